// The model's weights, one struct per layer part, in the model's own vocabulary. Every field is a Tensor in the
// backend's memory; the shape comment gives its layout (PyTorch's [out_features, in_features] for projections).
// Symbols: H hidden, V vocabulary, nk/nv key/value heads with head dims dk/dv, C = 2·nk·dk + nv·dv conv channels,
// K conv kernel width, nq/nkv query/KV heads with head dim d, E experts, I expert width, Is shared-expert width.
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/backend.h"

namespace plumb {

// Gated DeltaNet. Qwen3-Next's fused, group-interleaved in_proj_qkvz / in_proj_ba are permuted at load into the
// same contiguous layout Qwen3.5 stores, so one forward pass serves both.
struct GdnWeights {
  Tensor in_proj_qkv;  // [C, H]: rows all q heads | all k heads | all v heads (the conv channel order)
  Tensor in_proj_z;    // [nv·dv, H]: output gate, value head by value head
  Tensor in_proj_b;    // [nv, H]: beta logits
  Tensor in_proj_a;    // [nv, H]: decay inputs
  Tensor conv1d;       // [C, K] F32
  Tensor A_log;        // [nv] F32
  Tensor dt_bias;      // [nv] F32
  Tensor norm;         // [dv] F32, the gated RMSNorm's plain weight (shared by all value heads)
  Tensor out_proj;     // [H, nv·dv]
};

// Gated full attention.
struct AttentionWeights {
  Tensor q_proj;  // [nq·2d, H] with the output gate ([q_h | gate_h] per head), else [nq·d, H]
  Tensor k_proj;  // [nkv·d, H]
  Tensor v_proj;  // [nkv·d, H]
  Tensor o_proj;  // [H, nq·d]
  Tensor q_norm;  // [d] F32, zero-centred
  Tensor k_norm;  // [d] F32, zero-centred
};

// A SiLU-gated MLP: down(SiLU(gate x) ⊙ up x).
struct MlpWeights {
  Tensor gate_proj;  // [width, H]
  Tensor up_proj;    // [width, H]
  Tensor down_proj;  // [H, width]
};

struct MoeWeights {
  Tensor router;                // [E, H]
  ExpertWeights experts;        // gate_up [E, 2I, H], down [E, H, I]
  std::vector<Tensor> storage;  // while loading: the checkpoint's fused 3-D tensors or per-expert ones
  bool has_shared_expert = false;
  MlpWeights shared_expert;   // width Is
  Tensor shared_expert_gate;  // [1, H]
};

struct LayerWeights {
  LayerKind kind = LayerKind::kGatedDeltaNet;
  MlpKind mlp_kind = MlpKind::kDense;
  Tensor input_norm;      // [H] F32, zero-centred
  Tensor post_attn_norm;  // [H] F32, zero-centred
  GdnWeights gdn;         // when kind is kGatedDeltaNet
  AttentionWeights attn;  // when kind is kFullAttention
  MlpWeights mlp;         // when mlp_kind is kDense
  MoeWeights moe;         // when mlp_kind is kMoe
};

// The multi-token-prediction head (mtp.*): from the main model's final hidden state h_t and the embedding of the next
// token x_{t+1}, one full-attention decoder layer drafts x_{t+2}. Its checkpoint fc [H, 2H] takes the normed
// embedding in columns [0, H) and the normed hidden state in [H, 2H); it is split at load into the two halves, whose
// products are added. It shares the main model's embedding and lm_head.
struct MtpWeights {
  Tensor pre_fc_norm_embedding;  // [H] F32, zero-centred
  Tensor pre_fc_norm_hidden;     // [H] F32, zero-centred
  Tensor fc_embedding;           // [H, H]: fc's columns [0, H)
  Tensor fc_hidden;              // [H, H]: fc's columns [H, 2H)
  LayerWeights layer;            // full attention, then the MLP kind of the main model's layers
  Tensor norm;                   // [H] F32, zero-centred
};

struct ModelWeights {
  Tensor embed_tokens;  // [V, H]
  std::vector<LayerWeights> layers;
  Tensor final_norm;              // [H] F32, zero-centred
  Tensor lm_head;                 // [V, H]; the embedding itself when tied
  std::optional<MtpWeights> mtp;  // when loaded for speculative decoding
};

// Every decoder layer's weights: the model's, then the MTP head's when it is loaded.
inline std::vector<LayerWeights*> decoder_layers(ModelWeights& w) {
  std::vector<LayerWeights*> out;
  for (LayerWeights& layer : w.layers) out.push_back(&layer);
  if (w.mtp) out.push_back(&w.mtp->layer);
  return out;
}

}  // namespace plumb
