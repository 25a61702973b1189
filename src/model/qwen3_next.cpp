#include "model/qwen3_next.h"

#include <algorithm>

#include "core/error.h"

namespace plumb {

Qwen3NextModel::Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend) {}

SequenceState Qwen3NextModel::new_sequence(int64_t kv_capacity) const {
  const ModelConfig& c = config_;
  SequenceState s;
  s.kv_capacity = std::max<int64_t>(kv_capacity, 1);
  s.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerState& l = s.layers[i];
    if (c.layer_types[i] == LayerKind::kGatedDeltaNet) {
      l.conv_state = backend_.zeros(DType::kF32, {c.conv_dim(), c.linear_conv_kernel_dim - 1});
      l.recurrent_state =
          backend_.zeros(DType::kF32, {c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim});
    } else {
      l.k_cache = backend_.zeros(DType::kF32, {s.kv_capacity, c.num_key_value_heads, c.head_dim});
      l.v_cache = backend_.zeros(DType::kF32, {s.kv_capacity, c.num_key_value_heads, c.head_dim});
    }
  }
  return s;
}

void Qwen3NextModel::ensure_kv_capacity(SequenceState& state, int64_t tokens) const {
  if (tokens <= state.kv_capacity) return;
  const int64_t capacity = std::max(tokens, 2 * state.kv_capacity);
  for (LayerState& l : state.layers) {
    if (!l.k_cache.data()) continue;
    for (Tensor* cache : {&l.k_cache, &l.v_cache}) {
      Tensor grown = backend_.zeros(DType::kF32, {capacity, cache->dim(1), cache->dim(2)});
      Tensor head = grown.rows(0, state.position);
      backend_.copy(cache->rows(0, state.position), head);
      *cache = grown;
    }
  }
  state.kv_capacity = capacity;
}

Tensor Qwen3NextModel::forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                               GdnAlgorithm gdn_algorithm) const {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.hidden_size;
  PLUMB_CHECK(T > 0, "forward: no tokens");
  PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == c.num_layers, "forward: state is for another model");
  ensure_kv_capacity(state, state.position + T);
  const GdnAlgorithm algorithm = T == 1 ? GdnAlgorithm::kRecurrent : gdn_algorithm;

  Tensor hidden = backend_.zeros(DType::kF32, {T, H});  // [T, H] the residual stream
  backend_.embedding(weights_.embed_tokens, ids, hidden);
  Tensor normed = backend_.zeros(DType::kF32, {T, H});  // [T, H]
  Tensor mixed = backend_.zeros(DType::kF32, {T, H});   // [T, H] a sub-layer's output
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = weights_.layers[i];
    LayerState& s = state.layers[i];
    // h = x + Mixer(RMSNorm_in(x))
    backend_.rms_norm(hidden, w.input_norm, eps, NormWeight::kZeroCentred, normed);
    if (w.kind == LayerKind::kGatedDeltaNet)
      gated_deltanet(w.gdn, s, normed, mixed, algorithm);
    else
      full_attention(w.attn, s, normed, state.position, mixed);
    backend_.add(hidden, mixed);
    // out = h + MLP(RMSNorm_post(h))
    backend_.rms_norm(hidden, w.post_attn_norm, eps, NormWeight::kZeroCentred, normed);
    if (w.mlp_kind == MlpKind::kMoe)
      mixture_of_experts(w.moe, normed, mixed);
    else
      dense_mlp(w.mlp, normed, mixed);
    backend_.add(hidden, mixed);
  }
  state.position += T;

  const Tensor last = rows == LogitsRows::kLast ? hidden.rows(T - 1, T) : hidden;
  Tensor final_normed = backend_.zeros(DType::kF32, last.shape());  // [T or 1, H]
  backend_.rms_norm(last, weights_.final_norm, eps, NormWeight::kZeroCentred, final_normed);
  Tensor logits = backend_.zeros(DType::kF32, {last.dim(0), c.vocab_size});  // [T or 1, V]
  backend_.linear(final_normed, weights_.lm_head, logits);
  return logits;
}

void Qwen3NextModel::gated_deltanet(const GdnWeights& w, LayerState& s, const Tensor& x, Tensor& out,
                                    GdnAlgorithm algorithm) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  Backend& be = backend_;
  Tensor qkv = be.zeros(DType::kF32, {T, c.conv_dim()});  // [T, C] pre-conv q | k | v
  Tensor z = be.zeros(DType::kF32, {T, nv * dv});         // [T, nv·dv] output gate
  Tensor b = be.zeros(DType::kF32, {T, nv});              // [T, nv]
  Tensor a = be.zeros(DType::kF32, {T, nv});              // [T, nv]
  be.linear(x, w.in_proj_qkv, qkv);
  be.linear(x, w.in_proj_z, z);
  be.linear(x, w.in_proj_b, b);
  be.linear(x, w.in_proj_a, a);

  Tensor conv = be.zeros(DType::kF32, {T, c.conv_dim()});  // [T, C] SiLU(conv(qkv))
  be.causal_conv1d_silu(qkv, w.conv1d, s.conv_state, conv);
  Tensor q = be.zeros(DType::kF32, {T, nk, dk});  // [T, nk, dk]
  Tensor k = be.zeros(DType::kF32, {T, nk, dk});  // [T, nk, dk]
  Tensor v = be.zeros(DType::kF32, {T, nv, dv});  // [T, nv, dv]
  be.slice_columns(conv, 0, nk * dk, q);
  be.slice_columns(conv, nk * dk, 2 * nk * dk, k);
  be.slice_columns(conv, 2 * nk * dk, c.conv_dim(), v);

  Tensor g = be.zeros(DType::kF32, {T, nv});     // [T, nv] log decay, ≤ 0
  Tensor beta = be.zeros(DType::kF32, {T, nv});  // [T, nv] write strength in (0, 1)
  be.gdn_gates(a, b, w.A_log, w.dt_bias, g, beta);
  Tensor core = be.zeros(DType::kF32, {T, nv, dv});  // [T, nv, dv]
  be.gated_delta_rule(q, k, v, g, beta, s.recurrent_state, core, algorithm);

  Tensor gated = be.zeros(DType::kF32, {T * nv, dv});  // [T·nv, dv] per value head
  be.gated_rms_norm(core.reshape({T * nv, dv}), z.reshape({T * nv, dv}), w.norm, static_cast<float>(c.rms_norm_eps),
                    gated);
  be.linear(gated.reshape({T, nv * dv}), w.out_proj, out);
}

void Qwen3NextModel::full_attention(const AttentionWeights& w, LayerState& s, const Tensor& x, int64_t past,
                                    Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  Backend& be = backend_;
  Tensor q = be.zeros(DType::kF32, {T, nq, d});  // [T, nq, d]
  Tensor gate;                                   // [T, nq, d] output gate logits
  if (c.attn_output_gate) {
    Tensor q_and_gate = be.zeros(DType::kF32, {T * nq, 2 * d});  // [T·nq, 2d]: [q_h | gate_h] per head
    Tensor q_and_gate_rows = q_and_gate.reshape({T, nq * 2 * d});
    be.linear(x, w.q_proj, q_and_gate_rows);
    gate = be.zeros(DType::kF32, {T, nq, d});
    be.slice_columns(q_and_gate, 0, d, q);
    be.slice_columns(q_and_gate, d, 2 * d, gate);
  } else {
    Tensor flat = q.reshape({T, nq * d});
    be.linear(x, w.q_proj, flat);
  }
  Tensor k = s.k_cache.rows(past, past + T);  // [T, nkv, d], written in place in the cache
  Tensor v = s.v_cache.rows(past, past + T);  // [T, nkv, d]
  Tensor k_flat = k.reshape({T, nkv * d}), v_flat = v.reshape({T, nkv * d});
  be.linear(x, w.k_proj, k_flat);
  be.linear(x, w.v_proj, v_flat);

  const float eps = static_cast<float>(c.rms_norm_eps);
  be.rms_norm(q, w.q_norm, eps, NormWeight::kZeroCentred, q);
  be.rms_norm(k, w.k_norm, eps, NormWeight::kZeroCentred, k);
  std::vector<int64_t> positions(T);
  for (int64_t t = 0; t < T; ++t) positions[t] = past + t;
  be.rotary_embedding(q, positions, c.rotary_dim, c.rope_theta);
  be.rotary_embedding(k, positions, c.rotary_dim, c.rope_theta);

  Tensor o = be.zeros(DType::kF32, {T, nq, d});  // [T, nq, d]
  be.attention(q, s.k_cache, s.v_cache, past, o);
  if (c.attn_output_gate) be.mul_sigmoid(o, gate);
  be.linear(o.reshape({T, nq * d}), w.o_proj, out);
}

void Qwen3NextModel::dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) const {
  const int64_t T = x.dim(0), width = w.gate_proj.dim(0);
  Tensor gate = backend_.zeros(DType::kF32, {T, width});  // [T, width]
  Tensor up = backend_.zeros(DType::kF32, {T, width});    // [T, width]
  backend_.linear(x, w.gate_proj, gate);
  backend_.linear(x, w.up_proj, up);
  backend_.silu_mul(gate, up, gate);
  backend_.linear(gate, w.down_proj, out);
}

void Qwen3NextModel::mixture_of_experts(const MoeWeights& w, const Tensor& x, Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), E = c.num_experts, top_k = c.num_experts_per_tok;
  Tensor router_logits = backend_.zeros(DType::kF32, {T, E});       // [T, E]
  Tensor expert_ids = backend_.zeros(DType::kI32, {T, top_k});      // [T, top_k]
  Tensor expert_weights = backend_.zeros(DType::kF32, {T, top_k});  // [T, top_k]
  backend_.linear(x, w.router, router_logits);
  backend_.moe_route(router_logits, top_k, c.norm_topk_prob, expert_ids, expert_weights);
  backend_.moe_experts(x, expert_ids, expert_weights, w.experts, out);
  if (!w.has_shared_expert) return;
  // y += sigmoid(w_sg · x) · SharedMLP(x)
  Tensor shared = backend_.zeros(DType::kF32, x.shape());    // [T, H]
  Tensor shared_gate = backend_.zeros(DType::kF32, {T, 1});  // [T, 1]
  dense_mlp(w.shared_expert, x, shared);
  backend_.linear(x, w.shared_expert_gate, shared_gate);
  backend_.mul_sigmoid_rows(shared, shared_gate);
  backend_.add(out, shared);
}

}  // namespace plumb
