#include "support/served_speculation.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "support/engine_stream.h"
#include "support/speculation_check.h"

namespace plumb::test {

std::vector<std::vector<int32_t>> OracleDrafter::propose(const std::vector<DraftRequest>& batch) {
  std::vector<std::vector<int32_t>> out;
  for (const DraftRequest& r : batch) {
    // Positions 1 .. from + n of the sequence (position 0's token is never shown: no row runs before it).
    std::vector<int32_t>& seen = seen_[r.state];
    seen.resize(static_cast<size_t>(r.from));
    seen.insert(seen.end(), r.next_ids.begin(), r.next_ids.end());
    std::vector<int32_t>& drafts = out.emplace_back();
    const std::vector<int32_t>* match = nullptr;
    for (const std::vector<int32_t>& ref : references_)
      if (ref.size() > seen.size() && std::equal(seen.begin(), seen.end(), ref.begin() + 1)) match = &ref;
    if (!match) {
      unmatched_ += r.count > 0 ? 1 : 0;
      continue;
    }
    for (int64_t i = 0; i < r.count && seen.size() + 1 + static_cast<size_t>(i) < match->size(); ++i) {
      const int32_t right = (*match)[seen.size() + 1 + static_cast<size_t>(i)];
      const bool wrong = wrong_every_ > 0 && ++proposed_ % wrong_every_ == 0;
      drafts.push_back(wrong ? static_cast<int32_t>((right + 1) % vocab_) : right);
    }
  }
  return out;
}

namespace {

// Takes even ids only, and is done after `length` tokens.
class EvenIds final : public TokenConstraint {
 public:
  explicit EvenIds(size_t length) : length_(length) {}
  bool mask(float* logits, int64_t vocab) const override {
    for (int64_t id = 1; id < vocab; id += 2) logits[id] = -std::numeric_limits<float>::infinity();
    return true;
  }
  bool accept(int32_t id) override {
    ++taken_;
    return id % 2 == 0;
  }
  bool finished() const override { return taken_ == length_; }

 private:
  size_t length_, taken_ = 0;
};
constexpr size_t kConstrainedLength = 12;

std::vector<EngineRequest> mixed_requests(const Qwen3NextModel& model, int64_t prompt_length) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<EngineRequest> out;
  for (int i = 0; i < 5; ++i) {
    EngineRequest r;
    r.prompt = random_ids(40 + static_cast<uint64_t>(i), prompt_length + 29 * i, vocab);
    r.max_tokens = 19 + 3 * i;
    out.push_back(std::move(r));
  }
  out[1].sampling = {.temperature = 0.8f, .top_p = 0.9f, .seed = 7};  // drawn by the runner where it draws
  out[2].top_logprobs = 3;
  out[2].sampling = {.temperature = 0.7f, .presence_penalty = 0.5f, .seed = 9};
  out[3].constraint = std::make_shared<EvenIds>(kConstrainedLength);
  // A stop id: the fifth token request 4 draws alone, so it ends after four at most.
  GenerateOptions options;
  options.max_tokens = 5;
  out[4].stop_ids = {generate(model, out[4].prompt, options).tokens.back()};
  return out;
}

SchedulerConfig config_for(int64_t speculative_tokens) {
  return SchedulerConfig{.max_running = 5,
                         .max_waiting = 8,
                         .step_tokens = 5 * 9 + 64,
                         .prefill_chunk = 64,
                         .kv_pages = 64,
                         .kv_page_tokens = kKvPageSize,
                         .speculative_tokens = speculative_tokens};
}

// Every request at once through an engine over `runner`; each one's outcome, and the steps the engine took.
std::vector<StreamOutcome> serve(Runner& runner, int64_t speculative_tokens, const std::vector<EngineRequest>& requests,
                                 uint64_t& steps) {
  Engine engine(runner, config_for(speculative_tokens));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (EngineRequest r : requests) {
    if (r.constraint) r.constraint = std::make_shared<EvenIds>(kConstrainedLength);  // state: a fresh one a run
    streams.push_back(engine.submit(std::move(r)).stream);
  }
  std::vector<StreamOutcome> out;
  for (auto& stream : streams) out.push_back(stream ? drain(*stream) : StreamOutcome{});
  steps = engine.stats().steps;
  return out;
}

void compare(const std::vector<StreamOutcome>& got, const std::vector<StreamOutcome>& want, const std::string& run,
             std::vector<std::string>& out) {
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string where = fmt::format("{}, request {}: ", run, i);
    if (got[i].tokens != want[i].tokens)
      out.push_back(where + fmt::format("tokens {} where plain decoding made {}", fmt::join(got[i].tokens, " "),
                                        fmt::join(want[i].tokens, " ")));
    if (got[i].finish != want[i].finish)
      out.push_back(where + "it ended otherwise than plain decoding " + got[i].error);
    for (size_t t = 0; t < got[i].details.size() && t < want[i].details.size(); ++t) {
      const GeneratedToken &g = got[i].details[t], &w = want[i].details[t];
      bool same = g.logprob == w.logprob && g.top.size() == w.top.size();
      for (size_t a = 0; same && a < g.top.size(); ++a) same = g.top[a].id == w.top[a].id;
      if (!same) out.push_back(where + fmt::format("token {}'s logprobs differ", t));
    }
  }
}

}  // namespace

std::vector<std::string> served_speculation_mismatches(const Qwen3NextModel& model, int64_t prompt_length) {
  std::vector<std::string> out;
  const std::vector<EngineRequest> requests = mixed_requests(model, prompt_length);
  ModelRunner plain_runner(model, 5);
  uint64_t plain_steps = 0;
  const std::vector<StreamOutcome> want = serve(plain_runner, 0, requests, plain_steps);
  // The stop id may come up before the fifth token (a small model repeats itself), never after.
  if (want[3].finish != StopCause::kConstraintDone || want[4].finish != StopCause::kStopToken ||
      want[4].tokens.size() > 4)
    out.push_back(
        fmt::format("the plain run ended its constrained request with {} and its stopped one with {} after {} "
                    "tokens, not as the check expects",
                    want[3].finish ? static_cast<int>(*want[3].finish) : -1,
                    want[4].finish ? static_cast<int>(*want[4].finish) : -1, want[4].tokens.size()));
  std::vector<std::vector<int32_t>> references;
  for (size_t i = 0; i < requests.size(); ++i) {
    references.push_back(requests[i].prompt);
    references.back().insert(references.back().end(), want[i].tokens.begin(), want[i].tokens.end());
  }
  for (int64_t k : {1, 3, 8}) {
    for (int64_t wrong_every : {0, 3, 1}) {
      const std::string run = fmt::format("k {}, every {}th draft wrong", k, wrong_every);
      ModelRunner runner(model, 5);
      auto drafter = std::make_unique<OracleDrafter>(references, model.config().vocab_size, wrong_every);
      const OracleDrafter& oracle = *drafter;
      runner.enable_drafting(std::move(drafter));
      uint64_t steps = 0;
      const std::vector<StreamOutcome> got = serve(runner, k, requests, steps);
      compare(got, want, run, out);
      if (oracle.unmatched() > 0) out.push_back(run + ": the runner showed the drafter tokens no plain run made");
      SpeculationStats all;
      for (const StreamOutcome& o : got) {
        all.drafted += o.speculation.drafted;
        all.accepted += o.speculation.accepted;
        if (wrong_every == 0 && o.speculation.accepted != o.speculation.drafted)
          out.push_back(run +
                        fmt::format(": {} of {} right drafts kept", o.speculation.accepted, o.speculation.drafted));
      }
      if (all.drafted == 0) out.push_back(run + ": nothing was drafted");
      if (wrong_every == 1 && all.accepted != 0)
        out.push_back(run + fmt::format(": {} wrong drafts kept", all.accepted));
      if (wrong_every == 3 && all.accepted == 0) out.push_back(run + ": no right draft kept");
      if (wrong_every == 0 && k > 1 && steps >= plain_steps)
        out.push_back(run + fmt::format(": {} steps, as many as plain decoding's {}", steps, plain_steps));
      // A backend that records steps replays verifications of a shape seen before (StepGraphs::verify): the tokens
      // compared above then came from replayed graphs too.
      if (model.backend().device() != Device::kCpu && runner.verifications_replayed() == 0)
        out.push_back(run + ": no verification ran as a recorded graph");
    }
  }
  if (model.has_mtp()) {
    ModelRunner runner(model, 5);
    runner.enable_drafting(std::make_unique<MtpDrafter>(model));
    uint64_t steps = 0;
    const std::vector<StreamOutcome> got = serve(runner, 3, requests, steps);
    compare(got, want, "MTP head, k 3", out);
    int64_t drafted = 0;
    for (const StreamOutcome& o : got) drafted += o.speculation.drafted;
    if (drafted == 0) out.push_back("MTP head, k 3: nothing was drafted");
  }
  return out;
}

}  // namespace plumb::test
