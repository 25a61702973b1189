#include "grammar/cache.h"

namespace plumb::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity)
    : vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::json_schema(const nlohmann::ordered_json& schema,
                                                                 const JsonWrapping& wrapping) {
  // NUL cannot occur in dumped JSON, so the three parts cannot run into each other.
  std::string key = schema.dump();
  key += '\0' + wrapping.prefix + '\0' + wrapping.suffix;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  }
  auto compiled = std::make_shared<const CompiledGrammar>(compile_json_schema(schema, wrapping), vocabulary_);
  std::lock_guard lock(mutex_);
  if (grammars_.size() >= capacity_) grammars_.clear();
  return grammars_.emplace(std::move(key), std::move(compiled)).first->second;
}

}  // namespace plumb::grammar
