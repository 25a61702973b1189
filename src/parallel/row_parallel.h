// Row-parallel projections: a weight w [N, K] split by its K columns over the ranks, each rank multiplying its share
// of the activations (the column-parallel layer before it leaves each rank its own columns) and the ranks' products
// reduced. Two reductions:
// - exact: the products' fixed K-slice fold (docs/kernel-contract.md) goes on from rank to rank. Each 128-wide slice
//   of K is folded by the rank holding its first column (its owner), whole: where the slice runs on past that rank's
//   columns, the ranks holding the rest send it their activations' columns of the slice first, and the owner holds the
//   slice's weight columns. Rank r adds its slices' partial sums, in slice order, onto the running sum rank r − 1 sends
//   it, and the last rank's sum is broadcast. Every rank ends with the bits of the unsplit product, whatever the
//   number of ranks and wherever their columns begin.
// - sum: each rank's whole product over its own columns, all-reduced in rank order. The same bits run to run, but
//   another split rounds the sum differently.
// Widths (an MLP's) are split at slice boundaries where they have a slice a rank (row_parallel_columns), so no
// activations move; heads are split by head (head_columns), wherever a head begins.
// Beside them the products whose split needs no reduction: a column-parallel weight's rows (the product before a
// row-parallel one) and an output head's vocabulary rows, whose logits are gathered.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/backend.h"
#include "parallel/collective.h"

namespace plumb::parallel {

enum class RowReduction { kExact, kSum };

// The columns [begin, end) of K that rank `rank` of `world` ranks takes: whole slices where K has at least as many
// as there are ranks, so that no activations move, and otherwise K's columns as evenly as they come.
struct ColumnRange {
  int64_t begin = 0;
  int64_t end = 0;
};
ColumnRange row_parallel_columns(int64_t k, int rank, int world);
// Share `rank` of `count` things (heads, experts, rows) split over `world` ranks in contiguous runs, earlier ranks one
// more where they do not divide evenly.
ColumnRange even_share(int64_t count, int rank, int world);

// Every rank's columns of K, in rank order: contiguous runs from column 0 to K, none empty.
using ColumnSplit = std::vector<ColumnRange>;
ColumnSplit row_parallel_split(int64_t k, int world);                // row_parallel_columns of every rank
ColumnSplit head_split(int64_t heads, int64_t head_dim, int world);  // head_columns of every rank

// The columns of a product over per-head features (an attention or GDN block's output projection, K = heads ·
// head_dim) that rank `rank` takes when the heads are split over the ranks, earlier ranks one head more.
ColumnRange head_columns(int64_t heads, int64_t head_dim, int rank, int world);

// One rank's share of a row-parallel weight, in host memory: the slices it owns, whole, for the exact reduction, or
// its columns as one matrix for the sum.
struct RowParallelShard {
  RowReduction reduction = RowReduction::kExact;
  int rank = 0;
  ColumnSplit split;               // every rank's columns
  std::vector<ColumnRange> owned;  // kExact: the columns of K of the slices this rank folds, in order
  std::vector<Tensor> slices;      // kExact: [N, ≤ kWeightScaleBlockK] each, those slices' weight columns
  Tensor whole;                    // kSum: [N, columns().end - columns().begin]
  ColumnRange columns() const { return split[static_cast<size_t>(rank)]; }
};
// Rank `rank`'s share of w [N, K] (a host tensor: F32, BF16, or FP8 with its block scales, which follow their
// slices) split as `split` says.
RowParallelShard shard_row_parallel(const Tensor& w, RowReduction reduction, const ColumnSplit& split, int rank);

// Rows [begin, end) of a column-parallel weight w [N, K] (the product before a row-parallel one, whose columns the
// same range names): a view of w, an FP8 weight's block scales coming with its rows.
Tensor shard_column_parallel(const Tensor& w, ColumnRange rows);

// The vocabulary rows [begin, end) of an output head (lm_head [V, H]) rank `rank` of `world` holds: V in contiguous
// shares as even as they come (no slice alignment: each logit is a whole row's product), earlier ranks one row more.
ColumnRange vocab_rows(int64_t vocab, int rank, int world);
// logits [T, V] ← x · lm_headᵀ from this rank's rows of lm_head (head_rows [end - begin, H], in `be`'s memory): each
// rank's logits gathered in rank order, so every rank holds the unsplit product's bits.
void vocab_parallel_logits(Backend& be, Collective& collective, const Tensor& x, const Tensor& head_rows,
                           Tensor& logits);

// y [T, N] ← x · wᵀ, x [T, K] given as this rank's columns, x_local [T, shard.columns() width], and w as this rank's
// shard (host tensors: the exchange of a slice's activations goes through the host). Every rank calls it with the
// same shapes; y is the same on every rank, and with kExact it is linear(x, w)'s.
void row_parallel_linear(Backend& be, Collective& collective, const Tensor& x_local, const RowParallelShard& shard,
                         Tensor& y);

}  // namespace plumb::parallel
