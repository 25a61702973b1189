// Structured output in the server: a request's JSON Schema compiled (once per schema, by GrammarCache) into a
// grammar over the model's vocabulary, and handed to the engine as the request's TokenConstraint. Reasoning is left
// free: where the prompt opened a <think> block, the constraint starts after "</think>".
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/constraint.h"
#include "grammar/cache.h"
#include "server/openai_api.h"
#include "server/prompt.h"

namespace plumb::server {

class StructuredOutputs {
 public:
  // `vocab_size`: the model's logits per row (at least the tokenizer's ids).
  StructuredOutputs(const ModelText& text, int64_t vocab_size) : text_(text), vocab_size_(vocab_size) {}
  // The constraint of one request. Throws plumb::Error (a 400) for a schema the compiler refuses, naming where the
  // schema came from, or for a model served without a tokenizer.
  std::shared_ptr<TokenConstraint> constraint(const StructuredOutput& output, bool opens_reasoning);

 private:
  const ModelText& text_;
  int64_t vocab_size_;
  std::once_flag built_;  // the vocabulary's trie is built on the first constrained request
  std::unique_ptr<grammar::GrammarCache> cache_;
};

}  // namespace plumb::server
