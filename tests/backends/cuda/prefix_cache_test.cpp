// The prefix cache on the GPU: every prompt length 1..300 of fixture models that starts with a kept prefix resumes
// from its longest kept 64-token boundary and gives the logits and every layer's state of the run from 0, bit for bit
// (tests/support/prefix_check.h).
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "engine/generate.h"
#include "need_gpu.h"
#include "support/fixtures.h"
#include "support/prefix_check.h"

namespace plumb {
namespace {

class GpuPrefixCache : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuPrefixCache, EveryLengthResumesBitIdentical) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  const std::vector<std::string> mismatches = test::prefix_resume_mismatches(model, 1, 300);
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " lengths differ from the run from 0";
}

// MoE with a shared expert (Qwen3-Next, BF16 weights), Qwen3.5 MoE.
INSTANTIATE_TEST_SUITE_P(Models, GpuPrefixCache,
                         ::testing::Values("tests/fixtures/models/qwen3_next_bf16",
                                           "tests/fixtures/models/qwen3_5_moe"),
                         test::FolderName());

}  // namespace
}  // namespace plumb
