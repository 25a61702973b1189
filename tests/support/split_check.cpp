#include "support/split_check.h"

#include <random>
#include <utility>

#include "model/state_hash.h"

namespace plumb::test {

Hashes hashes_of(const Qwen3NextModel& model, const Tensor& last_logits, int64_t row, const SequenceState& state) {
  Hashes out{{"logits", tensor_hash(model.backend(), last_logits.rows(row, row + 1))}};
  for (auto& h : state_hashes(model, state)) out.push_back(std::move(h));
  return out;
}

std::string first_difference(const Hashes& want, const Hashes& got) {
  if (want.size() != got.size()) return "a different number of hashes";
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) return want[i].first;
  return "";
}

std::vector<std::string> split_mismatches(const Qwen3NextModel& model, const SplitCheck& check) {
  const int64_t V = model.config().vocab_size;
  std::mt19937_64 rng(check.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> base(static_cast<size_t>(check.last_length));
  for (int32_t& id : base) id = token(rng);

  std::vector<std::string> mismatches;
  const auto compare = [&](int64_t n, const std::string& run, const Hashes& want, const Hashes& got) {
    const std::string diff = first_difference(want, got);
    if (!diff.empty()) mismatches.push_back("length " + std::to_string(n) + ", " + run + ": " + diff + " differs");
  };
  std::vector<std::vector<SequenceState>> bases(check.chunks.size());  // [chunk][whole calls made]
  for (auto& b : bases) b.push_back(model.new_sequence());
  for (int64_t n = check.first_length; n <= check.last_length; ++n) {
    const std::vector<int32_t> ids(base.begin(), base.begin() + n);
    SequenceState whole = model.new_sequence();
    const Hashes want = hashes_of(model, model.forward(whole, ids, LogitsRows::kLast), 0, whole);

    for (size_t c = 0; c < check.chunks.size(); ++c) {
      const int64_t chunk = check.chunks[c];
      if (chunk >= n) continue;
      // The calls before the last are those of every length up to the next multiple of chunk: their state is kept
      // (bases[c][j]: after j whole calls) and forked for each length's last call.
      const int64_t whole_calls = (n - 1) / chunk;
      while (static_cast<int64_t>(bases[c].size()) <= whole_calls) {
        const int64_t done = static_cast<int64_t>(bases[c].size()) - 1;
        SequenceState next = model.fork_sequence(bases[c].back());
        model.forward(next, std::vector<int32_t>(base.begin() + done * chunk, base.begin() + (done + 1) * chunk),
                      LogitsRows::kLast);
        bases[c].push_back(std::move(next));
      }
      SequenceState state = model.fork_sequence(bases[c][whole_calls]);
      const Tensor logits =
          model.forward(state, std::vector<int32_t>(ids.begin() + whole_calls * chunk, ids.end()), LogitsRows::kLast);
      compare(n, "calls of " + std::to_string(chunk), want, hashes_of(model, logits, 0, state));
    }

    if (check.companions > 0) {
      // The prompt in the middle of one call with companions of other lengths, some shorter and some longer.
      std::vector<SequenceState> states;
      for (int64_t j = 0; j <= check.companions; ++j) states.push_back(model.new_sequence());
      std::vector<SequenceInput> batch;
      const int64_t middle = check.companions / 2;
      for (int64_t j = 0; j <= check.companions; ++j) {
        if (j == middle) {
          batch.push_back({&states[j], ids});
          continue;
        }
        // One of a single token, the others up to 40 or 100 tokens: lengths on both sides of a window.
        const int64_t length = j == 0 ? 1 : 1 + (n * 13 + j * 71) % (j % 2 ? 40 : 100);
        std::vector<int32_t> other(static_cast<size_t>(length));
        for (int32_t& id : other) id = token(rng);
        batch.push_back({&states[j], std::move(other)});
      }
      const Tensor logits = model.forward(batch, LogitsRows::kLast);  // [companions + 1, V]
      compare(n, "among " + std::to_string(check.companions) + " others", want,
              hashes_of(model, logits, middle, states[middle]));
    }
  }
  return mismatches;
}

}  // namespace plumb::test
