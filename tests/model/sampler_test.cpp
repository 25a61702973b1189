// Token selection: greedy, each filter, the repetition, presence and frequency penalties, seeded reproducibility
// and the sampled distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"

namespace plumb {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

// The counting-pass order against the comparison sort it replaced, on scores with many ties, both zeros,
// infinities, subnormals and a wide range, at sizes up to a real vocabulary.
TEST(Sampler, TokensByScoreIsTheStableSortOrder) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> wide(0.0f, 100.0f);
  const float ties[] = {-1.0f, 0.5f, 2.0f, 0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f};
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{248320}}) {
    std::vector<float> scores(n);
    for (float& s : scores) s = rng() % 2 == 0 ? ties[rng() % std::size(ties)] : wide(rng);
    std::vector<int32_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    EXPECT_EQ(tokens_by_score(scores), want) << n << " scores";
  }
}

// first_max_index is std::max_element's answer on every input: ties to the first, -0 and +0 alike, infinities, and
// a NaN (which max_element keeps only when it comes first), at sizes around its eight lanes and a full vocabulary.
TEST(Sampler, FirstMaxIndexIsMaxElement) {
  std::mt19937_64 rng(5);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f};
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17}, int64_t{248320}}) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      std::uniform_int_distribution<int> level(0, 3);  // few distinct values, so ties are common
      for (float& v : x) v = static_cast<float>(level(rng)) - 1.5f;
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      const int plants = trial % 4;
      for (int k = 0; k < plants; ++k) x[static_cast<size_t>(at(rng))] = specials[(trial + k) % 7];
      if (trial % 10 == 9) x[0] = NAN;
      EXPECT_EQ(first_max_index(x.data(), n), std::max_element(x.begin(), x.end()) - x.begin())
          << "n " << n << ", trial " << trial;
    }
  }
}

TEST(Sampler, GreedyTakesTheLowestIdAmongTheBest) {
  const Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.sample(kLogits.data(), 6, {}, 0), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  for (uint64_t step = 0; step < 50; ++step) {
    EXPECT_EQ(Sampler({.temperature = 1.0f, .top_k = 1}).sample(kLogits.data(), 6, {}, step), 1);
    EXPECT_EQ(Sampler({.temperature = 1.0f, .top_p = 1e-6f}).sample(kLogits.data(), 6, {}, step), 1);
  }
}

TEST(Sampler, SeedReproducesAndStepsDiffer) {
  const SamplingParams p{.temperature = 2.0f, .seed = 42};
  std::vector<int32_t> a, b, c;
  for (uint64_t step = 0; step < 64; ++step) {
    a.push_back(Sampler(p).sample(kLogits.data(), 6, {}, step));
    b.push_back(Sampler(p).sample(kLogits.data(), 6, {}, step));
    c.push_back(Sampler({.temperature = 2.0f, .seed = 43}).sample(kLogits.data(), 6, {}, step));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, FrequenciesFollowTheTemperedSoftmax) {
  const SamplingParams p{.temperature = 1.5f, .seed = 7};
  const int draws = 20000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[Sampler(p).sample(kLogits.data(), 6, {}, static_cast<uint64_t>(i))];
  double total = 0;
  for (float l : kLogits) total += std::exp(l / 1.5);
  for (int32_t id = 0; id < 6; ++id) {
    const double expected = std::exp(kLogits[id] / 1.5) / total;
    const double sigma = std::sqrt(expected * (1 - expected) / draws);
    // Five standard deviations: a correct sampler fails this about once in two million runs.
    EXPECT_TRUE(std::fabs(counts[id] / static_cast<double>(draws) - expected) <= 5 * sigma + 1e-9) << id;
  }
}

TEST(Sampler, TopKTopPAndMinPRestrictTheCandidates) {
  for (uint64_t step = 0; step < 200; ++step) {
    const int32_t k2 = Sampler({.temperature = 5.0f, .top_k = 2, .seed = 1}).sample(kLogits.data(), 6, {}, step);
    EXPECT_TRUE(k2 == 1 || k2 == 4) << k2;
    // p(1) = p(4) ≈ 0.33 each and p(2) ≈ 0.2 at temperature 1: top-p 0.6 keeps exactly the two best.
    const int32_t p = Sampler({.temperature = 1.0f, .top_p = 0.6f, .seed = 2}).sample(kLogits.data(), 6, {}, step);
    EXPECT_TRUE(p == 1 || p == 4) << p;
    // min-p 0.5 keeps tokens with p >= p_max / 2: ids 1, 4 and 2 (e^-0.5 ≈ 0.61 of the best).
    const int32_t m = Sampler({.temperature = 1.0f, .min_p = 0.5f, .seed = 3}).sample(kLogits.data(), 6, {}, step);
    EXPECT_TRUE(m == 1 || m == 4 || m == 2) << m;
  }
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  const Sampler penalized({.repetition_penalty = 2.0f});
  EXPECT_EQ(penalized.sample(kLogits.data(), 6, {1, 4}, 0), 2);  // 3.0 → 1.5 for both seen tokens
  const std::vector<float> negative = {-1.0f, -0.6f};
  EXPECT_EQ(penalized.sample(negative.data(), 2, {0}, 0), 1);
  EXPECT_EQ(penalized.sample(negative.data(), 2, {1}, 0), 0);  // -0.6 → -1.2
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountOnlyGeneratedTokens) {
  // Scores 1.0, 3.0, 2.5, -1.0, 3.0, 0.0; history = prompt {1} then generated {4, 4}.
  const std::vector<int32_t> history = {1, 4, 4};
  // Presence 0.6: token 4 drops to 2.4 once, token 1 is only in the prompt and keeps 3.0.
  EXPECT_EQ(Sampler({.presence_penalty = 0.6f}).sample(kLogits.data(), 6, history, 0, 1), 1);
  // Counted from the start, the prompt's token 1 is penalized too: 2.5 wins.
  EXPECT_EQ(Sampler({.presence_penalty = 0.6f}).sample(kLogits.data(), 6, history, 0, 0), 2);
  // Frequency 0.3 counts token 4 twice (3.0 → 2.4) and token 1 not at all.
  EXPECT_EQ(Sampler({.frequency_penalty = 0.3f}).sample(kLogits.data(), 6, {4, 4, 1}, 0, 0), 1);
  // Negative penalties promote: token 5 (0.0) generated once with presence -2 and frequency -2 gets 4.0.
  EXPECT_EQ(Sampler({.presence_penalty = -2.0f, .frequency_penalty = -2.0f}).sample(kLogits.data(), 6, {5}, 0, 0), 5);
  EXPECT_THROW(Sampler({}).sample(kLogits.data(), 6, {1}, 0, 2), Error);
}

TEST(Sampler, RefusesInvalidParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = 2.0f}), Error);
  EXPECT_THROW(Sampler({.top_k = -3}), Error);
  EXPECT_THROW(Sampler({.repetition_penalty = 0.0f}), Error);
  EXPECT_THROW(Sampler({.temperature = NAN}), Error);
  EXPECT_THROW(Sampler({.presence_penalty = 2.5f}), Error);
  EXPECT_THROW(Sampler({.frequency_penalty = NAN}), Error);
}

}  // namespace
}  // namespace plumb
