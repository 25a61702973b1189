#include "support/prefix_check.h"

#include <algorithm>
#include <optional>
#include <random>
#include <span>

#include "engine/prefix_cache.h"
#include "support/split_check.h"

namespace plumb::test {
namespace {

// The last token's logits [V] of a forward of `ids`, then every layer's state.
Hashes hashes_after(const Qwen3NextModel& model, SequenceState& state, const std::vector<int32_t>& ids) {
  return hashes_of(model, model.forward(state, ids, LogitsRows::kLast), 0, state);
}

}  // namespace

std::vector<std::string> prefix_resume_mismatches(const Qwen3NextModel& model, int64_t first, int64_t last) {
  constexpr int64_t kLongest = 300, kKept = 256;
  std::vector<std::string> out;
  if (!(first >= 1 && first <= last && last <= kLongest)) {
    out.push_back("lengths " + std::to_string(first) + ".." + std::to_string(last) + " are not within 1..300");
    return out;
  }
  std::mt19937_64 rng(31);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config().vocab_size - 1));
  std::vector<int32_t> base(kLongest);
  for (int32_t& id : base) id = token(rng);

  const int64_t pages_before = model.kv_pool().used_pages();
  PrefixCache cache(model, {.snapshots = 100, .pages = 100});
  {
    // One sequence passes every boundary up to 256 and is kept at each.
    SequenceState state = model.new_sequence();
    for (int64_t end = PrefixCache::kBlock; end <= kKept; end += PrefixCache::kBlock) {
      model.forward(state, std::vector<int32_t>(base.begin() + end - PrefixCache::kBlock, base.begin() + end),
                    LogitsRows::kLast);
      cache.keep(std::span<const int32_t>(base).first(static_cast<size_t>(end)), state);
    }
  }
  const int64_t cached_pages = model.kv_pool().used_pages() - pages_before;
  if (cached_pages != kKept / PrefixCache::kBlock)
    out.push_back("the 4 entries hold " + std::to_string(cached_pages) + " pages, not the 4 of their common prefix");

  for (int64_t n = first; n <= last; ++n) {
    const std::vector<int32_t> prompt(base.begin(), base.begin() + n);
    SequenceState whole = model.new_sequence();
    const Hashes want = hashes_after(model, whole, prompt);

    std::optional<ResumedPrefix> resumed = cache.resume(prompt);
    const int64_t expected = std::min(kKept, (n - 1) / PrefixCache::kBlock * PrefixCache::kBlock);
    const int64_t at = resumed ? resumed->state.position : 0;
    const std::string what = "length " + std::to_string(n);
    if (at != expected) {
      out.push_back(what + " resumed at " + std::to_string(at) + ", not " + std::to_string(expected));
      continue;
    }
    if (!resumed) continue;
    const Hashes got = hashes_after(model, resumed->state, std::vector<int32_t>(prompt.begin() + at, prompt.end()));
    const std::string diff = first_difference(want, got);
    if (!diff.empty()) out.push_back(what + " resumed at " + std::to_string(at) + ": " + diff + " differs");
  }
  if (model.kv_pool().used_pages() - pages_before != cached_pages)
    out.push_back("the resumed sequences did not return their own pages");
  if (cache.stats().entries != kKept / PrefixCache::kBlock) out.push_back("an entry was lost");
  return out;
}

}  // namespace plumb::test
