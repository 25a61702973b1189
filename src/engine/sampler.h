// Choosing the next token from logits: greedy, or sampled with temperature, top-k, top-p and min-p after optional
// repetition, presence and frequency penalties. Randomness comes from a counter-based generator keyed by (seed, step),
// so a seed reproduces a run exactly, on any machine.
#pragma once

#include <cstdint>
#include <vector>

#include "core/counter_rng.h"

namespace plumb {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax, ties to the lowest id)
  int64_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; >1 makes tokens already seen less likely (as in transformers)
  float presence_penalty = 0.0f;    // 0: off; subtracted once from every token generated so far (as in OpenAI)
  float frequency_penalty = 0.0f;   // 0: off; subtracted once per time a token was generated so far (as in OpenAI)
  uint64_t seed = 0;
};

// A seed for a request that names none, so unseeded sampled runs differ (as OpenAI and vLLM draw one). Drawn from
// std::random_device below 2^53, so JSON clients that read numbers as doubles (JavaScript) get it back exactly.
uint64_t fresh_seed();

// The index std::max_element(x, x + n) returns (the first largest element; a NaN only when it comes first), found in
// passes the compiler vectorizes: the largest value, then the first element equal to it. n >= 1.
int64_t first_max_index(const float* x, int64_t n);

// Token ids ordered by score, highest first, equal scores by lower id (-0 and +0 are equal): the order of
// std::stable_sort with `scores[a] > scores[b]`, made by four stable counting passes over the scores' bits, so a
// 248K-token vocabulary takes a few milliseconds instead of a comparison sort's tens.
std::vector<int32_t> tokens_by_score(const std::vector<float>& scores);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks a token from one row of logits [V]. `history` holds the prompt and the tokens generated so far; its first
  // `prompt_length` tokens are the prompt, which the repetition penalty counts and the presence and frequency
  // penalties do not (as OpenAI and vLLM do). `step` numbers the draw so a seeded run is reproducible.
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history, uint64_t step,
                 int64_t prompt_length = 0) const;
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
};

}  // namespace plumb
