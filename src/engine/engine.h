// The serving engine: many requests at once over one Runner. A step thread loops schedule -> forward -> sample ->
// stream events; submit() and cancel() may be called from any thread. Every request gets its own RequestStream of
// events, ending with exactly one event that carries a finish cause.
//
// Answers re-run for the prefix cache. A runner keeps prompt states only (Runner::offer_prefix): an answer's tokens
// ran one at a time through the decode path, whose arithmetic is not a prompt chunk's, so a state kept inside it would
// give a later prompt that contains it other bits than the same prompt run from 0. A chat's next turn would then run
// the whole answer before it again. So a request that finishes (a stop id, its length, or its constraint done) with
// its answer past its prompt's last 64-token boundary leaves its prompt and answer, cut at their last boundary, to be
// run again as a prompt, from the prompt's kept end, while the engine has no client's request: the runner then keeps
// the answer's boundaries as prompt states, and the next turn resumes from the last one. A client's request never
// waits for one: a re-run still in the batch when one arrives stops after the step it is in (what it reached stays
// kept) and waits at the front of the queue until the engine is idle again. The most recent max_running answers
// wait; older ones are dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/constraint.h"
#include "engine/draft_policy.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "scheduler/scheduler.h"

namespace plumb {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // log-softmax of the model's raw logits
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // the most likely tokens, best first (only when logprobs were asked for)
};

enum class StopCause {
  kStopToken,       // a stop id was drawn (it is not streamed)
  kLength,          // max_tokens were generated
  kCancelled,       // cancel() was called
  kShutdown,        // the engine stopped before the request finished
  kError,           // the runner failed or the constraint allowed no token; `error` says why
  kConstraintDone,  // the request's constraint allows no further token (its last event carries the last token)
};

struct EngineEvent {
  std::optional<GeneratedToken> token;  // a new token
  std::optional<StopCause> finish;      // set on the request's last event
  std::string error;                    // with kError
  // On the request's first event after it was admitted: the prompt tokens its state started from, kept by the
  // runner's prefix cache (0 when it ran the whole prompt).
  std::optional<int64_t> cached_tokens = std::nullopt;
  // On the request's last event: how its speculative decoding went (all zero without it).
  SpeculationStats speculation = {};
};

// A thread-safe queue of one request's events.
class RequestStream {
 public:
  // The pending events, waiting up to `timeout` for the first one (empty on timeout).
  std::vector<EngineEvent> wait(std::chrono::milliseconds timeout);
  void push(EngineEvent event);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<EngineEvent> events_;
};

struct EngineRequest {
  std::vector<int32_t> prompt;  // ids, each < vocab
  int64_t max_tokens = 16;      // >= 1
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // drawing one ends the request
  int32_t top_logprobs = -1;      // -1: no logprobs; 0..20: the drawn token's logprob and this many alternatives
  // Applied to this request's row before each draw (logprobs stay those of the model's raw logits). Used by the
  // step thread only, so it needs no locking of its own.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class SubmitStatus {
  kQueued,
  kQueueFull,  // the waiting queue is full: try again later
  kTooLong,    // prompt + max_tokens exceed the context or the KV pool
  kShuttingDown,
};

struct Submission {
  SubmitStatus status = SubmitStatus::kQueued;
  SequenceId id = 0;
  std::shared_ptr<RequestStream> stream;  // set when queued
};

struct EngineOptions {
  // Re-run finished answers while idle so that their states are kept (above); only with a runner that keeps prefixes.
  bool prefill_answers = true;
  // With speculative decoding, each step's drafts a decoding sequence are chosen by a DraftPolicy (0 up to
  // SchedulerConfig::speculative_tokens, by what steps of each count made a second) rather than always the most.
  bool adaptive_drafts = false;
};

struct EngineStats {
  int64_t waiting = 0;
  int32_t running = 0;
  int32_t state_slots_used = 0;
  int32_t state_slots_total = 0;
  int64_t kv_pages_used = 0;
  int64_t kv_pages_total = 0;
  uint64_t steps = 0;
  int64_t prefix_hits = 0;           // admitted requests that started from a kept prefix
  int64_t prefix_cached_tokens = 0;  // prompt tokens those requests did not run
  int64_t answers_pending = 0;       // finished answers waiting to be re-run or re-running (included in running)
  int64_t answer_tokens = 0;         // answer tokens re-run as prompts while idle
  SpeculationStats speculation;      // every request's speculative decoding so far
};

class Engine {
 public:
  // Starts the step thread. `runner` must have at least config.max_running slots and outlive the engine. With
  // config.speculative_tokens (at most kMaxSpeculativeTokens, and only over a runner that drafts), every decoding
  // request has that many tokens drafted a step, and draws the rows verified in order, exactly as plain decoding
  // draws them, keeping drafts while each equals the token drawn before it: the tokens are plain decoding's.
  Engine(Runner& runner, SchedulerConfig config, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws plumb::Error (naming the field) on an invalid one.
  Submission submit(EngineRequest request);
  // Ends a request at once: its slot and pages are freed and its stream ends with kCancelled. Unknown ids are ignored.
  void cancel(SequenceId id);
  // Ends every request (kShutdown) and joins the step thread; later submissions get kShuttingDown.
  void stop();

  EngineStats stats() const;
  int64_t vocab_size() const { return runner_.vocab_size(); }
  int64_t max_context() const { return runner_.max_context(); }
  int64_t speculative_tokens() const { return scheduler_.config().speculative_tokens; }

 private:
  struct Active {
    EngineRequest request;
    Sampler sampler;
    std::shared_ptr<RequestStream> stream;
    std::vector<int32_t> tokens;  // prompt, then the drawn tokens
    int32_t slot = -1;            // its state slot once scheduled
    // The prompt tokens its state started from once admitted, until its first event reports them.
    std::optional<int64_t> unreported_cached_tokens = std::nullopt;
    // A finished answer re-run as a prompt (no client's request): the kept boundary it must resume from, at least.
    std::optional<int64_t> answer_from = std::nullopt;
    SpeculationStats speculation = {};
  };
  struct Drawn;
  // An entry's draws, row after row (its token's, then each draft's while the draws agree with them), made as plain
  // decoding makes them: stop ids, the constraint, logprobs. runner_ids [rows]: the runner's draws, if it drew;
  // logits [rows, V], if they came back. Touches `a` alone, so entries draw in parallel.
  Drawn draw_rows(Active& a, const RunnerEntry& entry, std::span<const int32_t> drafts,
                  std::span<const int32_t> runner_ids, const float* logits);
  // A finished request's prompt and answer up to their last 64-token boundary, and its prompt's last boundary.
  struct Answer {
    std::vector<int32_t> tokens;
    int64_t from = 0;
  };
  // Whether the runner's kept prefixes can serve this engine's sequences: it keeps them, and prompt chunks end on the
  // 64-token boundaries they are kept at.
  bool keeps_prefixes() const;
  // Under mutex_: queues a finished request's answer to be re-run, where it passed a boundary its prompt did not.
  void queue_answer(const Active& a);
  // Under mutex_, before admission: submits queued answers when the engine has no client's request, and stops the
  // running ones (back to the queue's front) when it has.
  void schedule_answers();
  // Under mutex_, for the sequences just admitted: each one's slot starts from the runner's longest kept prefix of
  // its prompt, where the prompt's chunks allow it.
  void start_admitted(const std::vector<std::pair<SequenceId, int32_t>>& admitted);
  // Under mutex_, after a step: the runner may keep the state of every sequence whose prompt chunks the step left at
  // a whole block.
  void offer_prefixes(const StepPlan& plan, const std::vector<std::shared_ptr<Active>>& active);
  void loop();
  // Runs a planned step; returns the tokens it drew.
  int64_t run_step(const StepPlan& plan, const std::vector<std::shared_ptr<Active>>& active);
  void end(SequenceId id, EngineEvent last);  // under mutex_: removes the request and pushes its last event

  Runner& runner_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Scheduler scheduler_;
  std::unordered_map<SequenceId, std::shared_ptr<Active>> active_;
  SequenceId next_id_ = 1;
  bool stopping_ = false;
  std::vector<int32_t> released_slots_;  // slots of ended requests, freed in the runner before the next step
  uint64_t steps_ = 0;
  int64_t prefix_hits_ = 0, prefix_cached_tokens_ = 0;
  EngineOptions options_;
  std::deque<Answer> answers_;          // waiting to be re-run, oldest first
  std::vector<SequenceId> answer_ids_;  // re-runs the scheduler holds
  int64_t answer_tokens_ = 0;
  SpeculationStats speculation_;
  std::optional<DraftPolicy> draft_policy_;  // with options_.adaptive_drafts; the step thread's alone
  std::thread thread_;
};

}  // namespace plumb
