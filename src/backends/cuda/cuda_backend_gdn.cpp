// CudaBackend::causal_conv1d_silu and CudaBackend::gated_delta_rule: shape checks, the per-call tables (conv tiles;
// delta-rule sequences with their state pointers) uploaded in one copy each, and the launches of kernels/gdn*.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/tensor_checks.h"
#include "core/error.h"
#include "ops/checks.h"

namespace plumb {
namespace {

static_assert(cuda::kGdnChunkRows == kGdnChunkSize, "the chunked kernel's chunk length is the interface's");

constexpr int64_t kGridYZMax = 65535;

// A call's trail states (Backend's StateTrails) as one device table of pointers, sequence after sequence.
class TrailTable {
 public:
  TrailTable(CudaBackend& backend, const StateTrails& trails) : first_(trails.size()), size_(trails.size()) {
    std::vector<float*> pointers;
    for (size_t i = 0; i < trails.size(); ++i) {
      first_[i] = pointers.size();
      size_[i] = static_cast<int64_t>(trails[i].size());
      for (Tensor* t : trails[i]) pointers.push_back(t->f32());
    }
    if (!pointers.empty()) table_ = backend.upload_vector(pointers);
  }
  // The states of sequence i's trail from its token `offset` on: how many, and where their table starts.
  int64_t count(size_t i, int64_t offset) const {
    return i < size_.size() ? std::max<int64_t>(0, size_[i] - offset) : 0;
  }
  float* const* from(size_t i, int64_t offset) const {
    if (count(i, offset) == 0) return nullptr;
    return static_cast<float* const*>(table_.get()) + first_[i] + static_cast<size_t>(offset);
  }

 private:
  std::vector<size_t> first_;  // [sequences]
  std::vector<int64_t> size_;  // [sequences]
  std::shared_ptr<void> table_;
};

}  // namespace

void CudaBackend::causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states,
                                     const BatchRows& batch, Tensor& y, const StateTrails& trails) {
  const char* op = "causal_conv1d_silu";
  expect_gpu(x, DType::kF32, 2, op, "x");
  expect_gpu(w, DType::kF32, 2, op, "w");
  expect_gpu(y, DType::kF32, 2, op, "y");
  const int64_t T = x.dim(0), C = x.dim(1), K = w.dim(1);
  PLUMB_CHECK(K >= cuda::kConvMinWidth && K <= cuda::kConvMaxWidth, "{}: w {} has {} taps, supported {}..{}", op,
              shape_str(w.shape()), K, cuda::kConvMinWidth, cuda::kConvMaxWidth);
  expect_shape(w, {C, K}, op, "w");
  expect_shape(y, {T, C}, op, "y");
  PLUMB_CHECK(C <= kInt32Max, "{}: {} channels", op, C);
  // A tile reads the K-1 inputs before its first token, which the previous tile's outputs would have overwritten.
  PLUMB_CHECK(x.data() != y.data() || T == 0, "{}: y must not alias x", op);
  expect_batch(batch, T, states.size(), op);
  expect_distinct_states(states, op);
  expect_trails(trails, states, batch, op);

  const TrailTable trail(*this, trails);
  std::vector<cuda::ConvTile> tiles;
  for (size_t i = 0; i < batch.size(); ++i) {
    PLUMB_CHECK(states[i] != nullptr, "{}: sequence {} has no state", op, i);
    const Tensor& state = *states[i];
    expect_gpu(state, DType::kF32, 2, op, "state");
    expect_shape(state, {C, K - 1}, op, "state");
    const SequenceRows& rows = batch[i];
    for (int64_t first = 0; first < rows.count; first += cuda::kConvTileRows)
      tiles.push_back({state.f32(), rows.begin, rows.count, first, trail.from(i, 0), trail.count(i, 0)});
  }
  if (tiles.empty()) return;
  PLUMB_CHECK(static_cast<int64_t>(tiles.size()) <= kInt32Max, "{}: {} tiles", op, tiles.size());
  const std::shared_ptr<void> table = upload_vector(tiles);

  cuda::CausalConv1dParams params{};
  params.x = x.f32();
  params.w = w.f32();
  params.y = y.f32();
  params.tiles = static_cast<const cuda::ConvTile*>(table.get());
  params.tile_count = static_cast<int64_t>(tiles.size());
  params.channels = static_cast<int>(C);
  params.width = static_cast<int>(K);
  enqueue("causal_conv1d_silu_kernel", [&] { cuda::launch_causal_conv1d_silu(params, fault_, stream_); });
}

void CudaBackend::gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b,
                                   const Tensor& A_log, const Tensor& dt_bias, const std::vector<Tensor*>& states,
                                   const BatchRows& batch, Tensor& o, GdnAlgorithm algorithm,
                                   const StateTrails& trails) {
  const char* op = "gated_delta_rule";
  expect_gpu(qkv, DType::kF32, 2, op, "qkv");
  expect_gpu(o, DType::kF32, 3, op, "o");
  const int64_t T = qkv.dim(0), nk = key_heads, nv = o.dim(1), dv = o.dim(2);
  PLUMB_CHECK(nk > 0 && nv > 0 && nv % nk == 0, "{}: {} value heads are not a multiple of {} key heads", op, nv, nk);
  const int64_t key_columns = qkv.dim(1) - nv * dv;  // 2·nk·dk
  PLUMB_CHECK(key_columns > 0 && key_columns % (2 * nk) == 0,
              "{}: qkv {} does not hold {} q and k heads and {} v heads of {}", op, shape_str(qkv.shape()), nk, nv, dv);
  const int64_t dk = key_columns / (2 * nk);
  PLUMB_CHECK(dk <= cuda::kGdnMaxHeadDim && dv >= 1 && dv <= cuda::kGdnMaxHeadDim,
              "{}: head dims dk = {}, dv = {}; supported 1..{}", op, dk, dv, cuda::kGdnMaxHeadDim);
  PLUMB_CHECK(nv <= kGridYZMax, "{}: {} value heads", op, nv);
  expect_shape(o, {T, nv, dv}, op, "o");
  expect_gpu(a, DType::kF32, 2, op, "a");
  expect_gpu(b, DType::kF32, 2, op, "b");
  expect_gpu(A_log, DType::kF32, 1, op, "A_log");
  expect_gpu(dt_bias, DType::kF32, 1, op, "dt_bias");
  expect_shape(a, {T, nv}, op, "a");
  expect_shape(b, {T, nv}, op, "b");
  expect_shape(A_log, {nv}, op, "A_log");
  expect_shape(dt_bias, {nv}, op, "dt_bias");
  expect_batch(batch, T, states.size(), op);
  expect_trails(trails, states, batch, op);
  PLUMB_CHECK(trails.empty() || algorithm == GdnAlgorithm::kRecurrent, "{}: trail states need the recurrent rule", op);
  const TrailTable trail(*this, trails);

  // Each sequence's pieces (the chunk rule of gdn_pieces) in three launches: the recurrent pieces that come before a
  // sequence's chunked piece, the chunked pieces, then every other recurrent piece (decode tokens among them). A
  // sequence's pieces run in its own order and each piece's path depends on its positions alone, never on what
  // shares the batch.
  std::vector<cuda::GdnSequence> recurrent_first, chunked, recurrent_last;
  bool state_vec4 = dv % 4 == 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    PLUMB_CHECK(states[i] != nullptr, "{}: sequence {} has no state", op, i);
    const Tensor& state = *states[i];
    expect_gpu(state, DType::kF32, 3, op, "state");
    expect_shape(state, {nv, dk, dv}, op, "state");
    const SequenceRows& rows = batch[i];
    const GdnPieces pieces = gdn_pieces(rows.past, rows.count, algorithm);
    bool after_chunked = false;
    for (int j = 0; j < pieces.size; ++j) {
      const GdnPiece& piece = pieces.piece[j];
      const cuda::GdnSequence sequence{state.f32(),
                                       rows.begin + piece.offset,
                                       piece.count,
                                       rows.past + piece.offset,
                                       trail.from(i, piece.offset),
                                       trail.count(i, piece.offset)};
      if (piece.chunked) {
        chunked.push_back(sequence);
        after_chunked = true;
        continue;
      }
      const bool before_chunked = !after_chunked && j + 1 < pieces.size;
      (before_chunked ? recurrent_first : recurrent_last).push_back(sequence);
      state_vec4 = state_vec4 && reinterpret_cast<uintptr_t>(state.data()) % 16 == 0;
      for (size_t t = 0; !trails.empty() && t < trails[i].size(); ++t)
        state_vec4 = state_vec4 && reinterpret_cast<uintptr_t>(trails[i][t]->data()) % 16 == 0;
    }
  }
  expect_distinct_states(states, op);
  PLUMB_CHECK(
      static_cast<int64_t>(std::max({recurrent_first.size(), chunked.size(), recurrent_last.size()})) <= kGridYZMax,
      "{}: {} sequences in one call", op, batch.size());
  // Scheduling order only: the longest prefills start first, which shortens the tail; results do not depend on it.
  std::stable_sort(chunked.begin(), chunked.end(),
                   [](const cuda::GdnSequence& x, const cuda::GdnSequence& y) { return x.count > y.count; });

  cuda::GatedDeltaRuleParams params{};
  params.qkv = qkv.f32();
  params.a = a.f32();
  params.b = b.f32();
  params.A_log = A_log.f32();
  params.dt_bias = dt_bias.f32();
  params.o = o.f32();
  params.key_heads = static_cast<int>(nk);
  params.value_heads = static_cast<int>(nv);
  params.key_dim = static_cast<int>(dk);
  params.value_dim = static_cast<int>(dv);
  params.qkv_stride = qkv.dim(1);
  params.q_scale = 1.0f / std::sqrt(static_cast<float>(dk));  // as the CPU reference computes it
  params.state_vec4 = state_vec4;
  const auto launch_recurrent = [&](const std::vector<cuda::GdnSequence>& sequences) {
    if (sequences.empty()) return;
    const std::shared_ptr<void> table = upload_vector(sequences);
    enqueue("gdn_recurrent_kernel", [&] {
      cuda::launch_gdn_recurrent(params, static_cast<const cuda::GdnSequence*>(table.get()),
                                 static_cast<int>(sequences.size()), fault_, stream_);
    });
  };
  launch_recurrent(recurrent_first);
  if (!chunked.empty()) {
    // The chunk list: chunks start at multiples of kGdnChunkSize of each sequence's position. One launch pair takes
    // at most kChunkScratchBytes of records; a sequence cut between two launches carries its state through memory,
    // and each of its chunks runs the same arithmetic either way.
    constexpr int64_t kChunkScratchBytes = int64_t{512} << 20;
    const int64_t record_bytes = nv * cuda::kGdnChunkRecordFloats * static_cast<int64_t>(sizeof(float));
    const size_t max_chunks = static_cast<size_t>(std::max<int64_t>(1, kChunkScratchBytes / record_bytes));
    std::vector<cuda::GdnChunk> chunks;
    std::vector<cuda::GdnChunkRun> runs;
    const auto launch = [&] {
      const std::shared_ptr<void> chunk_table = upload_vector(chunks);
      const std::shared_ptr<void> run_table = upload_vector(runs);
      const std::shared_ptr<void> records = scratch(chunks.size() * static_cast<size_t>(record_bytes));
      cuda::GdnChunkedPlan plan{};
      plan.chunks = static_cast<const cuda::GdnChunk*>(chunk_table.get());
      plan.chunk_count = static_cast<int32_t>(chunks.size());
      plan.runs = static_cast<const cuda::GdnChunkRun*>(run_table.get());
      plan.run_count = static_cast<int32_t>(runs.size());
      plan.records = static_cast<float*>(records.get());
      enqueue(
          "gdn_chunk_prepare_kernel / gdn_chunk_state_kernel",
          [&] { cuda::launch_gdn_chunked(params, plan, fault_, stream_); }, 2);
      chunks.clear();
      runs.clear();
    };
    for (const cuda::GdnSequence& sequence : chunked) {
      bool run_open = false;
      for (int64_t t0 = 0; t0 < sequence.count;) {
        if (chunks.size() == max_chunks) {
          launch();
          run_open = false;
        }
        const int64_t length = std::min(kGdnChunkSize - (sequence.past + t0) % kGdnChunkSize, sequence.count - t0);
        if (!run_open) runs.push_back({sequence.state, static_cast<int32_t>(chunks.size()), 0});
        run_open = true;
        chunks.push_back({sequence.begin + t0, static_cast<int32_t>(length), 0});
        ++runs.back().chunk_count;
        t0 += length;
      }
    }
    launch();
  }
  launch_recurrent(recurrent_last);
}

}  // namespace plumb
