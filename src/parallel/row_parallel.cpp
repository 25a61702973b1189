// row_parallel.h. The exact reduction is built from the backend's own product and addition: a product over one K-slice
// is that slice's partial sum as the whole product computes it (its fold starts from -0, which adds nothing), and
// add() is the fold's F32 addition rounded to nearest, so adding the slices' products in order onto the running sum
// repeats the whole product's fold step by step.
#include "parallel/row_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "model/weight_table.h"

namespace plumb::parallel {
namespace {

int64_t slices_of(int64_t k) {
  return (k + kWeightScaleBlockK - 1) / kWeightScaleBlockK;
}

}  // namespace

ColumnRange even_share(int64_t count, int rank, int world) {
  const int64_t each = count / world, extra = count % world;
  const int64_t begin = rank * each + std::min<int64_t>(rank, extra);
  return {begin, begin + each + (rank < extra ? 1 : 0)};
}

ColumnRange row_parallel_columns(int64_t k, int rank, int world) {
  const int64_t slices = slices_of(k);
  PLUMB_CHECK(world >= 1 && rank >= 0 && rank < world, "row-parallel split: rank {} of a world of {}", rank, world);
  PLUMB_CHECK(slices >= world, "row-parallel split: K = {} has {} slices of {}, fewer than the {} ranks", k, slices,
              kWeightScaleBlockK, world);
  const ColumnRange share = even_share(slices, rank, world);  // in slices
  return {share.begin * kWeightScaleBlockK, std::min(k, share.end * kWeightScaleBlockK)};
}

RowParallelShard shard_row_parallel(const Tensor& w, RowReduction reduction, ColumnRange columns) {
  PLUMB_CHECK(w.device() == Device::kCpu && w.rank() == 2,
              "row-parallel split: the weight is {} {}, expected a host matrix [N, K]",
              w.device() == Device::kCpu ? "a host tensor" : "a GPU tensor", shape_str(w.shape()));
  PLUMB_CHECK(columns.begin % kWeightScaleBlockK == 0 && columns.begin < columns.end && columns.end <= w.dim(1),
              "row-parallel split: columns {} to {} of K = {} do not start a slice of {}", columns.begin, columns.end,
              w.dim(1), kWeightScaleBlockK);
  RowParallelShard shard;
  shard.reduction = reduction;
  shard.columns = columns;
  if (reduction == RowReduction::kSum) {
    shard.whole = column_range(w, shard.columns.begin, shard.columns.end);
    return shard;
  }
  for (int64_t begin = shard.columns.begin; begin < shard.columns.end; begin += kWeightScaleBlockK)
    shard.slices.push_back(column_range(w, begin, std::min(shard.columns.end, begin + kWeightScaleBlockK)));
  return shard;
}

ColumnRange vocab_rows(int64_t vocab, int rank, int world) {
  PLUMB_CHECK(world >= 1 && rank >= 0 && rank < world && vocab >= world,
              "vocabulary split: rank {} of a world of {} over {} tokens", rank, world, vocab);
  return even_share(vocab, rank, world);
}

void vocab_parallel_logits(Backend& be, Collective& collective, const Tensor& x, const Tensor& head_rows,
                           Tensor& logits) {
  Tensor local = be.empty(DType::kF32, {x.dim(0), head_rows.dim(0)});  // [T, V_r]
  be.linear(x, head_rows, local);
  collective.all_gather_last(local, logits);
}

ColumnRange head_columns(int64_t heads, int64_t head_dim, int rank, int world) {
  PLUMB_CHECK(world >= 1 && rank >= 0 && rank < world && heads >= world,
              "head split: rank {} of a world of {} over {} heads", rank, world, heads);
  const ColumnRange share = even_share(heads, rank, world);  // in heads
  const int64_t first = share.begin;
  const ColumnRange columns{share.begin * head_dim, share.end * head_dim};
  PLUMB_CHECK(
      columns.begin % kWeightScaleBlockK == 0,
      "head split: rank {}'s heads start at column {} (head {}, {} columns a head), not at a slice boundary of {}",
      rank, columns.begin, first, head_dim, kWeightScaleBlockK);
  return columns;
}

Tensor shard_column_parallel(const Tensor& w, ColumnRange rows) {
  PLUMB_CHECK(w.rank() == 2 && rows.begin >= 0 && rows.begin < rows.end && rows.end <= w.dim(0),
              "column-parallel split: rows {} to {} of a weight {}", rows.begin, rows.end, shape_str(w.shape()));
  return w.rows(rows.begin, rows.end);
}

void row_parallel_linear(Backend& be, Collective& collective, const Tensor& x_local, const RowParallelShard& shard,
                         Tensor& y) {
  const int64_t width = shard.columns.end - shard.columns.begin, rows = y.dim(0);
  PLUMB_CHECK(x_local.rank() == 2 && x_local.dim(1) == width && x_local.dim(0) == rows,
              "row-parallel product: x is {}, expected [{}, {}] (this rank's columns {} to {})",
              shape_str(x_local.shape()), rows, width, shard.columns.begin, shard.columns.end);
  if (shard.reduction == RowReduction::kSum) {
    be.linear(x_local, shard.whole, y);
    collective.all_reduce_sum(y);
    return;
  }
  const int rank = collective.rank(), world = collective.world_size();
  Tensor partial = be.empty(DType::kF32, y.shape());  // [T, N]: one slice's product
  if (rank > 0) collective.recv(y, rank - 1);
  for (size_t s = 0; s < shard.slices.size(); ++s) {
    const int64_t begin = static_cast<int64_t>(s) * kWeightScaleBlockK;
    const int64_t end = std::min(width, begin + kWeightScaleBlockK);
    Tensor x_slice = be.empty(DType::kF32, {rows, end - begin});  // [T, ≤ 128]
    be.slice_columns(x_local, begin, end, x_slice);
    // The first slice of all starts the fold: its product is the running sum itself, sign of zero included.
    if (rank == 0 && s == 0) {
      be.linear(x_slice, shard.slices[s], y);
      continue;
    }
    be.linear(x_slice, shard.slices[s], partial);
    be.add(y, partial);
  }
  if (rank + 1 < world) collective.send(y, rank + 1);
  collective.broadcast(y, world - 1);
}

}  // namespace plumb::parallel
