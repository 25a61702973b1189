// Recorded decode steps on the GPU (engine/step_graphs.h, Backend::record_step): a step replayed from its graph gives
// the eager step's logits and states bit for bit, on its first run (the recording), on every replay, after the
// states are reset and replayed again, for a batch padded up to its bucket, and when the batch moves from bucket 16
// to bucket 1, which leaves every sequence outside the smaller batch untouched. The token draws a recorded step makes
// (greedy and sampled rows) are those of Backend::sample_tokens over the eager step's logits.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "engine/generate.h"
#include "engine/step_graphs.h"
#include "model/state_hash.h"
#include "need_gpu.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

using Hashes = std::vector<std::pair<std::string, uint64_t>>;

// Sequences of prompt lengths 5, 12, 19, ... (two of them past a 64-token page), and 400 + i for every sixth from the
// fourth on, whose decode rows fold two attention segments computed by two CTAs (kernels/attention.h on the GPU; the
// short rows beside them leave their second item empty), prefilled eagerly.
std::vector<SequenceState> prefilled(const Qwen3NextModel& model, int64_t count) {
  std::vector<SequenceState> out;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = i % 6 == 3 ? 400 + i : 5 + 7 * i;
    std::vector<int32_t> prompt;
    for (int64_t t = 0; t < length; ++t)
      prompt.push_back(static_cast<int32_t>((31 * i + 17 * t + 3) % model.config().vocab_size));
    out.push_back(model.new_sequence(length + 16));
    model.forward(out.back(), prompt, LogitsRows::kLast);
  }
  return out;
}

std::vector<SequenceState> forks(const Qwen3NextModel& model, const std::vector<SequenceState>& states) {
  std::vector<SequenceState> out;
  for (const SequenceState& s : states) out.push_back(model.fork_sequence(s));
  return out;
}

// The ids of decode step `step` for `count` sequences.
std::vector<SequenceInput> step_inputs(const Qwen3NextModel& model, std::vector<SequenceState>& states,
                                       const std::vector<size_t>& which, int64_t step) {
  std::vector<SequenceInput> batch;
  for (size_t i : which)
    batch.push_back({&states[i], {static_cast<int32_t>((7 * i + 13 * step + 1) % model.config().vocab_size)}});
  return batch;
}

// Step `step`'s draws for `count` rows: greedy rows and sampled ones with top-k, top-p and seeds of their own.
std::vector<TokenDraw> draws(size_t count, int64_t step) {
  std::vector<TokenDraw> out;
  for (size_t i = 0; i < count; ++i) {
    if (i % 2 == 0) {
      out.push_back({});
    } else {
      out.push_back({0.8f, static_cast<int64_t>(i % 3) * 5, 0.9f, 100 + i, static_cast<uint64_t>(step)});
    }
  }
  return out;
}

std::vector<size_t> first(size_t count) {
  std::vector<size_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = i;
  return out;
}

std::vector<uint8_t> bytes_of(Backend& backend, const Tensor& t) {
  const Tensor host = backend.download(t);
  const auto* p = static_cast<const uint8_t*>(host.data());
  return {p, p + host.nbytes()};
}

class GpuStepGraphs : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuStepGraphs, ReplaysAreBitIdenticalToEagerSteps) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/" + GetParam(), backend);
  model.kv_pool().reserve(model.kv_pool().used_pages() + 256);  // no step below grows the pool
  StepGraphs graphs(model, {true, {1, 4, 16}});
  const std::vector<SequenceState> start = prefilled(model, 16);

  // Batches of 16 (bucket 16) and 3 (bucket 4, one sink row), four steps each, twice from the same start: the
  // recording, its replays, and the replays again after a reset.
  for (size_t count : {size_t{16}, size_t{3}}) {
    std::vector<SequenceState> eager = forks(model, start);
    std::vector<std::vector<uint8_t>> eager_logits, eager_ids;
    for (int64_t step = 0; step < 4; ++step) {
      const Tensor logits = model.forward(step_inputs(model, eager, first(count), step), LogitsRows::kLast);
      Tensor ids = backend.empty(DType::kI32, {static_cast<int64_t>(count)});
      backend.sample_tokens(logits, draws(count, step), ids);
      eager_logits.push_back(bytes_of(backend, logits));
      eager_ids.push_back(bytes_of(backend, ids));
    }
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<SequenceState> graphed = forks(model, start);
      for (int64_t step = 0; step < 4; ++step) {
        const StepOutput out = graphs.forward(step_inputs(model, graphed, first(count), step), draws(count, step));
        const std::string what =
            "batch " + std::to_string(count) + " pass " + std::to_string(pass) + " step " + std::to_string(step);
        // A shape's first step runs eagerly and its second is recorded; the rest replay.
        if (pass > 0 || step > 0) {
          EXPECT_TRUE(graphs.last_replayed()) << what << " ran eagerly";
        }
        EXPECT_EQ(bytes_of(backend, out.logits), eager_logits[static_cast<size_t>(step)]) << what << ": logits differ";
        EXPECT_EQ(bytes_of(backend, out.ids), eager_ids[static_cast<size_t>(step)]) << what << ": draws differ";
      }
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(state_hashes(model, graphed[i]), state_hashes(model, eager[i]))
            << "batch " << count << " pass " << pass << ": sequence " << i << "'s states differ";
    }
  }
  EXPECT_EQ(graphs.recordings(), 2) << "one recording per bucket and page stride";

  // From bucket 16 to bucket 1: one step of all 16, then two of sequence 3 alone (bucket 1's eager first step and
  // its recording). The other 15 keep their states.
  std::vector<SequenceState> eager = forks(model, start), graphed = forks(model, start);
  model.forward(step_inputs(model, eager, first(16), 0), LogitsRows::kLast);
  graphs.forward(step_inputs(model, graphed, first(16), 0));
  std::vector<Hashes> before;
  for (const SequenceState& s : graphed) before.push_back(state_hashes(model, s));
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<uint8_t> alone =
        bytes_of(backend, model.forward(step_inputs(model, eager, {3}, step), LogitsRows::kLast));
    EXPECT_EQ(bytes_of(backend, graphs.forward(step_inputs(model, graphed, {3}, step))), alone) << "step " << step;
  }
  EXPECT_TRUE(graphs.last_replayed());
  for (size_t i = 0; i < graphed.size(); ++i) {
    const Hashes want = i == 3 ? state_hashes(model, eager[i]) : before[i];
    EXPECT_EQ(state_hashes(model, graphed[i]), want)
        << "sequence " << i << (i == 3 ? " differs from the eager step" : " changed outside its batch");
  }
}

// MoE with a shared expert (F32 and BF16 weights) and Qwen3.5 MoE.
INSTANTIATE_TEST_SUITE_P(Models, GpuStepGraphs,
                         ::testing::Values("tests/fixtures/models/qwen3_next_moe",
                                           "tests/fixtures/models/qwen3_next_bf16",
                                           "tests/fixtures/models/qwen3_5_moe"),
                         test::FolderName());

}  // namespace
}  // namespace plumb
