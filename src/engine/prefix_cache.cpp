#include "engine/prefix_cache.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/hash.h"

namespace plumb {

namespace {

// The hash of tokens [0, 64·b) for b = 0 .. n / 64: out[b] (a hash of the bytes, so continuing it block by block
// gives the hash of the whole prefix).
std::vector<uint64_t> block_hashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> out{kFnv1aOffset};
  for (size_t end = PrefixCache::kBlock; end <= tokens.size(); end += PrefixCache::kBlock)
    out.push_back(
        fnv1a64(tokens.data() + end - PrefixCache::kBlock, PrefixCache::kBlock * sizeof(int32_t), out.back()));
  return out;
}

}  // namespace

PrefixCacheLimits prefix_cache_limits(const Qwen3NextModel& model, double bytes, int64_t stride) {
  PLUMB_CHECK(stride > 0 && stride % PrefixCache::kBlock == 0,
              "prefix cache: a stride of {} tokens (a positive multiple of {} is needed)", stride, PrefixCache::kBlock);
  const double slot = std::max(1.0, static_cast<double>(model.recurrent_pool().slot_bytes()));
  const double page = std::max(1.0, static_cast<double>(model.kv_pool().page_bytes()));
  const double pages_per_entry = static_cast<double>(stride / PrefixCache::kBlock + 1);
  bytes = std::max(0.0, bytes);
  // Half the bytes for recurrent slots and the rest for pages, but room for one entry and its pages at least.
  const double entries =
      std::min(std::max(1.0, std::floor(bytes / 2.0 / slot)), std::floor((bytes - pages_per_entry * page) / slot));
  if (entries < 1.0) return {0, 0, stride};
  const double pages = std::floor((bytes - entries * slot) / page);
  return {static_cast<int64_t>(std::min(entries, 1e9)), static_cast<int64_t>(std::min(pages, 2e9)), stride};
}

PrefixCache::PrefixCache(const Qwen3NextModel& model, PrefixCacheLimits limits)
    : model_(model),
      limits_(limits),
      slot_bytes_(model.recurrent_pool().slot_bytes()),
      page_bytes_(model.kv_pool().page_bytes()) {
  PLUMB_CHECK(limits.snapshots > 0 && limits.pages > 0 && limits.stride > 0 && limits.stride % kBlock == 0,
              "prefix cache: limits of {} entries and {} KV pages at a stride of {} tokens", limits.snapshots,
              limits.pages, limits.stride);
}

bool PrefixCache::wants(int64_t position, int64_t prompt_size) const {
  if (position <= 0 || position % kBlock != 0 || position > prompt_size) return false;
  return position % limits_.stride == 0 || position == prompt_size / kBlock * kBlock;
}

PrefixCache::Entry* PrefixCache::find(std::span<const int32_t> tokens, uint64_t hash) {
  const auto it = entries_.find(hash);
  if (it == entries_.end() ||
      !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(), it->second.tokens.end()))
    return nullptr;
  return &it->second;
}

std::optional<ResumedPrefix> PrefixCache::resume(std::span<const int32_t> prompt) {
  ++stats_.lookups;
  if (prompt.empty()) return std::nullopt;
  const std::vector<uint64_t> hashes = block_hashes(prompt.first(prompt.size() - 1));
  for (size_t b = hashes.size() - 1; b > 0; --b) {
    Entry* entry = find(prompt.first(b * kBlock), hashes[b]);
    if (entry == nullptr) continue;
    entry->used = ++clock_;
    entry->reused = true;
    ++stats_.hits;
    stats_.hit_tokens += entry->state.position;
    return ResumedPrefix{model_.share_sequence(entry->state), entry->draft_hidden};
  }
  return std::nullopt;
}

bool PrefixCache::contains(std::span<const int32_t> tokens) {
  if (tokens.empty() || tokens.size() % kBlock != 0) return false;
  Entry* entry = find(tokens, block_hashes(tokens).back());
  if (entry != nullptr) entry->used = ++clock_;
  return entry != nullptr;
}

int64_t PrefixCache::new_pages(std::span<const int32_t> pages) const {
  int64_t added = 0;
  for (int32_t page : pages) added += page_holders_.count(page) ? 0 : 1;
  return added;
}

void PrefixCache::evict_least_recent() {
  // Passing entries first (reused false < true), the least recently used first among each class.
  const auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.reused, a.second.used) < std::pair(b.second.reused, b.second.used);
  });
  for (int32_t page : oldest->second.state.kv_pages.ids())
    if (--page_holders_.at(page) == 0) page_holders_.erase(page);
  entries_.erase(oldest);  // the entry's state returns its recurrent slot and lets go of its pages
  ++stats_.evictions;
}

void PrefixCache::keep(std::span<const int32_t> tokens, const SequenceState& state, KeptAt at,
                       const Tensor& draft_hidden) {
  PLUMB_CHECK(!tokens.empty() && tokens.size() % kBlock == 0 && state.position == static_cast<int64_t>(tokens.size()),
              "prefix cache: a state at position {} kept for {} tokens (a positive multiple of {} is needed)",
              state.position, tokens.size(), kBlock);
  const int64_t H = model_.config().hidden_size;
  PLUMB_CHECK(!draft_hidden.defined() || (draft_hidden.rank() == 2 && draft_hidden.dim(0) == 1 &&
                                          draft_hidden.dim(1) == H && state.draft_position == state.position - 1),
              "prefix cache: a hidden state {} to draft from at position {}, whose head's cache holds {} positions",
              draft_hidden.defined() ? shape_str(draft_hidden.shape()) : "(none)", state.position,
              state.draft_position);
  const uint64_t hash = block_hashes(tokens).back();
  if (Entry* entry = find(tokens, hash); entry != nullptr) {
    // Another sequence computed the same prefix: it is shared.
    entry->used = ++clock_;
    entry->reused = true;
    return;
  }
  // A different prefix of the same hash keeps its place: the new one is not kept.
  if (entries_.count(hash)) return;
  const std::span<const int32_t> pages =
      std::span<const int32_t>(state.kv_pages.ids()).first(tokens.size() / static_cast<size_t>(kBlock));
  if (static_cast<int64_t>(pages.size()) > limits_.pages) return;
  while (!entries_.empty() && (static_cast<int64_t>(entries_.size()) >= limits_.snapshots ||
                               static_cast<int64_t>(page_holders_.size()) + new_pages(pages) > limits_.pages))
    evict_least_recent();
  for (int32_t page : pages) ++page_holders_[page];
  Tensor hidden;  // [1, H] the cache's own copy: the one given lives in a step's memory
  if (draft_hidden.defined()) {
    hidden = model_.backend().empty(DType::kF32, {1, H});
    model_.backend().copy(draft_hidden, hidden);
  }
  entries_.emplace(hash, Entry{std::vector<int32_t>(tokens.begin(), tokens.end()), model_.share_sequence(state),
                               std::move(hidden), ++clock_, at == KeptAt::kPromptEnd});
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats out = stats_;
  out.entries = static_cast<int64_t>(entries_.size());
  out.bytes = out.entries * slot_bytes_ + static_cast<int64_t>(page_holders_.size()) * page_bytes_;
  return out;
}

}  // namespace plumb
