#include "engine/model_runner.h"

#include <algorithm>

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

void ModelRunner::warm_up(int64_t prefill_tokens) {
  graphs_.warm_up();
  if (prefill_tokens < 1) return;
  SequenceState state = model_.new_sequence(prefill_tokens);
  graphs_.forward({{&state, std::vector<int32_t>(static_cast<size_t>(prefill_tokens), 0)}}, {TokenDraw{}});
}

RunnerOutput ModelRunner::forward(const std::vector<RunnerEntry>& batch) {
  try {
    return run(batch);
  } catch (...) {
    // A forward that stops part-way has advanced some layers' states (and may have taken KV pages) but not others:
    // no slot of the batch may be continued from that, so each one is emptied and its pages go back to the pool.
    for (const RunnerEntry& e : batch)
      if (e.slot >= 0 && static_cast<size_t>(e.slot) < states_.size()) states_[static_cast<size_t>(e.slot)].reset();
    throw;
  }
}

// One batched forward for every entry: each sequence's logits are bit-identical to a forward of it alone.
RunnerOutput ModelRunner::run(const std::vector<RunnerEntry>& batch) {
  std::vector<SequenceInput> inputs;
  std::vector<TokenDraw> draws;  // [entries] when any entry draws: the others draw greedily, unread
  for (const RunnerEntry& e : batch) {
    PLUMB_CHECK(e.slot >= 0 && static_cast<size_t>(e.slot) < states_.size(), "state slot {} out of range", e.slot);
    std::optional<SequenceState>& state = states_[static_cast<size_t>(e.slot)];
    // A fresh sequence replaces the slot's old state, whose recurrent slot and KV pages go back to their pools first,
    // so a runner of N slots never holds more than N sequences' state.
    if (e.start == 0) {
      state.reset();
      state = model_.new_sequence();
    }
    PLUMB_CHECK(state,
                "slot {} holds no sequence (released, or emptied by a failed forward): it can start at 0, not {}",
                e.slot, e.start);
    PLUMB_CHECK(state->position == e.start, "slot {}: asked to continue at {} but the state is at {}", e.slot, e.start,
                state->position);
    PLUMB_CHECK(!e.draw || draws_tokens(), "slot {}: the runner on the CPU draws no tokens", e.slot);
    inputs.push_back({&*state, e.tokens});
  }
  RunnerOutput out;
  if (inputs.empty()) return out;
  const bool any_draw =
      std::any_of(batch.begin(), batch.end(), [](const RunnerEntry& e) { return e.draw.has_value(); });
  if (any_draw)
    for (const RunnerEntry& e : batch) draws.push_back(e.draw.value_or(TokenDraw{}));
  const StepOutput step = graphs_.forward(inputs, draws);  // logits [entries, V], ids [entries]
  Backend& backend = model_.backend();
  out.drawn.assign(batch.size(), -1);
  if (any_draw) {
    std::vector<int32_t> ids(batch.size());
    Tensor host(DType::kI32, {static_cast<int64_t>(ids.size())}, Device::kCpu, ids.data(), nullptr);
    backend.copy(step.ids, host);
    for (size_t i = 0; i < batch.size(); ++i)
      if (batch[i].draw) out.drawn[i] = ids[i];
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
    Tensor host(DType::kF32, {rows, vocab}, Device::kCpu, out.logits.data() + filled * vocab, nullptr);
    backend.copy(step.logits.rows(static_cast<int64_t>(i), static_cast<int64_t>(end)), host);
    filled += rows;
    i = end;
  }
  // A step that brings nothing back (prefill chunks only) still ends here: a failure of its kernels surfaces in this
  // call, which empties its own slots, rather than in a later step's.
  if (!any_draw && wanted == 0) backend.synchronize();
  return out;
}

void ModelRunner::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  states_[static_cast<size_t>(slot)].reset();
}

int64_t ModelRunner::start_from_cache(int32_t slot, std::span<const int32_t> prompt) {
  release(slot);
  if (!cache_) return 0;
  std::optional<SequenceState> kept = cache_->resume(prompt);
  if (!kept) return 0;
  const int64_t position = kept->position;
  states_[static_cast<size_t>(slot)] = std::move(*kept);
  return position;
}

void ModelRunner::offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) {
  if (!cache_ || !cache_->wants(position, static_cast<int64_t>(prompt.size()))) return;
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  const std::optional<SequenceState>& state = states_[static_cast<size_t>(slot)];
  PLUMB_CHECK(state && state->position == position, "slot {}: offered {} tokens as its prefix, but its state is at {}",
              slot, position, state ? state->position : -1);
  const bool end = position == static_cast<int64_t>(prompt.size()) / PrefixCache::kBlock * PrefixCache::kBlock;
  cache_->keep(prompt.first(static_cast<size_t>(position)), *state, end ? KeptAt::kPromptEnd : KeptAt::kWithinPrompt);
}

std::optional<PrefixCacheStats> ModelRunner::prefix_cache_stats() const {
  if (!cache_) return std::nullopt;
  return cache_->stats();
}

}  // namespace plumb
