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
  // Holds at most `capacity` grammars; past that it starts over empty. With each grammar's masks capped at 16 MiB,
  // the default bounds the memory of a server that sees many schemas to about half a GiB.
  explicit GrammarCache(std::shared_ptr<const Vocabulary> vocabulary, size_t capacity = 32);
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
  size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;

  template <typename Compile>
  std::shared_ptr<const CompiledGrammar> get(std::string key, Compile compile);
};

}  // namespace plumb::grammar
