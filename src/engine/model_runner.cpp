#include "engine/model_runner.h"

#include "core/error.h"

namespace plumb {

ModelRunner::ModelRunner(const Qwen3NextModel& model, int32_t slots, StepGraphOptions graphs)
    : model_(model), states_(static_cast<size_t>(slots)), graphs_(model, std::move(graphs)) {
  PLUMB_CHECK(slots > 0, "a model runner needs at least one slot, got {}", slots);
}

int64_t ModelRunner::vocab_size() const {
  return model_.config().vocab_size;
}

int64_t ModelRunner::max_context() const {
  return model_.config().max_position_embeddings;
}

std::vector<float> ModelRunner::forward(const std::vector<RunnerEntry>& batch) {
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
std::vector<float> ModelRunner::run(const std::vector<RunnerEntry>& batch) {
  std::vector<SequenceInput> inputs;
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
    inputs.push_back({&*state, e.tokens});
  }
  if (inputs.empty()) return {};
  const Tensor logits = graphs_.forward(inputs);  // [entries, V] in the backend's memory
  // Copied straight into the vector returned: no host tensor of its own to fill and copy again.
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  Tensor host(DType::kF32, logits.shape(), Device::kCpu, out.data(), nullptr);
  model_.backend().copy(logits, host);
  return out;
}

void ModelRunner::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < states_.size(), "state slot {} out of range", slot);
  states_[static_cast<size_t>(slot)].reset();
}

}  // namespace plumb
