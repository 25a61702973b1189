#include "support/speculation_check.h"

#include <fmt/format.h>

#include <random>

#include "model/state_hash.h"
#include "support/synthetic_model.h"

namespace plumb::test {

std::vector<std::vector<int32_t>> ReplayDrafter::propose(const std::vector<DraftRequest>& batch) {
  std::vector<std::vector<int32_t>> out;
  for (const DraftRequest& r : batch) {
    const auto n = static_cast<int64_t>(r.next_ids.size());
    if (r.from + n != r.state->position || r.hidden.dim(0) != n)
      problems_.push_back(fmt::format("handed {} tokens and {} hidden states after position {} at position {}", n,
                                      r.hidden.dim(0), r.from, r.state->position));
    for (size_t i = 0; i < r.next_ids.size(); ++i) {
      const size_t position = static_cast<size_t>(r.from) + 1 + i;
      if (position < reference_.size() && r.next_ids[i] != reference_[position])
        problems_.push_back(fmt::format("handed token {} for position {}, where the plain run has {}", r.next_ids[i],
                                        position, reference_[position]));
    }
    std::vector<int32_t>& drafts = out.emplace_back();
    for (int64_t i = 0; i < r.count; ++i) {
      const size_t position = static_cast<size_t>(r.from + n) + 1 + static_cast<size_t>(i);
      if (position >= reference_.size()) break;
      const bool wrong = wrong_every_ > 0 && ++proposed_ % wrong_every_ == 0;
      drafts.push_back(wrong ? static_cast<int32_t>((reference_[position] + 1) % vocab_) : reference_[position]);
    }
  }
  return out;
}

Qwen3NextModel open_mtp_model(const std::string& dir, Backend& backend, int64_t context) {
  const nlohmann::json config = small_config_with_mtp(context);
  write_model_folder(dir, config, synthetic_tensors(config, 21));
  LoadOptions options;
  options.mtp = true;
  return open_model(dir, backend, options);
}

std::vector<int32_t> random_ids(uint64_t seed, int64_t count, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

std::vector<std::string> speculation_mismatches(const Qwen3NextModel& model, const GenerateOptions& plain,
                                                const std::vector<int32_t>& prompt) {
  const GenerateResult want = generate(model, prompt, plain);
  const auto want_hashes = state_hashes(model, want.state);
  std::vector<int32_t> reference = prompt;
  reference.insert(reference.end(), want.tokens.begin(), want.tokens.end());
  if (want.stop_token) reference.push_back(*want.stop_token);
  std::vector<std::string> out;
  for (int64_t k : {1, 3, 8}) {
    for (int64_t wrong_every : {0, 4, 1}) {
      GenerateOptions options = plain;
      options.speculative_tokens = k;
      ReplayDrafter drafter(reference, model.config().vocab_size, wrong_every);
      const GenerateResult got = generate_with_drafter(model, std::nullopt, prompt, options, drafter);
      const std::string run = fmt::format("k {}, every {}th draft wrong: ", k, wrong_every);
      for (const std::string& p : drafter.problems()) out.push_back(run + "the drafter was " + p);
      if (got.tokens != want.tokens)
        out.push_back(run + fmt::format("tokens {} where plain decoding made {}", fmt::join(got.tokens, " "),
                                        fmt::join(want.tokens, " ")));
      if (got.finish != want.finish || got.stop_token != want.stop_token)
        out.push_back(run + "it ended otherwise than plain decoding (finish or stop token)");
      if (got.state.position != want.state.position)
        out.push_back(
            run + fmt::format("the state is at {}, plain decoding's at {}", got.state.position, want.state.position));
      const auto hashes = state_hashes(model, got.state);
      for (size_t i = 0; i < hashes.size() && i < want_hashes.size(); ++i) {
        if (hashes[i] == want_hashes[i]) continue;
        out.push_back(run + "the final state differs first at " + want_hashes[i].first);
        break;
      }
      const SpeculationStats& s = got.speculation;
      if (s.drafted == 0) out.push_back(run + "nothing was drafted");
      // Right drafts are all kept, wrong ones never (the first three proposals are right, the fourth wrong).
      if (wrong_every == 0 && s.accepted != s.drafted)
        out.push_back(run + fmt::format("{} of {} right drafts kept", s.accepted, s.drafted));
      if (wrong_every == 1 && s.accepted != 0) out.push_back(run + fmt::format("{} wrong drafts kept", s.accepted));
      if (wrong_every == 4 && (s.accepted == 0 || (s.drafted >= 4 && s.accepted == s.drafted)))
        out.push_back(run + fmt::format("{} of {} drafts kept, a fourth of them wrong", s.accepted, s.drafted));
      // Steps that kept drafts made more than one token each.
      if (wrong_every == 0 && k > 1 && s.steps >= static_cast<int64_t>(want.tokens.size()) - 1 && s.steps > 1)
        out.push_back(run +
                      fmt::format("{} verifying steps for {} tokens, all drafts right", s.steps, want.tokens.size()));
    }
  }
  return out;
}

}  // namespace plumb::test
