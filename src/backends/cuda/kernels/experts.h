// The routed experts of an MoE layer, around the grouped products of linear.h: group each token's (token, slot)
// pairs by expert on the device, then after the gate_up product apply SiLU(gate) ⊙ up, and after the down product
// combine each token's slots in slot order. Expert ids stay on the device: no host synchronization, and launch
// shapes depend only on the number of pairs and experts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// The grouping kernel keeps per-warp counts of every expert in shared memory (32 x experts ints).
constexpr int kMoeMaxExperts = 1024;

// An upper bound on the row tiles the grouping makes: each non-empty expert needs ceil(rows / tile_rows) tiles,
// at most rows / tile_rows + 1, and every tile holds at least one pair.
constexpr int64_t moe_max_tiles(int64_t pairs, int64_t experts, int64_t tile_rows) {
  const int64_t by_expert = pairs / tile_rows + (experts < pairs ? experts : pairs);
  return by_expert < pairs ? by_expert : pairs;
}

// The rows a typical expert takes from `pairs` (token, slot) pairs over `experts` experts, which a grouped product's
// launch shape is chosen by: the grouping gives every expert its own tiles, so rows per expert, not per call, decide
// how full a tile is. Twice the even share (routing is uneven), at most every pair.
constexpr int64_t moe_rows_per_expert(int64_t pairs, int64_t experts) {
  const int64_t twice_share = 2 * ((pairs + experts - 1) / experts);
  return pairs < twice_share ? pairs : twice_share;
}

// Where the grouping reports expert ids outside [0, experts): the lowest such pair p and its id, packed as
// (p << 32) | uint32(id) by an integer atomicMin, so the report is the same whatever the timing. The host reads it
// after the stream's work and turns it into an error (CudaBackend::synchronize).
constexpr unsigned long long kMoeIdReportClear = ~0ull;
struct MoeIdReport {
  unsigned long long first_bad = kMoeIdReportClear;  // the packed pair and id; kMoeIdReportClear when none
  int32_t experts = 0;                               // the reporting call's experts
  int32_t top_k = 0;                                 // and slots per token
};

// Groups pairs p = t·top_k + j by expert, stably (ascending p within an expert): sorted row s holds one pair. A pair
// whose id lies outside [0, experts) joins no group (its pair_row is -1, so the combine skips it) and is reported.
struct MoeGroupParams {
  const int32_t* expert_ids = nullptr;  // [pairs] (T, top_k flattened)
  MoeIdReport* report = nullptr;        // [1] device: see MoeIdReport
  int32_t pairs = 0;
  int32_t top_k = 0;
  int32_t experts = 0;
  int32_t tile_rows = 0;         // rows per tile of the products that follow (linear_tile_rows)
  int32_t* row_token = nullptr;  // [pairs] out: the token of sorted row s
  int32_t* pair_row = nullptr;   // [pairs] out: the sorted row of pair p, -1 for a pair of a bad id
  int32_t* tiles = nullptr;      // [moe_max_tiles, 3] out: {expert, row_begin, row_end} per tile, by expert
  int32_t* num_tiles = nullptr;  // [1] out
  bool one_block = false;        // true: the block kernel even for 32 pairs or fewer (the op harness compares the two)
};
// Up to 32 pairs (a decode step of a few tokens) group in one warp, more in one block: the same grouping.
void launch_moe_group(const MoeGroupParams& params, KernelFault fault, cudaStream_t stream);
// The dynamic shared memory (bytes) launch_moe_group gives its kernel for an expert count (for the resource records).
int moe_group_smem_bytes(int experts);

// act[s, i] = SiLU(gate_up[s, i]) · gate_up[s, inter + i]. gate_up [rows, 2·inter] F32; act [rows, inter] F32, or
// BF16 bits (rounded to nearest even) when act_bf16.
struct MoeSiluMulParams {
  const float* gate_up = nullptr;
  void* act = nullptr;
  bool act_bf16 = false;
  int32_t rows = 0;
  int32_t inter = 0;
};
void launch_moe_silu_mul(const MoeSiluMulParams& params, KernelFault fault, cudaStream_t stream);

// y[t, h] = Σ_j weights[t, j] · down[pair_row[t·top_k + j], h], j ascending from 0, skipping rows of -1 (y is
// overwritten).
struct MoeCombineParams {
  const float* down = nullptr;        // [pairs, hidden] by sorted row
  const int32_t* pair_row = nullptr;  // [tokens, top_k]
  const float* weights = nullptr;     // [tokens, top_k]
  float* y = nullptr;                 // [tokens, hidden]
  int32_t tokens = 0;
  int32_t hidden = 0;
  int32_t top_k = 0;
};
void launch_moe_combine(const MoeCombineParams& params, KernelFault fault, cudaStream_t stream);

}  // namespace plumb::cuda
