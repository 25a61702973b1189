#include "engine/speculative.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/error.h"

namespace plumb {

MtpDrafter::MtpDrafter(const Qwen3NextModel& model) : model_(model) {
  PLUMB_CHECK(model.has_mtp(),
              "speculative decoding drafts with the model's multi-token-prediction head (mtp.*), which was not "
              "loaded");
}

std::vector<std::vector<int32_t>> MtpDrafter::propose(const std::vector<DraftRequest>& batch) {
  Backend& be = model_.backend();
  const int64_t H = model_.config().hidden_size;
  std::vector<std::vector<int32_t>> drafts(batch.size());
  // The requests the head can serve: the head's row at position p reads its cache at [0, p], so one with a hole
  // before `from` would read what the pool held there; such a sequence is not drafted for.
  std::vector<size_t> served;
  std::vector<DraftInput> inputs;
  std::vector<Tensor> sources;  // [served] each one's hidden states
  int64_t rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const DraftRequest& r = batch[i];
    const auto n = static_cast<int64_t>(r.next_ids.size());
    PLUMB_CHECK(r.state && r.from >= 0 && n > 0 && r.hidden.rank() == 2 && r.hidden.dim(0) == n,
                "MtpDrafter: {} tokens and hidden states {} after position {}", n, shape_str(r.hidden.shape()), r.from);
    if (r.state->draft_position != r.from) continue;
    served.push_back(i);
    inputs.push_back({r.state, r.from, r.next_ids});
    sources.push_back(r.hidden);
    rows += n;
  }
  if (served.empty()) return drafts;
  // The positions just run, each with the token after it: the head's cache catches up, and each sequence's last row
  // drafts the token after the one just drawn.
  Tensor hidden = sources.front();  // [rows, H]
  if (sources.size() > 1) {
    hidden = be.empty(DType::kF32, {rows, H});
    std::vector<Tensor> parts;
    int64_t row = 0;
    for (const Tensor& s : sources) {
      parts.push_back(hidden.rows(row, row + s.dim(0)));
      row += s.dim(0);
    }
    be.copy_all(sources, parts);
  }
  // Each row's argmax, taken where the logits are (Backend::sample_tokens, greedy): only ids leave the device.
  auto argmax_ids = [&](const Tensor& logits) {  // logits [rows, V] -> rows ids on the host
    const int64_t n = logits.dim(0);
    Tensor ids = be.empty(DType::kI32, {n});
    be.sample_tokens(logits, std::vector<TokenDraw>(static_cast<size_t>(n)), ids);
    std::vector<int32_t> host(static_cast<size_t>(n));
    Tensor out(DType::kI32, {n}, Device::kCpu, host.data(), nullptr);
    be.copy(ids, out);
    return host;
  };
  std::vector<int64_t> next_position(served.size());  // where each one's next draft step runs
  for (size_t s = 0; s < served.size(); ++s) {
    const DraftRequest& r = batch[served[s]];
    r.state->draft_position = r.from + static_cast<int64_t>(r.next_ids.size());
    next_position[s] = r.state->draft_position;
  }
  // Where no request wants a draft (a prompt chunk's catch-up), only the head's cache is written.
  if (std::none_of(served.begin(), served.end(), [&](size_t i) { return batch[i].count > 0; })) {
    model_.draft(inputs, hidden, nullptr);
    return drafts;
  }
  Tensor last_hidden;  // [served, H] each one's normed last-row state
  std::vector<int32_t> best = argmax_ids(model_.draft(inputs, hidden, &last_hidden));  // [served]
  // Draft steps: each request still short of its count runs its last draft beside its head state of the step before.
  std::vector<size_t> live(served.size());  // [rows of logits and last_hidden]: indices into served
  std::iota(live.begin(), live.end(), size_t{0});
  for (;;) {
    std::vector<size_t> more;       // the served requests that draft again
    std::vector<Tensor> more_rows;  // their rows of last_hidden
    for (size_t m = 0; m < live.size(); ++m) {
      const size_t s = live[m];
      std::vector<int32_t>& d = drafts[served[s]];
      const int64_t count = batch[served[s]].count;
      if (static_cast<int64_t>(d.size()) >= count) continue;  // a count of 0 only caught up
      d.push_back(best[m]);
      if (static_cast<int64_t>(d.size()) == count) continue;
      more.push_back(s);
      more_rows.push_back(last_hidden.rows(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1));
    }
    if (more.empty()) break;
    Tensor previous = last_hidden;  // [more, H]
    if (more.size() != live.size()) {
      previous = be.empty(DType::kF32, {static_cast<int64_t>(more.size()), H});
      std::vector<Tensor> to_rows;
      for (size_t m = 0; m < more.size(); ++m)
        to_rows.push_back(previous.rows(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1));
      be.copy_all(more_rows, to_rows);
    }
    // The draft at position p + i - 1 (after i drafts, p the position of the token just drawn), from the one before
    // it and the head's state there.
    std::vector<DraftInput> step;
    for (const size_t s : more)
      step.push_back({batch[served[s]].state, next_position[s]++, {drafts[served[s]].back()}});
    best = argmax_ids(model_.draft(step, previous, &last_hidden));
    live = std::move(more);
  }
  return drafts;
}

}  // namespace plumb
