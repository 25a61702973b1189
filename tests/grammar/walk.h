// What the grammar tests share: the test vocabularies (real tokenizers' token bytes) and random constrained walks,
// which draw allowed tokens until the grammar is done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace plumb::test {

struct TestVocabulary {
  std::string name;
  std::shared_ptr<const grammar::Vocabulary> vocabulary;
};

// The tiny fixture tokenizer (387 tokens) and models/default's (4099), with <|im_end|> and <|endoftext|> as stops.
std::vector<TestVocabulary> test_vocabularies();
// The same for the tokenizer folder `dir`.
std::shared_ptr<const grammar::Vocabulary> vocabulary_from_dir(const std::string& dir);

struct Walk {
  std::string text;  // the drawn tokens' bytes (a stop token adds none)
  std::vector<int32_t> tokens;
  bool complete = false;  // ended by a stop token or with the grammar finished
};

// Draws allowed tokens at random (after a few steps, favouring ones that close strings, objects and arrays, so a
// walk ends) until a stop token is drawn, the grammar is finished or `max_tokens` were drawn. `check`, when given,
// sees the matcher before each draw.
Walk random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& grammar, uint64_t seed, int64_t max_tokens,
                 void (*check)(const grammar::Matcher&) = nullptr);

}  // namespace plumb::test
