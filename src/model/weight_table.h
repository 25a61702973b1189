// The declarative map from checkpoint tensor names to ModelWeights slots: for a given config, every tensor the
// checkpoint must hold, its expected shape, and where it goes. The loader walks this table; any checkpoint tensor it
// does not name (other than the ignored multimodal and MTP parts) is refused.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace plumb {

enum class WeightRole {
  kProjection,  // a 2-D matrix used by linear(): kept in its stored dtype (FP8 is dequantized)
  kParameter,   // a small vector or kernel: converted to F32
};

// Rearrangements applied to a checkpoint tensor before it reaches its slot(s).
enum class WeightTransform {
  kNone,
  kConvKernel,     // [C, 1, K] → [C, K]
  kQwen3NextQkvz,  // group-interleaved in_proj_qkvz → rows [q | k | v] and [z]: targets {qkv, z}
  kQwen3NextBa,    // group-interleaved in_proj_ba → rows [b] and [a]: targets {b, a}
  kColumnHalves,   // [N, 2K] → columns [0, K) and [K, 2K): targets {first, second}
};

struct WeightSlot {
  std::string name;  // full checkpoint name, prefix included
  Shape shape;       // expected checkpoint shape
  WeightRole role = WeightRole::kProjection;
  WeightTransform transform = WeightTransform::kNone;
  std::vector<Tensor*> targets;  // one, or two for the split transforms
};

// Every tensor a checkpoint of this config must hold. `contains` tells whether the checkpoint has a name; it
// decides each MoE layer's expert layout (fused 3-D gate_up_proj / down_proj, or per expert).
// Fills weights.layers' kinds and reserves the slots the table points into; call finish_weights afterwards. With
// `mtp`, the table also lists the multi-token-prediction head (mtp.*, config.mtp_layers of 1) into weights.mtp.
std::vector<WeightSlot> build_weight_table(const ModelConfig& config, ModelWeights& weights,
                                           const std::function<bool(const std::string&)>& contains, bool mtp = false);

// Once the table's targets are loaded: stacks each MoE layer's experts (taking the fused 3-D tensors as they are, or
// copying per-expert tensors into stacked ones on the backend) and points lm_head at the embedding when tied.
void finish_weights(const ModelConfig& config, ModelWeights& weights, Backend& backend);

// Columns [begin, end) of a 2-D host tensor of any dtype; a quantized weight's scales go with them (begin and end on
// the boundaries of its scales: an FP8 weight's K-slices, an NVFP4 weight's groups of 16).
Tensor column_range(const Tensor& from, int64_t begin, int64_t end);
// Rows row_order[0], row_order[1], … of a host tensor of any dtype (rank 1 or more) as a new one; a quantized
// weight's scales go with them.
Tensor gather_rows(const Tensor& from, const std::vector<int64_t>& row_order);

// Qwen3-Next's in_proj_qkvz rows regrouped from per-key-head groups [q_g | k_g | v_g… | z_g…] to
// [all q | all k | all v | all z]; `from` and the result are [2·nk·dk + 2·nv·dv, H] host tensors of any dtype.
Tensor permute_qwen3_next_qkvz(const Tensor& from, const ModelConfig& config);
// Qwen3-Next's in_proj_ba rows regrouped from per-key-head groups [b… | a…] to [all b | all a]: [2·nv, H].
Tensor permute_qwen3_next_ba(const Tensor& from, const ModelConfig& config);

}  // namespace plumb
