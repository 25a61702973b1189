#include "model/qwen3_next.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "core/error.h"
#include "model/projection_stacks.h"

namespace plumb {

namespace {

std::vector<bool> attention_layers(const ModelConfig& c) {
  std::vector<bool> out;
  for (LayerKind kind : c.layer_types) out.push_back(kind == LayerKind::kFullAttention);
  return out;
}

}  // namespace

Qwen3NextModel::Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      backend_(backend),
      kv_pool_(std::make_shared<KvPagePool>(backend, attention_layers(config_), config_.num_key_value_heads,
                                            config_.head_dim)),
      recurrent_pool_(std::make_shared<RecurrentStatePool>(backend, config_)) {
  stack_projections(weights_, backend_);
}

SequenceState Qwen3NextModel::new_sequence(int64_t reserve_tokens) const {
  return sequence_in(RecurrentSlot(recurrent_pool_), reserve_tokens);
}

SequenceState Qwen3NextModel::sequence_in(RecurrentSlot slot, int64_t reserve_tokens) const {
  const ModelConfig& c = config_;
  SequenceState s;
  s.recurrent_slot = std::move(slot);
  s.kv_pages = KvPages(kv_pool_);
  s.kv_pages.cover(reserve_tokens);
  s.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] != LayerKind::kGatedDeltaNet) continue;
    s.layers[i].conv_state = recurrent_pool_->conv_state(static_cast<size_t>(i), s.recurrent_slot.id());
    s.layers[i].recurrent_state = recurrent_pool_->recurrent_state(static_cast<size_t>(i), s.recurrent_slot.id());
  }
  return s;
}

SequenceState Qwen3NextModel::fork_sequence(const SequenceState& state) const {
  PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == config_.num_layers && state.kv_pages.pool() == kv_pool_ &&
                  state.recurrent_slot.pool() == recurrent_pool_,
              "fork_sequence: state is for another model");
  SequenceState fork = sequence_in(RecurrentSlot(recurrent_pool_, state.recurrent_slot.id()), state.position);
  fork.position = state.position;
  const std::vector<int32_t>& from = state.kv_pages.ids();
  const std::vector<int32_t>& to = fork.kv_pages.ids();
  for (size_t j = 0; j < from.size() && j < to.size(); ++j) kv_pool_->copy_page(from[j], to[j]);
  return fork;
}

SequenceState Qwen3NextModel::share_sequence(const SequenceState& state) const {
  PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == config_.num_layers && state.kv_pages.pool() == kv_pool_ &&
                  state.recurrent_slot.pool() == recurrent_pool_,
              "share_sequence: state is for another model");
  PLUMB_CHECK(state.position % kKvPageSize == 0 && state.kv_pages.tokens_covered() >= state.position,
              "share_sequence: a state at position {} does not end on a whole KV page of {} positions", state.position,
              kKvPageSize);
  SequenceState shared = sequence_in(RecurrentSlot(recurrent_pool_, state.recurrent_slot.id()), 0);
  shared.position = state.position;
  shared.kv_pages.share(
      std::span<const int32_t>(state.kv_pages.ids()).first(static_cast<size_t>(state.position / kKvPageSize)));
  return shared;
}

Tensor Qwen3NextModel::forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                               GdnAlgorithm gdn_algorithm) const {
  return forward({SequenceInput{&state, ids}}, rows, gdn_algorithm);
}

Tensor Qwen3NextModel::forward(const std::vector<SequenceInput>& batch, LogitsRows rows,
                               GdnAlgorithm gdn_algorithm) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  PLUMB_CHECK(!batch.empty(), "forward: no sequences");
  BatchRows layout;  // each sequence's rows of the token-major tensors below
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  bool one_token_each = true;
  for (const SequenceInput& in : batch) {
    PLUMB_CHECK(in.state && !in.ids.empty(), "forward: a sequence with no tokens");
    SequenceState& state = *in.state;
    PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == c.num_layers && state.kv_pages.pool() == kv_pool_,
                "forward: state is for another model");
    const int64_t count = static_cast<int64_t>(in.ids.size());
    state.kv_pages.cover(state.position + count);  // may grow the pool: before any layer takes its pool tensors
    layout.push_back({static_cast<int64_t>(ids.size()), count, state.position});
    ids.insert(ids.end(), in.ids.begin(), in.ids.end());
    for (int64_t t = 0; t < count; ++t) positions.push_back(state.position + t);
    one_token_each = one_token_each && count == 1;
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  // Each sequence's cache: its page table, the same in every attention layer, and the layer's pools (set below).
  std::vector<KvCache> caches(batch.size());
  std::vector<KvCache*> cache_ptrs;
  for (size_t s = 0; s < batch.size(); ++s) {
    caches[s].pages = batch[s].state->kv_pages.ids();
    cache_ptrs.push_back(&caches[s]);
  }

  Tensor hidden = backend_.empty(DType::kF32, {T, H});  // [T, H] the residual stream
  backend_.embedding(weights_.embed_tokens, ids, hidden);
  Tensor normed = backend_.empty(DType::kF32, {T, H});  // [T, H] the next sub-layer's normalized input
  Tensor mixed = backend_.empty(DType::kF32, {T, H});   // [T, H] a sub-layer's output
  const float eps = static_cast<float>(c.rms_norm_eps);
  // Each residual add is one step with the norm that reads its sum (add_rms_norm), the last layer's excepted: the
  // final norm reads only the rows whose logits are wanted.
  if (c.num_layers > 0) backend_.rms_norm(hidden, weights_.layers[0].input_norm, eps, NormWeight::kZeroCentred, normed);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = weights_.layers[i];
    // h = x + Mixer(RMSNorm_in(x))
    if (w.kind == LayerKind::kGatedDeltaNet) {
      std::vector<Tensor*> conv_states, recurrent_states;
      for (const SequenceInput& in : batch) {
        conv_states.push_back(&in.state->layers[i].conv_state);
        recurrent_states.push_back(&in.state->layers[i].recurrent_state);
      }
      gated_deltanet(w.gdn, conv_states, recurrent_states, layout, normed, mixed, gdn_algorithm);
    } else {
      for (KvCache& cache : caches) {
        cache.k = kv_pool_->k(static_cast<size_t>(i));
        cache.v = kv_pool_->v(static_cast<size_t>(i));
      }
      full_attention(w.attn, cache_ptrs, layout, positions, normed, mixed);
    }
    // out = h + MLP(RMSNorm_post(h))
    backend_.add_rms_norm(hidden, mixed, w.post_attn_norm, eps, NormWeight::kZeroCentred, normed);
    std::optional<GatedBranch> shared;
    if (w.mlp_kind == MlpKind::kMoe)
      shared = mixture_of_experts(w.moe, normed, mixed);
    else
      dense_mlp(w.mlp, normed, mixed);
    residual_step(hidden, mixed, shared, i + 1 < c.num_layers ? &weights_.layers[i + 1].input_norm : nullptr, normed);
  }
  for (const SequenceInput& in : batch) in.state->position += static_cast<int64_t>(in.ids.size());

  Tensor last = hidden;  // [T or sequences, H]: the rows whose logits are wanted
  if (rows == LogitsRows::kLast && !one_token_each) {
    last = backend_.empty(DType::kF32, {static_cast<int64_t>(batch.size()), H});
    for (size_t s = 0; s < layout.size(); ++s) {
      const int64_t row = layout[s].begin + layout[s].count - 1;
      Tensor dst = last.rows(static_cast<int64_t>(s), static_cast<int64_t>(s) + 1);
      backend_.copy(hidden.rows(row, row + 1), dst);
    }
  }
  Tensor final_normed = backend_.empty(DType::kF32, last.shape());  // [T or sequences, H]
  backend_.rms_norm(last, weights_.final_norm, eps, NormWeight::kZeroCentred, final_normed);
  Tensor logits = backend_.empty(DType::kF32, {last.dim(0), c.vocab_size});  // [T or sequences, V]
  backend_.linear(final_normed, weights_.lm_head, logits);
  return logits;
}

void Qwen3NextModel::gated_deltanet(const GdnWeights& w, const std::vector<Tensor*>& conv_states,
                                    const std::vector<Tensor*>& recurrent_states, const BatchRows& layout,
                                    const Tensor& x, Tensor& out, GdnAlgorithm algorithm) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  Backend& be = backend_;
  Tensor qkv = be.empty(DType::kF32, {T, c.conv_dim()});  // [T, C] pre-conv q | k | v
  Tensor z = be.empty(DType::kF32, {T, nv * dv});         // [T, nv·dv] output gate
  Tensor b = be.empty(DType::kF32, {T, nv});              // [T, nv] beta logits
  Tensor a = be.empty(DType::kF32, {T, nv});              // [T, nv] decay inputs
  be.linear_parts(x, {&w.in_proj_qkv, &w.in_proj_z, &w.in_proj_b, &w.in_proj_a}, {&qkv, &z, &b, &a});

  Tensor conv = be.empty(DType::kF32, {T, c.conv_dim()});  // [T, C] SiLU(conv(qkv)): q | k | v per token
  be.causal_conv1d_silu(qkv, w.conv1d, conv_states, layout, conv);
  Tensor core = be.empty(DType::kF32, {T, nv, dv});  // [T, nv, dv]
  be.gated_delta_rule(conv, c.linear_num_key_heads, a, b, w.A_log, w.dt_bias, recurrent_states, layout, core,
                      algorithm);

  Tensor gated = be.empty(DType::kF32, {T * nv, dv});  // [T·nv, dv] per value head
  be.gated_rms_norm(core.reshape({T * nv, dv}), z.reshape({T * nv, dv}), w.norm, static_cast<float>(c.rms_norm_eps),
                    gated);
  be.linear(gated.reshape({T, nv * dv}), w.out_proj, out);
}

void Qwen3NextModel::full_attention(const AttentionWeights& w, const std::vector<KvCache*>& caches,
                                    const BatchRows& layout, const std::vector<int64_t>& positions, const Tensor& x,
                                    Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  Backend& be = backend_;
  Tensor q = be.empty(DType::kF32, {T, nq, d});   // [T, nq, d]
  Tensor gate;                                    // [T, nq, d] output gate logits
  Tensor k = be.empty(DType::kF32, {T, nkv, d});  // [T, nkv, d] the new keys
  Tensor v = be.empty(DType::kF32, {T, nkv, d});  // [T, nkv, d] the new values
  Tensor k_flat = k.reshape({T, nkv * d}), v_flat = v.reshape({T, nkv * d});
  if (c.attn_output_gate) {
    Tensor q_and_gate = be.empty(DType::kF32, {T * nq, 2 * d});  // [T·nq, 2d]: [q_h | gate_h] per head
    Tensor q_and_gate_rows = q_and_gate.reshape({T, nq * 2 * d});
    be.linear_parts(x, {&w.q_proj, &w.k_proj, &w.v_proj}, {&q_and_gate_rows, &k_flat, &v_flat});
    gate = be.empty(DType::kF32, {T, nq, d});
    be.slice_columns(q_and_gate, 0, d, q);
    be.slice_columns(q_and_gate, d, 2 * d, gate);
  } else {
    Tensor flat = q.reshape({T, nq * d});
    be.linear_parts(x, {&w.q_proj, &w.k_proj, &w.v_proj}, {&flat, &k_flat, &v_flat});
  }

  const float eps = static_cast<float>(c.rms_norm_eps);
  be.rms_norm(q, w.q_norm, eps, NormWeight::kZeroCentred, q);
  be.rms_norm(k, w.k_norm, eps, NormWeight::kZeroCentred, k);
  be.rotary_embedding(q, positions, c.rotary_dim, c.rope_theta);
  be.rotary_embedding(k, positions, c.rotary_dim, c.rope_theta);

  Tensor o = be.empty(DType::kF32, {T, nq, d});  // [T, nq, d]
  be.attention(q, k, v, caches, layout, o);
  if (c.attn_output_gate) be.mul_sigmoid(o, gate);
  be.linear(o.reshape({T, nq * d}), w.o_proj, out);
}

void Qwen3NextModel::dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) const {
  const int64_t T = x.dim(0), width = w.gate_proj.dim(0);
  Tensor gate = backend_.empty(DType::kF32, {T, width});  // [T, width]
  Tensor up = backend_.empty(DType::kF32, {T, width});    // [T, width]
  backend_.linear_parts(x, {&w.gate_proj, &w.up_proj}, {&gate, &up});
  backend_.silu_mul(gate, up, gate);
  backend_.linear(gate, w.down_proj, out);
}

void Qwen3NextModel::residual_step(Tensor& hidden, Tensor& mixed, std::optional<GatedBranch>& branch,
                                   const Tensor* next_norm, Tensor& normed) const {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (branch && next_norm) {
    backend_.add_gated_branch_rms_norm(hidden, mixed, *branch, *next_norm, eps, NormWeight::kZeroCentred, normed);
    return;
  }
  if (branch) {
    backend_.mul_sigmoid_rows(branch->out, branch->gate);
    backend_.add(mixed, branch->out);
  }
  if (next_norm)
    backend_.add_rms_norm(hidden, mixed, *next_norm, eps, NormWeight::kZeroCentred, normed);
  else
    backend_.add(hidden, mixed);
}

std::optional<GatedBranch> Qwen3NextModel::mixture_of_experts(const MoeWeights& w, const Tensor& x, Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), E = c.num_experts, top_k = c.num_experts_per_tok;
  Tensor router_logits = backend_.empty(DType::kF32, {T, E});       // [T, E]
  Tensor expert_ids = backend_.empty(DType::kI32, {T, top_k});      // [T, top_k]
  Tensor expert_weights = backend_.empty(DType::kF32, {T, top_k});  // [T, top_k]
  if (!w.has_shared_expert) {
    backend_.linear(x, w.router, router_logits);
    route_and_run_experts(w, x, router_logits, expert_ids, expert_weights, out);
    return std::nullopt;
  }
  // y += sigmoid(w_sg · x) · SharedMLP(x), the gated branch residual_step adds; the router and the shared expert's
  // three products of x are one.
  const MlpWeights& s = w.shared_expert;
  const int64_t width = s.gate_proj.dim(0);
  Tensor shared_gate = backend_.empty(DType::kF32, {T, 1});  // [T, 1]
  Tensor gate = backend_.empty(DType::kF32, {T, width});     // [T, Is]
  Tensor up = backend_.empty(DType::kF32, {T, width});       // [T, Is]
  backend_.linear_parts(x, {&w.router, &w.shared_expert_gate, &s.gate_proj, &s.up_proj},
                        {&router_logits, &shared_gate, &gate, &up});
  Tensor shared = backend_.empty(DType::kF32, x.shape());  // [T, H]
  // The shared expert reads only the stacked product's outputs (gate, up, shared_gate) and writes only `gate` (in
  // place) and `shared`, none of which the routing or the routed experts touch: the two may run side by side.
  backend_.concurrently([&] { route_and_run_experts(w, x, router_logits, expert_ids, expert_weights, out); },
                        [&] {
                          backend_.silu_mul(gate, up, gate);
                          backend_.linear(gate, s.down_proj, shared);
                        });
  return GatedBranch{shared, shared_gate};
}

void Qwen3NextModel::route_and_run_experts(const MoeWeights& w, const Tensor& x, const Tensor& router_logits,
                                           Tensor& expert_ids, Tensor& expert_weights, Tensor& out) const {
  const ModelConfig& c = config_;
  backend_.moe_route(router_logits, c.num_experts_per_tok, c.norm_topk_prob, expert_ids, expert_weights);
  if (routing_) trace_routing(router_logits, expert_ids, expert_weights);
  backend_.moe_experts(x, expert_ids, expert_weights, w.experts, out);
}

void Qwen3NextModel::trace_routing(const Tensor& router_logits, Tensor& expert_ids, Tensor& expert_weights) const {
  RoutingTrace& trace = *routing_;
  const int64_t T = expert_ids.dim(0), top_k = expert_ids.dim(1), E = router_logits.dim(1);
  if (trace.mode == RoutingTrace::Mode::kRecord) {
    const Tensor ids = backend_.download(expert_ids);  // [T, top_k]
    trace.top_k = top_k;
    trace.calls.emplace_back(ids.data_as<int32_t>(), ids.data_as<int32_t>() + T * top_k);
    return;
  }
  PLUMB_CHECK(trace.next < trace.calls.size() && trace.top_k == top_k &&
                  static_cast<int64_t>(trace.calls[trace.next].size()) == T * top_k,
              "routing replay: MoE call {} of this run does not match the recording ({} calls of top {})", trace.next,
              trace.calls.size(), trace.top_k);
  const std::vector<int32_t>& chosen = trace.calls[trace.next++];
  const Tensor logits = backend_.download(router_logits);  // [T, E]
  Tensor ids = Tensor::zeros(DType::kI32, {T, top_k}), weights = Tensor::zeros(DType::kF32, {T, top_k});
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.f32() + t * E;
    double max_logit = row[0], total = 0.0, kept = 0.0;
    for (int64_t e = 1; e < E; ++e) max_logit = std::max<double>(max_logit, row[e]);
    for (int64_t e = 0; e < E; ++e) total += std::exp(row[e] - max_logit);
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = chosen[t * top_k + j];
      PLUMB_CHECK(e >= 0 && e < E, "routing replay: expert id {} of {}", e, E);
      kept += std::exp(row[e] - max_logit) / total;
    }
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = chosen[t * top_k + j];
      const double p = std::exp(row[e] - max_logit) / total;
      ids.data_as<int32_t>()[t * top_k + j] = e;
      weights.f32()[t * top_k + j] = static_cast<float>(config_.norm_topk_prob ? p / kept : p);
    }
  }
  backend_.copy(ids, expert_ids);
  backend_.copy(weights, expert_weights);
}

}  // namespace plumb
