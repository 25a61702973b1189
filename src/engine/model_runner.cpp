#include "engine/model_runner.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "core/error.h"

namespace plumb {

ModelRunner::ModelRunner(const Qwen3NextModel& model, int32_t slots, StepGraphOptions graphs)
    : model_(model), states_(static_cast<size_t>(slots)), graphs_(model, std::move(graphs)) {
  PLUMB_CHECK(slots > 0, "a model runner needs at least one slot, got {}", slots);
}

void ModelRunner::enable_prefix_cache(PrefixCacheLimits limits) {
  cache_.emplace(model_, limits);
}

int64_t ModelRunner::vocab_size() const {
  return model_.config().vocab_size;
}

int64_t ModelRunner::max_context() const {
  return model_.config().max_position_embeddings;
}

bool ModelRunner::draws_tokens() const {
  return model_.backend().device() != Device::kCpu;
}

void ModelRunner::warm_up(int64_t prefill_tokens, int64_t speculative_tokens) {
  graphs_.warm_up();
  const int64_t bucket = graphs_.largest_bucket();
  if (drafter_ && speculative_tokens > 0 && bucket > 0 && bucket <= static_cast<int64_t>(states_.size())) {
    // Throwaway sequences at position 0 bring a token and their drafts, as serving's verifications do (the tokens
    // read from verify_tokens_); the eager first run takes the trails' slots, the second records.
    PLUMB_CHECK(speculative_tokens <= kMaxSpeculativeTokens, "warm_up: {} drafts a verification (at most {})",
                speculative_tokens, kMaxSpeculativeTokens);
    const int64_t T = speculative_tokens + 1;
    std::vector<SequenceState> rows;
    for (int64_t i = 0; i < bucket; ++i) rows.push_back(model_.new_sequence(T));
    std::vector<SequenceInput> batch;
    for (int64_t i = 0; i < bucket; ++i)
      batch.push_back({&rows[static_cast<size_t>(i)], std::vector<int32_t>(static_cast<size_t>(T), 0),
                       &trails_[static_cast<size_t>(i)].verified});
    Tensor tokens = verify_tokens_.rows(0, bucket * T);  // [bucket · T]
    model_.backend().copy(model_.backend().zeros(DType::kI32, {bucket * T}), tokens);
    for (int run = 0; run < 2; ++run) {
      graphs_.verify(batch, std::vector<TokenDraw>(static_cast<size_t>(bucket * T)), &tokens);
      for (SequenceState& s : rows) s.position = 0;
    }
    for (int64_t i = 0; i < bucket; ++i) trails_[static_cast<size_t>(i)].verified.count = 0;
  }
  if (prefill_tokens < 1) return;
  SequenceState state = model_.new_sequence(prefill_tokens);
  graphs_.forward({{&state, std::vector<int32_t>(static_cast<size_t>(prefill_tokens), 0)}}, {TokenDraw{}});
}

void ModelRunner::enable_drafting(std::unique_ptr<Drafter> drafter) {
  PLUMB_CHECK(drafter != nullptr, "enable_drafting: no drafter");
  drafter_ = std::move(drafter);
  trails_.clear();
  trails_.resize(states_.size());
  verify_tokens_ = model_.backend().empty(
      DType::kI32, {static_cast<int64_t>(states_.size()) * (static_cast<int64_t>(kMaxSpeculativeTokens) + 1)});
}

RunnerOutput ModelRunner::forward(const std::vector<RunnerEntry>& batch) {
  try {
    const std::vector<SequenceState*> states = states_for(batch);
    return drafter_ ? run_drafting(batch, states) : run(batch);
  } catch (...) {
    // A forward that stops part-way has advanced some layers' states (and may have taken KV pages) but not others:
    // no slot of the batch may be continued from that, so each one is emptied and its pages go back to the pool.
    for (const RunnerEntry& e : batch) {
      if (e.slot < 0 || static_cast<size_t>(e.slot) >= states_.size()) continue;
      states_[static_cast<size_t>(e.slot)].reset();
      if (drafter_) trails_[static_cast<size_t>(e.slot)].restart();
    }
    throw;
  }
}

std::vector<SequenceState*> ModelRunner::states_for(const std::vector<RunnerEntry>& batch) {
  std::vector<SequenceState*> states;  // [entries]
  for (const RunnerEntry& e : batch) {
    PLUMB_CHECK(e.slot >= 0 && static_cast<size_t>(e.slot) < states_.size(), "state slot {} out of range", e.slot);
    PLUMB_CHECK(!e.tokens.empty(), "slot {}: an entry with no tokens", e.slot);
    std::optional<SequenceState>& state = states_[static_cast<size_t>(e.slot)];
    // A fresh sequence replaces the slot's old state, whose recurrent slot and KV pages go back to their pools first,
    // so a runner of N slots never holds more than N sequences' state.
    if (e.start == 0) {
      state.reset();
      state = model_.new_sequence();
      if (drafter_) trails_[static_cast<size_t>(e.slot)].restart();
    }
    PLUMB_CHECK(state,
                "slot {} holds no sequence (released, or emptied by a failed forward): it can start at 0, not {}",
                e.slot, e.start);
    // A slot whose verification is not settled is ahead of its entry until run_drafting settles it.
    const bool settles = drafter_ && trails_[static_cast<size_t>(e.slot)].verified.count > 0;
    PLUMB_CHECK(settles || state->position == e.start, "slot {}: asked to continue at {} but the state is at {}",
                e.slot, e.start, state->position);
    PLUMB_CHECK(!e.draw || draws_tokens(), "slot {}: the runner on the CPU draws no tokens", e.slot);
    PLUMB_CHECK(!e.constraint || (e.draw && e.drafts == 0),
                "slot {}: a constraint keeps a runner's draw of one row, but the entry {}", e.slot,
                e.draw ? "asks for drafts" : "draws nothing");
    PLUMB_CHECK(e.drafts == 0 || (drafter_ && e.tokens.size() == 1 && e.drafts <= kMaxSpeculativeTokens),
                "slot {}: {} drafts asked after {} tokens (at most {} after one, and only of a runner that drafts)",
                e.slot, e.drafts, e.tokens.size(), kMaxSpeculativeTokens);
    states.push_back(&*state);
  }
  return states;
}

namespace {

// Rows [begin, end) of `src` [R, V] in the backend's memory, into `dst` on the host.
void copy_rows(Backend& backend, const Tensor& src, int64_t begin, int64_t end, float* dst) {
  Tensor host(DType::kF32, {end - begin, src.dim(1)}, Device::kCpu, dst, nullptr);
  backend.copy(src.rows(begin, end), host);
}

}  // namespace

std::vector<bool> ModelRunner::constrain_draws(const std::vector<RunnerEntry>& batch, const std::vector<int64_t>& rows,
                                               std::vector<TokenDraw>& draws, int64_t vocab) {
  const int64_t words = allowed_words(vocab);
  allowed_.resize(static_cast<size_t>(static_cast<int64_t>(batch.size()) * words));
  std::vector<bool> none(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].constraint || rows[i] < 0) continue;
    uint32_t* bits = allowed_.data() + static_cast<int64_t>(i) * words;
    if (batch[i].constraint->allowed(bits, vocab))
      draws[static_cast<size_t>(rows[i])].allowed = bits;
    else
      none[i] = true;
  }
  return none;
}

// One batched forward for every entry: each sequence's logits are bit-identical to a forward of it alone.
RunnerOutput ModelRunner::run(const std::vector<RunnerEntry>& batch) {
  std::vector<SequenceInput> inputs;
  std::vector<TokenDraw> draws;  // [entries] when any entry draws: the others draw greedily, unread
  for (size_t i = 0; i < batch.size(); ++i)
    inputs.push_back({&*states_[static_cast<size_t>(batch[i].slot)], batch[i].tokens});
  RunnerOutput out;
  if (inputs.empty()) return out;
  const bool any_draw =
      std::any_of(batch.begin(), batch.end(), [](const RunnerEntry& e) { return e.draw.has_value(); });
  if (any_draw)
    for (const RunnerEntry& e : batch) draws.push_back(e.draw.value_or(TokenDraw{}));
  // A step graph's draws are recorded without allowed tokens (they would change its tables' layout), so a step with
  // constrained rows drops the graph's draw and draws again from the same logits once the masks are made.
  const bool constrained =
      std::any_of(batch.begin(), batch.end(), [](const RunnerEntry& e) { return e.constraint != nullptr; });
  StepOutput step = graphs_.forward(inputs, constrained ? std::vector<TokenDraw>{} : draws);  // logits [entries, V]
  Backend& backend = model_.backend();
  std::vector<bool> none_allowed(batch.size(), false);
  if (constrained) {
    std::vector<int64_t> rows(batch.size());
    std::iota(rows.begin(), rows.end(), 0);
    none_allowed = constrain_draws(batch, rows, draws, step.logits.dim(1));
    step.ids = backend.empty(DType::kI32, {step.logits.dim(0)});
    backend.sample_tokens(step.logits, draws, step.ids);
  }
  out.drafts.resize(batch.size());
  out.drawn.assign(batch.size(), -1);
  if (any_draw) {
    std::vector<int32_t> ids(batch.size());  // [entries]
    Tensor host(DType::kI32, {static_cast<int64_t>(ids.size())}, Device::kCpu, ids.data(), nullptr);
    backend.copy(step.ids, host);
    for (size_t i = 0; i < batch.size(); ++i)
      if (batch[i].draw && !none_allowed[i]) out.drawn[i] = ids[i];
  }
  // The rows that want logits, copied straight into the vector returned, a run of adjacent rows at a time.
  const int64_t vocab = step.logits.dim(1);
  int64_t wanted = 0;
  for (const RunnerEntry& e : batch) wanted += e.logits ? 1 : 0;
  out.logits.resize(static_cast<size_t>(wanted * vocab));
  int64_t filled = 0;
  for (size_t i = 0; i < batch.size();) {
    if (!batch[i].logits) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < batch.size() && batch[end].logits) ++end;
    const auto rows = static_cast<int64_t>(end - i);
    copy_rows(backend, step.logits, static_cast<int64_t>(i), static_cast<int64_t>(end),
              out.logits.data() + filled * vocab);
    filled += rows;
    i = end;
  }
  // A step that brings nothing back (prefill chunks only) still ends here: a failure of its kernels surfaces in this
  // call, which empties its own slots, rather than in a later step's.
  if (!any_draw && wanted == 0) backend.synchronize();
  return out;
}

RunnerOutput ModelRunner::run_drafting(const std::vector<RunnerEntry>& batch,
                                       const std::vector<SequenceState*>& states) {
  Backend& backend = model_.backend();
  const int64_t vocab = model_.config().vocab_size;
  // Settle last steps' verifications: the rows kept are those the slot's entry starts after, and the slot's state
  // goes back to the last of them by a swap with its trail.
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerEntry& e = batch[i];
    DraftTrail& t = trails_[static_cast<size_t>(e.slot)];
    if (t.verified.count == 0) continue;
    const int64_t kept = e.start - t.from, ran = static_cast<int64_t>(t.ids.size());
    PLUMB_CHECK(kept >= 1 && kept <= ran, "slot {}: continues at {}, but its verification ran positions [{}, {})",
                e.slot, e.start, t.from, t.from + ran);
    model_.rewind(*states[i], t.verified, e.start);
    t.ids.resize(static_cast<size_t>(kept));
    t.hidden = t.hidden.rows(0, kept);
  }

  // Show the drafter the rows run since it last saw each slot, each with the token after it, and take its drafts.
  RunnerOutput out;
  out.drafts.resize(batch.size());
  std::vector<DraftRequest> requests;
  std::vector<size_t> requested;  // [requests]: entry index
  for (size_t i = 0; i < batch.size(); ++i) {
    const DraftTrail& t = trails_[static_cast<size_t>(batch[i].slot)];
    if (t.ids.empty()) continue;
    std::vector<int32_t> next(t.ids.begin() + 1, t.ids.end());
    next.push_back(batch[i].tokens.front());
    requests.push_back({states[i], t.from, std::move(next), t.hidden, batch[i].drafts});
    requested.push_back(i);
  }
  // The drafts stay in the backend's memory until the verification that reads them has run: the host plans the
  // verification while the device drafts, and waits for the device once, for both.
  DeviceDrafts proposed;
  std::vector<int64_t> drafts_at(batch.size(), 0), draft_count(batch.size(), 0);  // [entries] in proposed.ids
  int64_t drafted = 0;                                                            // proposed.ids's length
  if (!requests.empty()) {
    proposed = drafter_->propose_on_device(requests, backend);
    PLUMB_CHECK(proposed.counts.size() == requests.size(), "the drafter answered {} of {} requests",
                proposed.counts.size(), requests.size());
    for (size_t r = 0; r < requests.size(); ++r) {
      PLUMB_CHECK(proposed.counts[r] >= 0 && proposed.counts[r] <= requests[r].count,
                  "the drafter proposed {} tokens where {} were asked", proposed.counts[r], requests[r].count);
      drafts_at[requested[r]] = drafted;
      draft_count[requested[r]] = proposed.counts[r];
      drafted += proposed.counts[r];
    }
    PLUMB_CHECK(proposed.ids.rank() == 1 && proposed.ids.dtype() == DType::kI32 && proposed.ids.dim(0) == drafted,
                "the drafter proposed {} {} for {} drafts", dtype_name(proposed.ids.dtype()),
                shape_str(proposed.ids.shape()), drafted);
  }

  // Two calls at most: verifications under the decode rule (a row's arithmetic is then a decode step's, whatever
  // runs beside it in the call), the rest under the chunk rule, which for a lone token is the same arithmetic.
  struct Group {
    std::vector<SequenceInput> inputs;
    std::vector<TokenDraw> draws;  // [logits rows] when any entry draws
    Tensor logits, hidden, ids;    // [rows, V], [Σ T, H], [rows]
    std::vector<int32_t> host_ids;
  };
  std::array<Group, 2> groups;  // [0]: the chunk rule, one logits row an entry; [1]: verifications, every row's
  struct Place {
    size_t group = 0;
    int64_t row = 0, hidden_row = 0, rows = 1;  // its first logits row, first hidden row, and logits rows
  };
  std::vector<Place> places(batch.size());
  std::array<int64_t, 2> hidden_rows{0, 0};
  const bool any_draw =
      std::any_of(batch.begin(), batch.end(), [](const RunnerEntry& e) { return e.draw.has_value(); });
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerEntry& e = batch[i];
    const size_t g = draft_count[i] == 0 ? 0 : 1;
    std::vector<int32_t> tokens = e.tokens;  // [T]: a verification's drafts are read on the device, and set below
    tokens.resize(tokens.size() + static_cast<size_t>(draft_count[i]), 0);
    DraftTrail& t = trails_[static_cast<size_t>(e.slot)];
    t.from = e.start;
    t.ids = tokens;
    const auto T = static_cast<int64_t>(tokens.size());
    Group& group = groups[g];
    places[i] = {g, g == 1 ? static_cast<int64_t>(group.draws.size()) : static_cast<int64_t>(group.inputs.size()),
                 hidden_rows[g], g == 1 ? T : 1};
    hidden_rows[g] += T;
    group.inputs.push_back({states[i], std::move(tokens), g == 1 ? &t.verified : nullptr});
    // Row r of a verification draws as plain decoding's r-th step from here would.
    for (int64_t r = 0; r < places[i].rows; ++r) {
      TokenDraw draw = e.draw.value_or(TokenDraw{});
      draw.step += static_cast<uint64_t>(r);
      group.draws.push_back(draw);
    }
  }
  // Where each entry's logits rows go in out.logits, for the entries that want them.
  std::vector<int64_t> logits_at(batch.size(), -1);  // [entries]
  int64_t wanted = 0;                                // logits rows that go back
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].logits) continue;
    logits_at[i] = wanted;
    wanted += places[i].rows;
  }
  out.logits.resize(static_cast<size_t>(wanted * vocab));
  std::vector<int64_t> verify_rows(batch.size(), -1);  // [entries] a verification's first row among the group's
  for (size_t i = 0; i < batch.size(); ++i)
    if (places[i].group == 1) verify_rows[i] = places[i].hidden_row;
  const Tensor verify_ids = verification_tokens(batch, verify_rows, proposed, drafts_at, draft_count);
  std::vector<bool> none_allowed(batch.size(), false);  // [entries]: constrained entries whose constraint allows none
  for (size_t g = 0; g < groups.size(); ++g) {
    Group& group = groups[g];
    if (group.inputs.empty()) continue;
    // A group replayed from a recording leaves its results in the recording's memory, which the next group's replay
    // reuses: each group's logits and draws come back, and its hidden states are copied out, before the next runs.
    // A group with constrained rows is drawn again once their masks are made, as run() draws.
    bool constrained = false;
    for (size_t i = 0; i < batch.size(); ++i)
      constrained = constrained || (batch[i].constraint && places[i].group == g);
    const std::vector<TokenDraw> recorded_draws = any_draw && !constrained ? group.draws : std::vector<TokenDraw>{};
    StepOutput step = g == 1 ? graphs_.verify(group.inputs, recorded_draws, &verify_ids)
                             : graphs_.forward(group.inputs, recorded_draws, StepHidden::kEveryToken);
    group.logits = step.logits;
    group.hidden = step.hidden;
    if (graphs_.last_replayed()) {
      group.hidden = backend.empty(DType::kF32, step.hidden.shape());
      backend.copy(step.hidden, group.hidden);
    }
    if (any_draw) {
      group.ids = step.ids;
      if (constrained) {
        std::vector<int64_t> rows(batch.size(), -1);  // each entry's logits row in this group
        for (size_t i = 0; i < batch.size(); ++i)
          if (places[i].group == g) rows[i] = places[i].row;
        const std::vector<bool> none = constrain_draws(batch, rows, group.draws, vocab);
        for (size_t i = 0; i < batch.size(); ++i) none_allowed[i] = none_allowed[i] || none[i];
        group.ids = backend.empty(DType::kI32, {group.logits.dim(0)});
        backend.sample_tokens(group.logits, group.draws, group.ids);
      }
      group.host_ids.resize(static_cast<size_t>(group.logits.dim(0)));
      Tensor host(DType::kI32, {group.logits.dim(0)}, Device::kCpu, group.host_ids.data(), nullptr);
      backend.copy(group.ids, host);
    }
    for (size_t i = 0; i < batch.size(); ++i)
      if (places[i].group == g && logits_at[i] >= 0)
        copy_rows(backend, group.logits, places[i].row, places[i].row + places[i].rows,
                  out.logits.data() + logits_at[i] * vocab);
  }
  // The drafts reach the host once the verification that read them has run.
  if (drafted > 0) {
    std::vector<int32_t> all(static_cast<size_t>(drafted));
    Tensor host(DType::kI32, {drafted}, Device::kCpu, all.data(), nullptr);
    backend.copy(proposed.ids, host);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (draft_count[i] == 0) continue;
      const auto first = all.begin() + drafts_at[i];
      out.drafts[i].assign(first, first + draft_count[i]);
      for (int32_t id : out.drafts[i])
        PLUMB_CHECK(id >= 0 && id < vocab, "the drafter proposed token {}, outside the vocabulary of {}", id, vocab);
      std::vector<int32_t>& ids = trails_[static_cast<size_t>(batch[i].slot)].ids;  // [1 + drafts]
      std::copy(out.drafts[i].begin(), out.drafts[i].end(), ids.begin() + 1);
    }
  }

  // Each trail takes its rows' hidden states. The rows of prompt chunks go to the drafter now, all but each chunk's
  // last (whose next token is not known yet): the head's cache then reaches the chunk's last position but one, where
  // a prefix cache keeps the chunk's end (offer_prefix).
  std::vector<DraftRequest> catch_up;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Place& p = places[i];
    DraftTrail& t = trails_[static_cast<size_t>(batch[i].slot)];
    const auto n = static_cast<int64_t>(t.ids.size());
    t.hidden = groups[p.group].hidden.rows(p.hidden_row, p.hidden_row + n);
    if (p.group != 0 || n < 2) continue;
    catch_up.push_back(
        {states[i], t.from, std::vector<int32_t>(t.ids.begin() + 1, t.ids.end()), t.hidden.rows(0, n - 1), 0});
    t.from += n - 1;
    t.ids = {t.ids.back()};
    t.hidden = t.hidden.rows(n - 1, n);
  }
  if (!catch_up.empty()) drafter_->propose(catch_up);

  for (size_t i = 0; i < batch.size(); ++i) {
    const Place& p = places[i];
    const Group& group = groups[p.group];
    for (int64_t r = 0; r < p.rows; ++r)
      out.drawn.push_back(batch[i].draw && !none_allowed[i] ? group.host_ids[static_cast<size_t>(p.row + r)] : -1);
  }
  if (!any_draw && wanted == 0) backend.synchronize();  // as run(): a failure surfaces in this call
  return out;
}

Tensor ModelRunner::verification_tokens(const std::vector<RunnerEntry>& batch, const std::vector<int64_t>& rows_at,
                                        const DeviceDrafts& proposed, const std::vector<int64_t>& drafts_at,
                                        const std::vector<int64_t>& draft_count) {
  Backend& backend = model_.backend();
  std::vector<int32_t> firsts;  // [verifications] each one's token from the host
  int64_t rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (rows_at[i] < 0) continue;
    firsts.push_back(batch[i].tokens.front());
    rows = std::max(rows, rows_at[i] + 1 + draft_count[i]);
  }
  if (firsts.empty()) return Tensor();
  PLUMB_CHECK(rows <= verify_tokens_.dim(0), "a step's verifications bring {} tokens, past the {} kept for them", rows,
              verify_tokens_.dim(0));
  Tensor host = Tensor::zeros(DType::kI32, {static_cast<int64_t>(firsts.size())});  // its own memory: see upload
  std::copy(firsts.begin(), firsts.end(), host.data_as<int32_t>());
  const Tensor uploaded = backend.upload(host);  // [verifications]
  Tensor tokens = verify_tokens_.rows(0, rows);  // [Σ T]
  std::vector<Tensor> from, to;
  int64_t v = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (rows_at[i] < 0) continue;
    const int64_t row = rows_at[i];
    from.push_back(uploaded.rows(v, v + 1));
    to.push_back(tokens.rows(row, row + 1));
    from.push_back(proposed.ids.rows(drafts_at[i], drafts_at[i] + draft_count[i]));
    to.push_back(tokens.rows(row + 1, row + 1 + draft_count[i]));
    ++v;
  }
  backend.copy_all(from, to);
  return tokens;
}

void ModelRunner::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  states_[static_cast<size_t>(slot)].reset();
  if (drafter_) trails_[static_cast<size_t>(slot)].restart();
}

int64_t ModelRunner::start_from_cache(int32_t slot, std::span<const int32_t> prompt) {
  release(slot);
  if (!cache_) return 0;
  std::optional<ResumedPrefix> kept = cache_->resume(prompt);
  if (!kept) return 0;
  const int64_t position = kept->state.position;
  SequenceState& state = states_[static_cast<size_t>(slot)].emplace(std::move(kept->state));
  if (drafter_ && kept->draft_hidden.defined()) {
    // The head's cache holds every position of the prefix but its last, which the slot's trail shows the drafter
    // next step, with the token after it: drafts come from the first step. That position's keys and values in the
    // head's layer differ with the token after it, so its page becomes the sequence's own.
    state.kv_pages.own_page(static_cast<size_t>((position - 1) / kKvPageSize));
    DraftTrail& t = trails_[static_cast<size_t>(slot)];
    t.from = position - 1;
    t.ids = {prompt[static_cast<size_t>(position - 1)]};
    t.hidden = kept->draft_hidden;
  }
  return position;
}

void ModelRunner::offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) {
  if (!cache_ || !cache_->wants(position, static_cast<int64_t>(prompt.size()))) return;
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  const std::optional<SequenceState>& state = states_[static_cast<size_t>(slot)];
  PLUMB_CHECK(state && state->position == position, "slot {}: offered {} tokens as its prefix, but its state is at {}",
              slot, position, state ? state->position : -1);
  const bool end = position == static_cast<int64_t>(prompt.size()) / PrefixCache::kBlock * PrefixCache::kBlock;
  // A drafting runner's head has caught up to all but the prompt chunk's last row, which the trail holds
  // (run_drafting): the cache keeps that row's hidden state, so that requests resumed here draft at once.
  Tensor draft_hidden;  // [1, H]
  if (drafter_) {
    const DraftTrail& t = trails_[static_cast<size_t>(slot)];
    if (state->draft_position == position - 1 && t.from == position - 1 && t.ids.size() == 1) draft_hidden = t.hidden;
  }
  cache_->keep(prompt.first(static_cast<size_t>(position)), *state, end ? KeptAt::kPromptEnd : KeptAt::kWithinPrompt,
               draft_hidden);
}

std::optional<PrefixCacheStats> ModelRunner::prefix_cache_stats() const {
  if (!cache_) return std::nullopt;
  return cache_->stats();
}

}  // namespace plumb
