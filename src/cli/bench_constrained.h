// plumb bench --constrained: decode steps whose every row keeps to a grammar (structured output), timed as plumb serve
// runs them, beside the same runner's unconstrained steps.
#pragma once

#include "cli/bench_common.h"
#include "server/structured.h"

namespace plumb::cli::bench {

// Rounds of each kind of step, alternating, so that a drift of the machine's speed falls on both alike.
constexpr int kConstrainedRounds = 3;

// B sequences through a ModelRunner (graphs as plumb serve replays them), in alternating rounds of unconstrained steps
// and steps whose every row's draw keeps to `output` (the runner's draw with the allowed tokens: the masks made on the
// host while the device runs the step, then the draw). A row whose answer is done (the grammar finished, or a stop
// token) starts a new one. Needs a runner that draws (a GPU). Adds table rows and ctx.out["constrained"].
void bench_constrained(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t B,
                       server::StructuredOutputs& outputs, const server::StructuredOutput& output,
                       const std::vector<int32_t>& stop_ids);

}  // namespace plumb::cli::bench
