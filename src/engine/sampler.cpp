#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace plumb {

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
  return bits & ((uint64_t{1} << 53) - 1);
}

std::vector<int32_t> tokens_by_score(const std::vector<float>& scores) {
  const size_t n = scores.size();
  // key ascending = score descending: the float's bits made monotone (negatives flipped whole, positives with the
  // sign bit set), then inverted. Adding +0 first turns -0 into +0.
  std::vector<uint32_t> key(n), key_next(n);
  std::vector<int32_t> order(n), order_next(n);
  for (size_t i = 0; i < n; ++i) {
    const float s = scores[i] + 0.0f;
    uint32_t bits;
    std::memcpy(&bits, &s, sizeof bits);
    key[i] = ~((bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u);
    order[i] = static_cast<int32_t>(i);
  }
  // Least significant byte first; each pass is stable, so equal keys keep ascending ids.
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<size_t, 257> start{};
    for (size_t i = 0; i < n; ++i) ++start[((key[i] >> shift) & 0xffu) + 1];
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = start[(key[i] >> shift) & 0xffu]++;
      key_next[at] = key[i];
      order_next[at] = order[i];
    }
    key.swap(key_next);
    order.swap(order_next);
  }
  return order;
}

Sampler::Sampler(SamplingParams params) : params_(params) {
  PLUMB_CHECK(std::isfinite(params_.temperature) && params_.temperature >= 0.0f,
              "temperature must be a finite number >= 0, got {}", params_.temperature);
  PLUMB_CHECK(params_.top_k >= 0, "top_k must be >= 0, got {}", params_.top_k);
  PLUMB_CHECK(params_.top_p > 0.0f && params_.top_p <= 1.0f, "top_p must be in (0, 1], got {}", params_.top_p);
  PLUMB_CHECK(params_.min_p >= 0.0f && params_.min_p <= 1.0f, "min_p must be in [0, 1], got {}", params_.min_p);
  PLUMB_CHECK(params_.repetition_penalty > 0.0f && std::isfinite(params_.repetition_penalty),
              "repetition_penalty must be a finite number > 0, got {}", params_.repetition_penalty);
  PLUMB_CHECK(params_.presence_penalty >= -2.0f && params_.presence_penalty <= 2.0f,
              "presence_penalty must be in [-2, 2], got {}", params_.presence_penalty);
  PLUMB_CHECK(params_.frequency_penalty >= -2.0f && params_.frequency_penalty <= 2.0f,
              "frequency_penalty must be in [-2, 2], got {}", params_.frequency_penalty);
}

int64_t first_max_index(const float* x, int64_t n) {
  // Without NaN the largest value is the same whatever order it is found in (-0 and +0 compare equal, and so do the
  // first of either and max_element's), so the first pass keeps eight running maxima, free of one long dependency.
  constexpr int64_t kLanes = 8;
  float lane[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lane[j] = x[0];
  bool nan = false;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      nan |= x[i + j] != x[i + j];
      lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    }
  }
  for (; i < n; ++i) {
    nan |= x[i] != x[i];
    lane[0] = x[i] > lane[0] ? x[i] : lane[0];
  }
  if (nan) return std::max_element(x, x + n) - x;
  float largest = lane[0];
  for (int64_t j = 1; j < kLanes; ++j) largest = lane[j] > largest ? lane[j] : largest;
  for (i = 0; i < n; ++i)
    if (x[i] == largest) return i;
  return 0;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history, uint64_t step,
                        int64_t prompt_length) const {
  PLUMB_CHECK(prompt_length >= 0 && static_cast<size_t>(prompt_length) <= history.size(),
              "prompt_length {} is outside the history of {} tokens", prompt_length, history.size());
  const bool penalized =
      params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  // Greedy without penalties reads the logits in place: the same first maximum, without a copy of the vocabulary.
  if (params_.temperature == 0.0f && !penalized) return static_cast<int32_t>(first_max_index(logits, vocab));
  std::vector<float> scores(logits, logits + vocab);
  if (params_.repetition_penalty != 1.0f) {
    // As transformers' RepetitionPenaltyLogitsProcessor: divide positive scores, multiply negative ones.
    const std::unordered_set<int32_t> seen(history.begin(), history.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= vocab) continue;
      float& s = scores[id];
      s = s > 0 ? s / params_.repetition_penalty : s * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    // OpenAI's formula: score -= count * frequency_penalty + (count > 0) * presence_penalty, over generated tokens.
    std::unordered_map<int32_t, int64_t> counts;
    for (size_t i = static_cast<size_t>(prompt_length); i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [id, count] : counts) {
      if (id < 0 || id >= vocab) continue;
      scores[id] -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  if (params_.temperature == 0.0f) return static_cast<int32_t>(first_max_index(scores.data(), vocab));

  // Candidates best first (ties to the lower id), then each filter keeps a prefix of them.
  const std::vector<int32_t> order = tokens_by_score(scores);
  size_t keep = order.size();
  if (params_.top_k > 0) keep = std::min<size_t>(keep, static_cast<size_t>(params_.top_k));

  // Softmax of the temperature-scaled scores over the kept candidates, in double. The scores are divided in float, as
  // every earlier release drew, so a seed keeps its tokens; where the best score's quotient overflows (temperatures
  // like 1e-38 or a subnormal 1e-40 gave inf - inf = NaN and arbitrary tokens), the best score is subtracted first
  // instead, every exponent stays <= 0, and the draw is the greedy one (ties shared).
  std::vector<double> probs(keep);
  const float temperature = params_.temperature;
  const bool scaled_finite = std::isfinite(scores[order[0]] / temperature);
  const double top = scaled_finite ? static_cast<double>(scores[order[0]] / temperature) : scores[order[0]];
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    const float s = scores[order[i]];
    const double exponent =
        scaled_finite ? static_cast<double>(s / temperature) - top : (static_cast<double>(s) - top) / temperature;
    total += probs[i] = std::exp(exponent);
  }
  for (double& p : probs) p /= total;

  if (params_.top_p < 1.0f) {
    // The smallest prefix whose mass reaches top_p (at least one token).
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= params_.top_p) break;
    }
    keep = n;
  }
  if (params_.min_p > 0.0f) {
    // Keep tokens whose probability is at least min_p times the best one's.
    const double floor = params_.min_p * probs[0];
    size_t n = 1;
    while (n < keep && probs[n] >= floor) ++n;
    keep = n;
  }
  double kept_mass = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_mass += probs[i];
  const double target = uniform_from_counter(params_.seed, step) * kept_mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace plumb
