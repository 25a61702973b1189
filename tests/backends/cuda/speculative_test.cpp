// Speculative decoding on the GPU: whatever the drafts, the tokens and the final state are plain decoding's on the
// same backend, bit for bit (tests/support/speculation_check.h), greedy and sampled; and with the MTP head drafting
// on a model folder that has one. The prompts are 300 tokens, so every decode row sits past position 256, where a
// lone token's attention folds two key segments (docs/kernel-contract.md): the verify call must run its tokens that
// way too (GdnAlgorithm::kRecurrent), not as a prefill's whole tiles.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/cuda/cuda_backend.h"
#include "engine/generate.h"
#include "model/state_hash.h"
#include "need_gpu.h"
#include "support/fixtures.h"
#include "support/served_speculation.h"
#include "support/speculation_check.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

std::vector<int32_t> prompt_of(int64_t count, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
  return ids;
}

class GpuSpeculation : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuSpeculation, TokensAndStateAreDecodingsWhateverTheDrafts) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  for (float temperature : {0.0f, 0.9f}) {
    GenerateOptions plain;
    plain.max_tokens = 20;
    plain.sampling.temperature = temperature;
    plain.sampling.seed = 5;
    const std::vector<std::string> mismatches =
        test::speculation_mismatches(model, plain, prompt_of(300, model.config().vocab_size));
    for (const std::string& m : mismatches) ADD_FAILURE() << "temperature " << temperature << ", " << m;
  }
}

// MoE with a shared expert (Qwen3-Next, BF16 weights), Qwen3.5 MoE, dense Qwen3.5.
INSTANTIATE_TEST_SUITE_P(Models, GpuSpeculation,
                         ::testing::Values("tests/fixtures/models/qwen3_next_bf16", "tests/fixtures/models/qwen3_5_moe",
                                           "tests/fixtures/models/qwen3_5_dense"),
                         test::FolderName());

// The engine's batched step on the GPU: verifications beside other requests' prefill chunks, their rows drawn by the
// runner (the step counting on a row) or on the host, rolled back by a swap with their trails: plain decoding's tokens.
TEST_P(GpuSpeculation, TheEngineServesDecodingsTokensWhateverTheDrafts) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  for (const std::string& m : test::served_speculation_mismatches(model, 300)) ADD_FAILURE() << m;
}

TEST(GpuMtpHead, DraftingWithItLeavesTheTokensAsTheyAre) {
  PLUMB_NEED_GPU();
  const std::string dir = test::scratch_dir("gpu-mtp-head");
  CudaBackend backend;
  const Qwen3NextModel model = test::open_mtp_model(dir, backend, 1024);
  GenerateOptions plain;
  plain.max_tokens = 40;
  const std::vector<int32_t> prompt = prompt_of(300, model.config().vocab_size);
  const GenerateResult want = generate(model, prompt, plain);
  for (int64_t k : {1, 3, 8}) {
    GenerateOptions options = plain;
    options.speculative_tokens = k;
    const GenerateResult got = generate(model, prompt, options);
    EXPECT_EQ(got.tokens, want.tokens) << "k " << k;
    EXPECT_EQ(state_hashes(model, got.state), state_hashes(model, want.state)) << "k " << k;
    EXPECT_GT(got.speculation.drafted, 0) << "k " << k;
  }
  for (const std::string& m : test::served_speculation_mismatches(model, 300)) ADD_FAILURE() << "served: " << m;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb
