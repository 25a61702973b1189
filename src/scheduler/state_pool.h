// Host-side bookkeeping of per-sequence state: which recurrent-state slots (one per running sequence: the conv window
// and delta-rule state of every Gated DeltaNet layer) and how many KV pages (fixed-size blocks of attention-layer
// cache) are in use. Only counts and indices live here; the memory itself belongs to the runner.
#pragma once

#include <cstdint>
#include <vector>

namespace plumb {

// A fixed set of slots 0..count-1. acquire() hands out the lowest free slot, so a run is reproducible.
class SlotPool {
 public:
  explicit SlotPool(int32_t count);
  bool has_free() const { return used_ < static_cast<int32_t>(in_use_.size()); }
  int32_t acquire();  // throws plumb::Error when none is free
  void release(int32_t slot);
  int32_t used() const { return used_; }
  int32_t capacity() const { return static_cast<int32_t>(in_use_.size()); }

 private:
  std::vector<bool> in_use_;
  int32_t used_ = 0;
};

// A pool of KV pages of `page_tokens` tokens each, counted, not placed.
class PagePool {
 public:
  PagePool(int64_t pages, int64_t page_tokens);
  // Pages needed to hold `tokens` tokens.
  int64_t pages_for(int64_t tokens) const { return (tokens + page_tokens_ - 1) / page_tokens_; }
  bool can_reserve(int64_t pages) const { return used_ + pages <= capacity_; }
  void reserve(int64_t pages);  // throws plumb::Error when they are not free
  void release(int64_t pages);
  int64_t used() const { return used_; }
  int64_t capacity() const { return capacity_; }
  int64_t page_tokens() const { return page_tokens_; }

 private:
  int64_t capacity_;
  int64_t page_tokens_;
  int64_t used_ = 0;
};

}  // namespace plumb
