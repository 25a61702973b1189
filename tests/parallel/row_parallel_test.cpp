// The row-parallel product on the CPU backend, ranks in threads: with the exact reduction every rank holds the unsplit
// product's bits at 1 to 4 ranks, for F32, BF16 and FP8 weights and either rounding of the reference; the sum
// reduction is the same run to run but not the unsplit bits (the control that shows the exact one is not trivially
// so); and the K split is whole slices.
#include "parallel/row_parallel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "parallel/thread_world.h"
#include "support/tensors.h"

namespace plumb::parallel {
namespace {

constexpr int64_t kRows = 5, kFeatures = 37, kK = 680;  // K: five whole slices of 128 and a short one of 40
constexpr std::chrono::milliseconds kTimeout{20000};

Tensor random_f32(Shape shape, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor t = Tensor::zeros(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
  return t;
}

// w [N, K] as `dtype`; FP8 with a multiplier per row and K-slice.
Tensor weight(DType dtype) {
  const Tensor f32 = random_f32({kFeatures, kK}, 7, 0.5f);
  if (dtype != DType::kF8E4M3) return test::to_dtype(f32, dtype);
  Tensor codes = Tensor::zeros(DType::kF8E4M3, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) codes.data_as<uint8_t>()[i] = f32_to_fp8_e4m3(f32.f32()[i] * 64.0f);
  Tensor scales = random_f32(Tensor::block_scales_shape(f32.shape()), 8, 1.0f);
  for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = (1.0f + std::abs(scales.f32()[i])) / 64.0f;
  return codes.with_block_scales(scales);
}

// Columns [begin, end) of a host F32 matrix.
Tensor columns_of(const Tensor& x, int64_t begin, int64_t end) {
  Tensor out = Tensor::zeros(DType::kF32, {x.dim(0), end - begin});
  for (int64_t r = 0; r < x.dim(0); ++r)
    for (int64_t c = begin; c < end; ++c) out.f32()[r * (end - begin) + c - begin] = x.f32()[r * x.dim(1) + c];
  return out;
}

// Every rank's y from row_parallel_linear at `world` ranks.
std::vector<Tensor> run(const Tensor& x, const Tensor& w, RowReduction reduction, int world, CpuRounding rounding) {
  std::vector<Tensor> ys(static_cast<size_t>(world));
  run_thread_ranks(world, kTimeout, [&](Collective& c) {
    CpuBackend be(rounding);
    const RowParallelShard shard = shard_row_parallel(w, reduction, row_parallel_split(kK, world), c.rank());
    const Tensor x_local = columns_of(x, shard.columns().begin, shard.columns().end);
    Tensor y = Tensor::zeros(DType::kF32, {kRows, kFeatures});
    row_parallel_linear(be, c, x_local, shard, y);
    ys[static_cast<size_t>(c.rank())] = y;
  });
  return ys;
}

TEST(RowParallel, ColumnsAreWholeSlicesEarlierRanksTakingTheExtra) {
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 256}, {256, 512}, {512, 640}, {640, 680}};
  for (int r = 0; r < 4; ++r) {
    const ColumnRange c = row_parallel_columns(kK, r, 4);
    EXPECT_EQ(c.begin, expected[static_cast<size_t>(r)].first) << "rank " << r;
    EXPECT_EQ(c.end, expected[static_cast<size_t>(r)].second) << "rank " << r;
  }
  EXPECT_EQ(row_parallel_columns(kK, 0, 1).end, kK);
  // Fewer slices than ranks: K's columns as evenly as they come (the exact reduction's exchange carries the slices
  // that cross ranks).
  EXPECT_EQ(row_parallel_columns(kK, 0, 7).end, 98);
  EXPECT_EQ(row_parallel_columns(kK, 6, 7).begin, 583);
  try {
    row_parallel_columns(5, 0, 7);
    FAIL() << "7 ranks over 5 columns were accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "row-parallel split: rank 0 of a world of 7 over K = 5");
  }
}

TEST(RowParallel, TheExactReductionGivesEveryRankTheUnsplitProductsBits) {
  const Tensor x = random_f32({kRows, kK}, 3, 1.0f);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (const CpuRounding rounding : {CpuRounding::kF32, CpuRounding::kBf16Operands}) {
      const Tensor w = weight(dtype);
      CpuBackend be(rounding);
      Tensor unsplit = Tensor::zeros(DType::kF32, {kRows, kFeatures});
      be.linear(x, w, unsplit);
      for (const int world : {1, 2, 3, 4, 7}) {  // 7: more ranks than slices, K split by columns
        const std::vector<Tensor> ys = run(x, w, RowReduction::kExact, world, rounding);
        for (int r = 0; r < world; ++r)
          EXPECT_TRUE(test::same_bits(ys[static_cast<size_t>(r)], unsplit))
              << dtype_name(dtype) << (rounding == CpuRounding::kF32 ? "" : ", BF16 operands") << ", " << world
              << " ranks, rank " << r;
      }
    }
  }
}

TEST(RowParallel, TheSumReductionRepeatsItselfButNotTheUnsplitBits) {
  const Tensor x = random_f32({kRows, kK}, 4, 1.0f);
  const Tensor w = weight(DType::kBF16);
  CpuBackend be;
  Tensor unsplit = Tensor::zeros(DType::kF32, {kRows, kFeatures});
  be.linear(x, w, unsplit);
  EXPECT_TRUE(test::same_bits(run(x, w, RowReduction::kSum, 1, CpuRounding::kF32)[0], unsplit));
  for (int world = 2; world <= 4; ++world) {
    const std::vector<Tensor> first = run(x, w, RowReduction::kSum, world, CpuRounding::kF32);
    const std::vector<Tensor> again = run(x, w, RowReduction::kSum, world, CpuRounding::kF32);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(test::same_bits(first[static_cast<size_t>(r)], first[0])) << world << " ranks, rank " << r;
      EXPECT_TRUE(test::same_bits(again[static_cast<size_t>(r)], first[0])) << world << " ranks, rank " << r;
    }
    int differing = 0;
    for (int64_t i = 0; i < unsplit.numel(); ++i) differing += first[0].f32()[i] != unsplit.f32()[i] ? 1 : 0;
    EXPECT_GT(differing, 0) << world << " ranks: the sum gave the unsplit bits, so the exact test shows nothing";
  }
}

// A sharded MLP block as a model would run it: gate and up column-parallel (each rank its share of the intermediate
// features), SiLU(gate) ⊙ up on that share, down row-parallel with the exact reduction.
TEST(RowParallel, AShardedMlpGivesTheUnshardedBits) {
  constexpr int64_t kHidden = 200, kInter = 520;  // kInter: four whole slices and one of 8
  const Tensor x = random_f32({kRows, kHidden}, 11, 1.0f);
  const Tensor gate = test::to_dtype(random_f32({kInter, kHidden}, 12, 0.1f), DType::kBF16);
  const Tensor up = test::to_dtype(random_f32({kInter, kHidden}, 13, 0.1f), DType::kBF16);
  const Tensor down = test::to_dtype(random_f32({kHidden, kInter}, 14, 0.1f), DType::kBF16);
  CpuBackend be;
  Tensor g = Tensor::zeros(DType::kF32, {kRows, kInter});  // [T, I]
  Tensor u = Tensor::zeros(DType::kF32, {kRows, kInter});  // [T, I]
  Tensor a = Tensor::zeros(DType::kF32, {kRows, kInter});  // [T, I]
  be.linear(x, gate, g);
  be.linear(x, up, u);
  be.silu_mul(g, u, a);
  Tensor unsharded = Tensor::zeros(DType::kF32, {kRows, kHidden});
  be.linear(a, down, unsharded);
  for (int world = 1; world <= 4; ++world) {
    std::vector<Tensor> ys(static_cast<size_t>(world));
    run_thread_ranks(world, kTimeout, [&](Collective& c) {
      CpuBackend rank_be;
      const ColumnRange share_range = row_parallel_columns(kInter, c.rank(), world);
      const Tensor gate_r = shard_column_parallel(gate, share_range);  // [I_r, H]
      const Tensor up_r = shard_column_parallel(up, share_range);      // [I_r, H]
      const RowParallelShard down_r =
          shard_row_parallel(down, RowReduction::kExact, row_parallel_split(kInter, world), c.rank());
      const int64_t share = gate_r.dim(0);
      Tensor g_r = Tensor::zeros(DType::kF32, {kRows, share}), u_r = Tensor::zeros(DType::kF32, {kRows, share});
      Tensor a_r = Tensor::zeros(DType::kF32, {kRows, share});
      rank_be.linear(x, gate_r, g_r);
      rank_be.linear(x, up_r, u_r);
      rank_be.silu_mul(g_r, u_r, a_r);
      Tensor y = Tensor::zeros(DType::kF32, {kRows, kHidden});
      row_parallel_linear(rank_be, c, a_r, down_r, y);
      ys[static_cast<size_t>(c.rank())] = y;
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(test::same_bits(ys[static_cast<size_t>(r)], unsharded)) << world << " ranks, rank " << r;
  }
}

// An attention or GDN block's output projection with its heads split over the ranks (each rank's heads' outputs are
// its columns of the projection's input): the unsplit bits, at head counts that divide unevenly and at heads that
// start inside a slice, whose activations the later ranks send to the slice's owner — heads of 64 at four ranks, and
// heads of 24 at six, where the first slice runs over all six ranks' columns.
TEST(RowParallel, AnOutputProjectionSplitByHeadsGivesTheUnsplitBits) {
  constexpr int64_t kHidden = 96;
  struct Case {
    int64_t heads, head_dim;
    DType dtype;
    int max_world;
  };
  for (const Case& c : {Case{5, 256, DType::kBF16, 4}, Case{4, 64, DType::kF8E4M3, 4}, Case{6, 24, DType::kF32, 6}}) {
    const int64_t k = c.heads * c.head_dim;
    const Tensor heads_out = random_f32({kRows, k}, 31, 1.0f);
    const Tensor f32 = random_f32({kHidden, k}, 32, 0.05f);
    Tensor o_proj = test::to_dtype(f32, c.dtype == DType::kF8E4M3 ? DType::kF32 : c.dtype);
    if (c.dtype == DType::kF8E4M3) {
      Tensor codes = Tensor::zeros(DType::kF8E4M3, f32.shape());
      for (int64_t i = 0; i < f32.numel(); ++i) codes.data_as<uint8_t>()[i] = f32_to_fp8_e4m3(f32.f32()[i] * 256.0f);
      Tensor scales = Tensor::zeros(DType::kF32, Tensor::block_scales_shape(f32.shape()));
      for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = (1.0f + 0.25f * static_cast<float>(i % 5)) / 256;
      o_proj = codes.with_block_scales(scales);
    }
    CpuBackend be;
    Tensor unsplit = Tensor::zeros(DType::kF32, {kRows, kHidden});
    be.linear(heads_out, o_proj, unsplit);
    for (int world = 1; world <= c.max_world; ++world) {
      std::vector<Tensor> ys(static_cast<size_t>(world));
      run_thread_ranks(world, kTimeout, [&](Collective& collective) {
        CpuBackend rank_be;
        const ColumnSplit split = head_split(c.heads, c.head_dim, world);
        const RowParallelShard shard = shard_row_parallel(o_proj, RowReduction::kExact, split, collective.rank());
        const ColumnRange mine = shard.columns();
        Tensor y = Tensor::zeros(DType::kF32, {kRows, kHidden});
        row_parallel_linear(rank_be, collective, columns_of(heads_out, mine.begin, mine.end), shard, y);
        ys[static_cast<size_t>(collective.rank())] = y;
      });
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(test::same_bits(ys[static_cast<size_t>(r)], unsplit))
            << c.heads << " heads of " << c.head_dim << ", " << world << " ranks, rank " << r;
    }
  }
  EXPECT_EQ(head_columns(5, 256, 1, 2).begin, 3 * 256);
  EXPECT_EQ(head_columns(6, 24, 5, 6).begin, 120);
}

TEST(RowParallel, VocabularyParallelLogitsAreTheUnsplitHeadsBits) {
  constexpr int64_t kVocab = 1001, kHidden = 300;
  const Tensor x = random_f32({kRows, kHidden}, 21, 1.0f);
  const Tensor head = test::to_dtype(random_f32({kVocab, kHidden}, 22, 0.1f), DType::kBF16);
  CpuBackend be;
  Tensor unsplit = Tensor::zeros(DType::kF32, {kRows, kVocab});
  be.linear(x, head, unsplit);
  EXPECT_EQ(vocab_rows(kVocab, 0, 4).end, 251);
  EXPECT_EQ(vocab_rows(kVocab, 3, 4).begin, 751);
  for (int world = 1; world <= 4; ++world) {
    std::vector<Tensor> logits(static_cast<size_t>(world));
    run_thread_ranks(world, kTimeout, [&](Collective& c) {
      CpuBackend rank_be;
      const ColumnRange rows = vocab_rows(kVocab, c.rank(), world);
      Tensor out = Tensor::zeros(DType::kF32, {kRows, kVocab});
      vocab_parallel_logits(rank_be, c, x, head.rows(rows.begin, rows.end), out);
      logits[static_cast<size_t>(c.rank())] = out;
    });
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(test::same_bits(logits[static_cast<size_t>(r)], unsplit)) << world << " ranks, rank " << r;
  }
}

TEST(RowParallel, AnActivationOfAnotherWidthIsRefused) {
  const Tensor w = weight(DType::kF32);
  std::string message;
  try {
    run_thread_ranks(1, kTimeout, [&](Collective& c) {
      CpuBackend be;
      const RowParallelShard shard = shard_row_parallel(w, RowReduction::kExact, row_parallel_split(kK, 1), 0);
      const Tensor x_local = Tensor::zeros(DType::kF32, {kRows, kK - 1});
      Tensor y = Tensor::zeros(DType::kF32, {kRows, kFeatures});
      row_parallel_linear(be, c, x_local, shard, y);
    });
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "rank 0: row-parallel product: x is [5, 679], expected [5, 680] (this rank's columns 0 to 680)");
}

}  // namespace
}  // namespace plumb::parallel
