#include "engine/model_runner.h"

#include "core/error.h"

namespace plumb {

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

// One batched forward for every entry: each sequence's logits are bit-identical to a forward of it alone.
std::vector<float> ModelRunner::forward(const std::vector<RunnerEntry>& batch) {
  std::vector<SequenceInput> inputs;
  for (const RunnerEntry& e : batch) {
    PLUMB_CHECK(e.slot >= 0 && static_cast<size_t>(e.slot) < states_.size(), "state slot {} out of range", e.slot);
    std::optional<SequenceState>& state = states_[static_cast<size_t>(e.slot)];
    // A fresh sequence replaces the slot's old state, whose KV pages go back to the pool.
    if (e.start == 0) state = model_.new_sequence();
    PLUMB_CHECK(state && state->position == e.start, "slot {}: asked to continue at {} but the state is elsewhere",
                e.slot, e.start);
    inputs.push_back({&*state, e.tokens});
  }
  if (inputs.empty()) return {};
  const Tensor logits = model_.backend().download(model_.forward(inputs, LogitsRows::kLast));  // [entries, V]
  return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
}

void ModelRunner::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  states_[static_cast<size_t>(slot)].reset();
}

}  // namespace plumb
