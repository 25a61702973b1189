// StepGraphs on a backend that records nothing (the CPU): every step runs eagerly, a batch padded up to its bucket
// with sink rows gives each real sequence the logits and states of the unpadded forward pass, and a batch it cannot
// record (a prefill) is the forward pass itself.
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
    const Tensor want = model.forward(a, LogitsRows::kLast);  // [3, V]
    const Tensor got = graphs.forward(b);                     // [3, V] of a bucket of 4
    EXPECT_FALSE(graphs.last_replayed()) << "the CPU backend records nothing";
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << "step " << step << ": logits differ";
  }
  EXPECT_EQ(graphs.recordings(), 0);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_EQ(state_hashes(model, padded[i]), state_hashes(model, plain[i])) << "sequence " << i;
}

}  // namespace
}  // namespace plumb
