// Steps as recorded graphs (Backend::record_step): one recording per step shape (batch bucket, tokens a sequence,
// page-table stride, whether hidden states are kept), made on first use and replayed after. Two kinds of step
// record: a decode step, in which every sequence brings one token, and a verification of speculative drafts, in
// which every sequence brings the same number of tokens under the decode rule with a trail of its GDN states (see
// engine/speculative.h). A decode step of B sequences runs as the smallest bucket that holds B, its rows past B
// taken by sink sequences whose results are dropped: a row's results depend on its own inputs and state alone, so the
// sinks change no bit of the others, and a replay computes what the eager pass would. A verification records only
// when B is a bucket (a sink there would need trail state slots of its own). Any other batch, and every batch on a
// backend that records nothing (the CPU), runs as the eager forward pass. A recorded step ends with every row's
// token draw (Backend::sample_tokens), so a replay hands back ids without the logits having to leave the device.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "model/qwen3_next.h"

namespace plumb {

struct StepGraphOptions {
  bool enabled = true;                                   // false: every step eager (--no-graphs)
  std::vector<int64_t> buckets{1, 2, 4, 8, 16, 32, 64};  // batch sizes recorded, ascending
};

// What one step leaves in the backend's memory, valid until the next step of the same StepGraphs (a replay reuses
// the recording's memory: copy out what must outlive it).
struct StepOutput {
  Tensor logits;  // [rows, V] F32: a decode step's rows are its sequences' tokens, a verification's every token
  Tensor ids;     // [rows] I32: each row's draw; undefined when the step was given no draws
  Tensor hidden;  // [Σ T, H] F32: every token's final hidden state (after the final norm), when asked for
};

// What a step's forward pass returns beside its logits.
enum class StepHidden { kNone, kEveryToken };

class StepGraphs {
 public:
  StepGraphs(const Qwen3NextModel& model, StepGraphOptions options);

  // model.forward(batch, LogitsRows::kLast), replayed from a recording where the batch allows, then, given draws
  // [sequences], each row's token drawn from its logits. With StepHidden::kEveryToken, also every token's final
  // hidden state (model.forward's `hidden`).
  StepOutput forward(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws,
                     StepHidden hidden = StepHidden::kNone);
  Tensor forward(const std::vector<SequenceInput>& batch) { return forward(batch, {}).logits; }
  // A verification of speculative drafts: model.forward(batch, LogitsRows::kAll, GdnAlgorithm::kRecurrent, &hidden)
  // with every sequence's trail, replayed from a recording where the batch allows (as many sequences as a bucket,
  // each bringing the same number of tokens, two or more, and its trail already holding a slot for each state it
  // keeps), then each row's token drawn from its logits (draws [Σ T], or none). Returns every row's logits, draw and
  // final hidden state. With `ids` ([Σ T] I32 in the backend's memory), the tokens come from there (model.forward's
  // `ids`); a recording made so reads them where they were when it was made, so the caller keeps them at one
  // address (ModelRunner's verification tokens).
  StepOutput verify(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws,
                    const Tensor* ids = nullptr);

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
  // Whether the last step ran as a recording (made or replayed) rather than eagerly. A shape's first step runs
  // eagerly, its second is recorded.
  bool last_replayed() const { return last_replayed_; }
  // Verifications that ran as a recording (made or replayed) so far.
  int64_t verifications_replayed() const { return verifications_replayed_; }

 private:
  // What a recording is made for. bucket 0: the batch runs eagerly.
  struct Shape {
    int64_t bucket = 0;
    int64_t tokens = 1;  // a sequence brings; more than one only in a verification
    int64_t stride = 0;  // page-table entries a sequence
    StepHidden hidden = StepHidden::kNone;
    const void* ids = nullptr;  // where the tokens are read in the backend's memory; nullptr: from the host
    auto operator<=>(const Shape&) const = default;
  };
  Shape shape_of(const std::vector<SequenceInput>& batch, bool verify, StepHidden hidden) const;
  StepOutput run(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws, bool verify,
                 StepHidden hidden, const Tensor* ids = nullptr);

  const Qwen3NextModel& model_;
  StepGraphOptions options_;
  bool recordable_ = true;                              // false once the backend recorded nothing
  std::map<Shape, std::unique_ptr<StepGraph>> graphs_;  // by the shape recorded
  std::set<Shape> warmed_;                              // shapes that ran once, eagerly
  std::vector<SequenceState> sinks_;                    // [largest bucket]
  int64_t last_kernels_ = 0;
  bool last_replayed_ = false;
  int64_t verifications_replayed_ = 0;
};

}  // namespace plumb
