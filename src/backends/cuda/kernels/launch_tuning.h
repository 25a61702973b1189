// The numbers a GPU architecture's launches are shaped by, one table per architecture (launch_tuning_sm90.cu: the
// Hopper measurements each number comes from). None of them changes a result: the kernel contract makes every
// kernel's bits the same at each product shape, K split, warp count and grid size (docs/kernel-contract.md), so a
// table decides speed only. The choices that read them are written once for every architecture (launch_choices.h).
#pragma once

#include "backends/cuda/kernels/device_limits.h"

namespace plumb::cuda {

struct LaunchTuning {
  // Decode products (the streaming shapes, 1 to 64 rows): K is spread over blocks until the GPU holds about this
  // many warps of 16 output features a multiprocessor...
  int stream_warps_per_sm;          // ... for a plain product of BF16 weights
  int grouped_stream_warps_per_sm;  // ... for a grouped one (MoE experts, a tile list) of BF16 weights
  int fp8_plain_8_row_factor;       // ... times this for a plain product of FP8 weights and up to 8 rows
  int fp8_factor;                   // ... times this for the other FP8 streaming products
  // ... while the partial sums a split stores stay within this many bytes a byte of the weights they stand for.
  double bf16_partial_bytes_per_weight_byte;
  double fp8_partial_bytes_per_weight_byte;
  double nvfp4_partial_bytes_per_weight_byte;
  // Prefill products: 128-feature tiles while they still give every multiprocessor this many blocks (else 64).
  int wide_tile_blocks_per_sm;
  // Prefill products (BF16 and FP8 weights, more than 64 rows a matrix) on warpgroup MMA where the device and the
  // build have it (linear_wgmma_runs); else on the tiled mma.sync kernel.
  bool prefill_on_wgmma;
  // Shared memory a block of the decode products' shared-memory ring takes beyond its ring (its static shared memory
  // and what the runtime reserves a block), in bytes: what decides how many of its blocks a multiprocessor holds.
  int ring_block_extra_smem;
  // Blocks of 256 threads a multiprocessor for the grid-striding elementwise kernels.
  int grid_stride_blocks_per_sm;
};

// Hopper (sm_90: the H100 and H200).
extern const LaunchTuning kSm90Tuning;

// The table for a device of compute capability major.minor: sm_90's for 9.x, and sm_90's for the others too until
// one is measured there (their results are the same; their speed is not tuned).
const LaunchTuning& launch_tuning(int major, int minor);

}  // namespace plumb::cuda
