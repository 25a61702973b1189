// The prefix cache on the CPU reference (a fixture model: Qwen3-Next with MoE and a shared expert): a prompt of every
// length 1..300 that starts with a kept prefix resumes from its longest kept 64-token boundary and gives the logits
// and every layer's state of the one-call run, bit for bit (tests/support/prefix_check.h); a prompt is kept on the
// stride and at its last boundary; the least recently used entries go first within the budget; and through the engine,
// a chat's next turn starts from the last boundary of the turn before's prompt, or of its answer once the engine has
// re-run it (Engine), and streams the tokens and logprobs it streams with no cache.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"
#include "support/prefix_check.h"

namespace plumb {
namespace {

Qwen3NextModel fixture_model(Backend& backend) {
  return open_model(test::source_dir() + "/tests/fixtures/models/qwen3_next_moe", backend);
}

std::vector<int32_t> random_ids(const Qwen3NextModel& model, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config().vocab_size - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = token(rng);
  return ids;
}

class EveryLength : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(EveryLength, ResumesFromTheLongestKeptBoundaryBitIdentical) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  const auto [first, last] = GetParam();
  const std::vector<std::string> mismatches = test::prefix_resume_mismatches(model, first, last);
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " lengths differ from the run from 0";
}

INSTANTIATE_TEST_SUITE_P(Lengths, EveryLength,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 130}, std::pair<int64_t, int64_t>{131, 230},
                                           std::pair<int64_t, int64_t>{231, 300}),
                         [](const ::testing::TestParamInfo<std::pair<int64_t, int64_t>>& info) {
                           return std::to_string(info.param.first) + "_to_" + std::to_string(info.param.second);
                         });

TEST(PrefixCache, KeepsAPromptOnItsStrideAndAtItsLastBoundary) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  const PrefixCache every(model, {.snapshots = 4, .pages = 8});
  const PrefixCache wide(model, {.snapshots = 4, .pages = 8, .stride = 256});
  for (int64_t position : {64, 128, 192}) {
    EXPECT_TRUE(every.wants(position, 300)) << position;
    EXPECT_FALSE(wide.wants(position, 300)) << position << " is neither on the stride nor the last boundary";
  }
  EXPECT_TRUE(wide.wants(256, 300)) << "on the stride, and the last boundary";
  EXPECT_TRUE(wide.wants(192, 200)) << "the last boundary of a 200-token prompt";
  EXPECT_TRUE(wide.wants(256, 1000));
  EXPECT_FALSE(wide.wants(320, 1000));
  for (const PrefixCache* cache : {&every, &wide}) {
    EXPECT_FALSE(cache->wants(0, 300));
    EXPECT_FALSE(cache->wants(100, 300)) << "not a block boundary";
    EXPECT_FALSE(cache->wants(320, 300)) << "past the prompt: generated text is never kept";
  }
  EXPECT_THROW(PrefixCache(model, {.snapshots = 4, .pages = 8, .stride = 100}), Error);
  EXPECT_THROW(prefix_cache_limits(model, 1e9, 96), Error);
  // Half the bytes for recurrent slots, the rest for pages; at least one entry and stride / 64 + 1 pages.
  const auto slot = static_cast<double>(model.recurrent_pool().slot_bytes());
  const auto page = static_cast<double>(model.kv_pool().page_bytes());
  const double bytes = 20.5 * slot + 40 * page;
  const PrefixCacheLimits limits = prefix_cache_limits(model, bytes, 256);
  EXPECT_EQ(limits.snapshots, static_cast<int64_t>(std::floor(bytes / 2 / slot)));
  EXPECT_EQ(limits.pages,
            static_cast<int64_t>(std::floor((bytes - static_cast<double>(limits.snapshots) * slot) / page)));
  EXPECT_LE(static_cast<double>(limits.snapshots) * slot + static_cast<double>(limits.pages) * page, bytes);
  EXPECT_GE(static_cast<double>(limits.pages) * page, bytes / 2 - page) << "half for pages";
  EXPECT_EQ(limits.stride, 256);
  const PrefixCacheLimits one = prefix_cache_limits(model, slot + 5 * page, 256);
  EXPECT_EQ(one.snapshots, 1) << "one entry, though half the bytes hold no slot";
  EXPECT_EQ(one.pages, 5);
  EXPECT_EQ(prefix_cache_limits(model, slot + 4.5 * page, 256).snapshots, 0);
}

TEST(PrefixCache, KeepsTheEndsOfChatsThatShareNoPagesWithinItsDefaultSplit) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  // Room for four chats whose 256-token prompts share nothing: four ends and their 16 pages, and what passing
  // boundaries fit beside them; the passing ones go first.
  const auto slot = static_cast<double>(model.recurrent_pool().slot_bytes());
  const auto page = static_cast<double>(model.kv_pool().page_bytes());
  const double bytes = std::max(2.0 * 4.0 * slot, 4.0 * slot + 2.0 * 16.0 * page);
  PrefixCache cache(model, prefix_cache_limits(model, bytes));
  std::vector<std::vector<int32_t>> chats;
  for (uint64_t seed : {41, 42, 43, 44}) {
    chats.push_back(random_ids(model, 256, seed));
    SequenceState state = model.new_sequence();
    for (size_t end = 64; end <= 256; end += 64) {
      model.forward(state, std::vector<int32_t>(chats.back().begin() + end - 64, chats.back().begin() + end),
                    LogitsRows::kLast);
      cache.keep(std::span<const int32_t>(chats.back()).first(end), state,
                 end == 256 ? KeptAt::kPromptEnd : KeptAt::kWithinPrompt);
    }
  }
  for (const std::vector<int32_t>& chat : chats) EXPECT_TRUE(cache.contains(chat)) << "every chat's end is kept";
}

TEST(PrefixCache, EvictsTheLeastRecentlyUsedWithinItsBudget) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  // Room for two one-block entries of different prompts, not three.
  PrefixCache cache(model, {.snapshots = 2, .pages = 100});
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t seed : {1, 2, 3}) {
    prompts.push_back(random_ids(model, 64, seed));
    SequenceState state = model.new_sequence();
    model.forward(state, prompts.back(), LogitsRows::kLast);
    cache.keep(prompts.back(), state);
    if (seed == 2) {
      EXPECT_TRUE(cache.contains(prompts[0])) << "the first entry, now the most recently used";
    }
  }
  EXPECT_TRUE(cache.contains(prompts[0]));
  EXPECT_FALSE(cache.contains(prompts[1])) << "the least recently used entry goes first";
  EXPECT_TRUE(cache.contains(prompts[2]));
  const PrefixCacheStats stats = cache.stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_EQ(stats.bytes, 2 * (model.recurrent_pool().slot_bytes() + model.kv_pool().page_bytes()));
  EXPECT_EQ(model.kv_pool().used_pages(), 2) << "the evicted entry let go of its page";
  // Pages limit too. With room for 2: a 2-page entry fits; a 1-page entry of another prompt then evicts it; a 3-page
  // entry never fits, and evicts nothing.
  PrefixCache paged(model, {.snapshots = 10, .pages = 2});
  const std::vector<int32_t> long_prompt = random_ids(model, 192, 9);
  SequenceState state = model.new_sequence();
  model.forward(state, std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 128), LogitsRows::kLast);
  paged.keep(std::span<const int32_t>(long_prompt).first(128), state);
  EXPECT_EQ(paged.stats().entries, 1);
  SequenceState one = model.new_sequence();
  model.forward(one, prompts[0], LogitsRows::kLast);
  paged.keep(prompts[0], one);
  EXPECT_TRUE(paged.contains(prompts[0]));
  EXPECT_FALSE(paged.contains(std::span<const int32_t>(long_prompt).first(128))) << "2 + 1 pages exceed 2";
  model.forward(state, std::vector<int32_t>(long_prompt.begin() + 128, long_prompt.end()), LogitsRows::kLast);
  paged.keep(long_prompt, state);
  EXPECT_FALSE(paged.contains(long_prompt)) << "3 pages never fit 2";
  EXPECT_TRUE(paged.contains(prompts[0]));
}

TEST(PrefixCache, EvictsBoundariesAPromptPassedBeforeItsEndAndWhatWasReused) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  PrefixCache cache(model, {.snapshots = 3, .pages = 100});
  // Keeps a prompt's boundaries as a sequence passes them, the last as its end.
  const auto keep_prompt = [&](const std::vector<int32_t>& prompt) {
    SequenceState state = model.new_sequence();
    for (size_t end = 64; end <= prompt.size(); end += 64) {
      model.forward(state, std::vector<int32_t>(prompt.begin() + end - 64, prompt.begin() + end), LogitsRows::kLast);
      cache.keep(std::span<const int32_t>(prompt).first(end), state,
                 end == prompt.size() ? KeptAt::kPromptEnd : KeptAt::kWithinPrompt);
    }
  };
  const auto prefix = [](const std::vector<int32_t>& ids, size_t n) { return std::span<const int32_t>(ids).first(n); };
  const std::vector<int32_t> a = random_ids(model, 192, 21), b = random_ids(model, 128, 22),
                             c = random_ids(model, 64, 23);
  keep_prompt(a);  // a64, a128 passing; a192 its end
  keep_prompt(b);  // b64 evicts a64, b128 (an end) evicts a128
  EXPECT_TRUE(cache.contains(prefix(a, 192))) << "a prompt's end outlives the boundaries passed after it";
  EXPECT_TRUE(cache.contains(prefix(b, 128)));
  EXPECT_TRUE(cache.contains(prefix(b, 64)));
  EXPECT_FALSE(cache.contains(prefix(a, 64)));
  EXPECT_FALSE(cache.contains(prefix(a, 128)));
  keep_prompt(c);  // c64 (an end) evicts b64, the one passing entry, though a192 was used before it
  EXPECT_FALSE(cache.contains(prefix(b, 64)));
  EXPECT_TRUE(cache.contains(prefix(a, 192)));
  EXPECT_TRUE(cache.contains(prefix(c, 64)));
  // A passing entry a request resumed from is kept as an end is.
  PrefixCache shared(model, {.snapshots = 2, .pages = 100});
  SequenceState state = model.new_sequence();
  model.forward(state, std::vector<int32_t>(a.begin(), a.begin() + 64), LogitsRows::kLast);
  shared.keep(prefix(a, 64), state, KeptAt::kWithinPrompt);
  ASSERT_TRUE(shared.resume(prefix(a, 100)).has_value());
  SequenceState other = model.new_sequence();
  model.forward(other, std::vector<int32_t>(b.begin(), b.begin() + 64), LogitsRows::kLast);
  shared.keep(prefix(b, 64), other, KeptAt::kWithinPrompt);
  model.forward(other, std::vector<int32_t>(b.begin() + 64, b.end()), LogitsRows::kLast);
  shared.keep(b, other, KeptAt::kWithinPrompt);  // evicts b64, passing and never reused, not a64
  EXPECT_TRUE(shared.contains(prefix(a, 64)));
  EXPECT_FALSE(shared.contains(prefix(b, 64)));
}

TEST(PrefixCache, RefusesAStateThatIsNotAtTheEndOfItsTokens) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  PrefixCache cache(model, {.snapshots = 4, .pages = 4});
  const std::vector<int32_t> ids = random_ids(model, 70, 4);
  SequenceState state = model.new_sequence();
  model.forward(state, ids, LogitsRows::kLast);
  EXPECT_THROW(cache.keep(ids, state), Error) << "70 tokens are not a whole number of blocks";
  EXPECT_THROW(cache.keep(std::span<const int32_t>(ids).first(64), state), Error) << "the state is at 70, not 64";
}

// Two turns of a chat through the engine: the second turn's prompt is the first's, its answer and a new message.
struct Turns {
  test::StreamOutcome first, second;
};

// With `rerun_answers` the second turn comes once the engine is idle, its first answer re-run; without, at once.
Turns chat_turns(const Qwen3NextModel& model, bool cache, const SamplingParams& sampling, bool rerun_answers = false) {
  ModelRunner runner(model, 2);
  if (cache) runner.enable_prefix_cache({.snapshots = 16, .pages = 32});
  Engine engine(runner,
                SchedulerConfig{.max_running = 2,
                                .max_waiting = 4,
                                .step_tokens = 2 + 64,
                                .prefill_chunk = 64,
                                .kv_pages = 64,
                                .kv_page_tokens = kKvPageSize},
                EngineOptions{.prefill_answers = rerun_answers});
  EngineRequest first;
  first.prompt = random_ids(model, 150, 5);
  first.max_tokens = 60;
  first.sampling = sampling;
  first.top_logprobs = 2;
  Turns out;
  out.first = test::drain(*engine.submit(first).stream);
  if (rerun_answers) {
    EXPECT_TRUE(test::wait_until_idle(engine));
  }
  EngineRequest second = first;
  second.prompt.insert(second.prompt.end(), out.first.tokens.begin(), out.first.tokens.end());
  const std::vector<int32_t> message = random_ids(model, 30, 6);
  second.prompt.insert(second.prompt.end(), message.begin(), message.end());
  second.max_tokens = 20;
  out.second = test::drain(*engine.submit(second).stream);
  return out;
}

void expect_same_stream(const test::StreamOutcome& got, const test::StreamOutcome& want, const std::string& what) {
  ASSERT_EQ(got.finish, want.finish) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.details.size(), want.details.size()) << what;
  for (size_t i = 0; i < got.details.size(); ++i) {
    EXPECT_EQ(got.details[i].logprob, want.details[i].logprob) << what << ", token " << i;
    ASSERT_EQ(got.details[i].top.size(), want.details[i].top.size()) << what;
    for (size_t j = 0; j < got.details[i].top.size(); ++j) {
      EXPECT_EQ(got.details[i].top[j].id, want.details[i].top[j].id) << what << ", token " << i;
      EXPECT_EQ(got.details[i].top[j].logprob, want.details[i].top[j].logprob) << what << ", token " << i;
    }
  }
}

TEST(EnginePrefixCache, AChatsNextTurnStartsAtItsLastBoundaryAndStreamsTheSame) {
  CpuBackend backend;
  const Qwen3NextModel model = fixture_model(backend);
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 17;
  for (const SamplingParams& sampling : {SamplingParams{}, sampled}) {
    const std::string what = sampling.temperature == 0.0f ? "greedy" : "sampled";
    const Turns cached = chat_turns(model, true, sampling);
    const Turns rerun = chat_turns(model, true, sampling, /*rerun_answers=*/true);
    const Turns plain = chat_turns(model, false, sampling);
    ASSERT_EQ(plain.first.tokens.size(), 60u) << what;
    // The first turn's prompt of 150 tokens passed 64 and 128. Its answer's tokens passed 192, but ran one at a
    // time through the decode path: a state kept there would give the second turn other bits than its prompt run
    // from 0, so none is kept from the decode path. Re-run as a prompt while the engine was idle, the answer's
    // boundary at 192 is kept as a prompt's, and the second turn resumes there.
    EXPECT_EQ(cached.first.cached_tokens, 0) << what;
    EXPECT_EQ(cached.second.cached_tokens, 128) << what;
    EXPECT_EQ(rerun.second.cached_tokens, 192) << what;
    EXPECT_EQ(plain.second.cached_tokens, 0) << what;
    expect_same_stream(cached.first, plain.first, what + ", first turn");
    expect_same_stream(cached.second, plain.second, what + ", second turn");
    expect_same_stream(rerun.first, plain.first, what + ", first turn, answers re-run");
    expect_same_stream(rerun.second, plain.second, what + ", second turn from the re-run answer");
  }
}

}  // namespace
}  // namespace plumb
