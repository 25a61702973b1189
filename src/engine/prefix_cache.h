// Prefix caching for hybrid models: a sequence's state kept at 64-token boundaries of its prompt, so that a later
// request whose prompt starts with a kept prefix runs only the rest. A kept state is a Qwen3NextModel::share_sequence
// of the sequence: its own copy of every GDN layer's conv and recurrent state, and the sequence's full KV pages, shared
// rather than copied. A request that hits starts from a share of the kept state; by the chunk rule (a piece's
// arithmetic depends on its positions alone) its logits and states are bit-identical to the same request run from
// position 0.
//
// Only prompt tokens are kept: generated tokens run one at a time through the decode path, whose arithmetic is not a
// prompt chunk's, so a state kept inside an answer would give a later prompt that contains it other bits. The engine
// re-runs finished answers as prompts while idle, so that their states are kept too (engine.h).
//
// Entries are keyed by a hash of their whole prefix and checked token by token. When the limits (recurrent state
// slots, one per entry; KV pages, each counted once however many entries hold it) would be exceeded, entries go in
// two classes, the least recently used first within each: first the boundaries a prompt passed on its way that
// nothing has reused yet, then the rest (a prompt's last boundary, where a chat's next turn resumes, and every entry a
// request resumed from or a second sequence kept again, so a shared system prompt stays). Under plain LRU, sixteen
// chats of 6K-token prompts would each push ninety passing boundaries through the cache between two turns of one
// chat, and no turn would find the one entry it needs. Not thread-safe: the thread that runs the model's forward calls
// uses it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/qwen3_next.h"

namespace plumb {

// Where in the prompt it came from a kept prefix ends.
enum class KeptAt { kPromptEnd, kWithinPrompt };

// What a cache may hold: entries (a recurrent state slot each) and KV pages; and where a prompt's state is kept:
// at every multiple of `stride` tokens (a multiple of 64: a longer stride keeps fewer entries of a long prompt, each
// a later request resumes from being further back), and at the prompt's last 64-token boundary, where the prompt of
// a chat's next turn resumes.
struct PrefixCacheLimits {
  int64_t snapshots = 0;
  int64_t pages = 0;
  int64_t stride = kKvPageSize;
};

// The limits that fit `bytes` of device memory for `model` at `stride`: half of it for recurrent slots (one an
// entry), the rest for KV pages, {0, 0, stride} where not even one entry and stride / 64 + 1 pages fit. Half, since
// what an entry holds depends on the prompts: the entries of one chat share their pages along its turns, but two
// chats share none, and sixteen chats of 6K tokens on Qwen3.5-35B-A3B hold 1.05 GB of recurrent state at their ends
// against 1.9 GB of pages.
PrefixCacheLimits prefix_cache_limits(const Qwen3NextModel& model, double bytes, int64_t stride = kKvPageSize);

struct PrefixCacheStats {
  int64_t entries = 0;
  int64_t bytes = 0;       // recurrent state of every entry and the KV pages they hold, each page once
  int64_t lookups = 0;     // resume() calls
  int64_t hits = 0;        // lookups that found a prefix
  int64_t hit_tokens = 0;  // prompt tokens the hits did not run
  int64_t evictions = 0;
};

// A kept prefix's state, as a request that hits it starts from.
struct ResumedPrefix {
  SequenceState state;
  // [1, H] the main model's final hidden state at the prefix's last position, where the multi-token-prediction head's
  // cache held every position before it when the prefix was kept (state.draft_position is then one short of its
  // position): with it, speculative decoding drafts from the resumed request's first step. Undefined otherwise.
  Tensor draft_hidden;
};

class PrefixCache {
 public:
  // Prefixes end at multiples of this many tokens: the KV page size and the delta rule's chunk length.
  static constexpr int64_t kBlock = kKvPageSize;
  static_assert(kKvPageSize == kGdnChunkSize, "a kept prefix ends where both a KV page and a GDN chunk end");

  // Keeps at most `limits` (both positive) for `model`, which must outlive the cache.
  PrefixCache(const Qwen3NextModel& model, PrefixCacheLimits limits);

  // The longest kept prefix of `prompt` shorter than the prompt (a request still runs its last token for the
  // logits): a new sequence state at its end, sharing its KV pages; nullopt when none is kept.
  std::optional<ResumedPrefix> resume(std::span<const int32_t> prompt);
  // Whether a state after the first `position` tokens of a prompt of `prompt_size` tokens is one to keep (a positive
  // multiple of kBlock on the stride, or the prompt's last boundary).
  bool wants(int64_t position, int64_t prompt_size) const;
  // Keeps a share of `state`, which has processed exactly `tokens` (a positive multiple of kBlock), unless that
  // prefix is kept already; evicts the least recently used entries to stay within the limits, and keeps nothing
  // where this entry alone would exceed them. `draft_hidden` [1, H], when given, is the final hidden state of the
  // prefix's last position, whose state.draft_position must be one short of it (ResumedPrefix): a copy is kept.
  void keep(std::span<const int32_t> tokens, const SequenceState& state, KeptAt at = KeptAt::kPromptEnd,
            const Tensor& draft_hidden = Tensor());
  // Whether `tokens` is kept (it then counts as used).
  bool contains(std::span<const int32_t> tokens);

  PrefixCacheStats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;  // the prefix
    SequenceState state;          // at position tokens.size()
    Tensor draft_hidden;          // [1, H] or undefined (ResumedPrefix)
    uint64_t used = 0;            // the clock when last kept or resumed from
    bool reused = false;          // a prompt's end, resumed from, or kept again: evicted after those that are not
  };
  // The entry of exactly `tokens`, or nullptr.
  Entry* find(std::span<const int32_t> tokens, uint64_t hash);
  // The pages of `pages` the cache does not hold yet.
  int64_t new_pages(std::span<const int32_t> pages) const;
  void evict_least_recent();

  const Qwen3NextModel& model_;
  PrefixCacheLimits limits_;
  int64_t slot_bytes_, page_bytes_;
  std::unordered_map<uint64_t, Entry> entries_;        // by prefix_hash of their tokens
  std::unordered_map<int32_t, int32_t> page_holders_;  // KV page -> entries holding it
  uint64_t clock_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace plumb
