// The forward pass of Qwen3-Next and Qwen3.5 (text), written once against the Backend interface: Gated DeltaNet and
// gated full-attention layers, each followed by a dense MLP or a mixture of experts. One call runs the new tokens of
// a batch of sequences, each continuing from its cached state.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/config.h"
#include "model/kv_pages.h"
#include "model/recurrent_pool.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace plumb {

// What one sequence carries between calls. A GDN layer's own state (unset for attention layers), views of its slot
// in the model's recurrent state pool:
struct LayerState {
  Tensor conv_state;       // [C, K-1] F32: the last K-1 conv inputs
  Tensor recurrent_state;  // [nv, dk, dv] F32: the delta-rule state S
};

// A sequence's state. Its GDN layers' states live in its slot of the model's recurrent state pool, and its attention
// layers' keys (after norm and rotary) and values for positions [0, position) in the model's KV page pool, in the
// pages kv_pages lists (one table for every attention layer); both return to their pools when the state is destroyed
// or replaced.
struct SequenceState {
  int64_t position = 0;        // tokens already processed
  int64_t draft_position = 0;  // the MTP head's cache holds positions [0, draft_position) (speculative decoding)
  RecurrentSlot recurrent_slot;
  KvPages kv_pages;
  std::vector<LayerState> layers;  // [layers]: views of recurrent_slot's state
};

enum class LogitsRows { kAll, kLast };

// The expert choices of every MoE layer call, recorded from one run and replayed in another. Comparing two backends
// whose routers see near-ties differently (a BF16 GPU path against the FP32 reference) with the same choices measures
// their arithmetic rather than a flipped discrete choice. Replay takes the recorded experts and weighs them with the
// replaying run's own router probabilities.
struct RoutingTrace {
  enum class Mode { kRecord, kReplay };
  Mode mode = Mode::kRecord;
  int64_t top_k = 0;
  std::vector<std::vector<int32_t>> calls;  // per MoE layer call, in order: expert ids [T, top_k]
  size_t next = 0;                          // replay: the next call's index
};

// The GDN states a call leaves after each of a sequence's tokens but its last (SequenceInput::trail): slots[t] of the
// model's recurrent state pool holds the state after the call's token t, the call having run from position `from`;
// `count` of them hold one. What verifying speculative drafts keeps, so that keeping the first j tokens is an index
// swap (Qwen3NextModel::rewind). The slots stay with the trail from call to call: once it has as many as a
// verification wants, no call takes or zeroes one.
struct StateTrail {
  int64_t from = 0;
  int64_t count = 0;
  std::vector<RecurrentSlot> slots;
};

// One sequence's part of a batched forward call: its state and its new tokens, and where a verification keeps its
// states (only under GdnAlgorithm::kRecurrent).
struct SequenceInput {
  SequenceState* state = nullptr;
  std::vector<int32_t> ids;
  StateTrail* trail = nullptr;
};

// One sequence's part of a batched call of the multi-token-prediction head: row t, at position `position` + t, takes
// ids[t], the token at position `position` + t + 1, beside the hidden state of position `position` + t.
struct DraftInput {
  SequenceState* state = nullptr;
  int64_t position = 0;
  std::vector<int32_t> ids;
};

class Qwen3NextModel {
 public:
  Qwen3NextModel(ModelConfig config, ModelWeights weights, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return backend_; }
  // Records or replays expert choices (see RoutingTrace); nullptr (the default) routes normally.
  void set_routing_trace(RoutingTrace* trace) { routing_ = trace; }
  bool routing_trace_set() const { return routing_ != nullptr; }

  // A fresh sequence: a zeroed slot of the recurrent state pool and KV pages for reserve_tokens tokens (more are
  // allocated as it grows).
  SequenceState new_sequence(int64_t reserve_tokens = 0) const;
  // A copy of `state` that goes on independently: its own conv and recurrent states and KV pages, bit-identical to
  // the original's, so both continue as the original would.
  SequenceState fork_sequence(const SequenceState& state) const;
  // A sequence that starts where `state` is, sharing its KV pages rather than copying them: its own copy of the
  // recurrent state, and the same pages for positions [0, position), held by both. state's position must be a
  // multiple of kKvPageSize, so every shared page is full and neither sequence writes one. What a prefix cache keeps,
  // and what a request that hits it starts from; both continue exactly as `state` would.
  SequenceState share_sequence(const SequenceState& state) const;
  // The pool that holds every sequence's KV pages (its sequences keep it alive; the backend must outlive both).
  // gather_positions(backend(), kv_pool().k(layer), state.kv_pages.ids(), state.position) reads a cache.
  KvPagePool& kv_pool() const { return *kv_pool_; }
  // The pool of every sequence's GDN layer states (kept alive by its sequences, like the KV pool).
  RecurrentStatePool& recurrent_pool() const { return *recurrent_pool_; }

  // Runs every sequence's new tokens at positions state->position onwards in one pass (one matrix product per
  // weight for the whole batch) and advances each state. Returns logits in the backend's memory: kAll [Σ T, V],
  // sequence after sequence; kLast [sequences, V], each sequence's last token. The sequences' tokens take
  // `gdn_algorithm` for the delta rule (the chunk rule of gdn_pieces). A sequence's logits and state are
  // bit-identical whatever else shares its batch and wherever its calls end at multiples of kGdnChunkSize. With
  // kRecurrent, every token takes a decode step's arithmetic in the delta rule and in attention, so T tokens in one
  // call are bit-identical to T calls of one token each. When `hidden` is given, it
  // receives every new token's final hidden state (after the final norm), [Σ T, H]: what the MTP head drafts from.
  // With `ids` ([Σ T] I32 in the backend's memory, such as a drafter's proposals), the tokens come from it, and each
  // input's ids give only its number of tokens.
  Tensor forward(const std::vector<SequenceInput>& batch, LogitsRows rows,
                 GdnAlgorithm gdn_algorithm = GdnAlgorithm::kChunked, Tensor* hidden = nullptr,
                 const Tensor* ids = nullptr) const;
  // The batch of one.
  Tensor forward(SequenceState& state, const std::vector<int32_t>& ids, LogitsRows rows,
                 GdnAlgorithm gdn_algorithm = GdnAlgorithm::kChunked, Tensor* hidden = nullptr) const;

  // Takes a sequence back to `position` among the positions its last call ran, which left `trail` (trail.from <
  // position <= state.position): its GDN states become the trail's after position - 1, by swapping slots with the
  // trail, and the positions past it are dropped (their keys and values stay in the sequence's pages, unread, until
  // written again). The trail then holds no state.
  void rewind(SequenceState& state, StateTrail& trail, int64_t position) const;

  // Whether the multi-token-prediction head was loaded (LoadOptions::mtp).
  bool has_mtp() const { return weights_.mtp.has_value(); }
  // The MTP head (qwen3-next-spec.md section 7) over each sequence's rows: from row t's token and hidden state
  // (hidden [Σ T, H], the main model's final hidden states or a previous draft's), its one decoder layer writes its
  // keys and values at positions [position, position + T) of the sequence's KV pages (the head's own layer of the
  // pool) and attends to [0, position + t]. Returns the logits of each sequence's last row, [sequences, V], which
  // predict the token at position + T + 1, and writes that row's normed state to `last_hidden` [sequences, H], the
  // hidden state of the next draft step. With no `last_hidden`, only the head's cache is written: its decoder layer's
  // MLP, norm and lm_head are skipped (rows whose drafts nobody wants) and the result is empty. Sequence states'
  // positions do not move. With `ids` ([Σ T] I32 in the backend's memory, such as the draws of the step before),
  // the rows take their tokens from it, and each input's ids give only its number of rows: a draft step follows
  // the one before without its tokens visiting the host. With `vocab` above 0, the logits are those of the first
  // `vocab` ids alone, [sequences, vocab]: the lm_head's first rows, read alone (a drafting vocabulary; 0: all V).
  Tensor draft(const std::vector<DraftInput>& batch, const Tensor& hidden, Tensor* last_hidden,
               const Tensor* ids = nullptr, int64_t vocab = 0) const;

 private:
  // A sequence at position 0 holding `slot`, with pages for `reserve_tokens`.
  SequenceState sequence_in(RecurrentSlot slot, int64_t reserve_tokens) const;
  // Points the state's GDN layers at its recurrent slot.
  void bind_layers(SequenceState& state) const;
  // Each GDN layer's trail views for the batch's sequences with a trail ([layers][sequences][tokens]), their slots
  // taken first where the trail has too few; empty when no sequence has one.
  struct TrailViews;
  TrailViews trail_views(const std::vector<SequenceInput>& batch, GdnAlgorithm gdn_algorithm) const;
  // The row layout, ids, positions and page tables of a batch whose sequence s starts at starts[s]; each sequence's
  // pages are made to cover its new positions.
  struct BatchPlan;
  BatchPlan plan_batch(const std::vector<SequenceState*>& states, const std::vector<int64_t>& starts,
                       const std::vector<const std::vector<int32_t>*>& ids) const;
  // The plan's tokens embedded into out [T, H]: the plan's ids, or `ids` [T] in the backend's memory when given.
  void embed(const BatchPlan& plan, const Tensor* ids, Tensor& out) const;
  // The decoder layer's attention half for its KV pool layer `pool_layer`, its tokens by `rule` (Backend::attention):
  // its mixer output into `mixed`.
  void attention_layer(const LayerWeights& w, size_t pool_layer, BatchPlan& plan, const Tensor& normed, Tensor& mixed,
                       GdnAlgorithm rule) const;
  // The MLP half of a decoder layer: hidden ← hidden + MLP(normed), then `next_norm`'s RMSNorm into normed.
  void mlp_layer(const LayerWeights& w, Tensor& hidden, const Tensor* next_norm, Tensor& normed, Tensor& mixed) const;
  // The logits of `rows` of hidden [T, H] after `norm`, [T or sequences, V], or of the first `vocab` ids alone
  // (above 0). With `normed_all`, every row's normed state goes there ([T, H]); with `normed_rows`, those of the rows
  // whose logits were taken.
  Tensor logits_of(const Tensor& hidden, const BatchRows& layout, LogitsRows rows, const Tensor& norm,
                   Tensor* normed_all, Tensor* normed_rows, int64_t vocab = 0) const;

  void gated_deltanet(const GdnWeights& w, const std::vector<Tensor*>& conv_states,
                      const std::vector<Tensor*>& recurrent_states, const StateTrails& conv_trails,
                      const StateTrails& recurrent_trails, const BatchRows& layout, const Tensor& x, Tensor& out,
                      GdnAlgorithm algorithm) const;
  void full_attention(const AttentionWeights& w, const std::vector<KvCache*>& caches, const BatchRows& layout,
                      const std::vector<int64_t>& positions, const Tensor& x, Tensor& out, GdnAlgorithm rule) const;
  void dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) const;
  // The routed experts' weighted sum into out; a block with a shared expert returns that expert's output and gate
  // logits apart, for residual_step to add.
  std::optional<GatedBranch> mixture_of_experts(const MoeWeights& w, const Tensor& x, Tensor& out) const;
  // hidden ← hidden + mixed (+ the branch, gated), then normed = next_norm's RMSNorm of it; the last layer (no
  // next_norm) only adds.
  void residual_step(Tensor& hidden, Tensor& mixed, std::optional<GatedBranch>& branch, const Tensor* next_norm,
                     Tensor& normed) const;
  // The routed half of an MoE block: top-k of the router's logits, then the chosen experts' weighted sum into out.
  void route_and_run_experts(const MoeWeights& w, const Tensor& x, const Tensor& router_logits, Tensor& expert_ids,
                             Tensor& expert_weights, Tensor& out) const;
  void trace_routing(const Tensor& router_logits, Tensor& expert_ids, Tensor& expert_weights) const;

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  std::shared_ptr<KvPagePool> kv_pool_;
  std::shared_ptr<RecurrentStatePool> recurrent_pool_;
  RoutingTrace* routing_ = nullptr;
};

}  // namespace plumb
