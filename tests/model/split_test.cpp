// The chunk rule on the CPU reference, exhaustively: every prompt length 1..300 of a fixture model (Qwen3-Next with
// MoE and a shared expert) gives the same logits and states in one call, in calls of 64 or 128 tokens, and among three
// other sequences. Three ranges of lengths, so ctest can run them side by side.
#include <gtest/gtest.h>

#include <utility>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/split_check.h"

namespace plumb {
namespace {

class SplitInvariance : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(SplitInvariance, EveryPromptLengthIsBitIdenticalHoweverItIsCut) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/tests/fixtures/models/qwen3_next_moe", backend);
  test::SplitCheck check;
  std::tie(check.first_length, check.last_length) = GetParam();
  check.chunks = {64, 128};
  const std::vector<std::string> mismatches = test::split_mismatches(model, check);
  for (const std::string& m : mismatches) ADD_FAILURE() << m;
  EXPECT_TRUE(mismatches.empty()) << mismatches.size() << " runs differ from the one-call run";
}

INSTANTIATE_TEST_SUITE_P(Lengths, SplitInvariance,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 130}, std::pair<int64_t, int64_t>{131, 230},
                                           std::pair<int64_t, int64_t>{231, 300}),
                         [](const ::testing::TestParamInfo<std::pair<int64_t, int64_t>>& info) {
                           return std::to_string(info.param.first) + "_to_" + std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace plumb
