// The MoE pieces around the grouped expert products: grouping pairs by expert, SiLU-multiply, and the slot-ordered
// combine. experts.h states the contract.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/experts.h"
#include "backends/cuda/kernels/launch.cuh"

namespace plumb::cuda {
namespace {

// ---- Grouping (one block). ----
//
// Warp w owns a contiguous run of pairs and walks it 32 at a time. Pass 1 counts its pairs per expert; a scan
// turns the counts into each warp's first sorted row per expert (experts in id order, warps in order within an
// expert); pass 2 walks the run again and places each pair after the lower lanes of its step with the same
// expert. Rows within an expert therefore follow ascending pair index, and no step depends on timing: the result
// is the same every run. Only integer counts are kept, and each is written by one lane at a time.
constexpr int kGroupThreads = 1024;
constexpr int kGroupWarps = kGroupThreads / 32;

// Inclusive prefix sums of (a, b) over the block's threads in thread order. totals: [2][kGroupWarps] scratch.
__device__ void block_inclusive_scan2(int& a, int& b, int (*totals)[kGroupWarps]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int d = 1; d < 32; d *= 2) {
    const int up_a = __shfl_up_sync(0xffffffffu, a, d), up_b = __shfl_up_sync(0xffffffffu, b, d);
    if (lane >= d) {
      a += up_a;
      b += up_b;
    }
  }
  if (lane == 31) {
    totals[0][warp] = a;
    totals[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    int ta = totals[0][lane], tb = totals[1][lane];
    for (int d = 1; d < 32; d *= 2) {
      const int up_a = __shfl_up_sync(0xffffffffu, ta, d), up_b = __shfl_up_sync(0xffffffffu, tb, d);
      if (lane >= d) {
        ta += up_a;
        tb += up_b;
      }
    }
    totals[0][lane] = ta;
    totals[1][lane] = tb;
  }
  __syncthreads();
  if (warp > 0) {
    a += totals[0][warp - 1];
    b += totals[1][warp - 1];
  }
}

template <KernelFault kFault>
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const MoeGroupParams p) {
  wait_for_prior_grid();
  extern __shared__ int32_t counts[];  // [kGroupWarps, experts]: a warp's pairs per expert, then its next row
  __shared__ int scan_totals[2][kGroupWarps];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int experts = p.experts;
  for (int i = tid; i < kGroupWarps * experts; i += kGroupThreads) counts[i] = 0;
  __syncthreads();

  const int per_warp = (p.pairs + kGroupWarps - 1) / kGroupWarps;
  const int begin = min(p.pairs, warp * per_warp), end = min(p.pairs, begin + per_warp);
  int32_t* warp_counts = counts + warp * experts;  // [experts]
  const unsigned lanes_below = (1u << lane) - 1u;
  // -1 for a pair past the warp's run or of an id outside [0, experts) (reported once, below). The planted control
  // clamps valid ids into [0, experts - 1), so the last expert's pairs join the group before it.
  const int last_expert = kFault == KernelFault::kExpertsGroupClampOffByOne ? max(experts - 2, 0) : experts - 1;
  auto expert_of = [&](int pair) {
    if (pair >= end) return -1;
    const int id = p.expert_ids[pair];
    return id >= 0 && id < experts ? min(id, last_expert) : -1;
  };

  for (int base = begin; base < end; base += 32) {
    const int e = expert_of(base + lane);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (peers & lanes_below) == 0) warp_counts[e] += __popc(peers);  // the lowest peer counts them
    __syncwarp();
  }
  __syncthreads();

  // Thread e: expert e's warps' counts become offsets within the expert; then its first row and first tile.
  int total = 0;
  if (tid < experts) {
    for (int w = 0; w < kGroupWarps; ++w) {
      const int c = counts[w * experts + tid];
      counts[w * experts + tid] = total;
      total += c;
    }
  }
  const int tiles = (total + p.tile_rows - 1) / p.tile_rows;
  int row0 = total, tile0 = tiles;
  block_inclusive_scan2(row0, tile0, scan_totals);
  row0 -= total;
  tile0 -= tiles;
  if (tid < experts) {
    for (int w = 0; w < kGroupWarps; ++w) counts[w * experts + tid] += row0;
    for (int i = 0; i < tiles; ++i) {
      int32_t* tile = p.tiles + 3 * (tile0 + i);
      tile[0] = tid;
      tile[1] = row0 + i * p.tile_rows;
      tile[2] = row0 + min(total, (i + 1) * p.tile_rows);
    }
  }
  if (tid == kGroupThreads - 1) *p.num_tiles = tile0 + tiles;
  __syncthreads();

  for (int base = begin; base < end; base += 32) {
    const int pair = base + lane;
    const int e = expert_of(pair);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int row = warp_counts[e] + __popc(peers & lanes_below);
      p.row_token[row] = pair / p.top_k;
      p.pair_row[pair] = row;
    } else if (pair < end) {
      // Integer atomics only: the lowest bad pair wins whatever the order, so the report is the same every run.
      p.pair_row[pair] = -1;
      const auto id = static_cast<uint32_t>(p.expert_ids[pair]);
      atomicMin(&p.report->first_bad, (static_cast<unsigned long long>(pair) << 32) | id);
      p.report->experts = experts;  // every reporting thread of the call stores the same values
      p.report->top_k = p.top_k;
    }
    __syncwarp();
    if (e >= 0 && (peers & lanes_below) == 0) warp_counts[e] += __popc(peers);
    __syncwarp();
  }
}

// ---- Grouping of up to 32 pairs (one warp). ----
//
// A decode step of a few tokens groups in one warp, with none of the block kernel's per-warp counts to clear and
// scan: lane q holds pair q, and what the block kernel counts, this one finds by comparing lanes. Pair q's sorted row
// is the number of pairs of a lower expert plus those of its own expert at a lower pair; its expert's first tile is
// the sum of every lower expert's tiles. Those are the block kernel's rows, tiles and tile order, so the two give
// the same grouping bit for bit, and the products after them the same bits.
constexpr int kGroupWarpPairs = 32;

template <KernelFault kFault>
__global__ void __launch_bounds__(kGroupWarpPairs) moe_group_warp_kernel(const MoeGroupParams p) {
  wait_for_prior_grid();
  const int lane = static_cast<int>(threadIdx.x);
  const unsigned lanes_below = (1u << lane) - 1u;
  // As in the block kernel: -1 for a lane past the pairs or an id outside [0, experts), and the planted control
  // clamps valid ids into [0, experts - 1).
  const int last_expert = kFault == KernelFault::kExpertsGroupClampOffByOne ? max(p.experts - 2, 0) : p.experts - 1;
  const bool real = lane < p.pairs;
  const int id = real ? p.expert_ids[lane] : -1;
  const int e = real && id >= 0 && id < p.experts ? min(id, last_expert) : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int count = __popc(peers);
  const bool leader = e >= 0 && (peers & lanes_below) == 0;  // the expert's lowest pair
  const int tiles = leader ? (count + p.tile_rows - 1) / p.tile_rows : 0;
  int row = 0, tile0 = 0;
  for (int q = 0; q < kGroupWarpPairs; ++q) {
    const int eq = __shfl_sync(0xffffffffu, e, q), tiles_q = __shfl_sync(0xffffffffu, tiles, q);
    if (eq >= 0 && (eq < e || (eq == e && q < lane))) ++row;
    if (eq >= 0 && eq < e) tile0 += tiles_q;
  }
  const int all_tiles = __reduce_add_sync(0xffffffffu, tiles);
  if (e >= 0) {
    p.row_token[row] = lane / p.top_k;
    p.pair_row[lane] = row;
  } else if (real) {
    // The block kernel's report: the lowest bad pair wins through an integer atomic, whatever the order.
    p.pair_row[lane] = -1;
    atomicMin(&p.report->first_bad, (static_cast<unsigned long long>(lane) << 32) | static_cast<uint32_t>(id));
    p.report->experts = p.experts;
    p.report->top_k = p.top_k;
  }
  // A leader's row is its expert's first.
  for (int i = 0; i < tiles; ++i) {
    int32_t* tile = p.tiles + 3 * (tile0 + i);
    tile[0] = e;
    tile[1] = row + i * p.tile_rows;
    tile[2] = row + min(count, (i + 1) * p.tile_rows);
  }
  if (lane == 0) *p.num_tiles = all_tiles;
}

// ---- SiLU-multiply. ----

constexpr int kElementwiseThreads = 256;

template <bool kBf16, KernelFault kFault>
__global__ void __launch_bounds__(kElementwiseThreads) moe_silu_mul_kernel(const MoeSiluMulParams p) {
  wait_for_prior_grid();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(p.rows) * p.inter) return;
  const int64_t row = i / p.inter, c = i % p.inter;
  const float* gate_up = p.gate_up + row * 2 * p.inter;  // [2·inter]
  const float gate = gate_up[c], up = gate_up[p.inter + c];
  // The planted control takes the sigmoid of the wrong operand.
  const float sigmoid_of = kFault == KernelFault::kExpertsSiluSigmoidOfUp ? up : gate;
  const float act = gate / (1.0f + expf(-sigmoid_of)) * up;
  if constexpr (kBf16) {
    static_cast<uint16_t*>(p.act)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(act));
  } else {
    static_cast<float*>(p.act)[i] = act;
  }
}

// ---- Combine. ----

// Block (token, column block); each thread sums one column over the token's slots in slot order, as the CPU does.
template <KernelFault kFault>
__global__ void __launch_bounds__(kElementwiseThreads) moe_combine_kernel(const MoeCombineParams p) {
  wait_for_prior_grid();
  const int t = static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y) * kElementwiseThreads + static_cast<int>(threadIdx.x);
  if (h >= p.hidden) return;
  // The planted control leaves out each token's last routed expert.
  const int slots = kFault == KernelFault::kExpertsDropLastExpert ? p.top_k - 1 : p.top_k;
  const int32_t* rows = p.pair_row + static_cast<int64_t>(t) * p.top_k;  // [top_k]
  const float* weights = p.weights + static_cast<int64_t>(t) * p.top_k;  // [top_k]
  float acc = 0.0f;
  for (int j = 0; j < slots; ++j) {
    if (rows[j] < 0) continue;  // a pair of a bad id, reported by the grouping
    acc = __fadd_rn(acc, __fmul_rn(weights[j], p.down[static_cast<int64_t>(rows[j]) * p.hidden + h]));
  }
  p.y[static_cast<int64_t>(t) * p.hidden + h] = acc;
}

template <KernelFault kFault>
void launch_moe_group_as(const MoeGroupParams& params, cudaStream_t stream) {
  const int smem = moe_group_smem_bytes(params.experts);
  if (smem > 48 * 1024) {
    // Allow the kernel all the shared memory the device offers, once per device. A failure, or a device offering
    // too little for this many experts, surfaces at the launch, which the caller checks.
    static std::atomic<uint64_t> devices_done{0};
    int device = 0;
    cudaGetDevice(&device);
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (bit == 0 || (devices_done.load(std::memory_order_relaxed) & bit) == 0) {
      cudaFuncAttributes attributes{};
      const int optin = device_limits().smem_per_block_optin;
      if (optin > 0 && cudaFuncGetAttributes(&attributes, moe_group_kernel<kFault>) == cudaSuccess &&
          cudaFuncSetAttribute(moe_group_kernel<kFault>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               optin - static_cast<int>(attributes.sharedSizeBytes)) == cudaSuccess) {
        devices_done.fetch_or(bit, std::memory_order_relaxed);
      }
    }
  }
  launch_kernel(moe_group_kernel<kFault>, 1, kGroupThreads, smem, stream, params);
}

template <KernelFault kFault>
void launch_moe_silu_mul_as(const MoeSiluMulParams& params, int64_t count, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((count + kElementwiseThreads - 1) / kElementwiseThreads);
  if (params.act_bf16) {
    launch_kernel(moe_silu_mul_kernel<true, kFault>, blocks, kElementwiseThreads, 0, stream, params);
  } else {
    launch_kernel(moe_silu_mul_kernel<false, kFault>, blocks, kElementwiseThreads, 0, stream, params);
  }
}

}  // namespace

int moe_group_smem_bytes(int experts) {
  return kGroupWarps * experts * static_cast<int>(sizeof(int32_t));
}

void launch_moe_group(const MoeGroupParams& params, KernelFault fault, cudaStream_t stream) {
  if (params.pairs == 0) return;
  dispatch_fault<KernelFault::kExpertsGroupClampOffByOne>(fault, [&](auto planted) {
    if (params.pairs <= kGroupWarpPairs && !params.one_block) {
      launch_kernel(moe_group_warp_kernel<decltype(planted)::value>, 1, kGroupWarpPairs, 0, stream, params);
    } else {
      launch_moe_group_as<decltype(planted)::value>(params, stream);
    }
  });
}

void launch_moe_silu_mul(const MoeSiluMulParams& params, KernelFault fault, cudaStream_t stream) {
  const int64_t count = static_cast<int64_t>(params.rows) * params.inter;
  if (count == 0) return;
  dispatch_fault<KernelFault::kExpertsSiluSigmoidOfUp>(
      fault, [&](auto planted) { launch_moe_silu_mul_as<decltype(planted)::value>(params, count, stream); });
}

void launch_moe_combine(const MoeCombineParams& params, KernelFault fault, cudaStream_t stream) {
  if (params.tokens == 0 || params.hidden == 0) return;
  const dim3 grid(static_cast<unsigned>(params.tokens),
                  static_cast<unsigned>((params.hidden + kElementwiseThreads - 1) / kElementwiseThreads));
  dispatch_fault<KernelFault::kExpertsDropLastExpert>(fault, [&](auto planted) {
    launch_kernel(moe_combine_kernel<decltype(planted)::value>, grid, kElementwiseThreads, 0, stream, params);
  });
}

}  // namespace plumb::cuda
