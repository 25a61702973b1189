// The Runner of a Qwen3NextModel on any Backend: one SequenceState per slot, one batched forward call per step. A
// slot's KV pages come from the model's pool as its sequence grows and return to it when the slot is released. Steps
// in which every sequence brings one token, and verifications of drafts, replay recorded graphs (StepGraphs) unless
// graphs are off. On a GPU the runner draws tokens itself (Backend::sample_tokens, inside a replayed step's graph),
// so only ids leave the device for rows that need no host draw; the CPU leaves every draw to the engine's host
// sampler.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/prefix_cache.h"
#include "engine/runner.h"
#include "engine/speculative.h"
#include "engine/step_graphs.h"
#include "model/qwen3_next.h"

namespace plumb {

class ModelRunner final : public Runner {
 public:
  ModelRunner(const Qwen3NextModel& model, int32_t slots, StepGraphOptions graphs = {});
  // From now on a PrefixCache of `limits` serves start_from_cache and offer_prefix (without one they keep nothing).
  void enable_prefix_cache(PrefixCacheLimits limits);
  // From now on entries may ask for drafts (RunnerEntry::drafts), which `drafter` proposes. Every sequence's tokens
  // are then shown to it as they run, so that its own cache keeps up. A step's verifications (every one of the same
  // number of drafts) and its decode rows each replay a recorded graph where their shape allows
  // (StepGraphs::verify, StepGraphs::forward); the drafter's own steps and prompt chunks run eagerly.
  // A verification of k drafts leaves its GDN states after each of its first k rows in a trail (StateTrail); when
  // the slot's next entry says how many rows were kept, one swap of slots with the trail takes the state back to the
  // last of them (Qwen3NextModel::rewind). A slot's trail keeps the k state slots of its largest verification for as
  // long as the runner lives, which a server reserves beside the slots (k a slot).
  void enable_drafting(std::unique_ptr<Drafter> drafter);
  bool drafts_tokens() const override { return drafter_ != nullptr; }
  int64_t vocab_size() const override;
  int64_t max_context() const override;
  bool draws_tokens() const override;
  // Runs once what serving runs, so the memory it takes is taken before the rest is counted and reserved: every
  // graph bucket's recording with its sinks (StepGraphs::warm_up), with a drafter the largest bucket's verification
  // of `speculative_tokens` drafts a sequence (its recording, and the state slots the first slots' trails keep), and
  // one eager step of `prefill_tokens` tokens (the step memory a full prefill step takes). Its sequences are its
  // own, gone when it returns; the sinks and the trails' slots stay.
  void warm_up(int64_t prefill_tokens, int64_t speculative_tokens = 0);
  // The largest batch replayed from a graph (0 with graphs off), and the sequences the runner holds beside its slots
  // once warmed up (the graphs' sinks: a recurrent state slot and a KV page each).
  int64_t largest_graph_bucket() const { return graphs_.largest_bucket(); }
  int64_t sink_sequences() const { return graphs_.sinks_needed(); }
  // Verifications of drafts that ran as a recorded graph so far (StepGraphs::verify).
  int64_t verifications_replayed() const { return graphs_.verifications_replayed(); }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override;
  void release(int32_t slot) override;
  bool keeps_prefixes() const override { return cache_.has_value(); }
  int64_t start_from_cache(int32_t slot, std::span<const int32_t> prompt) override;
  void offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) override;
  // The cache's counts; nullopt without one.
  std::optional<PrefixCacheStats> prefix_cache_stats() const;

 private:
  // What drafting keeps of a slot between calls.
  struct DraftTrail {
    int64_t from = 0;          // the first position not yet shown to the drafter
    std::vector<int32_t> ids;  // [n] the tokens run at positions from, from + 1, ...
    Tensor hidden;             // [n, H] their final hidden states
    // The states of the slot's last verification (from `from`), unsettled while it holds any: the slot's next entry
    // says how many of its rows were kept. Its slots outlive the slot's sequences.
    StateTrail verified;
    // Forgets the slot's sequence, keeping the trail's slots for the next one.
    void restart() {
      from = 0;
      ids.clear();
      hidden = Tensor();
      verified.count = 0;
    }
  };
  RunnerOutput run(const std::vector<RunnerEntry>& batch);
  // run() with a drafter: settles the slots' last verifications, shows the drafter what ran and takes its drafts,
  // then runs the batch, verifications under the decode rule.
  RunnerOutput run_drafting(const std::vector<RunnerEntry>& batch, const std::vector<SequenceState*>& states);
  // The tokens of a step's verifications in verify_tokens_ ([Σ T] of its rows): entry i, whose rows start at
  // rows_at[i] among the verifications' (-1: it verifies nothing), takes its one token from the host and then
  // draft_count[i] drafts from proposed.ids at drafts_at[i], copied on the device.
  Tensor verification_tokens(const std::vector<RunnerEntry>& batch, const std::vector<int64_t>& rows_at,
                             const DeviceDrafts& proposed, const std::vector<int64_t>& drafts_at,
                             const std::vector<int64_t>& draft_count);
  // Each entry's state, a fresh one for an entry that starts at 0, checked against the entry.
  std::vector<SequenceState*> states_for(const std::vector<RunnerEntry>& batch);
  // Points the draw of each constrained entry i with rows[i] >= 0, draws[rows[i]], at the tokens its constraint
  // allows (kept in allowed_), asked of it now: call it once the forward pass is queued, so the host works while the
  // device runs. True in the result for an entry whose constraint allows none: its row draws unconstrained, and the
  // caller reports -1 for it.
  std::vector<bool> constrain_draws(const std::vector<RunnerEntry>& batch, const std::vector<int64_t>& rows,
                                    std::vector<TokenDraw>& draws, int64_t vocab);

  const Qwen3NextModel& model_;
  std::vector<std::optional<SequenceState>> states_;  // [slots]
  std::unique_ptr<Drafter> drafter_;
  std::vector<DraftTrail> trails_;  // [slots] with a drafter
  // [slots · (kMaxSpeculativeTokens + 1)] I32 with a drafter: a step's verification tokens, always at this address,
  // where a recorded verification reads them.
  Tensor verify_tokens_;
  StepGraphs graphs_;
  std::vector<uint32_t> allowed_;  // [entries, allowed_words(vocab)]: constrained draws' allowed tokens this step
  std::optional<PrefixCache> cache_;
};

}  // namespace plumb
