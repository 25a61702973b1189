// Speculative decoding's promise, checked end to end on any backend: whatever the drafts, the tokens, the way the
// generation ends and the final state are plain decoding's, bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/speculative.h"
#include "model/qwen3_next.h"

namespace plumb::test {

// Proposes the tokens a plain run made (`reference`: the prompt, then the generated tokens and the stop token drawn,
// if any), except that every `wrong_every`-th proposal (counting over the whole run; 0: none) is the next id instead.
// Notes in problems() where the decode loop hands it tokens that run did not make, or hidden states that do not
// match them in number.
class ReplayDrafter : public Drafter {
 public:
  ReplayDrafter(std::vector<int32_t> reference, int64_t vocab, int64_t wrong_every)
      : reference_(std::move(reference)), vocab_(vocab), wrong_every_(wrong_every) {}
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override;
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<int32_t> reference_;
  int64_t vocab_, wrong_every_;
  int64_t proposed_ = 0;
  std::vector<std::string> problems_;
};

// A small model with an MTP head of random weights (small_config_with_mtp(context), seed 21) written to `dir` and
// opened on `backend` with its head loaded.
Qwen3NextModel open_mtp_model(const std::string& dir, Backend& backend, int64_t context);

// `count` ids drawn uniformly from [0, vocab) by a generator seeded with `seed`: a prompt of random tokens.
std::vector<int32_t> random_ids(uint64_t seed, int64_t count, int64_t vocab);

// Runs generate(model, prompt, plain), then the same with ReplayDrafters of k = 1, 3 and 8 whose drafts are all
// right, every fourth wrong, or all wrong. Returns one line per disagreement (empty: all identical), naming the run
// and what differs: the tokens, the finish, the stop token, the position, the first state hash that differs, or the
// drafts' fate (none drafted, a right one dropped, a wrong one kept, a step that kept drafts but made one token).
std::vector<std::string> speculation_mismatches(const Qwen3NextModel& model, const GenerateOptions& plain,
                                                const std::vector<int32_t>& prompt);

}  // namespace plumb::test
