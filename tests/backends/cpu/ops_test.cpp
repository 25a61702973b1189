// The CPU reference ops against plain double-precision transcriptions of their formulas, on awkward sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "support/random.h"
#include "support/seeded_test.h"
#include "support/tensors.h"

namespace plumb {
namespace {

class CpuOps : public test::SeededTest {
 protected:
  CpuBackend be_;
};

TEST_F(CpuOps, LinearMatchesDoubleForEveryWeightDtype) {
  SCOPED_TRACE(trace());
  for (int64_t T : {1, 3, 65}) {
    const int64_t K = 37, N = 19;
    const Tensor x = test::random_tensor(rng_, {T, K}), w32 = test::random_tensor(rng_, {N, K});
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      // The weight as stored in `dtype`, and the values that storage represents.
      Tensor w = Tensor::zeros(dtype, {N, K});
      std::vector<float> represented(N * K);
      for (int64_t i = 0; i < N * K; ++i) {
        const float v = w32.f32()[i];
        if (dtype == DType::kF32) w.f32()[i] = v;
        if (dtype == DType::kBF16) w.data_as<uint16_t>()[i] = f32_to_bf16(v);
        if (dtype == DType::kF16) w.data_as<uint16_t>()[i] = f32_to_f16(v);
        convert_to_f32(dtype, static_cast<char*>(w.data()) + i * dtype_size(dtype), &represented[i], 1);
      }
      Tensor y = Tensor::zeros(DType::kF32, {T, N});
      be_.linear(x, w, y);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0;
          for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(x.f32()[t * K + k]) * represented[n * K + k];
          // FP32 accumulation of K = 37 products of O(1) terms: error well under 1e-5 · K.
          ASSERT_TRUE(std::fabs(y.f32()[t * N + n] - ref) <= 2e-5 * K) << dtype_name(dtype);
        }
    }
  }
}

TEST_F(CpuOps, RmsNormVariants) {
  SCOPED_TRACE(trace());
  const int64_t R = 5, D = 33;
  const Tensor x = test::random_tensor(rng_, {R, D}), w = test::random_tensor(rng_, {D}),
               z = test::random_tensor(rng_, {R, D});
  Tensor zc = Tensor::zeros(DType::kF32, {R, D}), plain = Tensor::zeros(DType::kF32, {R, D});
  Tensor gated = Tensor::zeros(DType::kF32, {R, D});
  be_.rms_norm(x, w, 1e-6f, NormWeight::kZeroCentred, zc);
  be_.rms_norm(x, w, 1e-6f, NormWeight::kPlain, plain);
  be_.gated_rms_norm(x, z, w, 1e-6f, gated);
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x.f32()[r * D + i]) * x.f32()[r * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
    for (int64_t i = 0; i < D; ++i) {
      const double n = x.f32()[r * D + i] * inv, zi = z.f32()[r * D + i];
      EXPECT_TRUE(std::fabs(zc.f32()[r * D + i] - n * (1.0 + w.f32()[i])) <= 1e-5);
      EXPECT_TRUE(std::fabs(plain.f32()[r * D + i] - n * w.f32()[i]) <= 1e-5);
      EXPECT_TRUE(std::fabs(gated.f32()[r * D + i] - n * w.f32()[i] * zi / (1 + std::exp(-zi))) <= 1e-5);
    }
  }
}

// What the pool pages no sequence owns hold.
constexpr float kUnowned = 7.0f;

bool holds_only(const Tensor& t, float value) {
  return std::all_of(t.f32(), t.f32() + t.numel(), [&](float x) { return x == value; });
}

enum class PageOrder {
  kInOrder,   // sequence after sequence, each its pages in position order
  kShuffled,  // handed out round-robin across the sequences from a shuffled list: out of order and interleaved
};

// Page tables for sequences of counts[i] pages sharing one pool of Σ counts pages.
std::vector<std::vector<int32_t>> page_tables(const std::vector<int64_t>& counts, PageOrder order,
                                              std::mt19937_64& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0})));
  std::iota(ids.begin(), ids.end(), 0);
  if (order == PageOrder::kShuffled) std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(counts.size());
  size_t next = 0;
  for (size_t i = 0; i < counts.size() && order == PageOrder::kInOrder; ++i)
    for (int64_t j = 0; j < counts[i]; ++j) tables[i].push_back(ids[next++]);
  for (int64_t j = 0; next < ids.size(); ++j)
    for (size_t i = 0; i < counts.size(); ++i)
      if (j < counts[i]) tables[i].push_back(ids[next++]);
  return tables;
}

// A pool [pool_pages, kKvPageSize, nkv, d] holding cache i ([pages · kKvPageSize, nkv, d] by position) in the pages
// tables[i] lists; the pages no table lists hold `fill`.
Tensor paged_pool(const std::vector<Tensor>& logical, const std::vector<std::vector<int32_t>>& tables,
                  int64_t pool_pages, float fill) {
  const int64_t nkv = logical[0].dim(1), d = logical[0].dim(2), page_elements = kKvPageSize * nkv * d;
  Tensor pool = Tensor::from_f32(std::vector<float>(static_cast<size_t>(pool_pages * page_elements), fill),
                                 {pool_pages, kKvPageSize, nkv, d});
  for (size_t i = 0; i < logical.size(); ++i)
    for (size_t j = 0; j < tables[i].size(); ++j)
      std::memcpy(pool.f32() + tables[i][j] * page_elements, logical[i].f32() + j * page_elements,
                  static_cast<size_t>(page_elements) * sizeof(float));
  return pool;
}

// Positions [0, positions) of a cache, in position order, from its pool and page table: [positions, nkv, d].
Tensor logical_cache(const Tensor& pool, const std::vector<int32_t>& table, int64_t positions) {
  const int64_t nkv = pool.dim(2), d = pool.dim(3);
  Tensor out = Tensor::zeros(DType::kF32, {positions, nkv, d});
  for (int64_t p = 0; p < positions; ++p)
    std::memcpy(out.f32() + p * nkv * d,
                pool.f32() + ((table[p / kKvPageSize] * kKvPageSize + p % kKvPageSize) * nkv * d),
                static_cast<size_t>(nkv * d) * sizeof(float));
  return out;
}

// One attention call over the caches of `batch` (caches[i]: [pages_i · kKvPageSize, nkv, d] by position) laid out in
// one pool by `order`, with `spare` pages no sequence owns. Returns the output and each cache's content by position
// after the call, whole pages, so anything written outside the new positions shows.
struct PagedRun {
  Tensor o;                  // [T, nq, d]
  std::vector<Tensor> k, v;  // per sequence: [pages · kKvPageSize, nkv, d]
  Tensor k_spare, v_spare;   // [spare pages · kKvPageSize, nkv, d]
};
PagedRun run_paged(Backend& be, const Tensor& q, const Tensor& k, const Tensor& v, const BatchRows& batch,
                   const std::vector<Tensor>& k_caches, const std::vector<Tensor>& v_caches, PageOrder order,
                   int64_t spare, std::mt19937_64& rng) {
  std::vector<int64_t> counts;
  for (const Tensor& c : k_caches) counts.push_back(c.dim(0) / kKvPageSize);
  counts.push_back(spare);  // the spare pages as one more table, which no call sees
  const std::vector<std::vector<int32_t>> tables = page_tables(counts, order, rng);
  const int64_t pool_pages = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const Tensor k_pool = paged_pool(k_caches, tables, pool_pages, kUnowned);
  const Tensor v_pool = paged_pool(v_caches, tables, pool_pages, kUnowned);
  std::vector<KvCache> caches;
  for (size_t i = 0; i < batch.size(); ++i) caches.push_back({k_pool, v_pool, tables[i]});
  std::vector<KvCache*> pointers;
  for (KvCache& c : caches) pointers.push_back(&c);
  PagedRun run{Tensor::zeros(DType::kF32, q.shape()), {}, {}, {}, {}};
  be.attention(q, k, v, pointers, batch, run.o, GdnAlgorithm::kChunked);
  for (size_t i = 0; i < batch.size(); ++i) {
    run.k.push_back(logical_cache(k_pool, tables[i], k_caches[i].dim(0)));
    run.v.push_back(logical_cache(v_pool, tables[i], v_caches[i].dim(0)));
  }
  run.k_spare = logical_cache(k_pool, tables.back(), spare * kKvPageSize);
  run.v_spare = logical_cache(v_pool, tables.back(), spare * kKvPageSize);
  return run;
}

TEST_F(CpuOps, AttentionMatchesDoubleSoftmax) {
  SCOPED_TRACE(trace());
  // Positions 60..66 arrive with the call: they cross from the sequence's first page into its second.
  const int64_t past = 60, T = 7, nq = 6, nkv = 2, d = 12, positions = 2 * kKvPageSize;
  const Tensor q = test::random_tensor(rng_, {T, nq, d});
  // Keys and values by position: rows [0, past) are already cached, rows [past, past + T) arrive with the call.
  const Tensor k = test::random_tensor(rng_, {positions, nkv, d}), v = test::random_tensor(rng_, {positions, nkv, d});
  // Rows the call must overwrite hold garbage, so reading the cache before writing it would show.
  Tensor k_cache = test::clone(k), v_cache = test::clone(v);
  for (int64_t i = past * nkv * d; i < positions * nkv * d; ++i) k_cache.f32()[i] = v_cache.f32()[i] = 1e3f;
  const PagedRun run =
      run_paged(be_, q, k.rows(past, past + T), v.rows(past, past + T), BatchRows{SequenceRows{0, T, past}}, {k_cache},
                {v_cache}, PageOrder::kShuffled, 1, rng_);
  // The new keys and values land at their positions; later positions and the spare page are untouched.
  EXPECT_TRUE(test::same_bits(run.k[0].rows(0, past + T), k.rows(0, past + T)));
  EXPECT_TRUE(test::same_bits(run.v[0].rows(0, past + T), v.rows(0, past + T)));
  EXPECT_TRUE(test::same_bits(run.k[0].rows(past + T, positions), k_cache.rows(past + T, positions)));
  EXPECT_TRUE(holds_only(run.k_spare, kUnowned) && holds_only(run.v_spare, kUnowned));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nq; ++h) {
      const int64_t g = h / (nq / nkv), n = past + t + 1;
      std::vector<double> p(n);
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += static_cast<double>(q.f32()[(t * nq + h) * d + c]) * k.f32()[(j * nkv + g) * d + c];
        total += p[j] = std::exp(s / std::sqrt(static_cast<double>(d)));
      }
      for (int64_t c = 0; c < d; ++c) {
        double ref = 0;
        for (int64_t j = 0; j < n; ++j) ref += p[j] / total * v.f32()[(j * nkv + g) * d + c];
        ASSERT_TRUE(std::fabs(run.o.f32()[(t * nq + h) * d + c] - ref) <= 1e-5) << t << " " << h << " " << c;
      }
    }
}

// Three sequences of ragged lengths, each with history in its cache, with every page layout and both roundings of
// the reference: in one call over a shared pool, each one's output rows and cache content are bit-identical to
// calling it alone over a pool of its own pages in order. Where the pages lie, in what order and among whose pages,
// changes nothing.
TEST_F(CpuOps, BatchedPagedAttentionIsBitIdenticalToEachSequenceAlone) {
  SCOPED_TRACE(trace());
  const int64_t nq = 4, nkv = 2, d = 16;
  const BatchRows batch = {{0, 70, 100}, {70, 1, 7}, {71, 37, 64}};
  const int64_t T = 108;
  const Tensor q = test::random_tensor(rng_, {T, nq, d});
  const Tensor k = test::random_tensor(rng_, {T, nkv, d}), v = test::random_tensor(rng_, {T, nkv, d});
  std::vector<Tensor> k_caches, v_caches;
  for (const SequenceRows& seq : batch) {
    // Whole pages past past + count: room beyond the last position, which must stay as it was.
    const int64_t positions = (seq.past + seq.count) / kKvPageSize * kKvPageSize + kKvPageSize;
    k_caches.push_back(test::random_tensor(rng_, {positions, nkv, d}));
    v_caches.push_back(test::random_tensor(rng_, {positions, nkv, d}));
  }
  for (CpuRounding rounding : {CpuRounding::kF32, CpuRounding::kBf16Operands}) {
    CpuBackend be(rounding);
    for (PageOrder order : {PageOrder::kInOrder, PageOrder::kShuffled}) {
      const PagedRun batched = run_paged(be, q, k, v, batch, k_caches, v_caches, order, 2, rng_);
      for (size_t s = 0; s < batch.size(); ++s) {
        SCOPED_TRACE("sequence " + std::to_string(s) + (order == PageOrder::kInOrder ? ", in order" : ", shuffled") +
                     (rounding == CpuRounding::kF32 ? ", F32" : ", BF16 operands"));
        const int64_t begin = batch[s].begin, end = begin + batch[s].count;
        const PagedRun alone = run_paged(be, q.rows(begin, end), k.rows(begin, end), v.rows(begin, end),
                                         BatchRows{SequenceRows{0, end - begin, batch[s].past}}, {k_caches[s]},
                                         {v_caches[s]}, PageOrder::kInOrder, 0, rng_);
        EXPECT_TRUE(test::same_bits(batched.o.rows(begin, end), alone.o));
        EXPECT_TRUE(test::same_bits(batched.k[s], alone.k[0]));
        EXPECT_TRUE(test::same_bits(batched.v[s], alone.v[0]));
      }
      EXPECT_TRUE(holds_only(batched.k_spare, kUnowned) && holds_only(batched.v_spare, kUnowned));
    }
  }
}

TEST_F(CpuOps, AttentionRefusesAShortPageTableAndPagesOutsideThePool) {
  const int64_t T = 3, past = 62, nkv = 1, d = 4;  // positions 62..64 need two pages
  const Tensor q = test::random_tensor(rng_, {T, 2, d}), k = test::random_tensor(rng_, {T, nkv, d});
  const Tensor pool = Tensor::zeros(DType::kF32, {2, kKvPageSize, nkv, d});
  Tensor o = Tensor::zeros(DType::kF32, {T, 2, d});
  auto call = [&](std::vector<int32_t> table, int64_t past_tokens) {
    KvCache cache{pool, pool, table};
    be_.attention(q, k, k, {&cache}, BatchRows{SequenceRows{0, T, past_tokens}}, o, GdnAlgorithm::kChunked);
  };
  EXPECT_THROW(call({1}, past), Error);      // one page for 65 positions
  EXPECT_THROW(call({1, 2}, past), Error);   // page 2 of a pool of 2
  EXPECT_THROW(call({1, -1}, past), Error);  // a negative page id
  EXPECT_NO_THROW(call({1, 0}, past));
  EXPECT_NO_THROW(call({1}, past - 3));  // 62 positions fit one page
}

TEST_F(CpuOps, RotaryEmbeddingRotatesPairsHalfApart) {
  SCOPED_TRACE(trace());
  const int64_t T = 3, heads = 2, d = 10, rot = 6;
  const Tensor x = test::random_tensor(rng_, {T, heads, d});
  Tensor y = Tensor::from_f32(std::vector<float>(x.f32(), x.f32() + x.numel()), x.shape());
  const std::vector<int64_t> positions = {0, 7, 130};
  be_.rotary_embedding(y, positions, rot, 10000.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const float* xv = x.f32() + (t * heads + h) * d;
        double ref = xv[i];
        if (i < rot) {
          const int64_t f = i % (rot / 2);
          const double angle = positions[t] * std::pow(10000.0, -2.0 * f / rot);
          ref = i < rot / 2 ? xv[i] * std::cos(angle) - xv[i + rot / 2] * std::sin(angle)
                            : xv[i] * std::cos(angle) + xv[i - rot / 2] * std::sin(angle);
        }
        // FP32 angles at position 130 carry ~1e-5 relative error.
        EXPECT_TRUE(std::fabs(y.f32()[(t * heads + h) * d + i] - ref) <= 1e-4) << t << " " << i;
      }
}

TEST_F(CpuOps, MoeRouteSoftmaxTopkRenormalize) {
  const Tensor logits = Tensor::from_f32({0.0f, 2.0f, 1.0f, 2.0f, -1.0f}, {1, 5});
  Tensor ids = Tensor::zeros(DType::kI32, {1, 3}), weights = Tensor::zeros(DType::kF32, {1, 3});
  for (bool renormalize : {false, true}) {
    be_.moe_route(logits, 3, renormalize, ids, weights);
    const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
    const double p2 = std::exp(2.0) / z, p1 = std::exp(1.0) / z, kept = 2 * p2 + p1;
    EXPECT_EQ(ids.data_as<int32_t>()[0], 1);  // equal probabilities: the lower id first
    EXPECT_EQ(ids.data_as<int32_t>()[1], 3);
    EXPECT_EQ(ids.data_as<int32_t>()[2], 2);
    EXPECT_NEAR(weights.f32()[0], renormalize ? p2 / kept : p2, 1e-6);
    EXPECT_NEAR(weights.f32()[2], renormalize ? p1 / kept : p1, 1e-6);
  }
}

TEST_F(CpuOps, MoeExpertsIsTheWeightedSumOfDenseMlps) {
  SCOPED_TRACE(trace());
  const int64_t T = 4, H = 9, I = 5, E = 3, top_k = 2;
  // Stacked by expert: expert e's gate rows [0, I) and up rows [I, 2I) of gate_up[e].
  const ExpertWeights experts{test::random_tensor(rng_, {E, 2 * I, H}), test::random_tensor(rng_, {E, H, I})};
  const Tensor x = test::random_tensor(rng_, {T, H});
  Tensor ids = Tensor::zeros(DType::kI32, {T, top_k}), weights = test::random_tensor(rng_, {T, top_k});
  for (int64_t i = 0; i < T * top_k; ++i) ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 2 + 1) % E);
  Tensor y = Tensor::zeros(DType::kF32, {T, H});
  be_.moe_experts(x, ids, weights, experts, y);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> ref(H, 0.0);
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = ids.data_as<int32_t>()[t * top_k + j];
      std::vector<double> act(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < H; ++c) {
          g += static_cast<double>(experts.gate_up.f32()[(e * 2 * I + i) * H + c]) * x.f32()[t * H + c];
          u += static_cast<double>(experts.gate_up.f32()[(e * 2 * I + I + i) * H + c]) * x.f32()[t * H + c];
        }
        act[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t n = 0; n < H; ++n) {
        double s = 0;
        for (int64_t i = 0; i < I; ++i) s += experts.down.f32()[(e * H + n) * I + i] * act[i];
        ref[n] += weights.f32()[t * top_k + j] * s;
      }
    }
    for (int64_t n = 0; n < H; ++n) EXPECT_TRUE(std::fabs(y.f32()[t * H + n] - ref[n]) <= 1e-4) << t << " " << n;
  }
}

// The expert's rows are read from its own slab: a row routed to expert e is unchanged when the other experts'
// weights change.
TEST_F(CpuOps, MoeExpertsReadOnlyTheRoutedExpertsSlab) {
  SCOPED_TRACE(trace());
  const int64_t T = 2, H = 8, I = 3, E = 4, top_k = 1;
  const ExpertWeights experts{test::random_tensor(rng_, {E, 2 * I, H}), test::random_tensor(rng_, {E, H, I})};
  ExpertWeights other{test::clone(experts.gate_up), test::clone(experts.down)};
  for (int64_t e : {0, 1, 3}) {
    for (int64_t i = 0; i < 2 * I * H; ++i) other.gate_up.f32()[e * 2 * I * H + i] += 1.0f;
    for (int64_t i = 0; i < H * I; ++i) other.down.f32()[e * H * I + i] -= 1.0f;
  }
  const Tensor x = test::random_tensor(rng_, {T, H}), weights = Tensor::from_f32({0.5f, 2.0f}, {T, top_k});
  Tensor ids = Tensor::zeros(DType::kI32, {T, top_k});
  ids.data_as<int32_t>()[0] = ids.data_as<int32_t>()[1] = 2;
  Tensor y = Tensor::zeros(DType::kF32, {T, H}), y_other = Tensor::zeros(DType::kF32, {T, H});
  be_.moe_experts(x, ids, weights, experts, y);
  be_.moe_experts(x, ids, weights, other, y_other);
  EXPECT_TRUE(test::same_bits(y, y_other));
}

TEST_F(CpuOps, MemoryAndKvDtypeOfTheReference) {
  EXPECT_EQ(be_.device(), Device::kCpu);
  EXPECT_EQ(be_.kv_dtype(), DType::kF32);  // the reference keeps its attention caches in full precision
  const Tensor e = be_.empty(DType::kI32, {3, 5});
  EXPECT_EQ(e.dtype(), DType::kI32);
  EXPECT_EQ(e.shape(), (Shape{3, 5}));
  EXPECT_EQ(e.device(), Device::kCpu);
  be_.synchronize();  // nothing is queued on the CPU: returns at once
  const Tensor z = be_.zeros(DType::kF32, {4});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(z.f32()[i], 0.0f);
}

TEST_F(CpuOps, EmbeddingRefusesOutOfRangeIds) {
  const Tensor table = test::random_tensor(rng_, {4, 3});
  Tensor out = Tensor::zeros(DType::kF32, {1, 3});
  EXPECT_THROW(be_.embedding(table, {4}, out), Error);
  EXPECT_THROW(be_.embedding(table, {-1}, out), Error);
  be_.embedding(table, {2}, out);
  EXPECT_EQ(out.f32()[1], table.f32()[7]);
}

TEST_F(CpuOps, EmbeddingTakesIdsFromATensor) {
  const Tensor table = test::random_tensor(rng_, {4, 3});
  std::vector<int32_t> ids{3, 0, 3};
  Tensor from_tensor = Tensor::zeros(DType::kF32, {3, 3}), from_host = Tensor::zeros(DType::kF32, {3, 3});
  be_.embedding(table, Tensor(DType::kI32, {3}, Device::kCpu, ids.data(), nullptr), from_tensor);
  be_.embedding(table, ids, from_host);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(from_tensor.f32()[i], from_host.f32()[i]) << i;
  ids[1] = 4;
  EXPECT_THROW(be_.embedding(table, Tensor(DType::kI32, {3}, Device::kCpu, ids.data(), nullptr), from_tensor), Error);
  const Tensor as_f32 = Tensor::zeros(DType::kF32, {3});
  EXPECT_THROW(be_.embedding(table, as_f32, from_tensor), Error);
}

}  // namespace
}  // namespace plumb
