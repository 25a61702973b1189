// Batch invariance of the CPU forward pass on the fixture models: a sequence's logits and states are bit-identical
// whatever shares its forward calls, and a chunked prefill split at a multiple of the chunk size is bit-identical to
// one call.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/random.h"

namespace plumb {
namespace {

// A MoE model with a shared expert, a dense Qwen3.5 model, and BF16 weights.
const char* const kModels[] = {
    "tests/fixtures/models/qwen3_next_moe",
    "tests/fixtures/models/qwen3_5_dense",
    "tests/fixtures/models/qwen3_next_bf16",
};

std::vector<int32_t> random_ids(std::mt19937_64& rng, int64_t count, int64_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

bool same_bits(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

// Every layer's conv, recurrent and filled KV state (positions [0, position) in order, wherever their pages lie), bit
// for bit.
void expect_same_state(const Qwen3NextModel& model, const SequenceState& a, const SequenceState& b,
                       const std::string& where) {
  ASSERT_EQ(a.position, b.position) << where;
  ASSERT_EQ(a.layers.size(), b.layers.size()) << where;
  Backend& be = model.backend();
  const KvPagePool& pool = model.kv_pool();
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerState &x = a.layers[i], &y = b.layers[i];
    const std::string layer = where + ", layer " + std::to_string(i);
    if (x.recurrent_state.data()) {
      EXPECT_TRUE(same_bits(x.recurrent_state.data(), y.recurrent_state.data(), x.recurrent_state.nbytes())) << layer;
      EXPECT_TRUE(same_bits(x.conv_state.data(), y.conv_state.data(), x.conv_state.nbytes())) << layer;
    } else {
      const Tensor xk = gather_positions(be, pool.k(i), a.kv_pages.ids(), a.position);
      const Tensor yk = gather_positions(be, pool.k(i), b.kv_pages.ids(), b.position);
      const Tensor xv = gather_positions(be, pool.v(i), a.kv_pages.ids(), a.position);
      const Tensor yv = gather_positions(be, pool.v(i), b.kv_pages.ids(), b.position);
      EXPECT_TRUE(same_bits(xk.data(), yk.data(), xk.nbytes())) << layer << " keys";
      EXPECT_TRUE(same_bits(xv.data(), yv.data(), xv.nbytes())) << layer << " values";
    }
  }
}

class BatchInvariance : public ::testing::TestWithParam<const char*> {
 protected:
  Qwen3NextModel open() { return open_model(test::source_dir() + "/" + GetParam(), backend_); }
  CpuBackend backend_;
};

// One sequence (a 70-token prompt, then decode steps) runs alone and, in lockstep, in a batch with 2 and with 5
// companions of other lengths that keep prefilling and decoding alongside it. After every call its logits rows and
// its whole state are bit-identical in both runs. Alone, its KV pages come in order; in the batch they interleave
// with the companions' pages.
TEST_P(BatchInvariance, ASequenceIsBitIdenticalAloneAndInABatch) {
  const Qwen3NextModel model = open();
  const int64_t V = model.config().vocab_size;
  std::mt19937_64 rng(2024);
  const std::vector<int32_t> prompt = random_ids(rng, 70, V);
  const std::vector<int32_t> decoded = random_ids(rng, 5, V);
  for (const int64_t companions : {2, 5}) {
    SCOPED_TRACE(std::to_string(companions) + " companions");
    const size_t slot = companions == 2 ? 0 : 3;  // where the sequence sits in the batch: first, or in the middle
    SequenceState alone = model.new_sequence(), shared = model.new_sequence();
    std::vector<SequenceState> others;
    for (int64_t j = 0; j < companions; ++j) others.push_back(model.new_sequence());
    for (int64_t call = 0; call <= static_cast<int64_t>(decoded.size()); ++call) {
      const std::vector<int32_t> ids = call == 0 ? prompt : std::vector<int32_t>{decoded[call - 1]};
      // Prefill on the first call; afterwards companions alternate between decode steps and prompt pieces.
      std::vector<SequenceInput> batch;
      for (int64_t j = 0; j < companions; ++j) {
        const int64_t count = call == 0 ? 1 + (j * 29 + 5) % 90 : ((call + j) % 2 ? 1 : 2 + (call * 7 + j) % 40);
        batch.push_back({&others[j], random_ids(rng, count, V)});
      }
      batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(slot), SequenceInput{&shared, ids});
      // Decode calls alternate between all rows and each sequence's last row.
      const LogitsRows rows = call % 2 ? LogitsRows::kLast : LogitsRows::kAll;
      const Tensor alone_logits = model.forward(alone, ids, LogitsRows::kAll);  // [T, V]
      const Tensor batch_logits = model.forward(batch, rows);
      int64_t row = static_cast<int64_t>(slot);
      if (rows == LogitsRows::kAll) {
        row = 0;
        for (size_t j = 0; j < slot; ++j) row += static_cast<int64_t>(batch[j].ids.size());
      }
      const std::string where = "call " + std::to_string(call);
      const size_t bytes = static_cast<size_t>(alone_logits.numel()) * sizeof(float);
      ASSERT_LE((row + alone_logits.dim(0)) * V, batch_logits.numel()) << where;
      EXPECT_TRUE(same_bits(alone_logits.f32(), batch_logits.f32() + row * V, bytes)) << where;
      expect_same_state(model, alone, shared, where);
    }
  }
}

// A 130-token prefill in two calls of 64 and 66 tokens is bit-identical to one call: the chunked delta rule's
// chunks start at the same absolute positions either way. The recurrent one is split anywhere, here also at 50.
TEST_P(BatchInvariance, PrefillSplitAtAChunkBoundaryIsBitIdentical) {
  const Qwen3NextModel model = open();
  const int64_t V = model.config().vocab_size;
  std::mt19937_64 rng(130);
  const std::vector<int32_t> ids = random_ids(rng, 130, V);
  struct Case {
    GdnAlgorithm algorithm;
    int64_t split;
  };
  for (const Case c :
       {Case{GdnAlgorithm::kChunked, 64}, Case{GdnAlgorithm::kRecurrent, 64}, Case{GdnAlgorithm::kRecurrent, 50}}) {
    const std::string where = std::string(c.algorithm == GdnAlgorithm::kChunked ? "chunked" : "recurrent") +
                              ", split at " + std::to_string(c.split);
    SequenceState whole_state = model.new_sequence();
    const Tensor whole = model.forward(whole_state, ids, LogitsRows::kAll, c.algorithm);  // [130, V]
    SequenceState state = model.new_sequence();
    const std::vector<int32_t> head(ids.begin(), ids.begin() + c.split), tail(ids.begin() + c.split, ids.end());
    const Tensor first = model.forward(state, head, LogitsRows::kAll, c.algorithm);   // [split, V]
    const Tensor second = model.forward(state, tail, LogitsRows::kAll, c.algorithm);  // [130 - split, V]
    EXPECT_TRUE(same_bits(whole.f32(), first.f32(), first.nbytes())) << where;
    EXPECT_TRUE(same_bits(whole.f32() + c.split * V, second.f32(), second.nbytes())) << where;
    expect_same_state(model, whole_state, state, where);
  }
}

// A fork goes on as the original would, on pages and states of its own: continuing the fork leaves the original
// untouched, and the original and its fork, given the same tokens, stay bit-identical (conv, recurrent and KV state).
TEST_P(BatchInvariance, AForkContinuesAsTheOriginalAndLeavesItUntouched) {
  const Qwen3NextModel model = open();
  const int64_t V = model.config().vocab_size;
  std::mt19937_64 rng(71);
  const std::vector<int32_t> prompt = random_ids(rng, 70, V), more = random_ids(rng, 60, V);
  SequenceState original = model.new_sequence(), reference = model.new_sequence();
  model.forward(original, prompt, LogitsRows::kLast);
  model.forward(reference, prompt, LogitsRows::kLast);
  SequenceState fork = model.fork_sequence(original);
  expect_same_state(model, reference, fork, "fork");
  for (size_t j = 0; j < fork.kv_pages.ids().size(); ++j)
    EXPECT_NE(fork.kv_pages.ids()[j], original.kv_pages.ids()[j]) << "page " << j << " is shared";
  model.forward(fork, random_ids(rng, 9, V), LogitsRows::kLast);  // the fork goes its own way
  expect_same_state(model, reference, original, "original after the fork moved on");
  fork = model.fork_sequence(original);
  const Tensor a = model.forward(original, more, LogitsRows::kAll), b = model.forward(fork, more, LogitsRows::kAll);
  EXPECT_TRUE(same_bits(a.f32(), b.f32(), a.nbytes()));
  expect_same_state(model, original, fork, "original and fork after the same tokens");
}

INSTANTIATE_TEST_SUITE_P(Models, BatchInvariance, ::testing::ValuesIn(kModels), test::FolderName());

}  // namespace
}  // namespace plumb
