// What the engine's step loop needs from a model: run many sequences' new tokens, each in its own state slot, and
// return what each one's last token yields: its logits, or a token the runner drew itself. ModelRunner
// (model_runner.h) serves it with Qwen3NextModel; tests serve it with scripted fakes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/constraint.h"
#include "ops/backend.h"

namespace plumb {

// How speculative decoding went: forward steps that verified drafts, drafts proposed, drafts kept.
struct SpeculationStats {
  int64_t steps = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
};
constexpr int64_t kMaxSpeculativeTokens = 8;  // draft tokens a step at most

struct RunnerEntry {
  int32_t slot = 0;             // the sequence's state slot
  int64_t start = 0;            // position of tokens[0]; 0 starts a fresh sequence in the slot
  std::vector<int32_t> tokens;  // the new tokens, at positions start, start + 1, ...
  bool logits = true;           // whether the last token's logits come back (RunnerOutput::logits)
  // Set: the runner draws the next token from the last token's logits itself (where they are, so they need not
  // travel) and returns it in RunnerOutput::drawn. Only where Runner::draws_tokens().
  std::optional<TokenDraw> draw = std::nullopt;
  // Speculative decoding (only where Runner::drafts_tokens(), for an entry of one token): the runner may propose up to
  // this many draft tokens for the positions after it and run them in the same call, each row with the arithmetic a
  // decode step of it alone would take. Each draft adds a row to the entry's results: its logits, and its draw (the
  // draw's step counting on by one a row). The next entry for the slot starts after the tokens the caller kept: the
  // entry's token and the drafts that agreed with the draws before them; the runner rolls the rest back.
  int64_t drafts = 0;
  // With `draw` and no drafts: the rule the draw keeps to (structured output). The runner asks it for the allowed
  // tokens once the step's forward pass is queued, so the host makes the mask while the device runs; where it allows
  // none the entry's draw is -1.
  const TokenConstraint* constraint = nullptr;
};

// An entry's rows are its last token's and then its drafts', 1 + drafts[entry].size() of them.
struct RunnerOutput {
  std::vector<std::vector<int32_t>> drafts;  // [entries]: the drafts each entry ran (empty unless it asked)
  std::vector<int32_t> drawn;                // [rows of every entry]: each row's draw, -1 for an entry without one
                                             // (or whose constraint allows no token)
  std::vector<float> logits;                 // [rows of the entries with logits, vocab] row-major, in entry order
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;  // most tokens (prompt + generated) one sequence may hold
  // Whether entries may carry a draw: the runner then draws as Backend::sample_tokens defines it.
  virtual bool draws_tokens() const { return false; }
  // Whether entries may ask for drafts (RunnerEntry::drafts).
  virtual bool drafts_tokens() const { return false; }
  // Runs every entry. On failure it throws plumb::Error and leaves every slot of the batch empty, so nothing
  // half-advanced can be continued: a later entry for such a slot must start at 0.
  virtual RunnerOutput forward(const std::vector<RunnerEntry>& batch) = 0;
  // The sequence in `slot` is gone: its state memory may be freed.
  virtual void release(int32_t slot) = 0;

  // Prefix caching (a runner without a cache keeps these defaults). Whether offer_prefix keeps anything.
  virtual bool keeps_prefixes() const { return false; }
  // A new sequence for `prompt` in `slot`: the
  // slot's state becomes the longest kept prefix of the prompt shorter than it, and its length is returned (the
  // sequence's first entry then starts there); 0 when none is kept (the first entry starts at 0 as usual).
  virtual int64_t start_from_cache(int32_t /*slot*/, std::span<const int32_t> /*prompt*/) { return 0; }
  // The sequence in `slot` has processed exactly the first `position` tokens of its `prompt` (a positive multiple of
  // 64): the runner may keep its state for later prompts that start with them.
  virtual void offer_prefix(int32_t /*slot*/, std::span<const int32_t> /*prompt*/, int64_t /*position*/) {}
};

}  // namespace plumb
