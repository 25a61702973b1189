#include "scheduler/state_pool.h"

#include "core/error.h"

namespace plumb {

SlotPool::SlotPool(int32_t count) : in_use_(static_cast<size_t>(count), false) {
  PLUMB_CHECK(count > 0, "a slot pool needs at least one slot, got {}", count);
}

int32_t SlotPool::acquire() {
  for (size_t i = 0; i < in_use_.size(); ++i) {
    if (in_use_[i]) continue;
    in_use_[i] = true;
    ++used_;
    return static_cast<int32_t>(i);
  }
  PLUMB_FAIL("no free state slot (all {} in use)", in_use_.size());
}

void SlotPool::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && static_cast<size_t>(slot) < in_use_.size() && in_use_[static_cast<size_t>(slot)],
              "state slot {} is not in use", slot);
  in_use_[static_cast<size_t>(slot)] = false;
  --used_;
}

PagePool::PagePool(int64_t pages, int64_t page_tokens) : capacity_(pages), page_tokens_(page_tokens) {
  PLUMB_CHECK(pages > 0 && page_tokens > 0, "a KV page pool needs pages > 0 and page tokens > 0, got {} and {}", pages,
              page_tokens);
}

void PagePool::reserve(int64_t pages) {
  PLUMB_CHECK(pages >= 0 && can_reserve(pages), "cannot reserve {} KV pages: {} of {} in use", pages, used_, capacity_);
  used_ += pages;
}

void PagePool::release(int64_t pages) {
  PLUMB_CHECK(pages >= 0 && pages <= used_, "cannot release {} KV pages: only {} in use", pages, used_);
  used_ -= pages;
}

}  // namespace plumb
