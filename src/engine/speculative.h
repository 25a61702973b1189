// Speculative decoding of one sequence: a drafter proposes the next k tokens, the main model runs the last chosen
// token and the k drafts in one forward call, and the sampler draws each of the k + 1 positions exactly as plain
// decoding would (same logits, history and step number). A draft is kept while it equals the token drawn at its
// position; the first that differs ends the step, and the drawn token takes its place. The output is therefore the
// plain decode's, bit for bit, greedy or sampled: speculation changes how many forward calls it takes, never a token.
//
// Bit-identity rests on the verify call's arithmetic being decode's: its tokens take the recurrent delta rule
// (GdnAlgorithm::kRecurrent), under which T tokens in one call equal T calls of one token, and every other op treats
// rows alone. The verify call also leaves the GDN states after each of its first k tokens in slots of the state pool
// (StateTrail); when j < k + 1 tokens are kept, the sequence's state becomes the one after its j-th by a swap of
// slots (Qwen3NextModel::rewind), and the positions past it are dropped by moving the sequence's position back.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "engine/runner.h"
#include "model/qwen3_next.h"

namespace plumb {

// One sequence's part of a drafting call. The main model has run positions [from, from + n) of `state` since the
// drafter last saw it: hidden [n, H] holds their final hidden states, and next_ids [n] the tokens at positions
// from + 1 .. from + n (the last one drawn from position from + n - 1's logits and not yet run). Drafts are proposed
// for positions from + n + 1 onwards.
struct DraftRequest {
  SequenceState* state = nullptr;
  int64_t from = 0;
  std::vector<int32_t> next_ids;
  Tensor hidden;
  int64_t count = 0;  // drafts wanted; 0: the drafter only sees the tokens run
};

// A drafter's proposal left in the backend's memory: ids [Σ counts] I32, request after request, counts[r] of them
// request r's (at most its count).
struct DeviceDrafts {
  Tensor ids;
  std::vector<int64_t> counts;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // For each request, at most its count tokens, in request order.
  virtual std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) = 0;
  // propose()'s drafts in `backend`'s memory, queued there by a drafter that runs on the device, so that a
  // verification can read them before they reach the host: a speculative step then waits for the device once
  // (ModelRunner). By default propose()'s, uploaded.
  virtual DeviceDrafts propose_on_device(const std::vector<DraftRequest>& batch, Backend& backend);
};

// Drafts with the model's multi-token-prediction head, greedily (the head's argmax, as Backend::sample_tokens draws at
// temperature 0, on the device), every request of a call in one batched head call a draft step. The steps follow one
// another on the device (a step's draws are the next one's tokens): propose_on_device waits for nothing, and
// propose() waits once, for the copy of every draft to the host.
// The head's own cache must hold every position before `from`: it does for a sequence that ran all its tokens through
// this drafter (SequenceState::draft_position). A sequence that did not, such as one continued from a plain run, gets
// no drafts and decodes one token a step.
//
// With a drafting vocabulary of `vocab` ids (above 0), drafts are the argmax over ids [0, vocab) alone, so each draft
// step reads only those rows of the lm_head (1 GB in BF16 on Qwen3.5's vocabulary of 248,320, most of a B = 1 draft
// step's bytes). A draft beyond them is never proposed, which can only lower how many drafts are kept: the tokens
// are verified as always, so they stay plain decoding's. Byte-level BPE vocabularies such as Qwen's number their
// tokens in merge order, so their first ids are roughly the most frequent.
// Checks a drafting vocabulary (MtpDrafter's `vocab`): 0 (all ids), or 1 to the model's vocabulary size.
void check_draft_vocab(const ModelConfig& config, int64_t draft_vocab);
// The same for a command's flags, before the model loads, and a vocabulary only where speculative_tokens drafts are
// made.
void check_draft_vocab(const ModelConfig& config, int64_t draft_vocab, int64_t speculative_tokens);

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(const Qwen3NextModel& model, int64_t vocab = 0);
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override;
  // `backend` must be the model's.
  DeviceDrafts propose_on_device(const std::vector<DraftRequest>& batch, Backend& backend) override;

 private:
  const Qwen3NextModel& model_;
  int64_t vocab_;  // the drafting vocabulary's ids; 0: all of the model's
};

}  // namespace plumb
