#include "grammar/cache.h"

#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace plumb::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity, size_t max_bytes)
    : vocabulary_(std::move(vocabulary)), capacity_(capacity), max_bytes_(max_bytes) {}

template <typename Compile>
std::shared_ptr<const CompiledGrammar> GrammarCache::get(std::string key, Compile compile) {
  {
    std::lock_guard lock(mutex_);
    if (const auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  }
  auto compiled = std::make_shared<const CompiledGrammar>(compile(), vocabulary_);
  const size_t bytes = compiled->context_bytes() + kMaxMaskCacheBytes;
  std::lock_guard lock(mutex_);
  if (grammars_.size() >= capacity_ || bytes_ + bytes > max_bytes_) {
    grammars_.clear();
    bytes_ = 0;
  }
  const auto [it, inserted] = grammars_.emplace(std::move(key), std::move(compiled));
  if (inserted) bytes_ += bytes;
  return it->second;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::json_schema(const nlohmann::ordered_json& schema,
                                                                 const JsonWrapping& wrapping) {
  // NUL cannot occur in dumped JSON, so the three parts cannot run into each other.
  std::string key = schema.dump();
  key += '\0' + wrapping.prefix + '\0' + wrapping.suffix;
  return get(std::move(key), [&] { return compile_json_schema(schema, wrapping); });
}

// Dumped JSON never starts with a control character, so a regex's key (\1 first) or a GBNF text's (\2) is no
// schema's.
std::shared_ptr<const CompiledGrammar> GrammarCache::regex(const std::string& pattern) {
  return get('\1' + pattern, [&] {
    GrammarBuilder builder;
    return builder.build(regex_rule(builder, pattern, RegexText::kRaw, false, "the regular expression"));
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCache::gbnf(const std::string& text) {
  return get('\2' + text, [&] { return compile_gbnf(text); });
}

}  // namespace plumb::grammar
