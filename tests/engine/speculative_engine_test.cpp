// Speculative decoding in the serving engine (CPU): requests decoding side by side, each verifying its drafts in the
// batched step, get the tokens, logprobs and endings plain decoding gives them, whatever the drafts; right drafts are
// all kept and cut the steps; the MTP head drafts through the runner with the same result.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "engine/speculative.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"
#include "support/speculation_check.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

// Proposes what plain decoding made: each sequence's tokens so far (as the runner shows them) are matched to the one
// reference (a prompt and its plain continuation) they start with, and the reference's next tokens are proposed,
// every `wrong_every`-th proposal (0: none) replaced by the next id. Notes sequences that match no reference.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(std::vector<std::vector<int32_t>> references, int64_t vocab, int64_t wrong_every)
      : references_(std::move(references)), vocab_(vocab), wrong_every_(wrong_every) {}

  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override {
    std::vector<std::vector<int32_t>> out;
    for (const DraftRequest& r : batch) {
      // Positions 1 .. from + n of the sequence (position 0's token is never shown: no row runs before it).
      std::vector<int32_t>& seen = seen_[r.state];
      seen.resize(static_cast<size_t>(r.from));
      seen.insert(seen.end(), r.next_ids.begin(), r.next_ids.end());
      std::vector<int32_t>& drafts = out.emplace_back();
      const std::vector<int32_t>* match = nullptr;
      for (const std::vector<int32_t>& ref : references_)
        if (ref.size() > seen.size() && std::equal(seen.begin(), seen.end(), ref.begin() + 1)) match = &ref;
      if (!match) {
        if (r.count > 0) unmatched_ += 1;
        continue;
      }
      for (int64_t i = 0; i < r.count && seen.size() + 1 + static_cast<size_t>(i) < match->size(); ++i) {
        const int32_t right = (*match)[seen.size() + 1 + static_cast<size_t>(i)];
        const bool wrong = wrong_every_ > 0 && ++proposed_ % wrong_every_ == 0;
        drafts.push_back(wrong ? static_cast<int32_t>((right + 1) % vocab_) : right);
      }
    }
    return out;
  }
  int64_t unmatched() const { return unmatched_; }

 private:
  std::vector<std::vector<int32_t>> references_;
  int64_t vocab_, wrong_every_;
  int64_t proposed_ = 0, unmatched_ = 0;
  std::map<const SequenceState*, std::vector<int32_t>> seen_;
};

// Takes every other id from the allowed ones, and is done after `length` tokens.
class EvenIds final : public TokenConstraint {
 public:
  explicit EvenIds(size_t length) : length_(length) {}
  bool mask(float* logits, int64_t vocab) const override {
    for (int64_t id = 1; id < vocab; id += 2) logits[id] = -std::numeric_limits<float>::infinity();
    return true;
  }
  bool accept(int32_t id) override {
    ++taken_;
    return id % 2 == 0;
  }
  bool finished() const override { return taken_ == length_; }

 private:
  size_t length_, taken_ = 0;
};

// Requests that decode side by side: greedy, sampled, with logprobs, under a constraint, and one that ends on a stop
// id its plain run draws; prompts of awkward lengths past one prefill chunk.
std::vector<EngineRequest> mixed_requests(const Qwen3NextModel& model) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<EngineRequest> out;
  for (int i = 0; i < 5; ++i) {
    EngineRequest r;
    r.prompt = test::random_ids(40 + static_cast<uint64_t>(i), 37 + 29 * i, vocab);
    r.max_tokens = 19 + 3 * i;
    out.push_back(std::move(r));
  }
  out[1].sampling = {.temperature = 0.8f, .top_p = 0.9f, .seed = 7};
  out[2].top_logprobs = 3;
  out[2].sampling = {.temperature = 0.7f, .presence_penalty = 0.5f, .seed = 9};
  out[3].constraint = std::make_shared<EvenIds>(12);
  // A stop id: the fifth token request 4 draws alone.
  GenerateOptions options;
  options.max_tokens = 5;
  out[4].stop_ids = {generate(model, out[4].prompt, options).tokens.back()};
  return out;
}

SchedulerConfig config_for(int64_t speculative_tokens) {
  return SchedulerConfig{.max_running = 5,
                         .max_waiting = 8,
                         .step_tokens = 5 * 9 + 64,
                         .prefill_chunk = 64,
                         .kv_pages = 64,
                         .kv_page_tokens = kKvPageSize,
                         .speculative_tokens = speculative_tokens};
}

// Every request at once through an engine over `runner`; each one's outcome, and the steps the engine took.
std::vector<test::StreamOutcome> serve(Runner& runner, SchedulerConfig config,
                                       const std::vector<EngineRequest>& requests, uint64_t* steps = nullptr) {
  Engine engine(runner, config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (EngineRequest r : requests) {
    // A constraint is state: each run gets a fresh one.
    if (r.constraint) r.constraint = std::make_shared<EvenIds>(12);
    const Submission s = engine.submit(std::move(r));
    EXPECT_EQ(s.status, SubmitStatus::kQueued);
    streams.push_back(s.stream);
  }
  std::vector<test::StreamOutcome> out;
  for (auto& stream : streams) out.push_back(test::drain(*stream));
  if (steps) *steps = engine.stats().steps;
  return out;
}

void expect_same(const std::vector<test::StreamOutcome>& got, const std::vector<test::StreamOutcome>& want,
                 const std::string& run) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string where = run + ", request " + std::to_string(i);
    EXPECT_EQ(got[i].tokens, want[i].tokens) << where;
    EXPECT_EQ(got[i].finish, want[i].finish) << where << ": " << got[i].error;
    ASSERT_EQ(got[i].details.size(), want[i].details.size()) << where;
    for (size_t t = 0; t < got[i].details.size(); ++t) {
      EXPECT_EQ(got[i].details[t].logprob, want[i].details[t].logprob) << where << ", token " << t;
      ASSERT_EQ(got[i].details[t].top.size(), want[i].details[t].top.size()) << where;
      for (size_t a = 0; a < got[i].details[t].top.size(); ++a)
        EXPECT_EQ(got[i].details[t].top[a].id, want[i].details[t].top[a].id) << where << ", token " << t;
    }
  }
}

TEST(SpeculativeEngine, ServesPlainDecodingsTokensWhateverTheDrafts) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  const std::vector<EngineRequest> requests = mixed_requests(model);
  ModelRunner plain_runner(model, 5);
  uint64_t plain_steps = 0;
  const std::vector<test::StreamOutcome> want = serve(plain_runner, config_for(0), requests, &plain_steps);
  ASSERT_EQ(want[3].finish, StopCause::kConstraintDone);
  ASSERT_EQ(want[4].finish, StopCause::kStopToken);
  ASSERT_EQ(want[4].tokens.size(), 4u);
  std::vector<std::vector<int32_t>> references;
  for (size_t i = 0; i < requests.size(); ++i) {
    references.push_back(requests[i].prompt);
    references.back().insert(references.back().end(), want[i].tokens.begin(), want[i].tokens.end());
  }
  for (int64_t k : {1, 3, 8}) {
    for (int64_t wrong_every : {0, 3, 1}) {
      const std::string run = "k " + std::to_string(k) + ", every " + std::to_string(wrong_every) + "th draft wrong";
      ModelRunner runner(model, 5);
      auto drafter = std::make_unique<OracleDrafter>(references, model.config().vocab_size, wrong_every);
      const OracleDrafter& oracle = *drafter;
      runner.enable_drafting(std::move(drafter));
      uint64_t steps = 0;
      const std::vector<test::StreamOutcome> got = serve(runner, config_for(k), requests, &steps);
      expect_same(got, want, run);
      EXPECT_EQ(oracle.unmatched(), 0) << run << ": the runner showed the drafter tokens no plain run made";
      int64_t drafted = 0, accepted = 0;
      for (const test::StreamOutcome& o : got) {
        drafted += o.speculation.drafted;
        accepted += o.speculation.accepted;
        if (wrong_every == 0) {
          EXPECT_EQ(o.speculation.accepted, o.speculation.drafted) << run;
        }
      }
      EXPECT_GT(drafted, 0) << run;
      if (wrong_every == 1) {
        EXPECT_EQ(accepted, 0) << run;
      }
      if (wrong_every == 3) {
        EXPECT_GT(accepted, 0) << run;
      }
      if (wrong_every == 0 && k > 1) {
        EXPECT_LT(steps, plain_steps) << run << ": right drafts save steps";
      }
    }
  }
}

// The model's own MTP head (random weights) drafting for the runner: the tokens stay plain decoding's.
TEST(SpeculativeEngine, TheMtpHeadDraftsThroughTheRunner) {
  const std::string dir = test::scratch_dir("speculative_engine_mtp");
  nlohmann::json config = test::small_qwen3_next_config();
  config["mtp_num_hidden_layers"] = 1;
  config["max_position_embeddings"] = 512;
  test::write_model_folder(dir, config, test::synthetic_tensors(config, 21));
  CpuBackend backend;
  LoadOptions options;
  options.mtp = true;
  const Qwen3NextModel model = open_model(dir, backend, options);
  const std::vector<EngineRequest> requests = mixed_requests(model);
  ModelRunner plain_runner(model, 5);
  const std::vector<test::StreamOutcome> want = serve(plain_runner, config_for(0), requests);
  ModelRunner runner(model, 5);
  runner.enable_drafting(std::make_unique<MtpDrafter>(model));
  const std::vector<test::StreamOutcome> got = serve(runner, config_for(3), requests);
  expect_same(got, want, "MTP head, k 3");
  int64_t drafted = 0;
  for (const test::StreamOutcome& o : got) drafted += o.speculation.drafted;
  EXPECT_GT(drafted, 0);
  std::filesystem::remove_all(dir);
}

TEST(SpeculativeEngine, RefusesDraftsARunnerCannotMakeOrTooMany) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  ModelRunner runner(model, 5);
  EXPECT_THROW(Engine(runner, config_for(2)), Error) << "a runner without a drafter";
  runner.enable_drafting(std::make_unique<OracleDrafter>(std::vector<std::vector<int32_t>>{}, 2, 0));
  EXPECT_THROW(Engine(runner, config_for(kMaxSpeculativeTokens + 1)), Error);
  RunnerEntry entry{0, 0, {1, 2}, true, std::nullopt, 2};
  EXPECT_THROW(runner.forward({entry}), Error) << "drafts after more than one token";
}

}  // namespace
}  // namespace plumb
