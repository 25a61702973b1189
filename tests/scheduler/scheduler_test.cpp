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

TEST(Scheduler, RandomTrafficKeepsEveryBudgetAndFinishesEveryRequest) {
  const uint64_t seed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  SchedulerConfig config{
      .max_running = 5, .max_waiting = 8, .step_tokens = 24, .prefill_chunk = 8, .kv_pages = 40, .kv_page_tokens = 4};
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
    for (const ScheduledWork& w : plan.work) {
      ASSERT_TRUE(slots.insert(w.slot).second) << "two sequences share slot " << w.slot;
      ASSERT_EQ(w.start, computed[w.id]);
      ASSERT_EQ(w.start % config.prefill_chunk == 0 || w.start >= prompt[w.id], true);
      computed[w.id] += w.count;
      if (w.samples) ++drawn[w.id];
    }
    for (SequenceId id : s.complete(plan)) retired.insert(id);
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

}  // namespace
}  // namespace plumb
