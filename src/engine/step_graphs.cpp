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

std::pair<int64_t, int64_t> StepGraphs::shape_of(const std::vector<SequenceInput>& batch) const {
  if (!options_.enabled || !recordable_ || options_.buckets.empty() || model_.routing_trace_set()) return {0, 0};
  const auto bucket =
      std::lower_bound(options_.buckets.begin(), options_.buckets.end(), static_cast<int64_t>(batch.size()));
  if (batch.empty() || bucket == options_.buckets.end()) return {0, 0};
  // Every sequence brings one token, and the pool holds every page the step adds without growing (a recording may
  // not reallocate the pool it reads).
  int64_t most_pages = 1, new_pages = 0;
  for (const SequenceInput& in : batch) {
    if (in.ids.size() != 1 || !in.state) return {0, 0};
    const int64_t pages = kv_pages_for(in.state->position + 1);
    most_pages = std::max(most_pages, pages);
    new_pages += std::max<int64_t>(0, pages - static_cast<int64_t>(in.state->kv_pages.ids().size()));
  }
  if (new_pages > model_.kv_pool().free_pages()) return {0, 0};
  return {*bucket, std::max(kMinPageStride, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(most_pages))))};
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

StepOutput StepGraphs::forward(const std::vector<SequenceInput>& batch, const std::vector<TokenDraw>& draws) {
  PLUMB_CHECK(draws.empty() || draws.size() == batch.size(), "a step of {} sequences got {} draws", batch.size(),
              draws.size());
  Backend& backend = model_.backend();
  const auto real = static_cast<int64_t>(batch.size());
  const auto [bucket, stride] = shape_of(batch);
  last_replayed_ = false;
  if (bucket == 0) {
    StepOutput out{model_.forward(batch, LogitsRows::kLast), {}};
    if (!draws.empty()) {
      out.ids = backend.empty(DType::kI32, {real});
      backend.sample_tokens(out.logits, draws, out.ids);
    }
    return out;
  }

  // Allowed tokens would add a table to the step and change its layout from the recording's.
  PLUMB_CHECK(std::none_of(draws.begin(), draws.end(), [](const TokenDraw& d) { return d.allowed != nullptr; }),
              "a step of a graph's shape draws without allowed tokens: draw constrained rows after it");
  // Sinks: sequences of their own at position 0, one page each, taking token 0 in the rows past the batch.
  while (static_cast<int64_t>(sinks_.size()) < bucket - real) sinks_.push_back(model_.new_sequence(1));
  std::vector<SequenceInput> rows = batch;
  for (int64_t i = real; i < bucket; ++i) rows.push_back({&sinks_[static_cast<size_t>(i - real)], {0}});

  // A recording always draws, so one recording serves steps with and without draws: rows without one (and the
  // sinks) draw greedily, and a step given no draws drops the ids.
  std::vector<TokenDraw> row_draws = draws;
  row_draws.resize(static_cast<size_t>(bucket));
  StepOutput out;  // [bucket] rows
  const auto step = [&] {
    out.logits = model_.forward(rows, LogitsRows::kLast);
    out.ids = backend.empty(DType::kI32, {bucket});
    backend.sample_tokens(out.logits, row_draws, out.ids);
  };
  auto& graph = graphs_[{bucket, stride}];
  if (graph) {
    backend.replay_step(*graph, step);
  } else if (warmed_.insert({bucket, stride}).second) {
    // A shape's first step runs eagerly: its kernels' one-time set-up (shared-memory limits) happens outside the
    // recording.
    graphs_.erase({bucket, stride});
    step();
  } else {
    graph = backend.record_step(stride, step);
    if (!graph) {
      graphs_.erase({bucket, stride});
      recordable_ = false;
    }
  }
  // The sinks go back to position 0, so their one page always holds them.
  for (int64_t i = real; i < bucket; ++i) sinks_[static_cast<size_t>(i - real)].position = 0;
  const auto recorded = graphs_.find({bucket, stride});
  if (recorded != graphs_.end()) {
    last_kernels_ = recorded->second->kernels();
    last_replayed_ = true;
  }
  return StepOutput{out.logits.rows(0, real), draws.empty() ? Tensor() : out.ids.rows(0, real)};
}

}  // namespace plumb
