// Speculative decoding in the serving engine, checked end to end on any backend: requests decoding side by side, each
// verifying its drafts in the batched step, get the tokens, logprobs and endings plain decoding gives them, whatever
// the drafts; right drafts are all kept and cut the steps; wrong ones never.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/speculative.h"
#include "model/qwen3_next.h"

namespace plumb::test {

// Proposes what plain decoding made: each sequence's tokens so far (as the runner shows them) are matched to the one
// reference (a prompt and its plain continuation) they start with, and the reference's next tokens are proposed,
// every `wrong_every`-th proposal (0: none) replaced by the next id. Counts sequences that match no reference.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(std::vector<std::vector<int32_t>> references, int64_t vocab, int64_t wrong_every)
      : references_(std::move(references)), vocab_(vocab), wrong_every_(wrong_every) {}
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override;
  int64_t unmatched() const { return unmatched_; }

 private:
  std::vector<std::vector<int32_t>> references_;
  int64_t vocab_, wrong_every_;
  int64_t proposed_ = 0, unmatched_ = 0;
  std::map<const SequenceState*, std::vector<int32_t>> seen_;  // each sequence's tokens at positions 1, 2, ...
};

// Five requests at once through the engine (greedy, sampled, with logprobs and penalties, under a constraint, and
// one that ends on a stop id its plain run draws; prompts of `prompt_length` + 29·i tokens) on plain ModelRunners and
// on drafting ones: with OracleDrafters of k = 1, 3 and 8 whose drafts are all right, every third wrong, or all wrong,
// and, where the model has its MTP head, with the head. One line per disagreement (empty: all identical).
std::vector<std::string> served_speculation_mismatches(const Qwen3NextModel& model, int64_t prompt_length);

}  // namespace plumb::test
