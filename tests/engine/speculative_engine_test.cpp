// Speculative decoding in the serving engine (CPU): requests decoding side by side, each verifying its drafts in the
// batched step, get the tokens, logprobs and endings plain decoding gives them, whatever the drafts
// (tests/support/served_speculation.h), on a fixture and with a random MTP head; and what the engine refuses.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "support/fixtures.h"
#include "support/served_speculation.h"
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
  nlohmann::json config = test::small_qwen3_next_config();
  config["mtp_num_hidden_layers"] = 1;
  config["max_position_embeddings"] = 512;
  test::write_model_folder(dir, config, test::synthetic_tensors(config, 21));
  CpuBackend backend;
  LoadOptions options;
  options.mtp = true;
  const Qwen3NextModel model = open_model(dir, backend, options);
  for (const std::string& m : test::served_speculation_mismatches(model, 37)) ADD_FAILURE() << m;
  std::filesystem::remove_all(dir);
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
