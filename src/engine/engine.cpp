#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>
#include <utility>

#include "core/error.h"
#include "core/parallel.h"

namespace plumb {

namespace {

constexpr int32_t kMaxTopLogprobs = 20;  // as OpenAI allows

// The drawn token's log-softmax and the `top` most likely tokens' (best first, ties to the lower id), from one row of
// raw logits [V]; the normalizer is summed in double.
GeneratedToken token_with_logprobs(const float* logits, int64_t vocab, int32_t id, int32_t top) {
  const float max = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_normalizer = max + std::log(sum);
  auto logprob = [&](int32_t t) { return static_cast<float>(logits[t] - log_normalizer); };
  GeneratedToken token{id, logprob(id), {}};
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto n = static_cast<std::ptrdiff_t>(std::min<int64_t>(top, vocab));
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (std::ptrdiff_t i = 0; i < n; ++i) token.top.push_back({order[static_cast<size_t>(i)], logprob(order[i])});
  return token;
}

}  // namespace

std::vector<EngineEvent> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  return std::exchange(events_, {});
}

void RequestStream::push(EngineEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

Engine::Engine(Runner& runner, SchedulerConfig config, EngineOptions options)
    : runner_(runner), scheduler_(config), options_(options) {
  PLUMB_CHECK(config.speculative_tokens <= kMaxSpeculativeTokens, "speculative tokens must be in 0..{}, got {}",
              kMaxSpeculativeTokens, config.speculative_tokens);
  PLUMB_CHECK(config.speculative_tokens == 0 || runner.drafts_tokens(),
              "speculative decoding needs a runner that drafts tokens (a model with its MTP head)");
  if (options.adaptive_drafts && config.speculative_tokens > 0) draft_policy_.emplace(config.speculative_tokens);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  stop();
}

Submission Engine::submit(EngineRequest request) {
  const int64_t vocab = runner_.vocab_size();
  PLUMB_CHECK(!request.prompt.empty(), "the prompt is empty");
  for (int32_t id : request.prompt) PLUMB_CHECK(id >= 0 && id < vocab, "prompt token {} is not in [0, {})", id, vocab);
  for (int32_t id : request.stop_ids) PLUMB_CHECK(id >= 0 && id < vocab, "stop token {} is not in [0, {})", id, vocab);
  PLUMB_CHECK(request.max_tokens >= 1, "max_tokens must be >= 1, got {}", request.max_tokens);
  PLUMB_CHECK(request.top_logprobs >= -1 && request.top_logprobs <= kMaxTopLogprobs,
              "top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs, request.top_logprobs);
  Sampler sampler(request.sampling);  // validates the sampling parameters
  const auto prompt_tokens = static_cast<int64_t>(request.prompt.size());
  if (prompt_tokens + request.max_tokens > runner_.max_context()) return {SubmitStatus::kTooLong, 0, nullptr};

  std::lock_guard lock(mutex_);
  if (stopping_) return {SubmitStatus::kShuttingDown, 0, nullptr};
  const SequenceId id = next_id_;
  switch (scheduler_.submit({id, prompt_tokens, request.max_tokens})) {
    case Admission::kQueueFull:
      return {SubmitStatus::kQueueFull, 0, nullptr};
    case Admission::kNeverFits:
      return {SubmitStatus::kTooLong, 0, nullptr};
    case Admission::kQueued:
      break;
  }
  ++next_id_;
  auto active = std::make_shared<Active>(Active{std::move(request), sampler, std::make_shared<RequestStream>(), {}});
  active->tokens = active->request.prompt;
  active_.emplace(id, active);
  wake_.notify_all();
  return {SubmitStatus::kQueued, id, active->stream};
}

void Engine::end(SequenceId id, EngineEvent last) {
  const auto it = active_.find(id);
  if (it == active_.end()) return;
  if (it->second->answer_from) {
    std::erase(answer_ids_, id);
  } else if (last.finish == StopCause::kStopToken || last.finish == StopCause::kLength ||
             last.finish == StopCause::kConstraintDone) {
    queue_answer(*it->second);
  }
  it->second->stream->push(std::move(last));
  if (it->second->slot >= 0) released_slots_.push_back(it->second->slot);
  active_.erase(it);
}

void Engine::cancel(SequenceId id) {
  std::lock_guard lock(mutex_);
  if (!scheduler_.cancel(id)) return;
  end(id, EngineEvent{std::nullopt, StopCause::kCancelled, {}});
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  while (!active_.empty()) {
    const SequenceId id = active_.begin()->first;
    scheduler_.cancel(id);
    end(id, EngineEvent{std::nullopt, StopCause::kShutdown, {}});
  }
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return EngineStats{scheduler_.waiting(),
                     scheduler_.running(),
                     scheduler_.slots().used(),
                     scheduler_.slots().capacity(),
                     scheduler_.pages().used(),
                     scheduler_.pages().capacity(),
                     steps_,
                     prefix_hits_,
                     prefix_cached_tokens_,
                     static_cast<int64_t>(answers_.size() + answer_ids_.size()),
                     answer_tokens_,
                     speculation_};
}

bool Engine::keeps_prefixes() const {
  // A kept prefix ends at a multiple of kKvPageSize; chunks of a multiple of it then still end where they would from
  // position 0, so every call the sequence makes computes what it would have (the chunk rule).
  return runner_.keeps_prefixes() && scheduler_.config().prefill_chunk % kKvPageSize == 0;
}

void Engine::queue_answer(const Active& a) {
  if (!options_.prefill_answers || !keeps_prefixes()) return;
  const auto block = [](size_t n) { return static_cast<int64_t>(n) / kKvPageSize * kKvPageSize; };
  const int64_t from = block(a.request.prompt.size()), until = block(a.tokens.size());
  if (until <= from) return;
  answers_.push_back({std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + until), from});
  if (static_cast<int64_t>(answers_.size()) > scheduler_.config().max_running) answers_.pop_front();
}

void Engine::schedule_answers() {
  const bool clients = scheduler_.waiting() + scheduler_.running() > static_cast<int64_t>(answer_ids_.size());
  if (clients) {
    // Newest first to the front, so they keep their order there.
    for (auto it = answer_ids_.rbegin(); it != answer_ids_.rend(); ++it) {
      const Active& a = *active_.at(*it);
      answers_.push_front({a.request.prompt, *a.answer_from});
    }
    for (const SequenceId id : std::vector<SequenceId>(answer_ids_)) {
      scheduler_.cancel(id);
      end(id, EngineEvent{std::nullopt, StopCause::kCancelled, {}});
    }
    return;
  }
  while (!answers_.empty() && static_cast<int64_t>(answer_ids_.size()) < scheduler_.config().max_running) {
    Answer answer = std::move(answers_.front());
    answers_.pop_front();
    const SequenceId id = next_id_;
    const auto size = static_cast<int64_t>(answer.tokens.size());
    if (scheduler_.submit({id, size, 1}) != Admission::kQueued) continue;
    ++next_id_;
    EngineRequest request;
    request.prompt = std::move(answer.tokens);
    request.max_tokens = 1;
    auto active = std::make_shared<Active>(
        Active{std::move(request), Sampler(SamplingParams{}), std::make_shared<RequestStream>(), {}});
    active->tokens = active->request.prompt;
    active->answer_from = answer.from;
    active_.emplace(id, std::move(active));
    answer_ids_.push_back(id);
  }
}

void Engine::start_admitted(const std::vector<std::pair<SequenceId, int32_t>>& admitted) {
  const bool aligned = keeps_prefixes();
  for (const auto& [id, slot] : admitted) {
    Active& a = *active_.at(id);
    const int64_t cached = aligned ? runner_.start_from_cache(slot, a.request.prompt) : 0;
    if (a.answer_from && cached < *a.answer_from) {
      // Its prompt's end is no longer kept: re-running the answer would run the prompt too. The slot goes back
      // with the state start_from_cache put there.
      a.slot = slot;
      scheduler_.cancel(id);
      end(id, EngineEvent{std::nullopt, StopCause::kCancelled, {}});
      continue;
    }
    if (cached > 0) scheduler_.start_at(id, cached);
    if (cached > 0 && !a.answer_from) {
      ++prefix_hits_;
      prefix_cached_tokens_ += cached;
    }
    a.unreported_cached_tokens = cached;
  }
}

void Engine::offer_prefixes(const StepPlan& plan, const std::vector<std::shared_ptr<Active>>& active) {
  for (size_t i = 0; i < plan.work.size(); ++i) {
    const ScheduledWork& w = plan.work[i];
    const int64_t position = w.start + w.count;
    if (!active_.count(w.id) || position % kKvPageSize != 0) continue;
    // Prompt tokens only: generated ones ran one at a time, through the decode path, whose arithmetic is not a
    // prompt chunk's, so a state kept inside an answer would give a later prompt that contains it other bits than
    // the same prompt run from 0. A finished answer's boundaries come from its re-run as a prompt (schedule_answers).
    const Active& a = *active[i];
    if (position > static_cast<int64_t>(a.request.prompt.size())) continue;
    runner_.offer_prefix(w.slot, a.request.prompt, position);
  }
}

void Engine::loop() {
  for (;;) {
    StepPlan plan;
    std::vector<std::shared_ptr<Active>> active;  // [plan.work]
    int64_t draft_limit = 0;                      // the drafts the plan allowed a decoding sequence
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !scheduler_.idle() || !answers_.empty(); });
      if (stopping_) return;
      schedule_answers();
      // Ended requests' slots first: a slot admitted below may be one of them, and its new state must not go.
      for (int32_t slot : released_slots_) runner_.release(slot);
      released_slots_.clear();
      start_admitted(scheduler_.admit());
      if (draft_policy_ && scheduler_.decoding() > 0)
        scheduler_.set_draft_limit(draft_policy_->choose(scheduler_.decoding()));
      draft_limit = scheduler_.draft_limit();
      plan = scheduler_.plan();
      if (plan.work.empty()) continue;  // every admitted answer re-run was dropped
      for (const ScheduledWork& w : plan.work) {
        active.push_back(active_.at(w.id));
        active.back()->slot = w.slot;
      }
    }
    // A request cancelled from here on still runs this step; complete() then skips it and its results are dropped.
    const auto start = std::chrono::steady_clock::now();
    const int64_t drawn = run_step(plan, active);
    if (draft_policy_) {
      bool decode_only = true;  // a prefill chunk's time says nothing of drafting
      for (size_t i = 0; i < plan.work.size(); ++i)
        decode_only = decode_only && plan.work[i].start >= static_cast<int64_t>(active[i]->request.prompt.size());
      if (decode_only)
        draft_policy_->observe(static_cast<int64_t>(plan.work.size()), draft_limit, drawn,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
}

namespace {

// A draw the runner can make where the logits are, for a request whose next token needs nothing the host holds: no
// constraint on a row with drafts (each draft row's mask would follow the drafts before it), no logprobs (they read
// the raw row), no penalties (they read the history), no min-p (Backend::sample_tokens has none), and a temperature
// whose inverse is finite. A constraint on a lone row travels as its allowed tokens (RunnerEntry::constraint).
std::optional<TokenDraw> runner_draw(const EngineRequest& r, uint64_t step, int64_t drafts) {
  const SamplingParams& p = r.sampling;
  const bool host_only = (r.constraint && drafts > 0) || r.top_logprobs >= 0 || p.repetition_penalty != 1.0f ||
                         p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.min_p > 0.0f ||
                         (p.temperature != 0.0f && !std::isfinite(1.0f / p.temperature));
  if (host_only) return std::nullopt;
  return TokenDraw{p.temperature, p.top_k, p.top_p, p.seed, step};
}

}  // namespace

// What one entry's rows drew: the tokens kept, in order, and how the request ends, if it does.
struct Engine::Drawn {
  std::vector<GeneratedToken> tokens;
  std::optional<StopCause> finish;
  std::string error;
  int64_t rows = 1;      // rows drawn: the tokens kept and a stop token drawn
  int64_t accepted = 0;  // drafts equal to the token drawn at their position
};

Engine::Drawn Engine::draw_rows(Active& a, const RunnerEntry& entry, std::span<const int32_t> drafts,
                                std::span<const int32_t> runner_ids, const float* logits) {
  const int64_t vocab = runner_.vocab_size();
  const auto prompt_length = static_cast<int64_t>(a.request.prompt.size());
  const std::vector<int32_t>& stops = a.request.stop_ids;
  Drawn out;
  // Row r's logits follow the entry's token and r drafts; its draw is plain decoding's next one, and the row after it
  // counts only if that draw is the draft run there.
  for (size_t r = 0; r <= drafts.size(); ++r) {
    out.rows = static_cast<int64_t>(r) + 1;
    const float* row = logits ? logits + static_cast<int64_t>(r) * vocab : nullptr;
    int32_t id = 0;
    if (entry.draw) {
      id = runner_ids[r];
      if (id == -1 && entry.constraint) {
        out.error = "the constraint allows no token here";
        break;
      }
      if (id < 0 || id >= vocab) {
        out.error = fmt::format("the runner drew token {}, outside the vocabulary of {}", id, vocab);
        break;
      }
    } else {
      std::vector<float> masked;  // a copy: the raw row still gives the logprobs
      const float* drawn_from = row;
      if (a.request.constraint) {
        masked.assign(row, row + vocab);
        if (!a.request.constraint->mask(masked.data(), vocab)) {
          out.error = "the constraint allows no token here";
          break;
        }
        drawn_from = masked.data();
      }
      const auto generated = static_cast<uint64_t>(static_cast<int64_t>(a.tokens.size()) - prompt_length);
      id = a.sampler.sample(drawn_from, vocab, a.tokens, generated, prompt_length);
    }
    const bool agrees = r < drafts.size() && id == drafts[r];
    out.accepted += agrees ? 1 : 0;
    a.tokens.push_back(id);  // a stop token is not streamed, but the next turn's prompt holds it after the answer
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      out.finish = StopCause::kStopToken;
      break;
    }
    GeneratedToken token{id, 0.0f, {}};
    if (a.request.top_logprobs >= 0) token = token_with_logprobs(row, vocab, id, a.request.top_logprobs);
    if (a.request.constraint) {
      if (!a.request.constraint->accept(id)) {
        out.error = "the drawn token breaks the constraint";
        break;
      }
      if (a.request.constraint->finished()) out.finish = StopCause::kConstraintDone;
    }
    out.tokens.push_back(std::move(token));
    if (out.finish || !agrees) break;
  }
  if (!out.error.empty()) out.finish = StopCause::kError;
  return out;
}

int64_t Engine::run_step(const StepPlan& plan, const std::vector<std::shared_ptr<Active>>& active) {
  std::vector<RunnerEntry> batch;  // [plan.work]
  for (size_t i = 0; i < plan.work.size(); ++i) {
    const ScheduledWork& w = plan.work[i];
    const Active& a = *active[i];
    const auto first = a.tokens.begin() + static_cast<std::ptrdiff_t>(w.start);
    // An answer re-run ends with its prompt: nothing to draw.
    const bool samples = w.samples && !a.answer_from;
    RunnerEntry entry{w.slot, w.start, std::vector<int32_t>(first, first + w.count), samples, std::nullopt};
    entry.drafts = samples ? w.drafts : 0;
    if (samples && runner_.draws_tokens())
      entry.draw =
          runner_draw(a.request, static_cast<uint64_t>(a.tokens.size() - a.request.prompt.size()), entry.drafts);
    entry.logits = samples && !entry.draw;
    if (entry.draw) entry.constraint = a.request.constraint.get();
    batch.push_back(std::move(entry));
  }
  RunnerOutput output;
  std::string error;
  try {
    output = runner_.forward(batch);
  } catch (const std::exception& e) {
    error = e.what();
  }

  std::lock_guard lock(mutex_);
  ++steps_;
  const int64_t vocab = runner_.vocab_size();
  // Each entry's rows: its token's, then one a draft; where its logits and draws start in the output.
  std::vector<int64_t> logits_row(batch.size(), -1), drawn_row(batch.size(), 0);
  if (error.empty()) {
    if (output.drafts.empty()) output.drafts.resize(batch.size());
    if (output.drafts.size() != batch.size())
      error = fmt::format("the runner returned drafts for {} entries of {}", output.drafts.size(), batch.size());
    int64_t logits_rows = 0, rows = 0;
    for (size_t i = 0; i < batch.size() && error.empty(); ++i) {
      const auto n = static_cast<int64_t>(output.drafts[i].size());
      if (n > batch[i].drafts) error = fmt::format("the runner ran {} drafts where {} were asked", n, batch[i].drafts);
      drawn_row[i] = rows;
      rows += 1 + n;
      if (!batch[i].logits) continue;
      logits_row[i] = logits_rows;
      logits_rows += 1 + n;
    }
    if (error.empty() && (output.drawn.size() != static_cast<size_t>(rows) ||
                          output.logits.size() != static_cast<size_t>(logits_rows * vocab)))
      error = fmt::format(
          "the runner returned {} draws and {} logits for {} entries of {} rows, {} of them with logits",
          output.drawn.size(), output.logits.size() / static_cast<size_t>(vocab), batch.size(), rows, logits_rows);
  }
  // The draws, each entry on its own host thread (a 248K-token vocabulary takes milliseconds a row); an entry's draws
  // depend on nothing but its own logits, history and step, so the split cannot change a token.
  std::vector<Drawn> drawn(plan.work.size());  // [work]
  if (error.empty()) {
    parallel_for(static_cast<int64_t>(plan.work.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const ScheduledWork& w = plan.work[i];
        if (!batch[i].logits && !batch[i].draw) continue;
        if (!active_.count(w.id)) continue;
        const auto n = output.drafts[i].size();
        const float* logits = batch[i].logits ? output.logits.data() + logits_row[i] * vocab : nullptr;
        drawn[i] =
            draw_rows(*active[i], batch[i], output.drafts[i],
                      std::span<const int32_t>(output.drawn).subspan(static_cast<size_t>(drawn_row[i]), n + 1), logits);
      }
    });
  }
  std::vector<std::pair<SequenceId, EngineEvent>> events;  // sent after complete() has retired what is done
  std::vector<int64_t> rows_drawn(plan.work.size(), 1);    // [work]
  for (size_t i = 0; i < plan.work.size(); ++i) {
    const ScheduledWork& w = plan.work[i];
    if (!active_.count(w.id)) continue;  // cancelled during the step
    Active& a = *active[i];
    if (!error.empty()) {
      events.push_back({w.id, EngineEvent{std::nullopt, StopCause::kError, error}});
      continue;
    }
    if (a.answer_from) answer_tokens_ += w.count;
    if (!batch[i].logits && !batch[i].draw) continue;
    Drawn& d = drawn[i];
    rows_drawn[i] = d.rows;
    if (!output.drafts[i].empty()) {
      const SpeculationStats step{1, static_cast<int64_t>(output.drafts[i].size()), d.accepted};
      for (SpeculationStats* s : {&a.speculation, &speculation_}) {
        s->steps += step.steps;
        s->drafted += step.drafted;
        s->accepted += step.accepted;
      }
    }
    for (size_t t = 0; t < d.tokens.size(); ++t)
      events.push_back({w.id, EngineEvent{std::move(d.tokens[t]), std::nullopt, {}}});
    if (d.finish) {
      if (d.finish == StopCause::kConstraintDone) {
        events.back().second.finish = d.finish;  // its last event carries the last token
      } else {
        events.push_back({w.id, EngineEvent{std::nullopt, d.finish, d.error}});
      }
    }
  }
  // Before anything ends: every sequence of the step still holds its state.
  if (error.empty()) offer_prefixes(plan, active);
  for (const auto& [id, event] : events)
    if (event.finish) scheduler_.finish(id);
  const std::vector<SequenceId> retired = scheduler_.complete(plan, rows_drawn);
  for (const SequenceId id : retired)
    if (const auto it = active_.find(id); it != active_.end() && it->second->answer_from)
      end(id, EngineEvent{std::nullopt, StopCause::kLength, {}});
  // A retired request's last event ends it for its length (a constraint that is done has the last word on why).
  for (const SequenceId id : retired) {
    const auto last = std::find_if(events.rbegin(), events.rend(), [&](const auto& e) { return e.first == id; });
    if (last != events.rend() && last->second.finish != StopCause::kConstraintDone)
      last->second.finish = StopCause::kLength;
  }
  for (auto& [id, event] : events) {
    Active& a = *active_.at(id);
    event.cached_tokens = std::exchange(a.unreported_cached_tokens, std::nullopt);
    if (event.finish) {
      event.speculation = a.speculation;
      end(id, std::move(event));
    } else {
      a.stream->push(std::move(event));
    }
  }
  int64_t drawn_total = 0;
  for (size_t i = 0; i < plan.work.size(); ++i) drawn_total += batch[i].logits || batch[i].draw ? rows_drawn[i] : 0;
  return drawn_total;
}

}  // namespace plumb
