// The chunk rule on the GPU: every prompt length 1..200 of fixture models gives the same logits and states in one
// call, in calls of 64 or 128 tokens, and among three other sequences (tests/support/split_check.h).
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "engine/generate.h"
#include "need_gpu.h"
#include "support/fixtures.h"
#include "support/split_check.h"

namespace plumb {
namespace {

class GpuSplitInvariance : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuSplitInvariance, EveryPromptLengthIsBitIdenticalHoweverItIsCut) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  test::SplitCheck check;
  check.last_length = 200;
  check.chunks = {64, 128};
  const std::vector<std::string> mismatches = test::split_mismatches(model, check);
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " runs differ from the one-call run";
}

// MoE with a shared expert (Qwen3-Next, F32 and BF16 weights), dense Qwen3.5, Qwen3.5 MoE.
INSTANTIATE_TEST_SUITE_P(Models, GpuSplitInvariance,
                         ::testing::Values("tests/fixtures/models/qwen3_next_moe",
                                           "tests/fixtures/models/qwen3_next_bf16",
                                           "tests/fixtures/models/qwen3_5_dense", "tests/fixtures/models/qwen3_5_moe"),
                         test::FolderName());

}  // namespace
}  // namespace plumb
