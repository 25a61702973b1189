// The KV page pool and the pages sequences hold: allocation, release and reuse, growth that keeps every page's
// contents, and no page left behind when sequence states are destroyed or replaced.
#include "model/kv_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

constexpr int64_t kHeads = 2, kDim = 4, kPageElements = kKvPageSize * kHeads * kDim;

// Layers 0 and 2 attend; layer 1 (a GDN layer) has no pool.
class KvPagePoolTest : public ::testing::Test {
 protected:
  // A value that names its layer, page and part (k or v), so a page moved or lost shows.
  static float mark(size_t layer, int32_t page, bool values) {
    return (values ? -1.0f : 1.0f) * (static_cast<float>(layer) * 1000.0f + static_cast<float>(page) + 0.5f);
  }
  void fill(int32_t page) {
    for (size_t layer : {size_t{0}, size_t{2}})
      for (bool values : {false, true}) {
        float* first = (values ? pool_.v(layer) : pool_.k(layer)).f32() + page * kPageElements;
        std::fill(first, first + kPageElements, mark(layer, page, values));
      }
  }
  bool holds_mark(int32_t page, int32_t mark_page) const {
    for (size_t layer : {size_t{0}, size_t{2}})
      for (bool values : {false, true}) {
        const float* first = (values ? pool_.v(layer) : pool_.k(layer)).f32() + page * kPageElements;
        if (!std::all_of(first, first + kPageElements, [&](float x) { return x == mark(layer, mark_page, values); }))
          return false;
      }
    return true;
  }

  CpuBackend be_;
  KvPagePool pool_{be_, {true, false, true}, kHeads, kDim};
};

TEST_F(KvPagePoolTest, GrowthKeepsEveryPageAndItsContents) {
  EXPECT_EQ(pool_.capacity(), 0);
  const std::vector<int32_t> first = pool_.allocate(3);
  EXPECT_EQ(first, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool_.k(0).shape(), (Shape{3, kKvPageSize, kHeads, kDim}));
  EXPECT_EQ(pool_.v(2).dtype(), be_.kv_dtype());
  EXPECT_FALSE(pool_.k(1).data());  // no pool for a layer without attention
  for (int32_t page : first) fill(page);
  const void* before = pool_.k(0).data();
  // Two more than are free: the pool doubles, the new pages come after the old ones.
  const std::vector<int32_t> second = pool_.allocate(2);
  EXPECT_EQ(second, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(pool_.capacity(), 6);
  EXPECT_NE(pool_.k(0).data(), before);
  for (int32_t page : first) EXPECT_TRUE(holds_mark(page, page)) << "page " << page;
  EXPECT_EQ(pool_.used_pages(), 5);
  EXPECT_EQ(pool_.free_pages(), 1);
  // An explicit reserve grows likewise; below the capacity it does nothing.
  pool_.reserve(40);
  pool_.reserve(10);
  EXPECT_EQ(pool_.capacity(), 40);
  for (int32_t page : first) EXPECT_TRUE(holds_mark(page, page)) << "page " << page;
}

// What a memory budget buys: k and v of the two attention layers, 64 positions of kHeads x kDim F32 each.
TEST_F(KvPagePoolTest, PageBytesCountEveryAttentionLayersKeysAndValues) {
  EXPECT_EQ(pool_.page_bytes(), 2 * 2 * kKvPageSize * kHeads * kDim * 4);
  pool_.reserve(5);
  EXPECT_EQ(pool_.capacity(), 5);
  EXPECT_EQ(pool_.free_pages(), 5);
  EXPECT_EQ(pool_.k(2).nbytes() + pool_.v(2).nbytes() + pool_.k(0).nbytes() + pool_.v(0).nbytes(),
            5 * pool_.page_bytes());
}

TEST_F(KvPagePoolTest, ReleasedPagesAreReusedFirst) {
  const std::vector<int32_t> pages = pool_.allocate(4);
  pool_.release(std::vector<int32_t>{pages[1], pages[3]});
  EXPECT_EQ(pool_.free_pages(), 2);
  const std::vector<int32_t> again = pool_.allocate(2);
  EXPECT_EQ(again, (std::vector<int32_t>{pages[3], pages[1]}));  // the most recently released first
  EXPECT_EQ(pool_.capacity(), 4);
  EXPECT_THROW(pool_.release(std::vector<int32_t>{4}), Error);  // outside the pool
  pool_.release(std::vector<int32_t>{pages[0]});
  EXPECT_THROW(pool_.release(std::vector<int32_t>{pages[0]}), Error);  // released twice
}

TEST_F(KvPagePoolTest, CopyPageCopiesEveryLayer) {
  const std::vector<int32_t> pages = pool_.allocate(2);
  fill(pages[0]);
  fill(pages[1]);
  pool_.copy_page(pages[0], pages[1]);
  EXPECT_TRUE(holds_mark(pages[1], pages[0]));
  EXPECT_TRUE(holds_mark(pages[0], pages[0]));
}

TEST_F(KvPagePoolTest, HandlesReturnTheirPages) {
  auto shared_pool = std::make_shared<KvPagePool>(be_, std::vector<bool>{true}, kHeads, kDim);
  {
    KvPages a(shared_pool), b(shared_pool);
    a.cover(1);
    EXPECT_EQ(a.ids().size(), 1u);
    a.cover(kKvPageSize);  // still one page
    EXPECT_EQ(a.ids().size(), 1u);
    a.cover(2 * kKvPageSize + 1);
    EXPECT_EQ(a.ids().size(), 3u);
    b.cover(kKvPageSize + 1);
    EXPECT_EQ(shared_pool->used_pages(), 5);
    KvPages c = std::move(a);  // the pages move with the handle
    EXPECT_EQ(c.ids().size(), 3u);
    EXPECT_EQ(shared_pool->used_pages(), 5);
    b = std::move(c);  // b's own pages go back
    EXPECT_EQ(shared_pool->used_pages(), 3);
    b.reset();
    EXPECT_EQ(shared_pool->used_pages(), 0);
    b.cover(10);
  }
  EXPECT_EQ(shared_pool->used_pages(), 0);
  EXPECT_EQ(shared_pool->free_pages(), shared_pool->capacity());
}

// A page held by two handles becomes one handle's own as a copy; the other keeps the original, and a page held once
// stays where it is.
TEST_F(KvPagePoolTest, OwnPageCopiesASharedPageOnly) {
  auto shared_pool = std::make_shared<KvPagePool>(be_, std::vector<bool>{true}, kHeads, kDim);
  KvPages a(shared_pool), b(shared_pool);
  a.cover(2 * kKvPageSize);
  for (size_t j = 0; j < 2; ++j) {
    float* k = shared_pool->k(0).f32() + a.ids()[j] * kPageElements;
    std::fill(k, k + kPageElements, static_cast<float>(j) + 0.5f);
  }
  b.share(a.ids());
  const std::vector<int32_t> before = a.ids();
  a.own_page(1);
  EXPECT_EQ(a.ids()[0], before[0]);
  EXPECT_NE(a.ids()[1], before[1]);
  EXPECT_EQ(b.ids(), before);
  EXPECT_EQ(shared_pool->holders(before[1]), 1);
  EXPECT_EQ(shared_pool->holders(a.ids()[1]), 1);
  const float* copy = shared_pool->k(0).f32() + a.ids()[1] * kPageElements;
  EXPECT_TRUE(std::all_of(copy, copy + kPageElements, [](float x) { return x == 1.5f; }));
  const std::vector<int32_t> owned = a.ids();
  a.own_page(1);  // already its own
  EXPECT_EQ(a.ids(), owned);
  EXPECT_EQ(shared_pool->used_pages(), 3);
  EXPECT_THROW(a.own_page(2), Error);
}

// A cache read by position: its pages in table order, the last one cut at the position count.
TEST_F(KvPagePoolTest, GatherPositionsReadsPagesInTableOrder) {
  const std::vector<int32_t> pages = pool_.allocate(3);
  for (int32_t page : pages) fill(page);
  const std::vector<int32_t> table = {pages[2], pages[0]};
  const Tensor got = gather_positions(be_, pool_.v(2), table, kKvPageSize + 5);
  ASSERT_EQ(got.shape(), (Shape{kKvPageSize + 5, kHeads, kDim}));
  const int64_t row = kHeads * kDim;
  EXPECT_EQ(got.f32()[0], mark(2, pages[2], true));
  EXPECT_EQ(got.f32()[kKvPageSize * row - 1], mark(2, pages[2], true));
  EXPECT_EQ(got.f32()[kKvPageSize * row], mark(2, pages[0], true));
  EXPECT_EQ(got.f32()[got.numel() - 1], mark(2, pages[0], true));
  EXPECT_THROW(gather_positions(be_, pool_.v(2), table, 2 * kKvPageSize + 1), Error);
}

// Sequence states of a real model take pages as they grow and give every one back when destroyed, replaced or
// released by the runner.
TEST(KvPagesOfAModel, NoPageOutlivesItsSequence) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::source_dir() + "/tests/fixtures/models/qwen3_next_moe", backend);
  const KvPagePool& pool = model.kv_pool();
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config().vocab_size - 1));
  auto ids = [&](int64_t n) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int32_t& id : out) id = token(rng);
    return out;
  };
  {
    SequenceState a = model.new_sequence(), b = model.new_sequence(100);
    EXPECT_EQ(pool.used_pages(), 2);  // b's reservation
    model.forward({{&a, ids(70)}, {&b, ids(5)}}, LogitsRows::kLast);
    EXPECT_EQ(pool.used_pages(), 4);
    a = model.new_sequence();  // replaced: its two pages go back
    EXPECT_EQ(pool.used_pages(), 2);
  }
  EXPECT_EQ(pool.used_pages(), 0);
  {
    ModelRunner runner(model, 2);
    runner.forward({{0, 0, ids(130)}, {1, 0, ids(3)}});
    EXPECT_EQ(pool.used_pages(), 4);
    runner.forward({{0, 0, ids(1)}});  // a fresh sequence in slot 0 replaces the old one
    EXPECT_EQ(pool.used_pages(), 2);
    runner.release(1);
    EXPECT_EQ(pool.used_pages(), 1);
  }
  EXPECT_EQ(pool.used_pages(), 0);
  EXPECT_EQ(pool.free_pages(), pool.capacity());
}

}  // namespace
}  // namespace plumb
