// Continuous batching over request ids and token counts. Requests wait in a FIFO queue; a request is admitted when a
// state slot is free and KV pages for its whole length (prompt + max new tokens) can be reserved, so a running
// sequence never has to be preempted. Each step runs one token of every decoding sequence and prefill chunks of the
// others, up to a token budget.
//
// Invariant that makes results batch-invariant: a prompt is cut into chunks at fixed offsets (0, c, 2c, ...; c =
// prefill_chunk) whatever else is running. A chunk that does not fit in this step's budget waits whole for the next
// step instead of being shortened, so a sequence sees the same forward calls alone or among many.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "scheduler/state_pool.h"

namespace plumb {

using SequenceId = uint64_t;

struct SchedulerConfig {
  int32_t max_running = 32;     // sequences in the batch at once; each holds one recurrent-state slot
  int64_t max_waiting = 256;    // requests queued for admission; one more is refused (kQueueFull)
  int64_t step_tokens = 256;    // most tokens one step runs: one per decoding sequence plus prefill chunks
  int64_t prefill_chunk = 64;   // prompt tokens a sequence runs per step at most
  int64_t kv_pages = 4096;      // KV pages in the pool
  int64_t kv_page_tokens = 16;  // tokens per KV page
  // Draft tokens a decoding sequence may have verified after its token each step (speculative decoding; 0: none).
  // They count against step_tokens, but never take the budget of the next prefill chunk.
  int64_t speculative_tokens = 0;
};

struct SequenceSpec {
  SequenceId id = 0;
  int64_t prompt_tokens = 0;   // >= 1
  int64_t max_new_tokens = 0;  // >= 1; the sequence retires after drawing this many tokens
};

enum class Admission {
  kQueued,     // waiting for a slot and pages
  kQueueFull,  // max_waiting requests are already waiting
  kNeverFits,  // needs more KV pages than the pool has
};

// One sequence's share of a step: run `count` tokens starting at position `start` in state slot `slot`. start == 0
// means the slot holds a fresh sequence. When `samples` is set the step ends with a token drawn from the logits of the
// last token run (the last prefill chunk, or a decode step). A decode step may also run up to `drafts` draft tokens
// after its token, and then draws one token more for each draft kept (complete() is told how many were drawn).
struct ScheduledWork {
  SequenceId id = 0;
  int32_t slot = 0;
  int64_t start = 0;
  int64_t count = 0;
  bool samples = false;
  int64_t drafts = 0;
};

struct StepPlan {
  std::vector<ScheduledWork> work;  // decodes first, then prefill chunks, each in admission order
  int64_t tokens() const;           // the tokens it runs at most, drafts included
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config);

  // Queues a request. Ids must be unique among the requests the scheduler holds.
  Admission submit(const SequenceSpec& spec);
  // Drops a waiting or running sequence and frees its slot and pages at once. False if the id is unknown.
  bool cancel(SequenceId id);
  // Ends a running sequence early (a stop token or string): frees its slot and pages.
  void finish(SequenceId id);

  // Admits what fits, then plans the next step. Call complete() with the plan once it has run.
  StepPlan schedule();
  // schedule()'s two halves, for a caller that acts between them: admit() admits what fits and returns each admitted
  // sequence's id and slot, in admission order; plan() plans the next step.
  std::vector<std::pair<SequenceId, int32_t>> admit();
  StepPlan plan() const;
  // A sequence admitted but not yet planned starts with its first `tokens` prompt tokens already in its slot (a
  // prefix cache hit): its prefill begins there. 0 <= tokens < its prompt.
  void start_at(SequenceId id, int64_t tokens);
  // The drafts plan() gives a decoding sequence from now on, at most: 0 to speculative_tokens (its default).
  void set_draft_limit(int64_t drafts);
  int64_t draft_limit() const { return draft_limit_; }
  // Running sequences past their prompt: the decode rows of the next plan.
  int64_t decoding() const;
  // Advances every sequence in `plan` and retires those that drew their last allowed token; returns their ids (their
  // slots and pages are already free). drawn[i]: the tokens plan.work[i] drew, from 1 to 1 + its drafts (a decode
  // step's kept drafts each add one, and as many positions); empty: one each.
  std::vector<SequenceId> complete(const StepPlan& plan, std::span<const int64_t> drawn = {});

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int32_t running() const { return static_cast<int32_t>(running_.size()); }
  const SlotPool& slots() const { return slots_; }
  const PagePool& pages() const { return pages_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Sequence {
    SequenceSpec spec;
    int32_t slot = -1;
    int64_t pages = 0;      // KV pages reserved
    int64_t computed = 0;   // tokens whose state is in the slot
    int64_t generated = 0;  // tokens drawn so far
  };
  std::optional<size_t> find_running(SequenceId id) const;
  void release(const Sequence& s);

  SchedulerConfig config_;
  int64_t draft_limit_ = 0;
  SlotPool slots_;
  PagePool pages_;
  std::deque<SequenceSpec> waiting_;
  std::vector<Sequence> running_;  // in admission order
};

}  // namespace plumb
