// The forward pass of Qwen3-Next and Qwen3.5 (text), written once against the Backend interface: Gated DeltaNet and
// gated full-attention layers, each followed by a dense MLP or a mixture of experts. One call runs the new tokens of
// a batch of sequences, each continuing from its cached state.
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
  KvCache kv;  // k, v [capacity, nkv, d] of the backend's kv_dtype(): keys after norm and rotary (attention)
};

struct SequenceState {
  int64_t position = 0;  // tokens already processed
  int64_t kv_capacity = 0;
  std::vector<LayerState> layers;
};

enum class LogitsRows { kAll, kLast };

// One sequence's part of a batched forward call: its state and its new tokens.
struct SequenceInput {
  SequenceState* state = nullptr;
  std::vector<int32_t> ids;
};

class Qwen3NextModel {
 public:
  Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return backend_; }

  // A fresh sequence: zero states and room for kv_capacity tokens (grown on demand).
  SequenceState new_sequence(int64_t kv_capacity = 256) const;

  // Runs every sequence's new tokens at positions state->position onwards in one pass (one matrix product per
  // weight for the whole batch) and advances each state. Returns logits in the backend's memory: kAll [Σ T, V],
  // sequence after sequence; kLast [sequences, V], each sequence's last token. Multi-token sequences use
  // `gdn_algorithm` for the delta rule; single tokens always take the recurrent step. A sequence's logits and state
  // are bit-identical whatever else shares its batch.
  Tensor forward(const std::vector<SequenceInput>& batch, LogitsRows rows,
                 GdnAlgorithm gdn_algorithm = GdnAlgorithm::kChunked) const;
  // The batch of one.
  Tensor forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                 GdnAlgorithm gdn_algorithm = GdnAlgorithm::kChunked) const;

 private:
  void gated_deltanet(const GdnWeights& w, const std::vector<Tensor*>& conv_states,
                      const std::vector<Tensor*>& recurrent_states, const BatchRows& layout, const Tensor& x,
                      Tensor& out, GdnAlgorithm algorithm) const;
  void full_attention(const AttentionWeights& w, const std::vector<KvCache*>& caches, const BatchRows& layout,
                      const std::vector<int64_t>& positions, const Tensor& x, Tensor& out) const;
  void dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) const;
  void mixture_of_experts(const MoeWeights& w, const Tensor& x, Tensor& out) const;
  void ensure_kv_capacity(SequenceState& state, int64_t tokens) const;

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
};

}  // namespace plumb
