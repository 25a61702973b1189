// plumb bench --speculative-tokens: decode steps that draft and verify (engine/speculative.h), timed as plumb serve
// runs them, at an acceptance length set by the benchmark rather than by the weights.
#pragma once

#include "cli/bench_common.h"

namespace plumb::cli::bench {

// B sequences through a drafting ModelRunner (the model's MTP head, greedy draws on the runner's device): each step
// drafts k tokens a sequence, verifies them with the sequence's token, and keeps a number of rows whose mean over the
// steps is `acceptance` (1 to k + 1; a random head's drafts are almost never right, so the benchmark decides, the way
// an engine with that acceptance would go on, rollbacks included). Adds a table row and ctx.out["speculative"].
void bench_speculative(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t B, int64_t k,
                       double acceptance);

}  // namespace plumb::cli::bench
