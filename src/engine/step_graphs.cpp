#include "engine/step_graphs.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace plumb {
namespace {

// The fewest page-table entries a recording gives a sequence: short sequences share one recording. Four pages (256
// positions) is one attention segment (kernels/attention.h on the GPU): a recording for sequences that short runs
// attention as one CTA a token, and longer ones get recordings with as many CTAs a token as their stride's segments.
constexpr int64_t kMinPageStride = 4;

}  // namespace

StepGraphs::StepGraphs(const Qwen3NextModel& model, StepGraphOptions options)
    : model_(model), options_(std::move(options)) {
  PLUMB_CHECK(std::is_sorted(options_.buckets.begin(), options_.buckets.end()) &&
                  (options_.buckets.empty() || options_.buckets.front() >= 1),
              "step graph buckets must be positive and ascending");
}

StepGraphs::Shape StepGraphs::shape_of(const std::vector<SequenceInput>& batch, bool verify, StepHidden hidden) const {
  if (!options_.enabled || !recordable_ || options_.buckets.empty() || model_.routing_trace_set()) return {};
  const auto bucket =
      std::lower_bound(options_.buckets.begin(), options_.buckets.end(), static_cast<int64_t>(batch.size()));
  if (batch.empty() || bucket == options_.buckets.end()) return {};
  // A verification records only at a bucket's own size: a sink would need a trail of its own, state slots (tens of
  // MB each on the real shapes) taken for rows whose results are dropped.
  if (verify && *bucket != static_cast<int64_t>(batch.size())) return {};
  // Every sequence brings the same number of tokens (one in a decode step), a verification's each with a trail that
  // already holds a slot for every state it keeps (a recording may not take one: taking one zeroes it), and the pool
  // holds every page the step adds without growing (a recording may not reallocate the pool it reads).
  const auto tokens = static_cast<int64_t>(batch.front().ids.size());
  if (verify ? tokens < 2 : tokens != 1) return {};
  int64_t most_pages = 1, new_pages = 0;
  for (const SequenceInput& in : batch) {
    if (static_cast<int64_t>(in.ids.size()) != tokens || !in.state || (in.trail != nullptr) != verify) return {};
    if (verify && static_cast<int64_t>(in.trail->slots.size()) < tokens - 1) return {};
    const int64_t pages = kv_pages_for(in.state->position + tokens);
    most_pages = std::max(most_pages, pages);
    new_pages += std::max<int64_t>(0, pages - static_cast<int64_t>(in.state->kv_pages.ids().size()));
  }
  if (new_pages > model_.kv_pool().free_pages()) return {};
  return {*bucket, tokens,
          std::max(kMinPageStride, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(most_pages)))), hidden};
}

int64_t StepGraphs::sinks_needed() const {
  if (!options_.enabled) return 0;
  int64_t most = 0, below = 0;
  for (int64_t bucket : options_.buckets) {
    most = std::max(most, bucket - (below + 1));
    below = bucket;
  }
  return most;
}

void StepGraphs::warm_up() {
  if (!options_.enabled || options_.buckets.empty()) return;
  while (sinks() < sinks_needed()) sinks_.push_back(model_.new_sequence(1));
  for (int64_t bucket : options_.buckets) {
    std::vector<SequenceState> rows;
    for (int64_t i = 0; i < bucket; ++i) rows.push_back(model_.new_sequence(1));
    std::vector<SequenceInput> batch;
    for (SequenceState& s : rows) batch.push_back({&s, {0}});
    // The eager first run, then the recording; back to position 0 between them, so one page holds each.
    for (int run = 0; run < 2 && recordable_; ++run) {
      forward(batch, std::vector<TokenDraw>(batch.size()));
      for (SequenceState& s : rows) s.position = 0;
    }
  }
}

StepOutput StepGraphs::forward(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws,
                               StepHidden hidden) {
  PLUMB_CHECK(draws.empty() || draws.size() == batch.size(), "a step of {} sequences got {} draws", batch.size(),
              draws.size());
  return run(batch, draws, false, hidden);
}

StepOutput StepGraphs::verify(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws,
                              const Tensor* ids) {
  size_t rows = 0;
  for (const SequenceInput& in : batch) {
    PLUMB_CHECK(in.trail, "a verification keeps every sequence's states in its trail");
    rows += in.ids.size();
  }
  PLUMB_CHECK(draws.empty() || draws.size() == rows, "a verification of {} tokens got {} draws", rows, draws.size());
  return run(batch, draws, true, StepHidden::kEveryToken, ids);
}

StepOutput StepGraphs::run(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws, bool verify,
                           StepHidden hidden, const Tensor* ids) {
  Backend& backend = model_.backend();
  const LogitsRows logits_rows = verify ? LogitsRows::kAll : LogitsRows::kLast;
  // A lone token's arithmetic is the same under both rules; a verification's tokens take a decode step's.
  const GdnAlgorithm rule = verify ? GdnAlgorithm::kRecurrent : GdnAlgorithm::kChunked;
  const bool keep_hidden = hidden == StepHidden::kEveryToken;
  Shape shape = shape_of(batch, verify, hidden);
  if (ids) shape.ids = ids->data();
  last_replayed_ = false;
  if (shape.bucket == 0) {
    StepOutput out;
    out.logits = model_.forward(batch, logits_rows, rule, keep_hidden ? &out.hidden : nullptr, ids);
    if (!draws.empty()) {
      out.ids = backend.empty(DType::kI32, {out.logits.dim(0)});
      backend.sample_tokens(out.logits, draws, out.ids);
    }
    return out;
  }

  // Allowed tokens would add a table to the step and change its layout from the recording's.
  PLUMB_CHECK(std::none_of(draws.begin(), draws.end(), [](const TokenDraw& d) { return d.allowed != nullptr; }),
              "a step of a graph's shape draws without allowed tokens: draw constrained rows after it");
  // Sinks (decode steps only): sequences of their own at position 0, one page each, taking token 0 in the rows past
  // the batch.
  const int64_t real = static_cast<int64_t>(batch.size()), sinks = shape.bucket - real, T = shape.tokens;
  PLUMB_CHECK(!ids || sinks == 0, "a step that reads its tokens from the device takes no sinks");
  while (static_cast<int64_t>(sinks_.size()) < sinks) sinks_.push_back(model_.new_sequence(1));
  std::vector<SequenceInput> rows = batch;
  for (int64_t i = 0; i < sinks; ++i) rows.push_back({&sinks_[static_cast<size_t>(i)], {0}});

  // A recording always draws, so one recording serves steps with and without draws: rows without one (and the
  // sinks) draw greedily, and a step given no draws drops the ids.
  const int64_t logits_per_sequence = verify ? T : 1;
  std::vector<TokenDraw> row_draws = draws;
  row_draws.resize(static_cast<size_t>(shape.bucket * logits_per_sequence));
  StepOutput out;  // [bucket] sequences' rows
  const auto step = [&] {
    out.logits = model_.forward(rows, logits_rows, rule, keep_hidden ? &out.hidden : nullptr, ids);
    out.ids = backend.empty(DType::kI32, {out.logits.dim(0)});
    backend.sample_tokens(out.logits, row_draws, out.ids);
  };
  auto& graph = graphs_[shape];
  if (graph) {
    backend.replay_step(*graph, step);
  } else if (warmed_.insert(shape).second) {
    // A shape's first step runs eagerly: its kernels' one-time set-up (shared-memory limits) happens outside the
    // recording.
    graphs_.erase(shape);
    step();
  } else {
    graph = backend.record_step(shape.stride, step);
    if (!graph) {
      graphs_.erase(shape);
      recordable_ = false;
    }
  }
  // The sinks go back to position 0, so their one page always holds them.
  for (int64_t i = 0; i < sinks; ++i) sinks_[static_cast<size_t>(i)].position = 0;
  const auto recorded = graphs_.find(shape);
  if (recorded != graphs_.end()) {
    last_kernels_ = recorded->second->kernels();
    last_replayed_ = true;
    verifications_replayed_ += verify ? 1 : 0;
  }
  const int64_t real_rows = real * logits_per_sequence;
  return StepOutput{out.logits.rows(0, real_rows), draws.empty() ? Tensor() : out.ids.rows(0, real_rows),
                    keep_hidden ? out.hidden.rows(0, real * T) : Tensor()};
}

}  // namespace plumb
