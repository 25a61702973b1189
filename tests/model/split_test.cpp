// The chunk rule on the CPU reference, exhaustively: every prompt length 1..300 of a fixture model gives the same
// logits and states in one call, in calls of 64, 128, 192 or 256 tokens, and among three other sequences.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/split_check.h"

namespace plumb {
namespace {

class SplitInvariance : public ::testing::TestWithParam<const char*> {};

TEST_P(SplitInvariance, EveryPromptLengthIsBitIdenticalHoweverItIsCut) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  test::SplitCheck check;
  check.max_length = 300;
  check.chunks = {64, 128, 192, 256};
  const std::vector<std::string> mismatches = test::split_mismatches(model, check);
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " runs differ from the one-call run";
}

// A MoE model with a shared expert (Qwen3-Next) and a dense Qwen3.5 model.
INSTANTIATE_TEST_SUITE_P(Models, SplitInvariance,
                         ::testing::Values("tests/fixtures/models/qwen3_next_moe",
                                           "tests/fixtures/models/qwen3_5_dense"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           const std::string path = info.param;
                           return path.substr(path.rfind('/') + 1);
                         });

}  // namespace
}  // namespace plumb
