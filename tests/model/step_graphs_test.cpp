// StepGraphs on a backend that records nothing (the CPU): every step runs eagerly, a batch padded up to its bucket
// with sink rows gives each real sequence the logits and states of the unpadded forward pass, and a batch it cannot
// record (a prefill) is the forward pass itself. A step given draws also returns each row's token as sample_tokens
// draws it from the step's logits.
#include "engine/step_graphs.h"

#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "model/state_hash.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

TEST(StepGraphs, EagerOnTheCpuAndPaddingChangesNoBit) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  StepGraphs graphs(model, {true, {4}});
  std::vector<SequenceState> plain, padded;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt{1 + i, 2, 3 + 2 * i};
    plain.push_back(model.new_sequence());
    padded.push_back(model.new_sequence());
    model.forward(plain.back(), prompt, LogitsRows::kLast);
    // A prompt is no decode step: StepGraphs hands it to the forward pass as it is.
    graphs.forward({{&padded.back(), prompt}});
    EXPECT_FALSE(graphs.last_replayed());
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<SequenceInput> a, b;
    for (int i = 0; i < 3; ++i) {
      const int32_t id = 5 + 3 * step + i;
      a.push_back({&plain[static_cast<size_t>(i)], {id}});
      b.push_back({&padded[static_cast<size_t>(i)], {id}});
    }
    const std::vector<TokenDraw> draws{{}, {0.9f, 0, 0.8f, 7, static_cast<uint64_t>(step)}, {1.5f, 3, 1.0f, 9, 0}};
    const Tensor want = model.forward(a, LogitsRows::kLast);  // [3, V]
    const StepOutput got = graphs.forward(b, draws);          // [3, V] of a bucket of 4
    EXPECT_FALSE(graphs.last_replayed()) << "the CPU backend records nothing";
    ASSERT_EQ(got.logits.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.logits.data(), want.data(), want.nbytes()), 0) << "step " << step << ": logits differ";
    Tensor want_ids = backend.empty(DType::kI32, {3});
    backend.sample_tokens(want, draws, want_ids);
    ASSERT_EQ(got.ids.shape(), want_ids.shape());
    EXPECT_EQ(std::memcmp(got.ids.data(), want_ids.data(), want_ids.nbytes()), 0) << "step " << step;
  }
  EXPECT_EQ(graphs.recordings(), 0);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(state_hashes(model, padded[i]), state_hashes(model, plain[i])) << "sequence " << i;
}

// A verification through StepGraphs (eager on the CPU) is the forward pass under the decode rule with every row's
// logits and hidden state: the same logits, draws, hidden states and trail states, and a rewind to any kept row
// gives the state of the twin rewound the same way.
TEST(StepGraphs, AVerificationIsTheForwardPassWithTrails) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  StepGraphs graphs(model, {true, {4}});
  std::vector<SequenceState> plain, graphed;
  std::vector<StateTrail> plain_trails(3), graphed_trails(3);
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> prompt{1 + i, 2, 3 + 2 * i, 4};
    plain.push_back(model.new_sequence());
    graphed.push_back(model.new_sequence());
    model.forward(plain.back(), prompt, LogitsRows::kLast);
    model.forward(graphed.back(), prompt, LogitsRows::kLast);
  }
  std::vector<SequenceInput> a, b;
  std::vector<TokenDraw> draws;
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<int32_t> ids{static_cast<int32_t>(5 + i), 7, 11};  // a token and two drafts
    a.push_back({&plain[i], ids, &plain_trails[i]});
    b.push_back({&graphed[i], ids, &graphed_trails[i]});
    for (uint64_t r = 0; r < 3; ++r) draws.push_back({0.9f, 0, 0.8f, 7, r});
  }
  Tensor want_hidden;
  const Tensor want = model.forward(a, LogitsRows::kAll, GdnAlgorithm::kRecurrent, &want_hidden);  // [9, V]
  const StepOutput got = graphs.verify(b, draws);
  EXPECT_FALSE(graphs.last_replayed()) << "the CPU backend records nothing";
  EXPECT_EQ(graphs.verifications_replayed(), 0);
  ASSERT_EQ(got.logits.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.data(), want.nbytes()), 0) << "logits differ";
  ASSERT_EQ(got.hidden.shape(), want_hidden.shape());
  EXPECT_EQ(std::memcmp(got.hidden.data(), want_hidden.data(), want_hidden.nbytes()), 0) << "hidden states differ";
  Tensor want_ids = backend.empty(DType::kI32, {9});
  backend.sample_tokens(want, draws, want_ids);
  ASSERT_EQ(got.ids.shape(), want_ids.shape());
  EXPECT_EQ(std::memcmp(got.ids.data(), want_ids.data(), want_ids.nbytes()), 0) << "draws differ";
  // Sequence i keeps i + 1 of its three rows.
  for (size_t i = 0; i < 3; ++i) {
    const int64_t keep = plain[i].position - 2 + static_cast<int64_t>(i);
    model.rewind(plain[i], plain_trails[i], keep);
    model.rewind(graphed[i], graphed_trails[i], keep);
    EXPECT_EQ(state_hashes(model, graphed[i]), state_hashes(model, plain[i])) << "sequence " << i;
  }
}

}  // namespace
}  // namespace plumb
