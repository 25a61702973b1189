// The scheduler alone: admission by slots, pages and queue length; chunked prefill at fixed offsets; decode steps;
// retirement at max_new_tokens; cancellation; and a long random simulation that checks every budget at every step.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/error.h"

namespace plumb {
namespace {

SchedulerConfig small_config() {
  return SchedulerConfig{
      .max_running = 2, .max_waiting = 3, .step_tokens = 10, .prefill_chunk = 4, .kv_pages = 8, .kv_page_tokens = 4};
}

TEST(Scheduler, AdmitsUpToTheSlotsAndQueuesTheRest) {
  Scheduler s(small_config());
  for (SequenceId id = 1; id <= 3; ++id) EXPECT_EQ(s.submit({id, 2, 2}), Admission::kQueued);
  const StepPlan plan = s.schedule();
  ASSERT_EQ(plan.work.size(), 2u);
  EXPECT_EQ(plan.work[0].id, 1u);
  EXPECT_EQ(plan.work[1].id, 2u);
  EXPECT_NE(plan.work[0].slot, plan.work[1].slot);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 1);
  EXPECT_EQ(s.slots().used(), 2);
  EXPECT_EQ(s.pages().used(), 2);  // 2 + 2 tokens = one page each
}

TEST(Scheduler, RefusesWhenTheQueueIsFullOrTheRequestCanNeverFit) {
  Scheduler s(small_config());
  EXPECT_EQ(s.submit({1, 30, 3}), Admission::kNeverFits);  // 33 tokens need 9 pages of 4; the pool has 8
  for (SequenceId id = 1; id <= 3; ++id) EXPECT_EQ(s.submit({id, 1, 1}), Admission::kQueued);
  EXPECT_EQ(s.submit({4, 1, 1}), Admission::kQueueFull);
  EXPECT_THROW(s.submit({5, 0, 1}), Error);
}

TEST(Scheduler, WaitsForPagesFirstComeFirstServed) {
  Scheduler s(small_config());
  EXPECT_EQ(s.submit({1, 20, 4}), Admission::kQueued);  // 6 pages
  EXPECT_EQ(s.submit({2, 8, 4}), Admission::kQueued);   // 3 pages: does not fit beside the first
  EXPECT_EQ(s.submit({3, 1, 1}), Admission::kQueued);   // would fit, but waits behind the second
  StepPlan plan = s.schedule();
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.pages().used(), 6);
  EXPECT_TRUE(s.cancel(1));
  EXPECT_EQ(s.pages().used(), 0);
  EXPECT_EQ(s.slots().used(), 0);
  plan = s.schedule();
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.pages().used(), 4);
}

TEST(Scheduler, PrefillRunsInChunksAtFixedOffsetsThenDecodes) {
  Scheduler s(small_config());
  ASSERT_EQ(s.submit({7, 10, 3}), Admission::kQueued);
  std::vector<std::pair<int64_t, int64_t>> spans;
  std::vector<bool> samples;
  std::vector<SequenceId> retired;
  for (int step = 0; step < 10 && retired.empty(); ++step) {
    const StepPlan plan = s.schedule();
    ASSERT_EQ(plan.work.size(), 1u);
    spans.emplace_back(plan.work[0].start, plan.work[0].count);
    samples.push_back(plan.work[0].samples);
    retired = s.complete(plan);
  }
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 4}, {4, 4}, {8, 2}, {10, 1}, {11, 1}};
  EXPECT_EQ(spans, expected);
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true, true, true}));
  EXPECT_EQ(retired, std::vector<SequenceId>{7});
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.slots().used(), 0);
  EXPECT_EQ(s.pages().used(), 0);
}

// Speculative decoding: a decode step may verify drafts, as many as the token limit leaves (k drafts can make k + 1
// tokens), and advances by the tokens it drew.
TEST(Scheduler, DraftsStopShortOfTheTokenLimitAndTheStepAdvancesByWhatWasDrawn) {
  SchedulerConfig config = small_config();
  config.speculative_tokens = 3;
  Scheduler s(config);
  ASSERT_EQ(s.submit({7, 2, 6}), Admission::kQueued);
  std::vector<int64_t> starts, drafts;
  std::vector<SequenceId> retired;
  // The prefill draws one token; then steps that keep 2 drafts (3 tokens), none (1 token), and what is left.
  const std::vector<int64_t> drawn = {1, 3, 1, 1};
  for (size_t step = 0; step < drawn.size() && retired.empty(); ++step) {
    const StepPlan plan = s.schedule();
    ASSERT_EQ(plan.work.size(), 1u);
    starts.push_back(plan.work[0].start);
    drafts.push_back(plan.work[0].drafts);
    retired = s.complete(plan, std::vector<int64_t>{drawn[step]});
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 2, 5, 6}));
  // 6 tokens at most: after 1 drawn 3 drafts fit, after 4 only 1, after 5 none.
  EXPECT_EQ(drafts, (std::vector<int64_t>{0, 3, 1, 0}));
  EXPECT_EQ(retired, std::vector<SequenceId>{7});
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, DraftsNeverTakeTheNextPrefillChunksBudget) {
  SchedulerConfig config = small_config();  // 10 tokens a step, chunks of 4
  config.speculative_tokens = 8;
  Scheduler s(config);
  ASSERT_EQ(s.submit({1, 1, 12}), Admission::kQueued);
  s.complete(s.schedule());  // its prompt; it decodes from now on
  EXPECT_EQ(s.schedule().work[0].drafts, 8) << "alone, it may take the whole budget but its own token";
  ASSERT_EQ(s.submit({2, 9, 5}), Admission::kQueued);
  const StepPlan plan = s.schedule();
  ASSERT_EQ(plan.work.size(), 2u);
  EXPECT_EQ(plan.work[0].drafts, 10 - 1 - 4) << "beside a prefill, what its chunk leaves";
  EXPECT_EQ(plan.work[1].count, 4);
  EXPECT_EQ(plan.tokens(), config.step_tokens);
  EXPECT_THROW(s.complete(plan, std::vector<int64_t>{7, 1}), Error) << "more tokens drawn than drafts allowed";
}

// The engine's draft policy lowers the drafts a step gives (DraftPolicy); the limit stays within 0..speculative_tokens,
// and the decoding count it is chosen by leaves prefilling sequences out.
TEST(Scheduler, ADraftLimitBoundsTheDraftsOfEveryDecodingSequence) {
  SchedulerConfig config = small_config();  // chunks of 4
  config.speculative_tokens = 3;
  config.max_running = 3;
  config.step_tokens = 12;
  config.kv_pages = 32;
  Scheduler s(config);
  EXPECT_EQ(s.draft_limit(), 3);
  ASSERT_EQ(s.submit({1, 1, 12}), Admission::kQueued);
  ASSERT_EQ(s.submit({2, 1, 12}), Admission::kQueued);
  ASSERT_EQ(s.submit({3, 9, 12}), Admission::kQueued);
  s.complete(s.schedule());  // two one-token prompts and a chunk of the third
  EXPECT_EQ(s.decoding(), 2);
  s.set_draft_limit(1);
  const StepPlan plan = s.plan();
  ASSERT_EQ(plan.work.size(), 3u);
  EXPECT_EQ(plan.work[0].drafts, 1);
  EXPECT_EQ(plan.work[1].drafts, 1);
  s.set_draft_limit(0);
  EXPECT_EQ(s.plan().work[0].drafts, 0);
  EXPECT_THROW(s.set_draft_limit(4), Error);
  EXPECT_THROW(s.set_draft_limit(-1), Error);
}

TEST(Scheduler, AChunkThatDoesNotFitWaitsWholeInsteadOfShrinking) {
  // Budget 10: sequence 1 decodes (1 token) while sequence 2 prefills in chunks of 4; with a third prefilling, the
  // chunk that would overflow the budget is deferred, never cut.
  SchedulerConfig config = small_config();
  config.max_running = 3;
  config.step_tokens = 7;
  config.kv_pages = 100;
  Scheduler s(config);
  ASSERT_EQ(s.submit({1, 4, 50}), Admission::kQueued);
  ASSERT_EQ(s.submit({2, 12, 1}), Admission::kQueued);
  ASSERT_EQ(s.submit({3, 12, 1}), Admission::kQueued);
  std::map<SequenceId, std::vector<int64_t>> starts;
  for (int step = 0; step < 20; ++step) {
    const StepPlan plan = s.schedule();
    EXPECT_LE(plan.tokens(), config.step_tokens);
    for (const ScheduledWork& w : plan.work) {
      if (w.id != 1) {
        EXPECT_EQ(w.count, 4) << "sequence " << w.id << " at " << w.start;
        starts[w.id].push_back(w.start);
      }
    }
    s.complete(plan);
  }
  EXPECT_EQ(starts[2], (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(starts[3], (std::vector<int64_t>{0, 4, 8}));
}

TEST(Scheduler, CancelDropsWaitingAndRunningSequences) {
  Scheduler s(small_config());
  for (SequenceId id = 1; id <= 3; ++id) ASSERT_EQ(s.submit({id, 3, 3}), Admission::kQueued);
  const StepPlan plan = s.schedule();
  EXPECT_TRUE(s.cancel(3));  // waiting
  EXPECT_TRUE(s.cancel(1));  // running, mid-step: complete() skips it
  EXPECT_FALSE(s.cancel(1));
  EXPECT_EQ(s.slots().used(), 1);
  s.complete(plan);
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 0);
  EXPECT_THROW(s.finish(42), Error);
}

TEST(Scheduler, RefusesABudgetThatCannotFitAChunkBesideEveryDecode) {
  SchedulerConfig config = small_config();
  config.step_tokens = 5;  // < max_running 2 + prefill_chunk 4
  EXPECT_THROW(Scheduler{config}, Error);
}

// With speculative decoding too: each decode step keeps a random number of the drafts it was allowed.
class SchedulerTraffic : public ::testing::TestWithParam<int64_t> {};

TEST_P(SchedulerTraffic, RandomTrafficKeepsEveryBudgetAndFinishesEveryRequest) {
  const uint64_t seed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  SchedulerConfig config{.max_running = 5,
                         .max_waiting = 8,
                         .step_tokens = 24,
                         .prefill_chunk = 8,
                         .kv_pages = 40,
                         .kv_page_tokens = 4,
                         .speculative_tokens = GetParam()};
  Scheduler s(config);
  std::map<SequenceId, int64_t> want;      // id -> max_new_tokens, for accepted requests
  std::map<SequenceId, int64_t> drawn;     // id -> tokens drawn
  std::map<SequenceId, int64_t> computed;  // id -> tokens run
  std::map<SequenceId, int64_t> prompt;    // id -> prompt tokens
  std::set<SequenceId> cancelled, retired;
  SequenceId next = 1;
  for (int step = 0; step < 2000; ++step) {
    if (step < 1500 && rng() % 3 == 0) {
      const SequenceSpec spec{next, static_cast<int64_t>(1 + rng() % 30), static_cast<int64_t>(1 + rng() % 12)};
      if (s.submit(spec) == Admission::kQueued) {
        want[spec.id] = spec.max_new_tokens;
        prompt[spec.id] = spec.prompt_tokens;
      }
      ++next;
    }
    if (!want.empty() && rng() % 50 == 0) {
      const SequenceId victim = 1 + rng() % next;
      if (want.count(victim) && !retired.count(victim) && !cancelled.count(victim) && s.cancel(victim))
        cancelled.insert(victim);
    }
    const StepPlan plan = s.schedule();
    ASSERT_LE(plan.tokens(), config.step_tokens);
    ASSERT_LE(s.slots().used(), config.max_running);
    ASSERT_LE(s.pages().used(), config.kv_pages);
    std::set<int32_t> slots;
    std::vector<int64_t> tokens;  // [work] drawn by each
    for (const ScheduledWork& w : plan.work) {
      ASSERT_TRUE(slots.insert(w.slot).second) << "two sequences share slot " << w.slot;
      ASSERT_EQ(w.start, computed[w.id]);
      ASSERT_EQ(w.start % config.prefill_chunk == 0 || w.start >= prompt[w.id], true);
      ASSERT_TRUE(w.drafts == 0 || (w.samples && w.count == 1 && w.drafts <= config.speculative_tokens));
      tokens.push_back(1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(1 + w.drafts)));
      computed[w.id] += w.count + tokens.back() - 1;
      if (w.samples) drawn[w.id] += tokens.back();
      ASSERT_LE(drawn[w.id], want[w.id]) << "request " << w.id << " drew past its limit";
    }
    for (SequenceId id : s.complete(plan, tokens)) retired.insert(id);
  }
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.slots().used(), 0);
  EXPECT_EQ(s.pages().used(), 0);
  EXPECT_GT(retired.size(), 100u);
  for (const auto& [id, n] : want) {
    if (cancelled.count(id)) continue;
    EXPECT_TRUE(retired.count(id)) << "request " << id << " never finished";
    EXPECT_EQ(drawn[id], n) << "request " << id;
    EXPECT_EQ(computed[id], prompt[id] + n - 1) << "request " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(DraftTokens, SchedulerTraffic, ::testing::Values(0, 3));

}  // namespace
}  // namespace plumb
