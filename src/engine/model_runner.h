// The Runner of a Qwen3NextModel on any Backend: one SequenceState per slot, one batched forward call per step. A
// slot's KV pages come from the model's pool as its sequence grows and return to it when the slot is released. Steps
// in which every sequence brings one token replay recorded graphs (StepGraphs) unless graphs are off.
#pragma once

#include <optional>
#include <vector>

#include "engine/runner.h"
#include "engine/step_graphs.h"
#include "model/qwen3_next.h"

namespace plumb {

class ModelRunner final : public Runner {
 public:
  ModelRunner(const Qwen3NextModel& model, int32_t slots, StepGraphOptions graphs = {});
  int64_t vocab_size() const override;
  int64_t max_context() const override;
  std::vector<float> forward(const std::vector<RunnerEntry>& batch) override;
  void release(int32_t slot) override;

 private:
  std::vector<float> run(const std::vector<RunnerEntry>& batch);

  const Qwen3NextModel& model_;
  std::vector<std::optional<SequenceState>> states_;  // [slots]
  StepGraphs graphs_;
};

}  // namespace plumb
