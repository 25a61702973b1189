// Speculative decoding in the serving engine (CPU): requests decoding side by side, each verifying its drafts in the
// batched step, get the tokens, logprobs and endings plain decoding gives them, whatever the drafts
// (tests/support/served_speculation.h), on a fixture and with a random MTP head; and what the engine refuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <tuple>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "engine/speculative.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"
#include "support/served_speculation.h"
#include "support/speculation_check.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

TEST(SpeculativeEngine, ServesPlainDecodingsTokensWhateverTheDrafts) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  for (const std::string& m : test::served_speculation_mismatches(model, 37)) ADD_FAILURE() << m;
}

// The model's own MTP head (random weights) drafting for the runner: the tokens stay plain decoding's.
TEST(SpeculativeEngine, TheMtpHeadDraftsThroughTheRunner) {
  const std::string dir = test::scratch_dir("speculative_engine_mtp");
  CpuBackend backend;
  const Qwen3NextModel model = test::open_mtp_model(dir, backend, 512);
  for (const std::string& m : test::served_speculation_mismatches(model, 37)) ADD_FAILURE() << m;
  std::filesystem::remove_all(dir);
}

// Every draft request a drafter answers, from a given position on: its sequence, where it starts, the tokens shown
// and the drafts.
class RecordingDrafter : public Drafter {
 public:
  using Record = std::tuple<int64_t, std::vector<int32_t>, std::vector<int32_t>>;
  RecordingDrafter(std::unique_ptr<Drafter> inner, int64_t from) : inner_(std::move(inner)), from_(from) {}
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override {
    std::vector<std::vector<int32_t>> drafts = inner_->propose(batch);
    for (size_t i = 0; i < batch.size(); ++i)
      if (batch[i].from >= from_) records.push_back({batch[i].state, {batch[i].from, batch[i].next_ids, drafts[i]}});
    return drafts;
  }
  std::vector<std::pair<const SequenceState*, Record>> records;

 private:
  std::unique_ptr<Drafter> inner_;
  int64_t from_;
};

// Requests resumed from the prefix cache draft from their first step, exactly as the same requests run whole draft
// (the head's cache for the prefix is the first request's, the prefix's last hidden state the cache's); two resumed
// at once each write the head's keys and values at the prefix's last position in a page of their own. Their tokens
// stay plain decoding's.
TEST(SpeculativeEngine, RequestsResumedFromThePrefixCacheDraftAtOnce) {
  const std::string dir = test::scratch_dir("speculative_engine_prefix");
  CpuBackend backend;
  const Qwen3NextModel model = test::open_mtp_model(dir, backend, 512);
  const int64_t vocab = model.config().vocab_size, prefix = 128;
  const std::vector<int32_t> shared = test::random_ids(3, prefix, vocab);
  std::vector<EngineRequest> requests(3);  // the one that leaves the prefix, then two that resume from it
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].prompt = shared;
    std::vector<int32_t> tail = test::random_ids(4 + r, 20 + 5 * static_cast<int64_t>(r), vocab);
    tail.front() = static_cast<int32_t>(r);  // each tail starts otherwise: it names the request in the drafts
    requests[r].prompt.insert(requests[r].prompt.end(), tail.begin(), tail.end());
    requests[r].max_tokens = 30;
  }
  const SchedulerConfig config{.max_running = 2,
                               .step_tokens = 2 * 4 + 2 * 64,
                               .prefill_chunk = 64,
                               .kv_pages = 32,
                               .kv_page_tokens = kKvPageSize,
                               .speculative_tokens = 3};
  struct Served {
    test::StreamOutcome outcome;
    std::vector<RecordingDrafter::Record> drafts;  // from the prefix's last position on
  };
  // Requests 1 and 2 together, resumed from request 0's prefix or run whole.
  const auto serve = [&](bool resume) {
    ModelRunner runner(model, 2);
    if (resume) runner.enable_prefix_cache({.snapshots = 8, .pages = 16});
    auto drafter = std::make_unique<RecordingDrafter>(std::make_unique<MtpDrafter>(model), prefix - 1);
    RecordingDrafter& recorder = *drafter;
    runner.enable_drafting(std::move(drafter));
    Engine engine(runner, config, EngineOptions{.prefill_answers = false});
    if (resume) {
      EXPECT_EQ(test::drain(*engine.submit(requests[0]).stream).finish, StopCause::kLength);
    }
    recorder.records.clear();
    std::vector<std::shared_ptr<RequestStream>> streams = {engine.submit(requests[1]).stream,
                                                           engine.submit(requests[2]).stream};
    std::vector<Served> out(2);
    for (size_t r = 0; r < 2; ++r) {
      out[r].outcome = test::drain(*streams[r]);
      EXPECT_EQ(out[r].outcome.cached_tokens.value_or(0), resume ? prefix : 0);
    }
    // A sequence's records, in order, start with the prefix's last position beside its own next token.
    std::map<const SequenceState*, size_t> owner;
    for (const auto& [state, record] : recorder.records) {
      const auto [from, next_ids, drafts] = record;
      if (!owner.count(state)) owner[state] = next_ids.front() == 1 ? 0 : 1;
      out[owner[state]].drafts.push_back(record);
    }
    return out;
  };
  const std::vector<Served> resumed = serve(true), whole = serve(false);
  for (size_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("request " + std::to_string(r + 1));
    GenerateOptions plain;
    plain.max_tokens = requests[r + 1].max_tokens;
    EXPECT_EQ(resumed[r].outcome.tokens, generate(model, requests[r + 1].prompt, plain).tokens);
    EXPECT_EQ(resumed[r].outcome.tokens, whole[r].outcome.tokens);
    EXPECT_GT(resumed[r].outcome.speculation.drafted, 0);
    EXPECT_EQ(resumed[r].outcome.speculation.drafted, whole[r].outcome.speculation.drafted);
    ASSERT_FALSE(whole[r].drafts.empty());
    EXPECT_EQ(std::get<0>(whole[r].drafts.front()), prefix - 1) << "the head's first request at the prefix's end";
    EXPECT_TRUE(resumed[r].drafts == whole[r].drafts) << "the head drafts otherwise from the cache's state";
  }
  std::filesystem::remove_all(dir);
}

// With the draft policy choosing each step's drafts (EngineOptions::adaptive_drafts), requests still get plain
// decoding's tokens, and the policy's first steps draft (it measures the most drafts first).
TEST(SpeculativeEngine, ChosenDraftCountsLeaveTheTokensPlain) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  const int64_t vocab = model.config().vocab_size;
  std::vector<EngineRequest> requests(3);
  std::vector<std::vector<int32_t>> references, want;
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].prompt = test::random_ids(20 + r, 30 + 11 * static_cast<int64_t>(r), vocab);
    requests[r].max_tokens = 40;
    GenerateOptions plain;
    plain.max_tokens = requests[r].max_tokens;
    want.push_back(generate(model, requests[r].prompt, plain).tokens);
    references.push_back(requests[r].prompt);
    references.back().insert(references.back().end(), want.back().begin(), want.back().end());
  }
  ModelRunner runner(model, 3);
  runner.enable_drafting(std::make_unique<test::OracleDrafter>(references, vocab, 3));
  Engine engine(runner,
                SchedulerConfig{.max_running = 3,
                                .step_tokens = 3 * 4 + 64,
                                .prefill_chunk = 64,
                                .kv_pages = 16,
                                .kv_page_tokens = kKvPageSize,
                                .speculative_tokens = 3},
                EngineOptions{.adaptive_drafts = true});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : requests) streams.push_back(engine.submit(r).stream);
  int64_t drafted = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const test::StreamOutcome outcome = test::drain(*streams[r]);
    EXPECT_EQ(outcome.tokens, want[r]) << "request " << r;
    drafted += outcome.speculation.drafted;
  }
  EXPECT_GT(drafted, 0);
}

TEST(SpeculativeEngine, RefusesDraftsARunnerCannotMakeOrTooMany) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  ModelRunner runner(model, 5);
  EXPECT_THROW(Engine(runner, SchedulerConfig{.speculative_tokens = 2}), Error) << "a runner without a drafter";
  runner.enable_drafting(std::make_unique<test::OracleDrafter>(std::vector<std::vector<int32_t>>{}, 2, 0));
  EXPECT_THROW(Engine(runner, SchedulerConfig{.speculative_tokens = kMaxSpeculativeTokens + 1}), Error);
  RunnerEntry entry{0, 0, {1, 2}, true, std::nullopt, 2};
  EXPECT_THROW(runner.forward({entry}), Error) << "drafts after more than one token";
}

}  // namespace
}  // namespace plumb
