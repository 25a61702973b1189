#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace plumb {

int64_t StepPlan::tokens() const {
  int64_t n = 0;
  for (const ScheduledWork& w : work) n += w.count + w.drafts;
  return n;
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(config),
      draft_limit_(config.speculative_tokens),
      slots_(config.max_running),
      pages_(config.kv_pages, config.kv_page_tokens) {
  PLUMB_CHECK(config_.max_waiting >= 0, "max_waiting must be >= 0, got {}", config_.max_waiting);
  PLUMB_CHECK(config_.prefill_chunk > 0, "prefill_chunk must be > 0, got {}", config_.prefill_chunk);
  PLUMB_CHECK(config_.speculative_tokens >= 0, "speculative_tokens must be >= 0, got {}", config_.speculative_tokens);
  // Room for a decode token of every running sequence plus one whole chunk, so every prefill makes progress.
  PLUMB_CHECK(config_.step_tokens >= config_.max_running + config_.prefill_chunk,
              "step_tokens ({}) must be at least max_running ({}) + prefill_chunk ({})", config_.step_tokens,
              config_.max_running, config_.prefill_chunk);
}

Admission Scheduler::submit(const SequenceSpec& spec) {
  PLUMB_CHECK(spec.prompt_tokens >= 1 && spec.max_new_tokens >= 1,
              "sequence {} needs a prompt token and a new token at least, got {} and {}", spec.id, spec.prompt_tokens,
              spec.max_new_tokens);
  if (pages_.pages_for(spec.prompt_tokens + spec.max_new_tokens) > pages_.capacity()) return Admission::kNeverFits;
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_waiting) return Admission::kQueueFull;
  waiting_.push_back(spec);
  return Admission::kQueued;
}

std::optional<size_t> Scheduler::find_running(SequenceId id) const {
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i].spec.id == id) return i;
  return std::nullopt;
}

void Scheduler::release(const Sequence& s) {
  slots_.release(s.slot);
  pages_.release(s.pages);
}

bool Scheduler::cancel(SequenceId id) {
  const auto queued = std::find_if(waiting_.begin(), waiting_.end(), [&](const SequenceSpec& s) { return s.id == id; });
  if (queued != waiting_.end()) {
    waiting_.erase(queued);
    return true;
  }
  const std::optional<size_t> i = find_running(id);
  if (!i) return false;
  release(running_[*i]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(*i));
  return true;
}

void Scheduler::finish(SequenceId id) {
  PLUMB_CHECK(cancel(id), "sequence {} is not known to the scheduler", id);
}

std::vector<std::pair<SequenceId, int32_t>> Scheduler::admit() {
  std::vector<std::pair<SequenceId, int32_t>> admitted;
  // First come, first served: a request that does not fit holds back those behind it, so none starves.
  while (!waiting_.empty() && slots_.has_free()) {
    const SequenceSpec& spec = waiting_.front();
    const int64_t pages = pages_.pages_for(spec.prompt_tokens + spec.max_new_tokens);
    if (!pages_.can_reserve(pages)) break;
    pages_.reserve(pages);
    running_.push_back(Sequence{spec, slots_.acquire(), pages, 0, 0});
    admitted.push_back({spec.id, running_.back().slot});
    waiting_.pop_front();
  }
  return admitted;
}

void Scheduler::start_at(SequenceId id, int64_t tokens) {
  const std::optional<size_t> i = find_running(id);
  PLUMB_CHECK(i.has_value(), "sequence {} is not running", id);
  Sequence& s = running_[*i];
  PLUMB_CHECK(s.computed == 0 && s.generated == 0 && tokens >= 0 && tokens < s.spec.prompt_tokens,
              "sequence {} cannot start at {}: {} of its {} prompt tokens are computed", id, tokens, s.computed,
              s.spec.prompt_tokens);
  s.computed = tokens;
}

StepPlan Scheduler::schedule() {
  admit();
  return plan();
}

void Scheduler::set_draft_limit(int64_t drafts) {
  PLUMB_CHECK(drafts >= 0 && drafts <= config_.speculative_tokens, "a draft limit of {} (0..{})", drafts,
              config_.speculative_tokens);
  draft_limit_ = drafts;
}

int64_t Scheduler::decoding() const {
  return std::count_if(running_.begin(), running_.end(),
                       [](const Sequence& s) { return s.computed >= s.spec.prompt_tokens; });
}

StepPlan Scheduler::plan() const {
  StepPlan plan;
  int64_t budget = config_.step_tokens;
  int64_t decoding = 0;
  bool prefilling = false;
  for (const Sequence& s : running_) {
    if (s.computed < s.spec.prompt_tokens) {
      prefilling = true;
    } else {
      ++decoding;
    }
  }
  // Drafts take what one token per decoding sequence and the next prefill chunk leave of the budget, first come
  // first served; a sequence drafts no further than the token limit allows (k drafts make up to k + 1 tokens).
  int64_t spare = std::max<int64_t>(0, budget - decoding - (prefilling ? config_.prefill_chunk : 0));
  for (const Sequence& s : running_) {
    if (s.computed < s.spec.prompt_tokens) continue;
    const int64_t drafts = std::min({draft_limit_, s.spec.max_new_tokens - s.generated - 1, spare});
    plan.work.push_back(ScheduledWork{s.spec.id, s.slot, s.computed, 1, true, drafts});
    budget -= 1 + drafts;
    spare -= drafts;
  }
  for (const Sequence& s : running_) {
    const int64_t left = s.spec.prompt_tokens - s.computed;
    if (left <= 0) continue;
    const int64_t chunk = std::min(config_.prefill_chunk, left);
    if (chunk > budget) continue;  // waits whole for a later step (see the invariant in scheduler.h)
    plan.work.push_back(ScheduledWork{s.spec.id, s.slot, s.computed, chunk, chunk == left});
    budget -= chunk;
  }
  return plan;
}

std::vector<SequenceId> Scheduler::complete(const StepPlan& plan, std::span<const int64_t> drawn) {
  PLUMB_CHECK(drawn.empty() || drawn.size() == plan.work.size(), "complete: {} draw counts for a plan of {}",
              drawn.size(), plan.work.size());
  std::vector<SequenceId> retired;
  for (size_t k = 0; k < plan.work.size(); ++k) {
    const ScheduledWork& w = plan.work[k];
    const std::optional<size_t> i = find_running(w.id);
    if (!i) continue;  // cancelled while the step ran
    Sequence& s = running_[*i];
    PLUMB_CHECK(s.computed == w.start, "sequence {}: step planned at position {} but the state is at {}", w.id, w.start,
                s.computed);
    const int64_t tokens = drawn.empty() ? 1 : drawn[k];
    PLUMB_CHECK(tokens >= 1 && tokens <= 1 + w.drafts && (w.samples || tokens == 1),
                "sequence {}: {} tokens drawn in a step that allowed {} drafts", w.id, tokens, w.drafts);
    // The kept drafts ran at the positions after the step's own tokens.
    s.computed += w.count + tokens - 1;
    if (!w.samples) continue;
    s.generated += tokens;
    if (s.generated >= s.spec.max_new_tokens) retired.push_back(w.id);
  }
  for (SequenceId id : retired) cancel(id);
  return retired;
}

}  // namespace plumb
