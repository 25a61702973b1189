// The forward pass of Qwen3-Next and Qwen3.5 (text), written once against the Backend interface: Gated DeltaNet and
// gated full-attention layers, each followed by a dense MLP or a mixture of experts. One call runs T new tokens of
// one sequence, continuing from its cached state.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace plumb {

// What one sequence carries between calls. Shapes per layer (only the kind's own fields are set):
struct LayerState {
  Tensor conv_state;       // [C, K-1] F32: the last K-1 conv inputs (GDN)
  Tensor recurrent_state;  // [nv, dk, dv] F32: the delta-rule state S (GDN)
  Tensor k_cache;          // [capacity, nkv, d] F32: keys after norm and rotary embedding (attention)
  Tensor v_cache;          // [capacity, nkv, d] F32 (attention)
};

struct SequenceState {
  int64_t position = 0;  // tokens already processed
  int64_t kv_capacity = 0;
  std::vector<LayerState> layers;
};

enum class LogitsRows { kAll, kLast };

class Qwen3NextModel {
 public:
  Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return backend_; }

  // A fresh sequence: zero states and room for kv_capacity tokens (grown on demand).
  SequenceState new_sequence(int64_t kv_capacity = 256) const;

  // Runs `ids` at positions state.position onwards and advances the state. Returns logits [T, V] (kAll) or [1, V]
  // (kLast) in the backend's memory. Multi-token calls use `gdn_algorithm` for the delta rule; single tokens always
  // take the recurrent step.
  Tensor forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                 GdnAlgorithm gdn_algorithm = GdnAlgorithm::kChunked) const;

 private:
  void gated_deltanet(const GdnWeights& w, LayerState& s, const Tensor& x, Tensor& out, GdnAlgorithm algorithm) const;
  void full_attention(const AttentionWeights& w, LayerState& s, const Tensor& x, int64_t past, Tensor& out) const;
  void dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) const;
  void mixture_of_experts(const MoeWeights& w, const Tensor& x, Tensor& out) const;
  void ensure_kv_capacity(SequenceState& state, int64_t tokens) const;

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
};

}  // namespace plumb
