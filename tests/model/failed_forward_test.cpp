// A forward call that fails part-way, injected into the real model on the CPU backend: the ModelRunner empties
// every slot of the failed batch (nothing half-advanced can be continued, its KV pages go back to the pool) and
// leaves the others alone; the engine ends the failed step's requests with kError, frees their slots and pages and
// serves the rest with the bits of a run that never failed.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "ops/forwarding_backend.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

using namespace std::chrono_literals;

constexpr const char* kInjected = "injected attention failure";

// A CpuBackend whose armed forward pass throws at its first attention call, after the GDN layers before it (layers 0
// and 1 of qwen3_next_moe) have advanced their states. It can also hold a forward pass at its embedding until
// released, so a test decides what shares an engine step.
class FailingBackend final : public ForwardingBackend {
 public:
  FailingBackend() : ForwardingBackend(cpu_) {}

  // The `forwards_from_now`-th forward pass to get past its embedding from now on fails (1: the next one, or the one
  // being held).
  void fail_forward(int forwards_from_now) {
    std::lock_guard lock(mutex_);
    forwards_to_failure_ = forwards_from_now;
  }
  // The next forward pass waits at its embedding until release().
  void hold_next_forward() {
    std::lock_guard lock(mutex_);
    hold_ = true;
  }
  // Whether a forward pass is waiting at its embedding within `timeout`.
  bool wait_until_held(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return held_; });
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      hold_ = false;
    }
    changed_.notify_all();
  }

  // Every forward pass starts with its one embedding call.
  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    {
      std::unique_lock lock(mutex_);
      held_ = hold_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return !hold_; });
      held_ = false;
      fails_now_ = forwards_to_failure_ > 0 && --forwards_to_failure_ == 0;
    }
    cpu_.embedding(table, ids, out);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                 const BatchRows& batch, Tensor& o, GdnAlgorithm rule) override {
    {
      std::lock_guard lock(mutex_);
      if (fails_now_) {
        fails_now_ = false;
        throw Error(kInjected);
      }
    }
    cpu_.attention(q, k, v, caches, batch, o, rule);
  }

 private:
  CpuBackend cpu_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int forwards_to_failure_ = 0;
  bool fails_now_ = false;  // the running forward pass fails at its next attention call
  bool hold_ = false;
  bool held_ = false;
};

// Releases a held forward pass however the test ends, before the engine (declared earlier) joins its step thread.
struct ReleaseOnExit {
  FailingBackend& backend;
  ~ReleaseOnExit() { backend.release(); }
};

std::string fixture_model() {
  return test::source_dir() + "/tests/fixtures/models/qwen3_next_moe";
}

std::vector<int32_t> tokens(int32_t first, int64_t count) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int32_t>((first + 7 * i) % 50 + 1));
  return out;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, int64_t begin, int64_t end) {
  return {v.begin() + begin, v.begin() + end};
}

// Slots 0 and 1 are in the failed call (0 continuing from 20 tokens past a page boundary, 1 starting fresh); slot 2
// is not. Afterwards slot 0 cannot be continued, slots 0 and 1 start again, and every logit equals a runner's that
// never failed.
TEST(FailedForward, EmptiesEverySlotOfTheFailedBatchAndNoOther) {
  CpuBackend clean_backend;
  FailingBackend failing_backend;
  const Qwen3NextModel clean_model = open_model(fixture_model(), clean_backend);
  const Qwen3NextModel model = open_model(fixture_model(), failing_backend);
  ModelRunner clean(clean_model, 3), runner(model, 3);
  const std::vector<int32_t> a = tokens(3, 70), b = tokens(5, 9), c = tokens(11, 12);

  for (ModelRunner* r : {&clean, &runner}) r->forward({{0, 0, slice(a, 0, 20)}, {2, 0, slice(c, 0, 10)}});
  EXPECT_EQ(model.kv_pool().used_pages(), 2);
  failing_backend.fail_forward(1);
  try {
    runner.forward({{0, 20, slice(a, 20, 70)}, {1, 0, b}});
    ADD_FAILURE() << "the injected failure did not surface";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(kInjected), std::string::npos) << e.what();
  }
  // Slots 0 and 1 took 2 and 1 pages for the call and gave them back with their states; slot 2 keeps its page.
  EXPECT_EQ(model.kv_pool().used_pages(), 1);
  EXPECT_THROW(runner.forward({{0, 20, slice(a, 20, 70)}}), Error);
  EXPECT_EQ(model.kv_pool().used_pages(), 1);

  const std::vector<RunnerEntry> restart = {{0, 0, slice(a, 0, 20)}, {1, 0, b}, {2, 10, slice(c, 10, 12)}};
  const std::vector<RunnerEntry> resume = {{0, 20, slice(a, 20, 70)}, {1, 9, {4}}, {2, 12, {8}}};
  for (const std::vector<RunnerEntry>* step : {&restart, &resume}) {
    const std::vector<float> want = clean.forward(*step).logits, got = runner.forward(*step).logits;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "logit " << i;
  }
}

using Outcome = test::StreamOutcome;
using test::drain;

std::vector<float> logprobs(const Outcome& o) {
  std::vector<float> out;
  for (const GeneratedToken& t : o.details) out.push_back(t.logprob);
  return out;
}

EngineRequest request(int32_t first, int64_t prompt_length, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = tokens(first, prompt_length);
  r.max_tokens = max_tokens;
  r.top_logprobs = 0;
  return r;
}

// Two slots, prefill chunks of 16. Step 1 runs A's first chunk alone; step 2 A's second chunk and B's first, and
// fails; C waited through it for a slot and D is submitted after it. C and D must get exactly the tokens and logprobs
// they get from an engine that never failed.
TEST(FailedForward, EndsItsRequestsWithAnErrorAndServesTheOthersUnchanged) {
  const SchedulerConfig config{
      .max_running = 2, .max_waiting = 8, .step_tokens = 64, .prefill_chunk = 16, .kv_pages = 64, .kv_page_tokens = 16};
  const EngineRequest a = request(1, 40, 6), b = request(2, 20, 6), c = request(3, 30, 8), d = request(4, 25, 8);

  Outcome clean_c, clean_d;
  {
    CpuBackend backend;
    const Qwen3NextModel model = open_model(fixture_model(), backend);
    ModelRunner runner(model, config.max_running);
    Engine engine(runner, config);
    const Submission sc = engine.submit(c), sd = engine.submit(d);
    clean_c = drain(*sc.stream);
    clean_d = drain(*sd.stream);
  }
  ASSERT_EQ(clean_c.finish, StopCause::kLength);
  ASSERT_EQ(clean_d.finish, StopCause::kLength);

  FailingBackend backend;
  const Qwen3NextModel model = open_model(fixture_model(), backend);
  ModelRunner runner(model, config.max_running);
  Engine engine(runner, config);
  const ReleaseOnExit release{backend};
  backend.hold_next_forward();
  const Submission sa = engine.submit(a);
  ASSERT_TRUE(backend.wait_until_held(20s));  // step 1: A alone
  backend.fail_forward(2);                    // step 2
  const Submission sb = engine.submit(b), sc = engine.submit(c);
  backend.release();

  for (const Submission* s : {&sa, &sb}) {
    const Outcome failed = drain(*s->stream);
    EXPECT_EQ(failed.finish, StopCause::kError);
    EXPECT_NE(failed.error.find(kInjected), std::string::npos) << failed.error;
    EXPECT_TRUE(failed.tokens.empty());
  }
  const Submission sd = engine.submit(d);
  const Outcome got_c = drain(*sc.stream), got_d = drain(*sd.stream);
  EXPECT_EQ(got_c.finish, StopCause::kLength);
  EXPECT_EQ(got_c.tokens, clean_c.tokens);
  EXPECT_EQ(logprobs(got_c), logprobs(clean_c));  // exact: the same bits
  EXPECT_EQ(got_d.finish, StopCause::kLength);
  EXPECT_EQ(got_d.tokens, clean_d.tokens);
  EXPECT_EQ(logprobs(got_d), logprobs(clean_d));

  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.state_slots_used, 0);
  EXPECT_EQ(stats.kv_pages_used, 0);
}

}  // namespace
}  // namespace plumb
