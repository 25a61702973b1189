// The serving engine over a model split over CPU ranks in threads (SplitRunner): with the exact reduction, concurrent
// greedy and sampled requests get the tokens and logprobs the unsplit model gives them; a rank that fails or hangs in
// a call ends that call within the timeout with its name, and every later call with the same message; a rank that
// cannot be built fails the construction by name.
#include "engine/split_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "engine/prefix_cache.h"
#include "engine/speculative.h"
#include "fake_runner.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"
#include "support/speculation_check.h"

namespace plumb {
namespace {

using namespace std::chrono_literals;
using Outcome = test::StreamOutcome;

SchedulerConfig config() {
  return SchedulerConfig{.max_running = 4,
                         .max_waiting = 16,
                         .step_tokens = 64,
                         .prefill_chunk = 16,
                         .kv_pages = 256,
                         .kv_page_tokens = 64};
}

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/models/" + name;
}

// Eight requests, greedy and sampled, of prompts from 3 to 45 tokens, submitted at once so that prefill chunks and
// decode rows share the steps.
std::vector<EngineRequest> requests() {
  std::vector<EngineRequest> out;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    for (int t = 0; t < 3 + 6 * i; ++t) r.prompt.push_back(static_cast<int32_t>((11 * i + 7 * t) % 190 + 1));
    r.max_tokens = 6 + i;
    r.top_logprobs = 0;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + static_cast<uint64_t>(i);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Outcome> serve(Runner& runner) {
  Engine engine(runner, config());
  std::vector<Submission> submitted;
  for (const EngineRequest& r : requests()) submitted.push_back(engine.submit(r));
  std::vector<Outcome> out;
  for (Submission& s : submitted) {
    EXPECT_EQ(s.status, SubmitStatus::kQueued);
    out.push_back(test::drain(*s.stream));
  }
  return out;
}

std::vector<float> logprobs(const Outcome& o) {
  std::vector<float> out;
  for (const GeneratedToken& t : o.details) out.push_back(t.logprob);
  return out;
}

TEST(SplitRunner, ServesTheUnsplitModelsTokensAndLogprobs) {
  for (const std::string name : {"qwen3_next_moe", "qwen3_5_dense"}) {
    CpuBackend host;
    const Qwen3NextModel model = open_model(fixture(name), host);
    ModelRunner unsplit(model, config().max_running);
    const std::vector<Outcome> expected = serve(unsplit);
    for (const int world : {2, 4}) {
      if (model.config().linear_num_value_heads % world != 0) continue;  // qwen3_5_dense's 6 value heads: 2 ranks
      SplitRunner split(world, 60s, [&](parallel::Collective& collective) {
        return split_model_runner(collective, std::make_unique<CpuBackend>(), model.config(), model.weights(),
                                  parallel::RowReduction::kExact, config().max_running);
      });
      EXPECT_EQ(split.vocab_size(), unsplit.vocab_size());
      EXPECT_EQ(split.max_context(), unsplit.max_context());
      const std::vector<Outcome> got = serve(split);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].finish, StopCause::kLength) << name << ", " << world << " ranks, request " << i;
        EXPECT_EQ(got[i].tokens, expected[i].tokens) << name << ", " << world << " ranks, request " << i;
        EXPECT_EQ(logprobs(got[i]), logprobs(expected[i])) << name << ", " << world << " ranks, request " << i;
      }
    }
  }
}

// Speculative decoding with the MTP head (its share on each rank) and the prefix cache, split over two ranks: the
// tokens, logprobs and speculation counts of the unsplit runner, requests resumed from a kept prefix among them.
TEST(SplitRunner, DraftsAndResumesFromThePrefixCacheAsTheUnsplitModel) {
  const std::string dir = test::scratch_dir("split_runner_mtp");
  CpuBackend host;
  const Qwen3NextModel model = test::open_mtp_model(dir, host, 512);
  SchedulerConfig scheduler = config();
  scheduler.speculative_tokens = 3;
  scheduler.step_tokens = 4 * 4 + 64;
  scheduler.prefill_chunk = 64;
  constexpr double kCacheBytes = 8e6;
  // A 70-token prompt, then three that start with its first 64 tokens.
  std::vector<EngineRequest> asked(4);
  for (int i = 0; i < 4; ++i) {
    for (int t = 0; t < 64; ++t) asked[i].prompt.push_back(static_cast<int32_t>((13 * t + 5) % 48 + 1));
    for (int t = 0; t < 6 + 3 * i; ++t) asked[i].prompt.push_back(static_cast<int32_t>((29 * t + 7 * i) % 48 + 1));
    asked[i].max_tokens = 12;
    asked[i].top_logprobs = 0;
  }
  const auto serve_all = [&](Runner& runner) {
    Engine engine(runner, scheduler, EngineOptions{.prefill_answers = false});
    std::vector<Outcome> out{test::drain(*engine.submit(asked[0]).stream)};
    std::vector<Submission> rest;
    for (int i = 1; i < 4; ++i) rest.push_back(engine.submit(asked[i]));
    for (Submission& s : rest) out.push_back(test::drain(*s.stream));
    return out;
  };
  ModelRunner unsplit(model, scheduler.max_running, StepGraphOptions{.enabled = false});
  unsplit.enable_drafting(std::make_unique<MtpDrafter>(model));
  unsplit.enable_prefix_cache(prefix_cache_limits(model, kCacheBytes));
  const std::vector<Outcome> expected = serve_all(unsplit);
  SplitRunner split(2, 60s, [&](parallel::Collective& collective) {
    return split_model_runner(collective, std::make_unique<CpuBackend>(), model.config(), model.weights(),
                              parallel::RowReduction::kExact, scheduler.max_running,
                              SplitModelOptions{.prefix_cache_bytes = kCacheBytes, .drafting = true});
  });
  ASSERT_TRUE(split.drafts_tokens());
  ASSERT_TRUE(split.keeps_prefixes());
  const std::vector<Outcome> got = serve_all(split);
  int64_t cached = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i;
    EXPECT_EQ(logprobs(got[i]), logprobs(expected[i])) << "request " << i;
    EXPECT_EQ(got[i].cached_tokens, expected[i].cached_tokens) << "request " << i;
    EXPECT_EQ(got[i].speculation.drafted, expected[i].speculation.drafted) << "request " << i;
    EXPECT_EQ(got[i].speculation.accepted, expected[i].speculation.accepted) << "request " << i;
    cached += got[i].cached_tokens.value_or(0);
  }
  EXPECT_GT(cached, 0) << "no request resumed from the cache";
  EXPECT_GT(got[1].speculation.drafted, 0);
  std::filesystem::remove_all(dir);
}

// A rank's runner that fails (throws, or blocks until released) in its third forward call, on one rank.
class FaultyRunner final : public Runner {
 public:
  enum class Fault { kThrow, kHang };
  FaultyRunner(std::unique_ptr<Runner> inner, Fault fault, std::mutex& mutex, std::condition_variable& released,
               const bool& release)
      : inner_(std::move(inner)), fault_(fault), mutex_(mutex), released_(released), release_(release) {}
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t max_context() const override { return inner_->max_context(); }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override {
    if (++calls_ == 3) {
      if (fault_ == Fault::kThrow) throw Error("injected forward failure");
      std::unique_lock lock(mutex_);
      released_.wait(lock, [&] { return release_; });
    }
    return inner_->forward(batch);
  }
  void release(int32_t slot) override { inner_->release(slot); }

 private:
  std::unique_ptr<Runner> inner_;
  Fault fault_;
  std::mutex& mutex_;
  std::condition_variable& released_;
  const bool& release_;
  int calls_ = 0;
};

TEST(SplitRunner, ARankThatFailsOrHangsEndsTheCallAndEveryLaterOneByName) {
  CpuBackend host;
  const Qwen3NextModel model = open_model(fixture("qwen3_next_moe"), host);
  const std::vector<RunnerEntry> step = {{0, 0, {5, 6, 7}}};
  // A hung rank outlives its SplitRunner (left behind once the world failed) until released: what it waits on
  // outlives the test.
  static std::mutex mutex;
  static std::condition_variable released;
  static bool release = false;
  for (const FaultyRunner::Fault fault : {FaultyRunner::Fault::kThrow, FaultyRunner::Fault::kHang}) {
    {
      std::lock_guard lock(mutex);
      release = false;
    }
    {
      SplitRunner split(2, 1500ms, [&](parallel::Collective& collective) -> std::unique_ptr<Runner> {
        std::unique_ptr<Runner> inner = split_model_runner(collective, std::make_unique<CpuBackend>(), model.config(),
                                                           model.weights(), parallel::RowReduction::kExact, 2);
        if (collective.rank() != 1) return inner;
        return std::make_unique<FaultyRunner>(std::move(inner), fault, mutex, released, release);
      });
      split.forward(step);
      split.release(0);
      split.forward(step);
      split.release(0);
      const auto start = std::chrono::steady_clock::now();
      std::string message;
      try {
        split.forward(step);
      } catch (const Error& e) {
        message = e.what();
      }
      const auto took = std::chrono::steady_clock::now() - start;
      if (fault == FaultyRunner::Fault::kThrow) {
        EXPECT_NE(message.find("rank 1: injected forward failure"), std::string::npos) << message;
        EXPECT_LT(took, 1s) << "a failed rank stops the others' collectives at once, not at the timeout";
      } else {
        EXPECT_NE(message.find("waited 1500 ms"), std::string::npos) << message;
        EXPECT_LT(took, 10s);
      }
      try {
        split.release(0);
        FAIL() << "a call after the ranks stopped was made";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the ranks stopped after a failure"), std::string::npos) << e.what();
      }
    }
    {
      std::lock_guard lock(mutex);
      release = true;
    }
    released.notify_all();
  }
}

TEST(SplitRunner, ARankThatCannotBeBuiltFailsTheConstructionByName) {
  try {
    SplitRunner none(-1, 5s, [](parallel::Collective&) -> std::unique_ptr<Runner> { return nullptr; });
    FAIL() << "a world of -1 ranks was built";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor parallel: a world of -1 ranks");
  }
  try {
    SplitRunner split(3, 5s, [](parallel::Collective& collective) -> std::unique_ptr<Runner> {
      if (collective.rank() == 2) throw Error("no memory for rank 2's share");
      return std::make_unique<test::FakeRunner>(50, 512);
    });
    FAIL() << "built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no memory for rank 2's share"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plumb
