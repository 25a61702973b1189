// Decode steps as recorded graphs (Backend::record_step): one recording per batch bucket and page-table stride, made
// on first use and replayed after. A batch of B sequences that each bring one token runs as the smallest bucket that
// holds B, its rows past B taken by sink sequences whose results are dropped: a row's results depend on its own inputs
// and state alone, so the sinks change no bit of the others, and a replay computes what the eager pass would. Any
// other batch, and every batch on a backend that records nothing (the CPU), runs as the eager forward pass. A recorded
// step ends with every row's token draw (Backend::sample_tokens), so a replay hands back ids without the logits
// having to leave the device.
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

// What one step leaves in the backend's memory, valid until the next step.
struct StepOutput {
  Tensor logits;  // [sequences, V] F32: each sequence's last token's
  Tensor ids;     // [sequences] I32: each row's draw; undefined when the step was given no draws
};

class StepGraphs {
 public:
  StepGraphs(const Qwen3NextModel& model, StepGraphOptions options);

  // model.forward(batch, LogitsRows::kLast), replayed from a recording where the batch allows, then, given draws
  // [sequences], each row's token drawn from its logits.
  StepOutput forward(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws);
  Tensor forward(const std::vector<SequenceInput>& batch) { return forward(batch, {}).logits; }

  // Makes what serving would otherwise make on first use: the sinks (sinks_needed() of them) and each bucket's
  // recording at the shortest page stride (a decode step of throwaway sequences at position 0, run eagerly and then
  // recorded). Takes a KV page per sink for good, and one per row of the largest bucket while it runs.
  void warm_up();
  // The largest batch recorded (0 with graphs off); the most padding rows a batch can take (the widest gap between
  // a bucket and the batch one above the bucket below it), each a sink sequence; and the sinks made so far (each
  // holds a recurrent state slot and a KV page).
  int64_t largest_bucket() const { return options_.enabled && !options_.buckets.empty() ? options_.buckets.back() : 0; }
  int64_t sinks_needed() const;
  int64_t sinks() const { return static_cast<int64_t>(sinks_.size()); }

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
  std::set<std::pair<int64_t, int64_t>> warmed_;                              // shapes that ran once, eagerly
  std::vector<SequenceState> sinks_;                                          // [largest bucket]
  int64_t last_kernels_ = 0;
  bool last_replayed_ = false;
};

}  // namespace plumb
