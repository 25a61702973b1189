// Splitting a finished model over ranks (tensor parallelism), from outside the model file: each rank's share is a
// model of the same family whose configuration names its own heads and widths, run by the one forward pass
// (model/qwen3_next.h) on a RankBackend (rank_backend.h) that knows where the ranks meet.
// - Attention: query heads split evenly, each rank's KV heads those its query heads read (split where there are at
//   least as many as ranks, else each rank keeps a copy of its one); q, k, v by rows (column-parallel), o_proj by
//   its columns (row-parallel).
// - Gated DeltaNet: value heads split evenly, with the key heads they read (split or kept as above); in_proj_qkv's q,
//   k and v rows, the conv channels, z, b, a, A_log and dt_bias by those heads; out_proj row-parallel.
// - MLPs (dense, and an MoE block's shared expert): the width split (row_parallel_columns); gate and up by rows, down
//   row-parallel.
// - Routed experts split by expert (expert parallel), contiguous, earlier ranks one more; the router whole on every
//   rank.
// - The embedding and lm_head split by vocabulary rows.
// - Norms, the shared-expert gate and the MTP head's fc whole on every rank.
// The KV and recurrent states follow: each rank's pools hold its own heads. With the exact reduction every rank's
// logits are the unsplit model's bits.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/qwen3_next.h"
#include "model/weights.h"
#include "parallel/rank_backend.h"
#include "parallel/row_parallel.h"

namespace plumb::parallel {

// One rank's share of a model split over `world` ranks: its configuration (its heads and widths; the vocabulary, the
// number of experts and everything else as the model's) and its weights, host tensors holding its rows and columns
// (tensors every rank uses whole are the model's own, shared; a row-parallel weight under the exact reduction is a
// tensor of the rank's shape that names the product, its shard holding the whole slices the rank folds).
struct ModelShare {
  int rank = 0;
  int world = 1;
  ModelConfig config;
  ModelWeights weights;
  ColumnRange vocabulary;  // its rows of the embedding and lm_head
  ColumnRange experts;     // its experts, in every MoE layer
  // Its shards of every row-parallel weight, in the order of the layers (the MTP head's last): a layer's mixer output
  // projection, then its MLP's down projection (the dense MLP's or the shared expert's).
  std::vector<RowParallelShard> row_parallel;
};

// What rank `rank` of `world` takes of a model of `config`, decided before any weight is read: its attention heads and
// the KV heads they read, its GDN value heads and the key heads they read, its experts and vocabulary rows, and its
// configuration (those heads, and its MLP and shared-expert widths). Refuses what the split does not allow, naming
// the count: heads not divisible by the world (or a world not divisible by too few KV or key heads), fewer experts,
// vocabulary rows or width columns than ranks.
struct SplitPlan {
  ModelConfig config;
  ColumnRange attention_heads, kv_heads, value_heads, key_heads, experts, vocabulary;
};
SplitPlan plan_split(const ModelConfig& config, int rank, int world);

// Rank `rank`'s share of a model whose weights are host tensors (a CPU backend's model, or a checkpoint read to the
// host), as plan_split decides, its row-parallel products reduced by `reduction`.
ModelShare shard_model(const ModelConfig& config, const ModelWeights& weights, int rank, int world,
                       RowReduction reduction);

// The rank's model on `backend` (a RankBackend over the rank's own CPU backend), its row-parallel products,
// vocabulary rows and experts bound to the backend's collectives.
Qwen3NextModel rank_model(ModelShare share, RankBackend& backend);

}  // namespace plumb::parallel
