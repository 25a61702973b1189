// Compiled grammars by schema: a server sees the same few schemas request after request, so each is compiled and
// its masks computed once, then shared by every request that names it.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace plumb::grammar {

class GrammarCache {
 public:
  // Holds at most `capacity` grammars and `max_bytes` of memory, counting each grammar's precomputed contexts (up to
  // 64 MiB: a regex of many '.' over a 151K-token vocabulary reaches it) and the kMaxMaskCacheBytes its masks may
  // grow to; past either it starts over empty. The default bounds what a server that sees many schemas keeps to
  // about half a GiB.
  explicit GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity = 32,
                        size_t max_bytes = size_t{512} << 20);
  // The grammar of `schema` with `wrapping`, compiled on first use (the key is the schema's text, hashed by the
  // map). Throws plumb::Error as compile_json_schema does; a schema that fails is not cached.
  std::shared_ptr<const CompiledGrammar> json_schema(const nlohmann::ordered_json& schema,
                                                     const JsonWrapping& wrapping = {});
  // The grammar of the texts `pattern` (regex.h's subset) matches whole, its characters as UTF-8.
  std::shared_ptr<const CompiledGrammar> regex(const std::string& pattern);
  // The grammar a GBNF text (gbnf.h) defines.
  std::shared_ptr<const CompiledGrammar> gbnf(const std::string& text);
  const Vocabulary& vocabulary() const { return *vocabulary_; }

 private:
  std::shared_ptr<const Vocabulary> vocabulary_;
  size_t capacity_, max_bytes_;
  size_t bytes_ = 0;  // what the grammars held may grow to, as the constructor counts it
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;

  template <typename Compile>
  std::shared_ptr<const CompiledGrammar> get(std::string key, Compile compile);
};

}  // namespace plumb::grammar
