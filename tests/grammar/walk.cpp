#include "walk.h"

#include <random>

#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace plumb::test {

std::shared_ptr<const grammar::Vocabulary> vocabulary_from_dir(const std::string& dir) {
  const auto tokenizer = tokenizer::Tokenizer::from_dir(dir);
  std::vector<int32_t> stops;
  for (const char* stop : {"<|im_end|>", "<|endoftext|>"})
    if (const auto id = tokenizer.token_id(stop)) stops.push_back(*id);
  return std::make_shared<const grammar::Vocabulary>(tokenizer.text_token_bytes(tokenizer.vocab_size()), stops);
}

std::vector<TestVocabulary> test_vocabularies() {
  return {{"tiny", vocabulary_from_dir(fixtures_dir() + "/tokenizer/tiny")},
          {"default", vocabulary_from_dir(source_dir() + "/models/default")}};
}

Walk random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& grammar, uint64_t seed, int64_t max_tokens,
                 void (*check)(const grammar::Matcher&)) {
  const grammar::Vocabulary& v = grammar->vocabulary();
  std::mt19937_64 rng(seed);
  grammar::Matcher matcher(grammar);
  Walk walk;
  std::vector<int32_t> allowed, closing;
  for (int64_t step = 0; step < max_tokens; ++step) {
    if (check) check(matcher);
    const std::shared_ptr<const grammar::TokenMask> mask = matcher.allowed();
    allowed.clear();
    closing.clear();
    for (int32_t id = 0; id < v.size(); ++id) {
      if (!grammar::mask_has(*mask, id)) continue;
      allowed.push_back(id);
      const std::string_view t = v.token(id);
      if (v.is_stop(id) || t.find_first_of("\"}]") != std::string_view::npos) closing.push_back(id);
    }
    if (allowed.empty()) return walk;
    const bool close = step >= 8 && !closing.empty() && std::uniform_real_distribution<>(0, 1)(rng) < 0.7;
    const std::vector<int32_t>& pool = close ? closing : allowed;
    const int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    if (!matcher.accept(id)) return walk;  // an allowed token refused: the caller's checks report it
    walk.tokens.push_back(id);
    if (v.is_stop(id)) {
      walk.complete = true;
      return walk;
    }
    walk.text += v.token(id);
    if (matcher.finished()) {
      walk.complete = true;
      return walk;
    }
  }
  return walk;
}

}  // namespace plumb::test
