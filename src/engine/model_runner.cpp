#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace plumb {

namespace {
// KV rows a fresh sequence starts with; the model grows the cache on demand, so this only saves early regrowth.
constexpr int64_t kInitialKvCapacity = 256;
}  // namespace

ModelRunner::ModelRunner(const Qwen3NextModel& model, int32_t slots)
    : model_(model), states_(static_cast<size_t>(slots)) {
  PLUMB_CHECK(slots > 0, "a model runner needs at least one slot, got {}", slots);
}

int64_t ModelRunner::vocab_size() const {
  return model_.config().vocab_size;
}

int64_t ModelRunner::max_context() const {
  return model_.config().max_position_embeddings;
}

std::vector<float> ModelRunner::forward(const std::vector<RunnerEntry>& batch) {
  const int64_t vocab = vocab_size();
  std::vector<float> logits(batch.size() * static_cast<size_t>(vocab));  // [entries, V]
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerEntry& e = batch[i];
    PLUMB_CHECK(e.slot >= 0 && static_cast<size_t>(e.slot) < states_.size(), "state slot {} out of range", e.slot);
    std::optional<SequenceState>& state = states_[static_cast<size_t>(e.slot)];
    if (e.start == 0) state = model_.new_sequence(kInitialKvCapacity);
    PLUMB_CHECK(state && state->position == e.start, "slot {}: asked to continue at {} but the state is elsewhere",
                e.slot, e.start);
    const Tensor row = model_.backend().download(model_.forward(*state, e.tokens, LogitsRows::kLast));  // [1, V]
    std::copy(row.f32(), row.f32() + vocab, logits.begin() + static_cast<std::ptrdiff_t>(i * vocab));
  }
  return logits;
}

void ModelRunner::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  states_[static_cast<size_t>(slot)].reset();
}

}  // namespace plumb
