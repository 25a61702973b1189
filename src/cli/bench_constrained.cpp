#include "cli/bench_constrained.h"

#include <algorithm>

#include "core/error.h"
#include "engine/model_runner.h"

namespace plumb::cli::bench {

void bench_constrained(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t B,
                       server::StructuredOutputs& outputs, const server::StructuredOutput& output,
                       const std::vector<int32_t>& stop_ids) {
  const BenchArgs& a = ctx.args;
  Backend& be = ctx.be;
  TokenStream tokens(ctx.config.vocab_size, a.seed + 2000 + static_cast<uint64_t>(B));
  const int64_t steps = 2 * kConstrainedRounds * (a.warmup + a.steps);
  const int64_t pages_each = (a.context + steps + 1 + kKvPageSize - 1) / kKvPageSize;
  model.kv_pool().reserve(model.kv_pool().used_pages() + B * (pages_each + 1));
  ModelRunner runner(model, static_cast<int32_t>(B), StepGraphOptions{!a.no_graphs, {B}});
  PLUMB_CHECK(runner.draws_tokens(), "--constrained: the runner on the {} draws no tokens", a.device);
  std::vector<std::shared_ptr<TokenConstraint>> constraints(static_cast<size_t>(B));  // [B] each row's answer
  for (auto& c : constraints) c = outputs.constraint(output, /*opens_reasoning=*/false);

  // Every sequence's prompt in one call; the draw of its last row is its first token.
  std::vector<RunnerEntry> batch;
  for (int64_t s = 0; s < B; ++s) batch.push_back({static_cast<int32_t>(s), 0, tokens.take(a.context), false, a.draw});
  std::vector<int32_t> next = runner.forward(batch).drawn;  // [B]
  std::vector<int64_t> position(static_cast<size_t>(B), a.context);
  int64_t answers = 0, answer_tokens = 0;
  // Runs `count` steps, constrained or not, adding each timed one's wall time to `samples`.
  const auto run = [&](bool constrained, int64_t count, std::vector<double>* samples) {
    for (int64_t step = 0; step < count; ++step) {
      batch.clear();
      for (size_t s = 0; s < next.size(); ++s) {
        RunnerEntry e{static_cast<int32_t>(s), position[s], {next[s]}, false, a.draw};
        e.draw->step = static_cast<uint64_t>(position[s]);
        if (constrained) e.constraint = constraints[s].get();
        batch.push_back(std::move(e));
      }
      be.synchronize();
      const auto start = Clock::now();
      const RunnerOutput out = runner.forward(batch);  // brings the drawn ids back: the step has ended
      if (samples) samples->push_back(seconds_since(start));
      for (size_t s = 0; s < next.size(); ++s) {
        const int32_t id = out.drawn[s];
        ++position[s];
        next[s] = id;
        if (!constrained) continue;
        PLUMB_CHECK(id >= 0 && constraints[s]->accept(id), "--constrained: row {} drew {}, which its grammar refuses",
                    s, id);
        ++answer_tokens;
        const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
        if (stop || constraints[s]->finished()) {
          constraints[s] = outputs.constraint(output, false);
          ++answers;
        }
      }
    }
  };
  std::vector<double> free_samples, constrained_samples;
  for (int r = 0; r < kConstrainedRounds; ++r) {
    run(false, a.warmup, nullptr);
    run(false, a.steps, &free_samples);
    run(true, a.warmup, nullptr);
    run(true, a.steps, &constrained_samples);
  }
  const double free_s = median(free_samples), constrained_s = median(constrained_samples);
  const double positions = static_cast<double>(a.context) + static_cast<double>(steps) / 2.0;
  const StepBytes bytes = decode_step_bytes(ctx.config, counts, be.kv_dtype(), B, positions);
  const double floor = bytes.total() / ctx.copy_bandwidth;
  const std::string shape = fmt::format("B={}, past {}", B, a.context);
  ctx.rows.push_back({"runner step", shape, human_time(free_s),
                      fmt::format("{:.1f} tok/s", static_cast<double>(B) / free_s), human_bytes(bytes.total()),
                      human_time(floor), percent(floor / free_s)});
  ctx.rows.push_back({"constrained step", shape, human_time(constrained_s),
                      fmt::format("{:.1f} tok/s, {:.3f}x the runner step's time",
                                  static_cast<double>(B) / constrained_s, constrained_s / free_s),
                      human_bytes(bytes.total()), human_time(floor), percent(floor / constrained_s)});
  ctx.out["constrained"].push_back({{"batch", B},
                                    {"past_tokens", a.context},
                                    {"runner_step_s_median", free_s},
                                    {"constrained_step_s_median", constrained_s},
                                    {"time_ratio", constrained_s / free_s},
                                    {"runner_tokens_per_s", static_cast<double>(B) / free_s},
                                    {"constrained_tokens_per_s", static_cast<double>(B) / constrained_s},
                                    {"answers_finished", answers},
                                    {"constrained_tokens", answer_tokens},
                                    {"floor_s", floor},
                                    {"runner_samples_s", free_samples},
                                    {"constrained_samples_s", constrained_samples}});
}

}  // namespace plumb::cli::bench
