// The attention layers' KV caches as pages of one pool shared by every sequence of a model, as vLLM's block tables:
// a page holds kKvPageSize positions, and one page id indexes the same page in every attention layer's pool, so a
// sequence has one page table for all layers. A sequence owns its pages through a KvPages handle, which returns them
// to the pool when the sequence's state is destroyed or replaced. A full page may be held by several handles at once
// (a prefix cache's entry and the sequences that start from it): the pool counts its holders and frees it when the
// last lets go. No holder writes a page another holds: a sequence writes only the positions past those it started
// from, and it starts from whole pages.
//
// Not thread-safe: the thread that runs a model's forward calls allocates, releases and grows its pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ops/backend.h"

namespace plumb {

// KV pages that hold `tokens` positions.
constexpr int64_t kv_pages_for(int64_t tokens) {
  return (tokens + kKvPageSize - 1) / kKvPageSize;
}

class KvPagePool {
 public:
  // Pools for the layers marked in attention_layers (the others get none), each of `kv_heads` heads of `head_dim`
  // in the backend's kv_dtype(). Starts empty: pages are allocated on first use.
  KvPagePool(Backend& backend, std::vector<bool> attention_layers, int64_t kv_heads, int64_t head_dim);
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  int64_t capacity() const { return capacity_; }  // pages
  // Device bytes one page takes in every attention layer's k and v pools together.
  int64_t page_bytes() const;
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return capacity_ - free_pages(); }

  // Takes `count` free pages, the most recently released first, each with one holder; grows the pool when too few
  // are free.
  std::vector<int32_t> allocate(int64_t count);
  // One more holder for each of `pages`. Throws plumb::Error for an id that is not an allocated page.
  void share(std::span<const int32_t> pages);
  // One holder fewer for each of `pages`; a page without holders returns to the free list. Throws plumb::Error for an
  // id that is not an allocated page.
  void release(std::span<const int32_t> pages);
  // Holders of `page` (0: free).
  int32_t holders(int32_t page) const;
  // Grows the pool to at least `pages` pages: new pool tensors, the old pages copied in, so every page id keeps its
  // contents. Growth replaces the pool tensors: take k()/v() after it.
  void reserve(int64_t pages);
  // Page `to` of every layer's pools becomes a copy of page `from`.
  void copy_page(int32_t from, int32_t to);

  // Layer i's pools, k and v [capacity, kKvPageSize, nkv, d]; undefined tensors for a layer without attention.
  const Tensor& k(size_t layer) const { return k_.at(layer); }
  const Tensor& v(size_t layer) const { return v_.at(layer); }

 private:
  Backend& backend_;
  std::vector<bool> attention_layers_;  // [layers]
  int64_t kv_heads_, head_dim_;
  int64_t capacity_ = 0;
  std::vector<Tensor> k_, v_;     // [layers]: the pools
  std::vector<int32_t> free_;     // free page ids; allocation takes from the back
  std::vector<int32_t> holders_;  // [capacity]: the handles holding each page (0: free)
};

// One sequence's pages, in position order: position p lives in page ids()[p / kKvPageSize]. Move-only; destroying or
// reassigning the handle returns its pages to the pool.
class KvPages {
 public:
  KvPages() = default;
  explicit KvPages(std::shared_ptr<KvPagePool> pool) : pool_(std::move(pool)) {}
  ~KvPages() { reset(); }
  KvPages(KvPages&& other) noexcept = default;
  KvPages& operator=(KvPages&& other) noexcept;
  KvPages(const KvPages&) = delete;
  KvPages& operator=(const KvPages&) = delete;

  // Allocates pages until they cover positions [0, tokens).
  void cover(int64_t tokens);
  // For a handle without pages: holds `pages` (allocated pages of its pool, in position order) beside their other
  // holders. The sequence must write none of their positions.
  void share(std::span<const int32_t> pages);
  // Makes page `index` of the handle its own: where another handle holds it too, a fresh page with a copy of its
  // contents takes its place here, so the sequence may write its positions (a request resumed from a prefix cache
  // whose speculative drafts write the multi-token-prediction head's keys and values at the prefix's last position).
  void own_page(size_t index);
  // Returns every page to the pool.
  void reset();

  const std::vector<int32_t>& ids() const { return ids_; }
  int64_t tokens_covered() const { return static_cast<int64_t>(ids_.size()) * kKvPageSize; }
  const std::shared_ptr<KvPagePool>& pool() const { return pool_; }

 private:
  std::shared_ptr<KvPagePool> pool_;
  std::vector<int32_t> ids_;
};

// Positions [0, positions) of a sequence's cache in one layer's pool (k or v), in position order: a new tensor
// [positions, nkv, d] in the backend's memory. What hashes and comparisons of a cache's content read, whatever
// pages hold it.
Tensor gather_positions(Backend& backend, const Tensor& pool, std::span<const int32_t> pages, int64_t positions);

}  // namespace plumb
