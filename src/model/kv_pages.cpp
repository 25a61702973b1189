#include "model/kv_pages.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"

namespace plumb {

KvPagePool::KvPagePool(Backend& backend, std::vector<bool> attention_layers, int64_t kv_heads, int64_t head_dim)
    : backend_(backend),
      attention_layers_(std::move(attention_layers)),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      k_(attention_layers_.size()),
      v_(attention_layers_.size()) {
  PLUMB_CHECK(kv_heads > 0 && head_dim > 0, "KV page pool: {} KV heads of {}", kv_heads, head_dim);
}

int64_t KvPagePool::page_bytes() const {
  const auto layers = static_cast<int64_t>(std::count(attention_layers_.begin(), attention_layers_.end(), true));
  return 2 * layers * kKvPageSize * kv_heads_ * head_dim_ * static_cast<int64_t>(dtype_size(backend_.kv_dtype()));
}

std::vector<int32_t> KvPagePool::allocate(int64_t count) {
  PLUMB_CHECK(count >= 0, "KV page pool: cannot allocate {} pages", count);
  // Doubling keeps the copies of growth to a constant amortized cost per page.
  if (count > free_pages()) reserve(std::max(capacity_ + count - free_pages(), 2 * capacity_));
  std::vector<int32_t> pages(free_.end() - count, free_.end());
  std::reverse(pages.begin(), pages.end());
  free_.resize(free_.size() - static_cast<size_t>(count));
  for (int32_t page : pages) holders_[page] = 1;
  return pages;
}

void KvPagePool::share(std::span<const int32_t> pages) {
  for (int32_t page : pages) PLUMB_CHECK(holders(page) > 0, "KV page pool: page {} is not allocated", page);
  for (int32_t page : pages) ++holders_[page];
}

void KvPagePool::release(std::span<const int32_t> pages) {
  for (int32_t page : pages) {
    PLUMB_CHECK(holders(page) > 0, "KV page pool: page {} is not allocated", page);
    if (--holders_[page] == 0) free_.push_back(page);
  }
}

int32_t KvPagePool::holders(int32_t page) const {
  return page >= 0 && page < capacity_ ? holders_[page] : 0;
}

void KvPagePool::reserve(int64_t pages) {
  if (pages <= capacity_) return;
  PLUMB_CHECK(pages <= std::numeric_limits<int32_t>::max(), "KV page pool: {} pages exceed 32-bit page ids", pages);
  for (size_t i = 0; i < attention_layers_.size(); ++i) {
    if (!attention_layers_[i]) continue;
    for (Tensor* pool : {&k_[i], &v_[i]}) {
      Tensor grown = backend_.zeros(backend_.kv_dtype(), {pages, kKvPageSize, kv_heads_, head_dim_});
      if (capacity_ > 0) {
        Tensor head = grown.rows(0, capacity_);
        backend_.copy(*pool, head);
      }
      *pool = grown;
    }
  }
  // The new ids go below the free ones, lowest on top: the pages released most recently are still taken first.
  std::vector<int32_t> fresh;
  for (int64_t page = pages - 1; page >= capacity_; --page) fresh.push_back(static_cast<int32_t>(page));
  free_.insert(free_.begin(), fresh.begin(), fresh.end());
  holders_.resize(static_cast<size_t>(pages), 0);
  capacity_ = pages;
}

void KvPagePool::copy_page(int32_t from, int32_t to) {
  PLUMB_CHECK(from >= 0 && from < capacity_ && to >= 0 && to < capacity_, "KV page pool: copy of page {} to {} of {}",
              from, to, capacity_);
  for (size_t i = 0; i < attention_layers_.size(); ++i) {
    if (!attention_layers_[i]) continue;
    for (const Tensor* pool : {&k_[i], &v_[i]}) {
      Tensor dst = pool->rows(to, to + 1);
      backend_.copy(pool->rows(from, from + 1), dst);
    }
  }
}

KvPages& KvPages::operator=(KvPages&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    ids_ = std::move(other.ids_);
    other.ids_.clear();
  }
  return *this;
}

void KvPages::cover(int64_t tokens) {
  PLUMB_CHECK(pool_ != nullptr, "KV pages: the sequence has no page pool");
  if (tokens <= tokens_covered()) return;
  const int64_t missing = (tokens - tokens_covered() + kKvPageSize - 1) / kKvPageSize;
  const std::vector<int32_t> pages = pool_->allocate(missing);
  ids_.insert(ids_.end(), pages.begin(), pages.end());
}

void KvPages::share(std::span<const int32_t> pages) {
  PLUMB_CHECK(pool_ != nullptr && ids_.empty(), "KV pages: only a handle of a pool without pages can share pages");
  pool_->share(pages);
  ids_.assign(pages.begin(), pages.end());
}

void KvPages::own_page(size_t index) {
  PLUMB_CHECK(pool_ != nullptr && index < ids_.size(), "KV pages: page {} of a sequence of {}", index, ids_.size());
  const int32_t shared = ids_[index];
  if (pool_->holders(shared) == 1) return;
  const int32_t own = pool_->allocate(1).front();
  pool_->copy_page(shared, own);
  pool_->release(std::span<const int32_t>(&shared, 1));
  ids_[index] = own;
}

void KvPages::reset() {
  if (pool_) pool_->release(ids_);
  ids_.clear();
}

Tensor gather_positions(Backend& backend, const Tensor& pool, std::span<const int32_t> pages, int64_t positions) {
  PLUMB_CHECK(pool.rank() == 4 && pool.dim(1) == kKvPageSize, "gather_positions: pool {} is not [pages, {}, nkv, d]",
              shape_str(pool.shape()), kKvPageSize);
  PLUMB_CHECK(positions >= 0 && positions <= static_cast<int64_t>(pages.size()) * kKvPageSize,
              "gather_positions: {} positions from {} pages", positions, pages.size());
  const int64_t nkv = pool.dim(2), d = pool.dim(3);
  Tensor out = backend.empty(pool.dtype(), {positions, nkv, d});  // [positions, nkv, d]
  for (int64_t first = 0, j = 0; first < positions; first += kKvPageSize, ++j) {
    const int32_t page = pages[j];
    PLUMB_CHECK(page >= 0 && page < pool.dim(0), "gather_positions: page id {} outside the pool of {}", page,
                pool.dim(0));
    const int64_t n = std::min(kKvPageSize, positions - first);
    Tensor dst = out.rows(first, first + n);
    backend.copy(pool.rows(page, page + 1).reshape({kKvPageSize, nkv, d}).rows(0, n), dst);
  }
  return out;
}

}  // namespace plumb
