// How many drafts the engine gives each decoding sequence a step (speculative decoding), chosen from what steps of
// each count cost and made. Whether drafting pays depends on the batch (a verification reads the weights once for
// more tokens, which pays most where a step is bound by reading them) and on how often the drafts are right, which
// changes with the text. So per batch bucket (the power of two at or above the decoding sequences) the policy keeps,
// for every count from 0 to the most allowed, a running estimate of the tokens a second its steps made, and takes the
// best; every count is measured first, most drafts first, and one of the others is tried again every kRevisit steps
// of the bucket, its estimate then started afresh (what it said that long ago no longer holds). Only steps that decode
// and do nothing else are counted: a prefill chunk's time says nothing of drafting. Pure host code, driven by tests
// with made-up timings.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace plumb {

class DraftPolicy {
 public:
  static constexpr int64_t kSamples = 3;   // steps a count is measured before the policy judges it
  static constexpr int64_t kRevisit = 32;  // steps of a bucket between two tries of a count not the best
  static constexpr double kWeight = 0.25;  // a new step's weight in the running estimates

  explicit DraftPolicy(int64_t max_drafts);

  // The drafts for a step of `decoding` (> 0) decoding sequences.
  int64_t choose(int64_t decoding);
  // A step of `decoding` decoding sequences and nothing else, at `drafts` drafts a sequence, made `tokens` tokens in
  // `seconds`.
  void observe(int64_t decoding, int64_t drafts, int64_t tokens, double seconds);
  // The estimate of a count's tokens a second in the bucket of `decoding` sequences; 0 where it has no step yet.
  double rate(int64_t decoding, int64_t drafts) const;

 private:
  struct Estimate {
    double tokens = 0.0, seconds = 0.0;  // running means of a step's
    int64_t samples = 0;
    int64_t last = 0;  // the bucket's step count when it was last measured
  };
  struct Bucket {
    std::vector<Estimate> by_drafts;  // [max_drafts + 1]
    int64_t steps = 0;                // choices made for it
    int64_t revisited = 0;            // the last count tried again
  };
  Bucket& bucket(int64_t decoding);

  int64_t max_drafts_;
  std::map<int64_t, Bucket> buckets_;  // by bucket size
};

}  // namespace plumb
