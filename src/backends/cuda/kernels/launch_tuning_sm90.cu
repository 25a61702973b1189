// Hopper's launch numbers (launch_tuning.h), each with the measurement behind it (on the H200); docs/performance.md
// holds the tables these sweeps produced.
#include "backends/cuda/kernels/launch_tuning.h"

namespace plumb::cuda {

const LaunchTuning kSm90Tuning = {
    // Measured on the H200 (the split sweep of bench/linear): at one to 16 rows a BF16 product runs fastest with
    // about four warps a multiprocessor, K split to make up the rest (8192 x 2048: whole; 4096 x 2048: 2; 2048 x 4096:
    // 4; 512 x 2048: 16); more, shorter blocks lose more to their start-up and their partial sums than they gain in
    // loads in flight.
    .stream_warps_per_sm = 4,
    // A grouped product ran the register-ring kernel when this was measured, whose warps keep fewer loads in flight
    // than the shared-memory ring's: it wants twice as many of them. (A grouped FP8 product at batch 1 now fits the
    // ring, its tiles one row each, at this same count: 16 warps a multiprocessor, FP8's count for a plain product.)
    .grouped_stream_warps_per_sm = 8,
    // FP8 weights cost instructions to widen (a few per pair of codes), and a warp waits on their results: with a
    // BF16 product's four warps a multiprocessor, one or two a scheduler, half its issue cycles go unused (ncu,
    // 12288 x 2048 at T=1). linear_bench --weights fp8's sweep (H200, 2026-12-04): one to 8 rows run fastest with
    // about 16 warps a multiprocessor (12288 x 2048: split 2, 20.4 against 23.5 µs whole; 8192 x 2048: 4;
    // 4096 x 2048: 8; 2048 x 4096: 16), 16 rows with about 8 (8192 x 2048: 2; 2048 x 4096: 8, 21 against 52 µs
    // whole).
    .fp8_plain_8_row_factor = 4,
    .fp8_factor = 2,
    // The partial sums travel through L2 and back: worth it only while small beside the weights they replace (BF16:
    // a quarter of their bytes). FP8's and NVFP4's gain from more warps outweighs partial sums of twice and four times
    // their weights' bytes, which 64 rows' come to (a split stores rows x 4 bytes a feature and 128 k, against 128
    // bytes of E4M3 codes or 64 of E2M1): linear_bench on the H100 (2026-12-07), split against whole at 64 rows,
    // FP8: 1024 x 2048 27.0 against 54.7 µs, 2048 x 4096 44.8 against 101.9, 4096 x 2048 35.5 against 55.5; NVFP4:
    // 26.7 against 59.5, 44.7 against 111.2, 35.2 against 59.5, and at 32 rows 17.2 against 37.0, 26.6 against 67.1,
    // 22.3 against 37.1. The splits this gives lose at 8192 x 2048 (split 2: FP8 25 %, NVFP4 14 %) and 2048 x 512
    // (split 4: 27 % and 17 %) at 64 rows (docs/performance.md).
    .bf16_partial_bytes_per_weight_byte = 0.25,
    .fp8_partial_bytes_per_weight_byte = 2.0,
    .nvfp4_partial_bytes_per_weight_byte = 4.0,
    // Two blocks a multiprocessor keep one block's loads in flight while the other multiplies.
    .wide_tile_blocks_per_sm = 2,
    // linear_bench at 4096 rows (H100, 2026-12-07, the warp-specialized kernel): warpgroup MMA runs every measured
    // shape at least as fast as the tiled kernel, down to grids of 64 blocks: BF16 12288 x 2048 226 against 168
    // TFLOP/s, 1024 x 2048 220 against 152 (tiled64), 256 x 2048 104 against 105 (tiled64), 2048 x 512 139 against
    // 116; FP8 240 against 114 (the tiled kernel spills with FP8's widening). Smaller grids (prefill chunks of 65 to
    // a few hundred rows) are not measured.
    .prefill_on_wgmma = true,
    // The 1 KiB the runtime reserves a block on sm_90 and the ring kernel's 128-256 bytes of static shared memory
    // (resource_usage.txt), rounded up.
    .ring_block_extra_smem = 2048,
    // Eight 256-thread blocks fill a multiprocessor's 2048 threads.
    .grid_stride_blocks_per_sm = 8,
};

}  // namespace plumb::cuda
