// Decode steps as recorded graphs (Backend::record_step): one recording per batch bucket and page-table stride, made
// on first use and replayed after. A batch of B sequences that each bring one token runs as the smallest bucket that
// holds B, its rows past B taken by sink sequences whose results are dropped: a row's results depend on its own inputs
// and state alone, so the sinks change no bit of the others, and a replay computes what the eager pass would. Any
// other batch, and every batch on a backend that records nothing (the CPU), runs as the eager forward pass.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "model/qwen3_next.h"

namespace plumb {

struct StepGraphOptions {
  bool enabled = true;                                   // false: every step eager (--no-graphs)
  std::vector<int64_t> buckets{1, 2, 4, 8, 16, 32, 64};  // batch sizes recorded, ascending
};

class StepGraphs {
 public:
  StepGraphs(const Qwen3NextModel& model, StepGraphOptions options);

  // model.forward(batch, LogitsRows::kLast), replayed from a recording where the batch allows: logits [sequences, V]
  // in the backend's memory, valid until the next call.
  Tensor forward(const std::vector<SequenceInput>& batch);

  // Recordings made so far, and the kernels a replay of the last one used runs.
  int64_t recordings() const { return static_cast<int64_t>(graphs_.size()); }
  int64_t last_kernels() const { return last_kernels_; }
  // Whether the last forward ran as a recording (made or replayed) rather than eagerly. A shape's first step runs
  // eagerly, its second is recorded.
  bool last_replayed() const { return last_replayed_; }

 private:
  // The bucket and page-table stride a batch runs as, or {0, 0} when it runs eagerly.
  std::pair<int64_t, int64_t> shape_of(const std::vector<SequenceInput>& batch) const;

  const Qwen3NextModel& model_;
  StepGraphOptions options_;
  bool recordable_ = true;                                                    // false once the backend recorded nothing
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<StepGraph>> graphs_;  // by (bucket, page stride)
  std::set<std::pair<int64_t, int64_t>> warmed_;                             // shapes that ran once, eagerly
  std::vector<SequenceState> sinks_;                                          // [largest bucket]
  int64_t last_kernels_ = 0;
  bool last_replayed_ = false;
};

}  // namespace plumb
