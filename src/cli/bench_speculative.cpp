#include "cli/bench_speculative.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"

namespace plumb::cli::bench {
namespace {

// Proposes ids from a stream and runs nothing on the device: a step with it is its verification alone, so that the
// head's part of a drafting step is the difference.
class GivenDrafter final : public Drafter {
 public:
  explicit GivenDrafter(TokenStream tokens) : tokens_(tokens) {}
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override {
    std::vector<std::vector<int32_t>> drafts;
    for (const DraftRequest& r : batch) drafts.push_back(tokens_.take(r.count));
    return drafts;
  }

 private:
  TokenStream tokens_;
};

// What the timed steps of one drafting runner did.
struct Steps {
  std::vector<double> samples;  // each timed step's seconds
  int64_t drafted = 0, kept = 0, verify_steps = 0, verifications_replayed = 0;
};

// B sequences of a.context prompt tokens through a runner drafting with `drafter`, then a.warmup + a.steps decode
// steps of k drafts a sequence, each keeping a number of rows whose running mean is `acceptance`.
Steps drafting_steps(Context& ctx, const Qwen3NextModel& model, int64_t B, int64_t k, double acceptance,
                     std::unique_ptr<Drafter> drafter) {
  const BenchArgs& a = ctx.args;
  Backend& be = ctx.be;
  TokenStream tokens(ctx.config.vocab_size, a.seed + static_cast<uint64_t>(B));
  const int64_t steps = a.warmup + a.steps;
  // Verifications replay a graph recorded for (B, k + 1 tokens a sequence) unless --no-graphs; the head's draft
  // steps run eagerly.
  ModelRunner runner(model, static_cast<int32_t>(B), StepGraphOptions{!a.no_graphs, {B}});
  runner.enable_drafting(std::move(drafter));
  // Every sequence's prompt in one call; the draw of its last row is its first token.
  const bool draws = runner.draws_tokens();
  std::vector<RunnerEntry> batch;
  for (int64_t s = 0; s < B; ++s) {
    batch.push_back({static_cast<int32_t>(s), 0, tokens.take(a.context), !draws, std::nullopt, 0});
    if (draws) batch.back().draw = TokenDraw{};
  }
  std::vector<int64_t> position(static_cast<size_t>(B), a.context);  // where each sequence's next token goes
  std::vector<int32_t> next(static_cast<size_t>(B));
  // The token after each sequence's kept rows: the runner's draw where it draws, else any id (the host's draw is
  // not what is timed here). rows_before[s]: sequence s's first row in the output.
  auto take_next = [&](const RunnerOutput& out, const std::vector<int64_t>& rows_before,
                       const std::vector<int64_t>& kept) {
    for (size_t s = 0; s < next.size(); ++s)
      next[s] = draws ? out.drawn[static_cast<size_t>(rows_before[s] + kept[s] - 1)] : tokens.next();
  };
  {
    std::vector<int64_t> rows_before(static_cast<size_t>(B)), one(static_cast<size_t>(B), 1);
    for (int64_t s = 0; s < B; ++s) rows_before[static_cast<size_t>(s)] = s;
    take_next(runner.forward(batch), rows_before, one);
  }
  // Rows kept a step: floor(acceptance) or one more, spread so that their running mean stays at `acceptance`.
  double owed = 0.0;
  Steps timed;
  for (int64_t step = 0; step < steps; ++step) {
    batch.clear();
    for (int64_t s = 0; s < B; ++s) {
      RunnerEntry e{static_cast<int32_t>(s), position[s], {next[s]}, !draws, std::nullopt, k};
      if (draws) e.draw = TokenDraw{.step = static_cast<uint64_t>(position[s])};
      batch.push_back(std::move(e));
    }
    be.synchronize();
    const auto start = Clock::now();
    const RunnerOutput out = runner.forward(batch);
    be.synchronize();
    if (step >= a.warmup) timed.samples.push_back(seconds_since(start));
    std::vector<int64_t> rows_before(static_cast<size_t>(B)), kept(static_cast<size_t>(B));
    int64_t row = 0;
    owed += acceptance;
    const auto this_step = static_cast<int64_t>(std::floor(owed));
    owed -= static_cast<double>(this_step);
    for (int64_t s = 0; s < B; ++s) {
      const auto ran = 1 + static_cast<int64_t>(out.drafts[static_cast<size_t>(s)].size());
      rows_before[s] = row;
      row += ran;
      kept[s] = std::min(this_step, ran);
      position[s] += kept[s];
      if (step >= a.warmup) {
        timed.drafted += ran - 1;
        timed.kept += kept[s];
        timed.verify_steps += ran > 1 ? 1 : 0;
      }
    }
    take_next(out, rows_before, kept);
  }
  timed.verifications_replayed = runner.verifications_replayed();
  return timed;
}

}  // namespace

void bench_speculative(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t B, int64_t k,
                       double acceptance) {
  const BenchArgs& a = ctx.args;
  Backend& be = ctx.be;
  PLUMB_CHECK(acceptance >= 1.0 && acceptance <= static_cast<double>(k + 1),
              "--acceptance-length {} is not in [1, {}] for {} speculative tokens", acceptance, k + 1, k);
  const int64_t steps = a.warmup + a.steps;
  const int64_t capacity = a.context + (steps + 1) * (k + 1);
  model.kv_pool().reserve(model.kv_pool().used_pages() + B * ((capacity + kKvPageSize - 1) / kKvPageSize + 1));
  // A slot a sequence and k more for its trail (the states its verification keeps); one runner at a time holds them.
  model.recurrent_pool().reserve(model.recurrent_pool().used_slots() + (1 + k) * B);
  const Steps drafting = drafting_steps(ctx, model, B, k, acceptance, std::make_unique<MtpDrafter>(model));
  // The same steps with drafts given: the verification alone (and the rollback), the head's part being the rest.
  const Steps given = drafting_steps(ctx, model, B, k, acceptance,
                                     std::make_unique<GivenDrafter>(TokenStream(ctx.config.vocab_size, a.seed + 7)));
  const double s = median(drafting.samples), verify = median(given.samples);
  const double tokens_per_step = static_cast<double>(drafting.kept) / static_cast<double>(a.steps * B);
  const double tok_per_s = static_cast<double>(B) * tokens_per_step / s;
  // The plain decode of the same batch in this run, if it was timed (steps with a synchronization after each).
  std::optional<double> plain;
  for (const json& d : ctx.out["decode"])
    if (d["batch"] == B) plain = d["tokens_per_s"].get<double>();
  // Against the floor of plain decoding: the bytes a plain step of B rows moves, per tokens_per_step tokens a row.
  const double positions = static_cast<double>(a.context) + static_cast<double>(steps) * tokens_per_step / 2.0;
  const StepBytes bytes = decode_step_bytes(ctx.config, counts, be.kv_dtype(), B, positions);
  const double floor = bytes.total() / ctx.copy_bandwidth;
  const double per_plain_step = s / tokens_per_step;  // the time B tokens take
  const std::string what = fmt::format("B={}, k={}, accept {:.2f}", B, k, acceptance);
  ctx.rows.push_back({"speculative step", what, human_time(s),
                      fmt::format("{:.1f} tok/s{}", tok_per_s,
                                  plain ? fmt::format(", {:.2f}x plain decode", tok_per_s / *plain) : std::string()),
                      human_bytes(bytes.total()), human_time(floor), percent(floor / per_plain_step)});
  ctx.rows.push_back({"  verification", what, human_time(verify),
                      fmt::format("drafts given; the head's part: {}", human_time(s - verify)), "", "", ""});
  // The same steps drafting among the first ids alone, at the same acceptance (set by the bench, not measured).
  json vocab = nullptr;
  if (a.draft_vocab > 0) {
    const Steps among =
        drafting_steps(ctx, model, B, k, acceptance, std::make_unique<MtpDrafter>(model, a.draft_vocab));
    const double v = median(among.samples), v_tok_per_s = static_cast<double>(B) * tokens_per_step / v;
    ctx.rows.push_back({fmt::format("  drafts < {}", a.draft_vocab), what, human_time(v),
                        fmt::format("{:.1f} tok/s{}; the head's part: {}", v_tok_per_s,
                                    plain ? fmt::format(", {:.2f}x plain decode", v_tok_per_s / *plain) : std::string(),
                                    human_time(v - verify)),
                        "", human_time(floor), percent(floor / (v / tokens_per_step))});
    vocab = {{"ids", a.draft_vocab},
             {"step_s_median", v},
             {"tokens_per_s", v_tok_per_s},
             {"drafting_s", v - verify},
             {"drafted", among.drafted},
             {"samples_s", among.samples},
             {"speedup", plain ? json(v_tok_per_s / *plain) : json(nullptr)}};
  }
  ctx.out["speculative"].push_back({{"batch", B},
                                    {"speculative_tokens", k},
                                    {"acceptance_length", acceptance},
                                    {"tokens_per_step", tokens_per_step},
                                    {"step_s_median", s},
                                    {"tokens_per_s", tok_per_s},
                                    {"plain_tokens_per_s", plain ? json(*plain) : json(nullptr)},
                                    {"speedup", plain ? json(tok_per_s / *plain) : json(nullptr)},
                                    {"drafted", drafting.drafted},
                                    {"verify_steps", drafting.verify_steps},
                                    {"verifications_replayed", drafting.verifications_replayed},
                                    {"verification_s_median", verify},
                                    {"drafting_s", s - verify},
                                    {"verification_samples_s", given.samples},
                                    {"plain_floor_s", floor},
                                    {"fraction_of_floor", floor / per_plain_step},
                                    {"samples_s", drafting.samples},
                                    {"draft_vocab", vocab}});
}

}  // namespace plumb::cli::bench
