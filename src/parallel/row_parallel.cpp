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

void check_split(const ColumnSplit& split, int64_t k) {
  PLUMB_CHECK(!split.empty() && split.front().begin == 0 && split.back().end == k,
              "row-parallel split: {} ranks' columns do not cover K = {}", split.size(), k);
  for (size_t r = 0; r < split.size(); ++r)
    PLUMB_CHECK(split[r].begin < split[r].end && (r == 0 || split[r].begin == split[r - 1].end),
                "row-parallel split: rank {}'s columns {} to {} are empty or do not follow the previous rank's", r,
                split[r].begin, split[r].end);
}

// A 128-wide slice of K and the rank that folds it: the one holding its first column.
struct Slice {
  ColumnRange columns;
  int owner = 0;
};

std::vector<Slice> slices_with_owners(const ColumnSplit& split) {
  const int64_t k = split.back().end;
  std::vector<Slice> out;
  int owner = 0;
  for (int64_t begin = 0; begin < k; begin += kWeightScaleBlockK) {
    while (begin >= split[static_cast<size_t>(owner)].end) ++owner;
    out.push_back({{begin, std::min(k, begin + kWeightScaleBlockK)}, owner});
  }
  return out;
}

ColumnRange intersect(ColumnRange a, ColumnRange b) {
  return {std::max(a.begin, b.begin), std::min(a.end, b.end)};
}

// dst[:, at:at + src width] ← src, both host F32 matrices with the same rows.
void place_columns(const Tensor& src, Tensor& dst, int64_t at) {
  const int64_t rows = src.dim(0), width = src.dim(1), stride = dst.dim(1);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(src.f32() + r * width, src.f32() + (r + 1) * width, dst.f32() + r * stride + at);
}

}  // namespace

ColumnRange even_share(int64_t count, int rank, int world) {
  const int64_t each = count / world, extra = count % world;
  const int64_t begin = rank * each + std::min<int64_t>(rank, extra);
  return {begin, begin + each + (rank < extra ? 1 : 0)};
}

ColumnRange row_parallel_columns(int64_t k, int rank, int world) {
  const int64_t slices = slices_of(k);
  PLUMB_CHECK(world >= 1 && rank >= 0 && rank < world && k >= world,
              "row-parallel split: rank {} of a world of {} over K = {}", rank, world, k);
  if (slices < world) return even_share(k, rank, world);      // the exchange carries the slices that cross ranks
  const ColumnRange share = even_share(slices, rank, world);  // in slices
  return {share.begin * kWeightScaleBlockK, std::min(k, share.end * kWeightScaleBlockK)};
}

ColumnSplit row_parallel_split(int64_t k, int world) {
  ColumnSplit split;
  for (int r = 0; r < world; ++r) split.push_back(row_parallel_columns(k, r, world));
  return split;
}

ColumnSplit head_split(int64_t heads, int64_t head_dim, int world) {
  ColumnSplit split;
  for (int r = 0; r < world; ++r) split.push_back(head_columns(heads, head_dim, r, world));
  return split;
}

RowParallelShard shard_row_parallel(const Tensor& w, RowReduction reduction, const ColumnSplit& split, int rank) {
  PLUMB_CHECK(w.device() == Device::kCpu && w.rank() == 2,
              "row-parallel split: the weight is {} {}, expected a host matrix [N, K]",
              w.device() == Device::kCpu ? "a host tensor" : "a GPU tensor", shape_str(w.shape()));
  check_split(split, w.dim(1));
  PLUMB_CHECK(rank >= 0 && rank < static_cast<int>(split.size()), "row-parallel split: rank {} of a world of {}", rank,
              split.size());
  RowParallelShard shard;
  shard.reduction = reduction;
  shard.rank = rank;
  shard.split = split;
  const ColumnRange mine = shard.columns();
  if (reduction == RowReduction::kSum) {
    shard.whole = column_range(w, mine.begin, mine.end);
    return shard;
  }
  for (const Slice& slice : slices_with_owners(split)) {
    if (slice.owner != rank) continue;
    shard.owned.push_back(slice.columns);
    shard.slices.push_back(column_range(w, slice.columns.begin, slice.columns.end));
  }
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
  return {share.begin * head_dim, share.end * head_dim};
}

Tensor shard_column_parallel(const Tensor& w, ColumnRange rows) {
  PLUMB_CHECK(w.rank() == 2 && rows.begin >= 0 && rows.begin < rows.end && rows.end <= w.dim(0),
              "column-parallel split: rows {} to {} of a weight {}", rows.begin, rows.end, shape_str(w.shape()));
  return w.rows(rows.begin, rows.end);
}

void row_parallel_linear(Backend& be, Collective& collective, const Tensor& x_local, const RowParallelShard& shard,
                         Tensor& y) {
  const ColumnRange mine = shard.columns();
  const int64_t width = mine.end - mine.begin, rows = y.dim(0);
  PLUMB_CHECK(x_local.rank() == 2 && x_local.dim(1) == width && x_local.dim(0) == rows,
              "row-parallel product: x is {}, expected [{}, {}] (this rank's columns {} to {})",
              shape_str(x_local.shape()), rows, width, mine.begin, mine.end);
  if (shard.reduction == RowReduction::kSum) {
    be.linear(x_local, shard.whole, y);
    collective.all_reduce_sum(y);
    return;
  }
  const int rank = collective.rank(), world = collective.world_size();
  PLUMB_CHECK(rank == shard.rank && world == static_cast<int>(shard.split.size()),
              "row-parallel product: rank {} of {} holds the shard of rank {} of {}", rank, world, shard.rank,
              shard.split.size());
  // This rank's activations in host memory, read only where a slice crosses into or out of its columns.
  Tensor x_host;
  bool downloaded = false;
  const auto host_x = [&]() -> const Tensor& {
    if (!downloaded) x_host = be.download(x_local);
    downloaded = true;
    return x_host;
  };
  // Its columns of slices that earlier ranks fold go to them first (sends do not wait for the receiver).
  for (const Slice& slice : slices_with_owners(shard.split)) {
    const ColumnRange part = intersect(slice.columns, mine);
    if (slice.owner == rank || part.begin >= part.end) continue;
    collective.send(column_range(host_x(), part.begin - mine.begin, part.end - mine.begin), slice.owner);
  }
  Tensor partial = be.empty(DType::kF32, y.shape());  // [T, N]: one slice's product
  if (rank > 0) collective.recv(y, rank - 1);
  for (size_t s = 0; s < shard.slices.size(); ++s) {
    const ColumnRange columns = shard.owned[s];
    Tensor x_slice = be.empty(DType::kF32, {rows, columns.end - columns.begin});  // [T, ≤ 128]
    if (columns.end <= mine.end) {
      be.slice_columns(x_local, columns.begin - mine.begin, columns.end - mine.begin, x_slice);
    } else {
      // The slice runs on into later ranks' columns: its activations from them, side by side with this rank's.
      Tensor gathered = Tensor::zeros(DType::kF32, x_slice.shape());  // [T, ≤ 128]
      place_columns(column_range(host_x(), columns.begin - mine.begin, width), gathered, 0);
      for (int q = rank + 1; q < world && shard.split[static_cast<size_t>(q)].begin < columns.end; ++q) {
        const ColumnRange part = intersect(columns, shard.split[static_cast<size_t>(q)]);
        Tensor received = Tensor::zeros(DType::kF32, {rows, part.end - part.begin});
        collective.recv(received, q);
        place_columns(received, gathered, part.begin - columns.begin);
      }
      be.copy(be.upload(gathered), x_slice);
    }
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
