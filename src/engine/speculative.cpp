#include "engine/speculative.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/error.h"

namespace plumb {

void check_draft_vocab(const ModelConfig& config, int64_t draft_vocab) {
  PLUMB_CHECK(draft_vocab >= 0 && draft_vocab <= config.vocab_size,
              "--draft-vocab {}: the drafts' vocabulary must be 1 to the model's {} ids (0: all of them)", draft_vocab,
              config.vocab_size);
}

void check_draft_vocab(const ModelConfig& config, int64_t draft_vocab, int64_t speculative_tokens) {
  check_draft_vocab(config, draft_vocab);
  PLUMB_CHECK(draft_vocab == 0 || speculative_tokens > 0, "--draft-vocab needs --speculative-tokens K");
}

MtpDrafter::MtpDrafter(const Qwen3NextModel& model, int64_t vocab) : model_(model), vocab_(vocab) {
  PLUMB_CHECK(model.has_mtp(),
              "speculative decoding drafts with the model's multi-token-prediction head (mtp.*), which was not "
              "loaded");
  check_draft_vocab(model.config(), vocab);
}

DeviceDrafts Drafter::propose_on_device(const std::vector<DraftRequest>& batch, Backend& backend) {
  DeviceDrafts out;
  std::vector<int32_t> all;
  for (const std::vector<int32_t>& d : propose(batch)) {
    out.counts.push_back(static_cast<int64_t>(d.size()));
    all.insert(all.end(), d.begin(), d.end());
  }
  Tensor host = Tensor::zeros(DType::kI32, {static_cast<int64_t>(all.size())});  // its own memory: upload may share it
  std::copy(all.begin(), all.end(), host.data_as<int32_t>());
  out.ids = backend.upload(host);
  return out;
}

std::vector<std::vector<int32_t>> MtpDrafter::propose(const std::vector<DraftRequest>& batch) {
  Backend& be = model_.backend();
  const DeviceDrafts proposed = propose_on_device(batch, be);
  std::vector<int32_t> all(static_cast<size_t>(proposed.ids.dim(0)));  // [Σ counts]
  Tensor host(DType::kI32, {proposed.ids.dim(0)}, Device::kCpu, all.data(), nullptr);
  if (!all.empty()) be.copy(proposed.ids, host);
  std::vector<std::vector<int32_t>> drafts(batch.size());
  auto next = all.begin();
  for (size_t r = 0; r < batch.size(); ++r) {
    drafts[r].assign(next, next + proposed.counts[r]);
    next += proposed.counts[r];
  }
  return drafts;
}

DeviceDrafts MtpDrafter::propose_on_device(const std::vector<DraftRequest>& batch, Backend& be) {
  PLUMB_CHECK(&be == &model_.backend(), "MtpDrafter: drafts go to the model's own backend");
  const int64_t H = model_.config().hidden_size;
  DeviceDrafts out;
  out.counts.assign(batch.size(), 0);
  out.ids = be.empty(DType::kI32, {0});  // until there are drafts
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
  if (served.empty()) return out;
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
  std::vector<int64_t> next_position(served.size());  // where each one's next draft step runs
  std::vector<int64_t> wanted(served.size());         // drafts each one wants
  for (size_t s = 0; s < served.size(); ++s) {
    const DraftRequest& r = batch[served[s]];
    r.state->draft_position = r.from + static_cast<int64_t>(r.next_ids.size());
    next_position[s] = r.state->draft_position;
    wanted[s] = r.count;
  }
  // Where no request wants a draft (a prompt chunk's catch-up), only the head's cache is written.
  if (std::all_of(wanted.begin(), wanted.end(), [](int64_t w) { return w == 0; })) {
    model_.draft(inputs, hidden, nullptr);
    return out;
  }
  // Each row's argmax, drawn where the logits are (Backend::sample_tokens, greedy), into the backend's memory.
  auto argmax = [&](const Tensor& logits) {  // logits [n, V] -> ids [n] I32
    Tensor ids = be.empty(DType::kI32, {logits.dim(0)});
    be.sample_tokens(logits, std::vector<TokenDraw>(static_cast<size_t>(logits.dim(0))), ids);
    return ids;
  };
  // The draft steps chain on the device: a step's draws are the next step's tokens, so no step waits for the host.
  // Which request drafts at which step is known from the counts alone: step i runs the requests that want more than
  // i drafts.
  Tensor last_hidden;  // [live, H] each live one's normed last-row state
  Tensor best =
      argmax(model_.draft(inputs, hidden, &last_hidden, nullptr, vocab_));  // [live] each live one's next draft
  std::vector<size_t> live(served.size());  // [rows of best and last_hidden]: into served
  std::iota(live.begin(), live.end(), size_t{0});
  std::vector<Tensor> step_drafts;             // [steps] each step's `best`
  std::vector<std::vector<size_t>> step_rows;  // [steps] whose draft each row of it is
  for (int64_t step = 1;; ++step) {
    step_drafts.push_back(best);
    step_rows.push_back(live);
    std::vector<size_t> more;  // indices into live of the requests that draft again
    for (size_t m = 0; m < live.size(); ++m)
      if (wanted[live[m]] > step) more.push_back(m);
    if (more.empty()) break;
    Tensor ids = best, previous = last_hidden;  // [more] and [more, H]
    if (more.size() != live.size()) {
      const auto n = static_cast<int64_t>(more.size());
      ids = be.empty(DType::kI32, {n});
      previous = be.empty(DType::kF32, {n, H});
      std::vector<Tensor> from, to;
      for (size_t j = 0; j < more.size(); ++j) {
        const auto m = static_cast<int64_t>(more[j]), row = static_cast<int64_t>(j);
        from.push_back(best.rows(m, m + 1));
        to.push_back(ids.rows(row, row + 1));
        from.push_back(last_hidden.rows(m, m + 1));
        to.push_back(previous.rows(row, row + 1));
      }
      be.copy_all(from, to);
    }
    // The draft at position p + i - 1 (after i drafts, p the position of the token just drawn), from the one before
    // it (ids, on the device) and the head's state there.
    std::vector<DraftInput> next;
    std::vector<size_t> next_live;
    for (const size_t m : more) {
      const size_t s = live[m];
      next.push_back({batch[served[s]].state, next_position[s]++, {0}});
      next_live.push_back(s);
    }
    best = argmax(model_.draft(next, previous, &last_hidden, &ids, vocab_));
    live = std::move(next_live);
  }
  // Every request's drafts together, request after request: step i's row m is draft i of served request
  // step_rows[i][m].
  std::vector<std::vector<Tensor>> by_request(served.size());  // [served][drafts] one-id views
  for (size_t step = 0; step < step_rows.size(); ++step)
    for (size_t m = 0; m < step_rows[step].size(); ++m) {
      const size_t s = step_rows[step][m];
      if (static_cast<int64_t>(step) < wanted[s])
        by_request[s].push_back(step_drafts[step].rows(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1));
    }
  int64_t total = 0;
  for (size_t s = 0; s < served.size(); ++s) {
    out.counts[served[s]] = static_cast<int64_t>(by_request[s].size());
    total += out.counts[served[s]];
  }
  out.ids = be.empty(DType::kI32, {total});  // [total]
  std::vector<Tensor> from, to;
  int64_t at = 0;
  for (size_t r = 0, s = 0; r < batch.size(); ++r) {
    if (s == served.size() || served[s] != r) continue;
    for (const Tensor& id : by_request[s]) {
      from.push_back(id);
      to.push_back(out.ids.rows(at, at + 1));
      ++at;
    }
    ++s;
  }
  be.copy_all(from, to);
  return out;
}

}  // namespace plumb
