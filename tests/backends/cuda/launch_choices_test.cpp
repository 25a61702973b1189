// What the launch choices pick on the H200 (its limits written out, so no GPU is needed): the K splits and shapes
// the sweeps in docs/performance.md measured fastest, which launch_tuning_sm90.cu's numbers are there to give. A
// change to a number or to a choice's rule that moves one of these is a change of speed to measure again.
#include "backends/cuda/kernels/launch_choices.h"

#include <gtest/gtest.h>

#include "backends/cuda/kernels/linear.h"

namespace plumb::cuda {
namespace {

// An H200's: 132 multiprocessors, 228 KiB of shared memory each, 227 KiB a block, compute capability 9.0.
constexpr DeviceLimits kH200{132, 233472, 232448, 9, 0};

// The split production picks for a plain product of `rows` rows, n x k weights of `w_type`.
int32_t split(LinearWeights w_type, int64_t rows, int32_t n, int32_t k) {
  LinearParams p;
  p.w_type = w_type;
  p.shape = choose_linear_shape(w_type, rows, rows, n, true, kH200);
  p.rows = static_cast<int32_t>(rows);
  p.n = n;
  p.k = k;
  p.max_tiles = static_cast<int32_t>(linear_row_tiles(p));
  return choose_linear_k_split(p, kH200);
}

TEST(LaunchChoices, DecodeSplitsAreTheMeasuredFastest) {
  // BF16 at one row: about four warps of 16 features a multiprocessor.
  EXPECT_EQ(split(LinearWeights::kBF16, 1, 8192, 2048), 1);
  EXPECT_EQ(split(LinearWeights::kBF16, 1, 4096, 2048), 2);
  EXPECT_EQ(split(LinearWeights::kBF16, 1, 2048, 4096), 4);
  EXPECT_EQ(split(LinearWeights::kBF16, 1, 512, 2048), 16);
  // FP8 at one row: about 16.
  EXPECT_EQ(split(LinearWeights::kFp8, 1, 12288, 2048), 2);
  EXPECT_EQ(split(LinearWeights::kFp8, 1, 8192, 2048), 4);
  EXPECT_EQ(split(LinearWeights::kFp8, 1, 4096, 2048), 8);
  EXPECT_EQ(split(LinearWeights::kFp8, 1, 2048, 4096), 16);
  // FP8 at 16 rows: about 8.
  EXPECT_EQ(split(LinearWeights::kFp8, 16, 8192, 2048), 2);
  EXPECT_EQ(split(LinearWeights::kFp8, 16, 2048, 4096), 8);
  // NVFP4 as FP8 at one row; both split at 32 and 64 rows too, where keeping the partial sums within the weights'
  // bytes kept them whole (linear_bench: about twice as fast split).
  EXPECT_EQ(split(LinearWeights::kNvfp4, 1, 12288, 2048), 2);
  EXPECT_EQ(split(LinearWeights::kNvfp4, 1, 2048, 4096), 16);
  EXPECT_EQ(split(LinearWeights::kNvfp4, 32, 4096, 2048), 4);
  EXPECT_EQ(split(LinearWeights::kNvfp4, 64, 2048, 4096), 8);
  EXPECT_EQ(split(LinearWeights::kNvfp4, 64, 1024, 2048), 16);
  EXPECT_EQ(split(LinearWeights::kFp8, 64, 2048, 4096), 8);
  EXPECT_EQ(split(LinearWeights::kFp8, 64, 1024, 2048), 16);
  EXPECT_EQ(split(LinearWeights::kFp8, 64, 12288, 2048), 1);
  // Prefill shapes never split.
  EXPECT_EQ(split(LinearWeights::kBF16, 4096, 2048, 4096), 1);
}

TEST(LaunchChoices, ShapesFollowTheRowsAndTheWeights) {
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 1, 1, 2048, true, kH200), LinearShape::kStream8);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 16, 16, 2048, true, kH200), LinearShape::kStream16);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 64, 64, 2048, true, kH200), LinearShape::kStream64);
  // Prefill: on warpgroup MMA where the device has it; else the tiled kernel, wide tiles while they give every
  // multiprocessor two blocks (2048 features x 4096 rows: 512 blocks; x 128 rows: 16). The smallest grid measured on
  // warpgroup MMA is 64 blocks (256 x 2048 at 4096 rows, a tie with tiled64); 128 rows' 16 blocks are not measured.
  EXPECT_EQ(choose_linear_shape(LinearWeights::kFp8, 4096, 4096, 2048, true, kH200), LinearShape::kWgmma128);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 4096, 4096, 2048, true, kH200), LinearShape::kWgmma128);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 128, 128, 2048, true, kH200), LinearShape::kWgmma128);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kFp8, 4096, 4096, 2048, false, kH200), LinearShape::kTiled128);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 4096, 4096, 2048, false, kH200), LinearShape::kTiled128);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kBF16, 128, 128, 2048, false, kH200), LinearShape::kTiled64);
  EXPECT_EQ(choose_linear_shape(LinearWeights::kF32, 1, 1, 2048, true, kH200), LinearShape::kF32);
}

TEST(LaunchChoices, BlocksWarpsAndSlicesFitTheDevice) {
  // Register-ring warps a block: four while the blocks still cover every multiprocessor, fewer below that.
  EXPECT_EQ(choose_linear_stream_warps(512 * 4, 4, kH200), 4);
  EXPECT_EQ(choose_linear_stream_warps(300, 4, kH200), 2);
  EXPECT_EQ(choose_linear_stream_warps(100, 4, kH200), 1);
  // The shared-memory ring takes a product whose blocks all fit at once: 228 KiB over (20 KiB + 2 KiB) is 10 a
  // multiprocessor, 1320 on the GPU.
  EXPECT_TRUE(linear_ring_holds_all_blocks(1320, 20480, kH200));
  EXPECT_FALSE(linear_ring_holds_all_blocks(1321, 20480, kH200));
  // The chunked delta rule's 32-column slices fit at key dims up to 128.
  EXPECT_EQ(choose_gdn_chunk_state_columns(128, kH200), 32);
  EXPECT_EQ(choose_gdn_chunk_state_columns(256, kH200), 8);
  EXPECT_EQ(grid_stride_block_cap(kH200), 8 * 132);
  // A token row's cluster: 16 blocks while every row's cluster still fits one wave of 132 multiprocessors, then
  // halves; 8 at most where 16 cannot be co-scheduled.
  EXPECT_EQ(choose_sample_cluster_blocks(1, 16, kH200), 16u);
  EXPECT_EQ(choose_sample_cluster_blocks(8, 16, kH200), 16u);
  EXPECT_EQ(choose_sample_cluster_blocks(9, 16, kH200), 8u);
  EXPECT_EQ(choose_sample_cluster_blocks(64, 16, kH200), 2u);
  EXPECT_EQ(choose_sample_cluster_blocks(66, 16, kH200), 2u);
  EXPECT_EQ(choose_sample_cluster_blocks(67, 16, kH200), 1u);
  EXPECT_EQ(choose_sample_cluster_blocks(1, 8, kH200), 8u);
}

}  // namespace
}  // namespace plumb::cuda
