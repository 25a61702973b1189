#include "engine/speculative.h"

#include "core/error.h"
#include "engine/sampler.h"

namespace plumb {

MtpDrafter::MtpDrafter(const Qwen3NextModel& model) : model_(model) {
  PLUMB_CHECK(model.has_mtp(),
              "speculative decoding drafts with the model's multi-token-prediction head (mtp.*), which was not "
              "loaded");
}

std::vector<int32_t> MtpDrafter::propose(SequenceState& state, int64_t from, const std::vector<int32_t>& next_ids,
                                         const Tensor& hidden, int64_t count) {
  PLUMB_CHECK(from >= 0 && from + static_cast<int64_t>(next_ids.size()) == state.position &&
                  hidden.dim(0) == static_cast<int64_t>(next_ids.size()),
              "MtpDrafter: {} tokens and {} hidden states after position {} for a sequence at {}", next_ids.size(),
              hidden.dim(0), from, state.position);
  // The head's row at position p reads its cache at [0, p]: with a hole before `from` it would read what the pool
  // held there, so such a sequence is not drafted for.
  if (state.draft_position != from) return {};
  Backend& be = model_.backend();
  const int64_t vocab = model_.config().vocab_size;
  Tensor last_hidden;  // [1, H] the head's normed state at its last row: the next draft step's hidden state
  // The positions just run, each with the token after it: the head's cache catches up, and its last row drafts the
  // token after the one just drawn.
  Tensor logits = be.download(model_.draft({DraftInput{&state, from, next_ids}}, hidden, last_hidden));  // [1, V]
  state.draft_position = state.position;
  std::vector<int32_t> drafts;
  while (static_cast<int64_t>(drafts.size()) < count) {
    drafts.push_back(static_cast<int32_t>(first_max_index(logits.f32(), vocab)));
    if (static_cast<int64_t>(drafts.size()) == count) break;
    // The draft at position state.position + i - 1 (after i drafts) from the one before it and the head's state.
    const int64_t position = state.position + static_cast<int64_t>(drafts.size()) - 1;
    const Tensor previous = last_hidden;
    logits = be.download(model_.draft({DraftInput{&state, position, {drafts.back()}}}, previous, last_hidden));
  }
  return drafts;
}

}  // namespace plumb
