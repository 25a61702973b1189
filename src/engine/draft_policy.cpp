#include "engine/draft_policy.h"

#include <bit>

#include "core/error.h"

namespace plumb {

DraftPolicy::DraftPolicy(int64_t max_drafts) : max_drafts_(max_drafts) {
  PLUMB_CHECK(max_drafts >= 0, "a draft policy of {} drafts at most", max_drafts);
}

DraftPolicy::Bucket& DraftPolicy::bucket(int64_t decoding) {
  PLUMB_CHECK(decoding > 0, "a draft policy asked for {} decoding sequences", decoding);
  Bucket& b = buckets_[static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(decoding)))];
  if (b.by_drafts.empty()) b.by_drafts.resize(static_cast<size_t>(max_drafts_ + 1));
  return b;
}

int64_t DraftPolicy::choose(int64_t decoding) {
  Bucket& b = bucket(decoding);
  ++b.steps;
  for (int64_t k = max_drafts_; k >= 0; --k)
    if (b.by_drafts[static_cast<size_t>(k)].samples < kSamples) return k;
  int64_t best = max_drafts_;
  const auto rate_of = [&](int64_t k) {
    const Estimate& e = b.by_drafts[static_cast<size_t>(k)];
    return e.seconds > 0.0 ? e.tokens / e.seconds : 0.0;
  };
  for (int64_t k = max_drafts_ - 1; k >= 0; --k)
    if (rate_of(k) > rate_of(best)) best = k;
  if (max_drafts_ > 0 && b.steps % kRevisit == 0) {
    // Another count, in turn: its estimate follows the text as the best's does.
    b.revisited = (b.revisited + 1) % (max_drafts_ + 1);
    if (b.revisited == best) b.revisited = (b.revisited + 1) % (max_drafts_ + 1);
    return b.revisited;
  }
  return best;
}

void DraftPolicy::observe(int64_t decoding, int64_t drafts, int64_t tokens, double seconds) {
  PLUMB_CHECK(drafts >= 0 && drafts <= max_drafts_ && tokens >= 0 && seconds >= 0.0,
              "a draft policy told of a step of {} drafts (0..{}) that made {} tokens in {} s", drafts, max_drafts_,
              tokens, seconds);
  Bucket& b = bucket(decoding);
  Estimate& e = b.by_drafts[static_cast<size_t>(drafts)];
  const bool stale = e.samples == 0 || b.steps - e.last >= kRevisit;
  const double weight = stale ? 1.0 : kWeight;
  e.tokens += weight * (static_cast<double>(tokens) - e.tokens);
  e.seconds += weight * (seconds - e.seconds);
  ++e.samples;
  e.last = b.steps;
}

double DraftPolicy::rate(int64_t decoding, int64_t drafts) const {
  const auto it = buckets_.find(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(decoding))));
  if (it == buckets_.end() || drafts < 0 || drafts > max_drafts_) return 0.0;
  const Estimate& e = it->second.by_drafts[static_cast<size_t>(drafts)];
  return e.seconds > 0.0 ? e.tokens / e.seconds : 0.0;
}

}  // namespace plumb
