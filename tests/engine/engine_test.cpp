// The engine's step loop over a fake runner: batch invariance (a request's tokens, greedy or sampled, are the same
// alone or among 31 others), stop ids, length, logprobs, cancellation freeing the slot at once, a full queue, and
// shutdown.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "fake_runner.h"
#include "support/engine_stream.h"

namespace plumb {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kVocab = 50;

SchedulerConfig engine_config() {
  return SchedulerConfig{.max_running = 32,
                         .max_waiting = 64,
                         .step_tokens = 64,
                         .prefill_chunk = 16,
                         .kv_pages = 1024,
                         .kv_page_tokens = 16};
}

using Outcome = test::StreamOutcome;
using test::drain;

EngineRequest request(int32_t first, int64_t prompt_length, int64_t max_tokens) {
  EngineRequest r;
  for (int64_t i = 0; i < prompt_length; ++i) r.prompt.push_back(static_cast<int32_t>((first + 7 * i) % kVocab));
  r.max_tokens = max_tokens;
  return r;
}

// 32 requests with distinct prompts of every length, so prefill chunks and decode rows share the steps: each one's
// tokens among the 31 others must be its tokens alone. No two requests' tokens are alike, so a stream handed another
// one's tokens shows. With sampling every request draws with its own seed, the rows of a step on host threads of
// their own. With `draws` the runner draws the tokens (as on a GPU), and returns no logits.
void expect_each_same_alone_and_among_31_others(const SamplingParams& sampling, bool draws = false) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 32; ++i) {
    requests.push_back(request(i, 5 + 3 * i, 10 + i));
    requests.back().sampling = sampling;
    requests.back().sampling.seed = sampling.seed + static_cast<uint64_t>(i);
  }
  std::vector<Outcome> alone;
  for (const EngineRequest& r : requests) {
    test::FakeRunner runner(kVocab, 512, {}, draws);
    Engine engine(runner, engine_config());
    const Submission s = engine.submit(r);
    ASSERT_EQ(s.status, SubmitStatus::kQueued);
    alone.push_back(drain(*s.stream));
    ASSERT_EQ(alone.back().finish, StopCause::kLength);
    ASSERT_EQ(static_cast<int64_t>(alone.back().tokens.size()), r.max_tokens);
  }
  for (size_t i = 0; i < alone.size(); ++i)
    for (size_t j = i + 1; j < alone.size(); ++j)
      ASSERT_NE(alone[i].tokens, alone[j].tokens) << "requests " << i << " and " << j << " would not tell apart";

  test::FakeRunner runner(kVocab, 512, {}, draws);
  Engine engine(runner, engine_config());
  std::vector<Submission> together;
  for (const EngineRequest& r : requests) together.push_back(engine.submit(r));
  for (size_t i = 0; i < together.size(); ++i) {
    ASSERT_EQ(together[i].status, SubmitStatus::kQueued);
    const Outcome among = drain(*together[i].stream);
    EXPECT_EQ(among.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(among.finish, StopCause::kLength) << "request " << i;
  }
  // Every prompt ran in chunks at multiples of 16 although 32 requests competed for each step's budget.
  // An entry asks for logits only where the host draws from them, and for a draw only where the runner draws.
  int64_t drawn = 0;
  for (const RunnerEntry& e : runner.calls()) {
    if (e.tokens.size() > 1) {
      EXPECT_EQ(e.start % 16, 0) << "a chunk starts at " << e.start;
    }
    EXPECT_FALSE(e.logits && e.draw) << "slot " << e.slot << " at " << e.start;
    EXPECT_EQ(e.draw.has_value(), draws && (e.logits || e.draw)) << "slot " << e.slot << " at " << e.start;
    drawn += e.draw ? 1 : 0;
  }
  // Every request's every token but none of the prompts' first chunks (a prompt of 5 + 3i tokens over 16-token chunks).
  int64_t samples = 0, mid_prompt_chunks = 0;
  for (const EngineRequest& r : requests) {
    samples += r.max_tokens;
    mid_prompt_chunks += (std::ssize(r.prompt) - 1) / 16;
  }
  EXPECT_EQ(std::ssize(runner.calls()) - mid_prompt_chunks, samples);
  EXPECT_EQ(drawn, draws ? samples : 0);
  EXPECT_EQ(engine.stats().state_slots_used, 0);
  EXPECT_EQ(engine.stats().kv_pages_used, 0);
}

TEST(Engine, GreedyTokensAreTheSameAloneAndAmong31Others) {
  expect_each_same_alone_and_among_31_others(SamplingParams{});
}

TEST(Engine, SampledTokensAreTheSameAloneAndAmong31Others) {
  expect_each_same_alone_and_among_31_others(SamplingParams{.temperature = 1.0f, .top_p = 0.9f, .seed = 11});
}

// Allows only ids of one residue mod 5 (a different one each step), then nothing after `length` tokens.
class StepwiseConstraint final : public TokenConstraint {
 public:
  explicit StepwiseConstraint(size_t length, bool allow_none = false) : length_(length), allow_none_(allow_none) {}
  bool mask(float* logits, int64_t vocab) const override {
    for (int64_t id = 0; id < vocab; ++id)
      if (allow_none_ || id % 5 != static_cast<int64_t>(taken.size() % 5))
        logits[id] = -std::numeric_limits<float>::infinity();
    return !allow_none_;
  }
  bool accept(int32_t id) override {
    taken.push_back(id);
    return id % 5 == static_cast<int32_t>((taken.size() - 1) % 5);
  }
  bool finished() const override { return taken.size() == length_; }
  std::vector<int32_t> taken;

 private:
  size_t length_;
  bool allow_none_;
};

TEST(Engine, AConstraintMasksEachDrawAndEndsTheRequestWhenDone) {
  for (const SamplingParams& sampling : {SamplingParams{}, SamplingParams{.temperature = 1.0f, .seed = 3}}) {
    EngineRequest constrained = request(2, 6, 20);
    constrained.sampling = sampling;
    constrained.top_logprobs = 0;
    constrained.constraint = std::make_shared<StepwiseConstraint>(4);
    std::vector<int32_t> alone;
    {
      test::FakeRunner runner(kVocab, 512);
      Engine engine(runner, engine_config());
      alone = drain(*engine.submit(constrained).stream).tokens;
    }
    test::FakeRunner runner(kVocab, 512);
    Engine engine(runner, engine_config());
    auto constraint = std::make_shared<StepwiseConstraint>(4);
    constrained.constraint = constraint;
    // Among other requests, so the masked row shares its steps, and draws the same tokens as alone.
    std::vector<Submission> others;
    for (int i = 0; i < 4; ++i) others.push_back(engine.submit(request(10 + i, 5, 12)));
    const Outcome out = drain(*engine.submit(constrained).stream);
    EXPECT_EQ(out.finish, StopCause::kConstraintDone);
    ASSERT_EQ(out.tokens.size(), 4u);
    EXPECT_EQ(out.tokens, constraint->taken);
    EXPECT_EQ(out.tokens, alone);
    for (size_t i = 0; i < out.tokens.size(); ++i) EXPECT_EQ(out.tokens[i] % 5, static_cast<int32_t>(i % 5)) << i;
    for (Submission& o : others) EXPECT_EQ(drain(*o.stream).finish, StopCause::kLength);
  }
}

TEST(Engine, AConstraintThatAllowsNoTokenEndsTheRequestWithAnError) {
  for (bool draws : {false, true}) {
    test::FakeRunner runner(kVocab, 512, {}, draws);
    Engine engine(runner, engine_config());
    EngineRequest r = request(2, 6, 20);
    r.constraint = std::make_shared<StepwiseConstraint>(4, /*allow_none=*/true);
    const Outcome out = drain(*engine.submit(r).stream);
    EXPECT_EQ(out.finish, StopCause::kError) << "runner draws: " << draws;
    EXPECT_EQ(out.error, "the constraint allows no token here") << "runner draws: " << draws;
    EXPECT_TRUE(out.tokens.empty());
  }
}

// A runner that draws takes a constrained row's draw too, with the constraint's allowed tokens, so the row's logits
// stay where they are; the tokens keep to the constraint, and greedy ones are those the host draws.
TEST(Engine, TheRunnerDrawsAConstrainedRowWithItsAllowedTokens) {
  for (const SamplingParams& sampling : {SamplingParams{}, SamplingParams{.temperature = 1.0f, .seed = 3}}) {
    std::vector<std::vector<int32_t>> tokens;  // [host draws, runner draws]
    for (bool draws : {false, true}) {
      test::FakeRunner runner(kVocab, 512, {}, draws);
      Engine engine(runner, engine_config());
      EngineRequest r = request(4, 7, 20);
      r.sampling = sampling;
      auto constraint = std::make_shared<StepwiseConstraint>(6);
      r.constraint = constraint;
      std::vector<Submission> others;
      for (int i = 0; i < 3; ++i) others.push_back(engine.submit(request(20 + i, 5, 9)));
      const Outcome out = drain(*engine.submit(r).stream);
      EXPECT_EQ(out.finish, StopCause::kConstraintDone);
      ASSERT_EQ(out.tokens.size(), 6u);
      for (size_t i = 0; i < out.tokens.size(); ++i) EXPECT_EQ(out.tokens[i] % 5, static_cast<int32_t>(i % 5)) << i;
      for (Submission& o : others) EXPECT_EQ(drain(*o.stream).finish, StopCause::kLength);
      int64_t constrained_draws = 0;
      for (const RunnerEntry& e : runner.calls()) {
        if (e.constraint == nullptr) continue;
        EXPECT_EQ(e.constraint, constraint.get());
        EXPECT_TRUE(e.draw.has_value());
        EXPECT_FALSE(e.logits);
        ++constrained_draws;
      }
      EXPECT_EQ(constrained_draws, draws ? 6 : 0);
      tokens.push_back(out.tokens);
    }
    if (sampling.temperature == 0.0f) {
      EXPECT_EQ(tokens[0], tokens[1]);
    }
  }
}

// Masks nothing, and then refuses whatever was drawn (as when logits leave every allowed token at -inf).
class RefusingConstraint final : public TokenConstraint {
 public:
  bool mask(float*, int64_t) const override { return true; }
  bool accept(int32_t) override { return false; }
  bool finished() const override { return false; }
};

TEST(Engine, ATokenTheConstraintRefusesEndsTheRequestWithAnErrorUnstreamed) {
  test::FakeRunner runner(kVocab, 512);
  Engine engine(runner, engine_config());
  EngineRequest r = request(2, 6, 20);
  r.constraint = std::make_shared<RefusingConstraint>();
  const Outcome out = drain(*engine.submit(r).stream);
  EXPECT_EQ(out.finish, StopCause::kError);
  EXPECT_EQ(out.error, "the drawn token breaks the constraint");
  EXPECT_TRUE(out.tokens.empty());
}

TEST(Engine, AStopIdEndsTheRequestWithoutBeingStreamed) {
  test::FakeRunner runner(kVocab, 512);
  Engine engine(runner, engine_config());
  const Outcome free_run = drain(*engine.submit(request(1, 6, 8)).stream);
  ASSERT_GE(free_run.tokens.size(), 3u);
  EngineRequest stopped = request(1, 6, 8);
  stopped.stop_ids = {free_run.tokens[2]};
  const Outcome out = drain(*engine.submit(stopped).stream);
  EXPECT_EQ(out.finish, StopCause::kStopToken);
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[2]);
  EXPECT_EQ(out.tokens, std::vector<int32_t>(free_run.tokens.begin(), first));
}

TEST(Engine, LogprobsAreNormalizedAndSortedBestFirst) {
  test::FakeRunner runner(kVocab, 512);
  Engine engine(runner, engine_config());
  EngineRequest r = request(2, 5, 4);
  r.top_logprobs = 5;
  const Outcome out = drain(*engine.submit(r).stream);
  ASSERT_EQ(out.details.size(), 4u);
  for (const GeneratedToken& t : out.details) {
    EXPECT_TRUE(t.logprob <= 0.0f);
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_TRUE(std::fabs(t.top[0].logprob - t.logprob) <= 1e-6f);  // greedy draws the best token
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_TRUE(t.top[i].logprob <= t.top[i - 1].logprob);
  }
  EXPECT_TRUE(drain(*engine.submit(request(2, 5, 2)).stream).details.at(0).top.empty());
}

TEST(Engine, CancelEndsTheStreamAndFreesTheSlotAtOnce) {
  test::FakeRunner runner(kVocab, 100000);
  SchedulerConfig config = engine_config();
  config.kv_pages = 30000;
  Engine engine(runner, config);
  const Submission s = engine.submit(request(4, 8, 50000));
  ASSERT_EQ(s.status, SubmitStatus::kQueued);
  for (int i = 0; i < 200 && s.stream->wait(50ms).empty(); ++i) {
  }
  EXPECT_EQ(engine.stats().state_slots_used, 1);
  engine.cancel(s.id);
  EXPECT_EQ(engine.stats().state_slots_used, 0);
  EXPECT_EQ(engine.stats().kv_pages_used, 0);
  EXPECT_EQ(drain(*s.stream).finish, StopCause::kCancelled);
  engine.cancel(s.id);  // a second cancel is harmless
}

TEST(Engine, RefusesWhatCannotRunAndReportsAFullQueue) {
  test::FakeRunner runner(kVocab, 64, 5ms);
  SchedulerConfig config = engine_config();
  config.max_running = 1;
  config.max_waiting = 1;
  config.step_tokens = 17;
  Engine engine(runner, config);
  EXPECT_EQ(engine.submit(request(1, 60, 5)).status, SubmitStatus::kTooLong);
  EXPECT_THROW(engine.submit(request(1, 0, 5)), Error);
  EngineRequest bad_id = request(1, 3, 5);
  bad_id.prompt[1] = kVocab;
  EXPECT_THROW(engine.submit(bad_id), Error);
  EngineRequest bad_sampling = request(1, 3, 5);
  bad_sampling.sampling.top_p = 0.0f;
  EXPECT_THROW(engine.submit(bad_sampling), Error);

  // One running (held by a long request), one waiting; the third is refused.
  const Submission running = engine.submit(request(1, 3, 60));
  ASSERT_EQ(running.status, SubmitStatus::kQueued);
  for (int i = 0; i < 200 && engine.stats().running == 0; ++i) std::this_thread::sleep_for(1ms);
  const Submission waiting = engine.submit(request(2, 3, 2));
  ASSERT_EQ(waiting.status, SubmitStatus::kQueued);
  EXPECT_EQ(engine.submit(request(3, 3, 2)).status, SubmitStatus::kQueueFull);
  EXPECT_EQ(drain(*running.stream).finish, StopCause::kLength);
  EXPECT_EQ(drain(*waiting.stream).finish, StopCause::kLength);
}

TEST(Engine, StopEndsEveryRequestAndRefusesNewOnes) {
  test::FakeRunner runner(kVocab, 100000);
  SchedulerConfig config = engine_config();
  config.kv_pages = 30000;
  Engine engine(runner, config);
  std::vector<Submission> subs;
  for (int i = 0; i < 4; ++i) subs.push_back(engine.submit(request(i, 4, 90000)));
  engine.stop();
  for (Submission& s : subs) {
    ASSERT_EQ(s.status, SubmitStatus::kQueued);
    EXPECT_EQ(drain(*s.stream).finish, StopCause::kShutdown);
  }
  EXPECT_EQ(engine.submit(request(1, 3, 2)).status, SubmitStatus::kShuttingDown);
}

TEST(Engine, TokensTheRunnerDrawsAreTheSameAloneAndAmong31Others) {
  expect_each_same_alone_and_among_31_others(SamplingParams{}, /*draws=*/true);
  expect_each_same_alone_and_among_31_others(SamplingParams{.temperature = 1.0f, .top_p = 0.9f, .seed = 11}, true);
  expect_each_same_alone_and_among_31_others(SamplingParams{.temperature = 0.7f, .top_k = 9, .seed = 5}, true);
}

// A greedy draw is the first largest logit wherever it is made, so the runner's greedy tokens are the host's.
TEST(Engine, GreedyTokensTheRunnerDrawsAreTheHostsDraws) {
  for (int i = 0; i < 8; ++i) {
    std::vector<Outcome> outcomes;
    for (bool draws : {false, true}) {
      test::FakeRunner runner(kVocab, 512, {}, draws);
      Engine engine(runner, engine_config());
      const Submission s = engine.submit(request(i, 3 + 5 * i, 24));
      ASSERT_EQ(s.status, SubmitStatus::kQueued);
      outcomes.push_back(drain(*s.stream));
    }
    EXPECT_EQ(outcomes[0].tokens, outcomes[1].tokens) << "request " << i;
    EXPECT_EQ(outcomes[1].finish, StopCause::kLength);
  }
}

// What the runner cannot draw (it needs the history, the raw logits or min-p) the host draws.
TEST(Engine, TheHostDrawsWhatNeedsTheHost) {
  std::vector<EngineRequest> host_only(5, request(3, 4, 3));
  host_only[0].top_logprobs = 0;
  host_only[1].sampling.repetition_penalty = 1.2f;
  host_only[2].sampling.presence_penalty = 0.5f;
  host_only[3].sampling.frequency_penalty = 0.5f;
  host_only[4].sampling = SamplingParams{.temperature = 1.0f, .min_p = 0.1f, .seed = 2};
  for (EngineRequest& r : host_only) {
    test::FakeRunner runner(kVocab, 512, {}, /*draws=*/true);
    Engine engine(runner, engine_config());
    const Submission s = engine.submit(r);
    ASSERT_EQ(s.status, SubmitStatus::kQueued);
    EXPECT_EQ(drain(*s.stream).tokens.size(), 3u);
    for (const RunnerEntry& e : runner.calls()) {
      EXPECT_FALSE(e.draw.has_value());
      EXPECT_TRUE(e.logits);
    }
  }
}

// A runner whose draw is outside the vocabulary ends the request with an error rather than streaming the id.
class OutOfVocabularyRunner final : public Runner {
 public:
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_context() const override { return 512; }
  bool draws_tokens() const override { return true; }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override {
    RunnerOutput out;
    for (const RunnerEntry& e : batch) {
      out.drawn.push_back(e.draw ? static_cast<int32_t>(kVocab) : -1);
      if (e.logits) out.logits.resize(out.logits.size() + kVocab);
    }
    return out;
  }
  void release(int32_t) override {}
};

TEST(Engine, ADrawOutsideTheVocabularyEndsTheRequestWithAnError) {
  OutOfVocabularyRunner runner;
  Engine engine(runner, engine_config());
  const Submission s = engine.submit(request(1, 3, 4));
  ASSERT_EQ(s.status, SubmitStatus::kQueued);
  const Outcome o = drain(*s.stream);
  EXPECT_TRUE(o.tokens.empty());
  EXPECT_EQ(o.finish, StopCause::kError);
  EXPECT_NE(o.error.find("outside the vocabulary"), std::string::npos) << o.error;
}

}  // namespace
}  // namespace plumb
