#include "model/qwen3_next.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "core/error.h"
#include "model/projection_stacks.h"

namespace plumb {

namespace {

// The KV pool's layers: the model's, then the MTP head's one attention layer when it is loaded.
std::vector<bool> attention_layers(const ModelConfig& c, const ModelWeights& w) {
  std::vector<bool> out;
  for (LayerKind kind : c.layer_types) out.push_back(kind == LayerKind::kFullAttention);
  if (w.mtp) out.push_back(true);
  return out;
}

}  // namespace

Qwen3NextModel::Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      backend_(backend),
      kv_pool_(std::make_shared<KvPagePool>(backend, attention_layers(config_, weights_), config_.num_key_value_heads,
                                            config_.head_dim)),
      recurrent_pool_(std::make_shared<RecurrentStatePool>(backend, config_)) {
  stack_projections(weights_, backend_);
}

SequenceState Qwen3NextModel::new_sequence(int64_t reserve_tokens) const {
  return sequence_in(RecurrentSlot(recurrent_pool_), reserve_tokens);
}

SequenceState Qwen3NextModel::sequence_in(RecurrentSlot slot, int64_t reserve_tokens) const {
  SequenceState s;
  s.recurrent_slot = std::move(slot);
  s.kv_pages = KvPages(kv_pool_);
  s.kv_pages.cover(reserve_tokens);
  s.layers.resize(config_.num_layers);
  bind_layers(s);
  return s;
}

void Qwen3NextModel::bind_layers(SequenceState& s) const {
  const ModelConfig& c = config_;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] != LayerKind::kGatedDeltaNet) continue;
    s.layers[i].conv_state = recurrent_pool_->conv_state(static_cast<size_t>(i), s.recurrent_slot.id());
    s.layers[i].recurrent_state = recurrent_pool_->recurrent_state(static_cast<size_t>(i), s.recurrent_slot.id());
  }
}

void Qwen3NextModel::rewind(SequenceState& state, StateTrail& trail, int64_t position) const {
  PLUMB_CHECK(state.recurrent_slot.pool() == recurrent_pool_, "rewind: state is for another model");
  PLUMB_CHECK(position > trail.from && position <= state.position && state.position == trail.from + trail.count + 1,
              "rewind: a sequence at {} whose last call ran from {} (with {} trail states) cannot go back to {}",
              state.position, trail.from, trail.count, position);
  if (position < state.position) {
    std::swap(state.recurrent_slot, trail.slots[static_cast<size_t>(position - trail.from - 1)]);
    bind_layers(state);
    state.position = position;
  }
  trail.count = 0;
}

struct Qwen3NextModel::TrailViews {
  std::vector<std::vector<Tensor>> conv, recurrent;        // [layers][trail states of the batch]: views of trail slots
  std::vector<StateTrails> conv_trails, recurrent_trails;  // [layers]: pointers to them, per sequence and token
};

Qwen3NextModel::TrailViews Qwen3NextModel::trail_views(const std::vector<SequenceInput>& batch,
                                                       GdnAlgorithm gdn_algorithm) const {
  TrailViews views;
  size_t states = 0;  // trail states the call writes, in each GDN layer
  for (const SequenceInput& in : batch) {
    if (!in.trail) continue;
    PLUMB_CHECK(gdn_algorithm == GdnAlgorithm::kRecurrent, "forward: trail states need the recurrent rule");
    StateTrail& trail = *in.trail;
    const size_t wanted = in.ids.size() - 1;
    for (const RecurrentSlot& slot : trail.slots)
      PLUMB_CHECK(slot.pool() == recurrent_pool_, "forward: a trail of another model's slots");
    while (trail.slots.size() < wanted) trail.slots.emplace_back(recurrent_pool_);
    trail.from = in.state->position;
    trail.count = static_cast<int64_t>(wanted);
    states += wanted;
  }
  if (states == 0) return views;
  const auto layers = static_cast<size_t>(config_.num_layers);
  views.conv.resize(layers);
  views.recurrent.resize(layers);
  views.conv_trails.resize(layers);
  views.recurrent_trails.resize(layers);
  for (size_t i = 0; i < layers; ++i) {
    if (config_.layer_types[i] != LayerKind::kGatedDeltaNet) continue;
    views.conv[i].reserve(states);  // no reallocation: the pointers below stay valid
    views.recurrent[i].reserve(states);
    views.conv_trails[i].resize(batch.size());
    views.recurrent_trails[i].resize(batch.size());
    for (size_t s = 0; s < batch.size(); ++s) {
      if (!batch[s].trail) continue;
      const StateTrail& trail = *batch[s].trail;
      for (int64_t t = 0; t < trail.count; ++t) {
        const int32_t slot = trail.slots[static_cast<size_t>(t)].id();
        views.conv[i].push_back(recurrent_pool_->conv_state(i, slot));
        views.recurrent[i].push_back(recurrent_pool_->recurrent_state(i, slot));
        views.conv_trails[i][s].push_back(&views.conv[i].back());
        views.recurrent_trails[i][s].push_back(&views.recurrent[i].back());
      }
    }
  }
  return views;
}

SequenceState Qwen3NextModel::fork_sequence(const SequenceState& state) const {
  PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == config_.num_layers && state.kv_pages.pool() == kv_pool_ &&
                  state.recurrent_slot.pool() == recurrent_pool_,
              "fork_sequence: state is for another model");
  SequenceState fork = sequence_in(RecurrentSlot(recurrent_pool_, state.recurrent_slot.id()), state.position);
  fork.position = state.position;
  fork.draft_position = state.draft_position;
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
  shared.draft_position = std::min(state.draft_position, state.position);
  shared.kv_pages.share(
      std::span<const int32_t>(state.kv_pages.ids()).first(static_cast<size_t>(state.position / kKvPageSize)));
  return shared;
}

Tensor Qwen3NextModel::forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                               GdnAlgorithm gdn_algorithm, Tensor* hidden) const {
  return forward({SequenceInput{&state, ids}}, rows, gdn_algorithm, hidden);
}

struct Qwen3NextModel::BatchPlan {
  BatchRows layout;  // each sequence's rows of the token-major tensors
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;
  // Each sequence's cache: its page table, the same in every attention layer, and the layer's pools (set per layer).
  std::vector<KvCache> caches;
  std::vector<KvCache*> cache_ptrs;
};

Qwen3NextModel::BatchPlan Qwen3NextModel::plan_batch(const std::vector<SequenceState*>& states,
                                                     const std::vector<int64_t>& starts,
                                                     const std::vector<const std::vector<int32_t>*>& ids) const {
  BatchPlan plan;
  for (size_t s = 0; s < states.size(); ++s) {
    PLUMB_CHECK(states[s] && !ids[s]->empty(), "forward: a sequence with no tokens");
    SequenceState& state = *states[s];
    PLUMB_CHECK(static_cast<int64_t>(state.layers.size()) == config_.num_layers && state.kv_pages.pool() == kv_pool_,
                "forward: state is for another model");
    const int64_t count = static_cast<int64_t>(ids[s]->size());
    state.kv_pages.cover(starts[s] + count);  // may grow the pool: before any layer takes its pool tensors
    plan.layout.push_back({static_cast<int64_t>(plan.ids.size()), count, starts[s]});
    plan.ids.insert(plan.ids.end(), ids[s]->begin(), ids[s]->end());
    for (int64_t t = 0; t < count; ++t) plan.positions.push_back(starts[s] + t);
  }
  plan.caches.resize(states.size());
  for (size_t s = 0; s < states.size(); ++s) {
    plan.caches[s].pages = states[s]->kv_pages.ids();
    plan.cache_ptrs.push_back(&plan.caches[s]);
  }
  return plan;
}

void Qwen3NextModel::embed(const BatchPlan& plan, const Tensor* ids, Tensor& out) const {
  const auto T = static_cast<int64_t>(plan.ids.size());
  if (!ids) return backend_.embedding(weights_.embed_tokens, plan.ids, out);
  PLUMB_CHECK(ids->rank() == 1 && ids->dim(0) == T, "forward: ids {} for {} tokens", shape_str(ids->shape()), T);
  backend_.embedding(weights_.embed_tokens, *ids, out);
}

Tensor Qwen3NextModel::forward(const std::vector<SequenceInput>& batch, LogitsRows rows, GdnAlgorithm gdn_algorithm,
                               Tensor* hidden_out, const Tensor* ids) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  PLUMB_CHECK(!batch.empty(), "forward: no sequences");
  std::vector<SequenceState*> states;
  std::vector<int64_t> starts;
  std::vector<const std::vector<int32_t>*> new_ids;
  for (const SequenceInput& in : batch) {
    PLUMB_CHECK(in.state, "forward: a sequence with no state");
    states.push_back(in.state);
    starts.push_back(in.state->position);
    new_ids.push_back(&in.ids);
  }
  BatchPlan plan = plan_batch(states, starts, new_ids);
  const int64_t T = static_cast<int64_t>(plan.ids.size());
  const TrailViews trails = trail_views(batch, gdn_algorithm);
  const StateTrails none;

  Tensor hidden = backend_.empty(DType::kF32, {T, H});  // [T, H] the residual stream
  embed(plan, ids, hidden);
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
      const bool trailed = !trails.conv_trails.empty();
      gated_deltanet(w.gdn, conv_states, recurrent_states, trailed ? trails.conv_trails[i] : none,
                     trailed ? trails.recurrent_trails[i] : none, plan.layout, normed, mixed, gdn_algorithm);
    } else {
      attention_layer(w, static_cast<size_t>(i), plan, normed, mixed, gdn_algorithm);
    }
    mlp_layer(w, hidden, i + 1 < c.num_layers ? &weights_.layers[i + 1].input_norm : nullptr, normed, mixed);
  }
  for (const SequenceInput& in : batch) in.state->position += static_cast<int64_t>(in.ids.size());
  return logits_of(hidden, plan.layout, rows, weights_.final_norm, hidden_out, nullptr);
}

Tensor Qwen3NextModel::draft(const std::vector<DraftInput>& batch, const Tensor& hidden, Tensor* last_hidden,
                             const Tensor* ids, int64_t vocab) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  PLUMB_CHECK(weights_.mtp.has_value(), "draft: the model was loaded without its multi-token-prediction head");
  PLUMB_CHECK(!batch.empty(), "draft: no sequences");
  PLUMB_CHECK(vocab >= 0 && vocab <= c.vocab_size, "draft: a drafting vocabulary of {} ids, outside 1..{} (0: all)",
              vocab, c.vocab_size);
  const MtpWeights& m = *weights_.mtp;
  std::vector<SequenceState*> states;
  std::vector<int64_t> starts;
  std::vector<const std::vector<int32_t>*> new_ids;
  for (const DraftInput& in : batch) {
    PLUMB_CHECK(in.state && in.position >= 0, "draft: a sequence with no state or a negative position");
    states.push_back(in.state);
    starts.push_back(in.position);
    new_ids.push_back(&in.ids);
  }
  BatchPlan plan = plan_batch(states, starts, new_ids);
  const int64_t T = static_cast<int64_t>(plan.ids.size());
  PLUMB_CHECK(hidden.rank() == 2 && hidden.dim(0) == T && hidden.dim(1) == H,
              "draft: hidden states {} for {} rows of width {}", shape_str(hidden.shape()), T, H);

  // x = fc([RMSNorm(embed(ids)) | RMSNorm(hidden)]), fc's two column halves as two products added.
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor embedded = backend_.empty(DType::kF32, {T, H});  // [T, H]
  embed(plan, ids, embedded);
  Tensor normed = backend_.empty(DType::kF32, {T, H});  // [T, H] a normalized input
  Tensor x = backend_.empty(DType::kF32, {T, H});       // [T, H] the head's residual stream
  Tensor mixed = backend_.empty(DType::kF32, {T, H});   // [T, H] a product or sub-layer output
  backend_.rms_norm(embedded, m.pre_fc_norm_embedding, eps, NormWeight::kZeroCentred, normed);
  backend_.linear(normed, m.fc_embedding, x);
  backend_.rms_norm(hidden, m.pre_fc_norm_hidden, eps, NormWeight::kZeroCentred, normed);
  backend_.linear(normed, m.fc_hidden, mixed);
  backend_.add(x, mixed);

  backend_.rms_norm(x, m.layer.input_norm, eps, NormWeight::kZeroCentred, normed);
  attention_layer(m.layer, static_cast<size_t>(c.num_layers), plan, normed, mixed, GdnAlgorithm::kChunked);
  if (!last_hidden) return Tensor();  // the keys and values are written: nothing past them is wanted
  mlp_layer(m.layer, x, nullptr, normed, mixed);
  return logits_of(x, plan.layout, LogitsRows::kLast, m.norm, nullptr, last_hidden, vocab);
}

Tensor Qwen3NextModel::logits_of(const Tensor& hidden, const BatchRows& layout, LogitsRows rows, const Tensor& norm,
                                 Tensor* normed_all, Tensor* normed_rows, int64_t vocab) const {
  const int64_t H = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // The norm is per row, so norming every row and then picking some gives the bits of picking them first.
  Tensor source = hidden;  // [T, H]: the rows to pick from, normed when every row's normed state is wanted
  if (normed_all) {
    *normed_all = backend_.empty(DType::kF32, hidden.shape());
    backend_.rms_norm(hidden, norm, eps, NormWeight::kZeroCentred, *normed_all);
    source = *normed_all;
  }
  const bool one_row_each =
      std::all_of(layout.begin(), layout.end(), [](const SequenceRows& r) { return r.count == 1; });
  Tensor picked = source;  // [T or sequences, H]: the rows whose logits are wanted
  if (rows == LogitsRows::kLast && !one_row_each) {
    picked = backend_.empty(DType::kF32, {static_cast<int64_t>(layout.size()), H});
    for (size_t s = 0; s < layout.size(); ++s) {
      const int64_t row = layout[s].begin + layout[s].count - 1;
      Tensor dst = picked.rows(static_cast<int64_t>(s), static_cast<int64_t>(s) + 1);
      backend_.copy(source.rows(row, row + 1), dst);
    }
  }
  Tensor normed = picked;  // [T or sequences, H]
  if (!normed_all) {
    normed = backend_.empty(DType::kF32, picked.shape());
    backend_.rms_norm(picked, norm, eps, NormWeight::kZeroCentred, normed);
  }
  if (normed_rows) *normed_rows = normed;
  // The first ids' logits are the lm_head's first rows' products: the rows alone are read. (A rank of a split model
  // holds a share of the lm_head's rows and gives the whole vocabulary's logits: V, not its rows, sizes them.)
  const int64_t width = vocab > 0 ? vocab : config_.vocab_size;
  Tensor logits = backend_.empty(DType::kF32, {normed.dim(0), width});  // [T or sequences, V or vocab]
  backend_.linear(normed, vocab > 0 ? weights_.lm_head.rows(0, vocab) : weights_.lm_head, logits);
  return logits;
}

void Qwen3NextModel::attention_layer(const LayerWeights& w, size_t pool_layer, BatchPlan& plan, const Tensor& normed,
                                     Tensor& mixed, GdnAlgorithm rule) const {
  for (KvCache& cache : plan.caches) {
    cache.k = kv_pool_->k(pool_layer);
    cache.v = kv_pool_->v(pool_layer);
  }
  full_attention(w.attn, plan.cache_ptrs, plan.layout, plan.positions, normed, mixed, rule);
}

void Qwen3NextModel::mlp_layer(const LayerWeights& w, Tensor& hidden, const Tensor* next_norm, Tensor& normed,
                               Tensor& mixed) const {
  // out = h + MLP(RMSNorm_post(h))
  const float eps = static_cast<float>(config_.rms_norm_eps);
  backend_.add_rms_norm(hidden, mixed, w.post_attn_norm, eps, NormWeight::kZeroCentred, normed);
  std::optional<GatedBranch> shared;
  if (w.mlp_kind == MlpKind::kMoe)
    shared = mixture_of_experts(w.moe, normed, mixed);
  else
    dense_mlp(w.mlp, normed, mixed);
  residual_step(hidden, mixed, shared, next_norm, normed);
}

void Qwen3NextModel::gated_deltanet(const GdnWeights& w, const std::vector<Tensor*>& conv_states,
                                    const std::vector<Tensor*>& recurrent_states, const StateTrails& conv_trails,
                                    const StateTrails& recurrent_trails, const BatchRows& layout, const Tensor& x,
                                    Tensor& out, GdnAlgorithm algorithm) const {
  const ModelConfig& c = config_;
  const int64_t T = x.dim(0), nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  Backend& be = backend_;
  Tensor qkv = be.empty(DType::kF32, {T, c.conv_dim()});  // [T, C] pre-conv q | k | v
  Tensor z = be.empty(DType::kF32, {T, nv * dv});         // [T, nv·dv] output gate
  Tensor b = be.empty(DType::kF32, {T, nv});              // [T, nv] beta logits
  Tensor a = be.empty(DType::kF32, {T, nv});              // [T, nv] decay inputs
  be.linear_parts(x, {&w.in_proj_qkv, &w.in_proj_z, &w.in_proj_b, &w.in_proj_a}, {&qkv, &z, &b, &a});

  Tensor conv = be.empty(DType::kF32, {T, c.conv_dim()});  // [T, C] SiLU(conv(qkv)): q | k | v per token
  be.causal_conv1d_silu(qkv, w.conv1d, conv_states, layout, conv, conv_trails);
  Tensor core = be.empty(DType::kF32, {T, nv, dv});  // [T, nv, dv]
  be.gated_delta_rule(conv, c.linear_num_key_heads, a, b, w.A_log, w.dt_bias, recurrent_states, layout, core, algorithm,
                      recurrent_trails);

  Tensor gated = be.empty(DType::kF32, {T * nv, dv});  // [T·nv, dv] per value head
  be.gated_rms_norm(core.reshape({T * nv, dv}), z.reshape({T * nv, dv}), w.norm, static_cast<float>(c.rms_norm_eps),
                    gated);
  be.linear(gated.reshape({T, nv * dv}), w.out_proj, out);
}

void Qwen3NextModel::full_attention(const AttentionWeights& w, const std::vector<KvCache*>& caches,
                                    const BatchRows& layout, const std::vector<int64_t>& positions, const Tensor& x,
                                    Tensor& out, GdnAlgorithm rule) const {
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
  be.attention(q, k, v, caches, layout, o, rule);
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
