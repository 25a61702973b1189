// Gated DeltaNet chunked prefill, pass 1 of 2: for every chunk in parallel, the quantities that depend on the
// chunk's own tokens alone, written to a record per (chunk, value head) (layout in gdn_chunked_common.cuh) that pass 2
// (gdn_chunked.cu) consumes in chunk order:
//   the gates β_i, γ_i = g_0 + ... + g_i (summed in order, as the CPU reference does), Γ_i = e^{γ_i}, e^{γ_L − γ_i};
//   A[i, j] = β_i e^{γ_i − γ_j} k_i·k_j (j < i) and T = (I + A)^-1, so that pass 2's Δ = T (diag(β) V − diag(βΓ) K S0)
//   is the reference's U − W S0; P[i, j] = e^{γ_i − γ_j} q_i·k_j (j <= i);
//   the inverse norms of k_i and q_i, which pass 2 applies to its products of the raw rows.
// One CTA per (chunk, key head): K Kᵀ and Q Kᵀ are shared by the key head's nv / nk value heads.
//
// Exact: every value is a fixed-order sum (the 3xTF32 Gram products over dk in k-steps of 8, the triangular solve
// row by row in four interleaved partial sums) of the chunk's own inputs.
#include <cuda_runtime.h>

#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/gdn_chunked_common.cuh"
#include "backends/cuda/kernels/gdn_device.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace plumb::cuda {
namespace {

constexpr int kPrepareThreads = 256;  // 8 warps
constexpr int kGramStride = 68;       // G and A rows, as T's
constexpr int kPairs = 4;             // warp pairs: each takes one value head at a time after the Gram products

// The CTA's shared memory, in floats.
struct PrepareLayout {
  int dkp, xs;
  int kq;     // K̂ [64][xs], then Q̂ [64][xs]; once the Gram products are done, the warp pairs' A [4][64][68]
  int gkk;    // [64][68]: K̂ K̂ᵀ (the lower 16 × 8 tiles)
  int gqk;    // [64][68]: Q̂ K̂ᵀ (likewise)
  int inv;    // [2][64]: 1/‖k_i‖, 1/‖q_i‖
  int gates;  // [4 pairs][4][64]: β, γ, Γ, e^{γ_L − γ_i}
  int total;
  __host__ __device__ explicit PrepareLayout(int dk) : dkp(gdn_padded_dim(dk)), xs(dkp + 4) {
    const int kq_floats = 2 * kChunkLen * xs, a_floats = kPairs * kChunkLen * kGramStride;
    kq = 0;
    gkk = kq + (kq_floats > a_floats ? kq_floats : a_floats);
    gqk = gkk + kChunkLen * kGramStride;
    inv = gqk + kChunkLen * kGramStride;
    gates = inv + 2 * kChunkLen;
    total = gates + kPairs * 4 * kChunkLen;
  }
};

// The lower 16 × 8 tiles of a 64 × 64 Gram matrix (m-tile m holds n-tiles 0 .. 2m+1: 20 in all), as runs of
// n-tiles on one m-tile, five tiles for each of the four warps that share the matrix.
struct TileRun {
  int m, n0, count;
};
__device__ __forceinline__ TileRun gram_run(int warp_in_group, int run) {
  // Runs (m, n0, count): warp 0 {(3, 0, 5)}, warp 1 {(3, 5, 3), (0, 0, 2)}, warp 2 {(2, 0, 5)}, warp 3 {(2, 5, 1),
  // (1, 0, 4)}; selects rather than a table, which would live in local memory.
  const bool odd = warp_in_group % 2 == 1;
  if (run == 0) return {warp_in_group < 2 ? 3 : 2, odd ? 5 : 0, odd ? (warp_in_group == 1 ? 3 : 1) : 5};
  return {warp_in_group == 1 ? 0 : 1, 0, odd ? (warp_in_group == 1 ? 2 : 4) : 0};
}

// Named barrier of the 64 threads of warp pair `pair` (ids 1..4; 0 is __syncthreads).
__device__ __forceinline__ void pair_sync(int pair) {
  asm volatile("bar.sync %0, 64;\n" ::"r"(pair + 1) : "memory");
}

// Column c of T = (I + A)^-1 for strictly lower A [64][68] (row i: T_i = e_i − Σ_{j<i} A_ij T_j), one thread per
// column; t[i] = T[i][c]. Fully unrolled so that t stays in registers: row i adds its i terms in four partial sums
// (j mod 4, ascending j), combined as (s0 + s1) + (s2 + s3).
__device__ __forceinline__ void solve_column(const float* sA, int c, float (&t)[kChunkLen]) {
#pragma unroll
  for (int i = 0; i < kChunkLen; ++i) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < kChunkLen / 4; ++q) {
      if (4 * q < i) {
        const float4 a = *reinterpret_cast<const float4*>(sA + i * kGramStride + 4 * q);
        s[0] = fmaf(a.x, t[4 * q], s[0]);
        if (4 * q + 1 < i) s[1] = fmaf(a.y, t[4 * q + 1], s[1]);
        if (4 * q + 2 < i) s[2] = fmaf(a.z, t[4 * q + 2], s[2]);
        if (4 * q + 3 < i) s[3] = fmaf(a.w, t[4 * q + 3], s[3]);
      }
    }
    const float sum = (s[0] + s[1]) + (s[2] + s[3]);
    t[i] = c < i ? -sum : (c == i ? 1.0f : 0.0f);
  }
}

// grid (chunks, nk), 256 threads.
template <KernelFault kFault>
__global__ void __launch_bounds__(kPrepareThreads, 2)
    gdn_chunk_prepare_kernel(const GatedDeltaRuleParams p, const GdnChunkedPlan plan, const bool vec4) {
  wait_for_prior_grid();
  extern __shared__ float4 shared_memory[];
  float* const smem = reinterpret_cast<float*>(shared_memory);
  const PrepareLayout lay(p.key_dim);
  const GdnChunk chunk = plan.chunks[blockIdx.x];
  const int kh = blockIdx.y;
  const int dk = p.key_dim, dkp = lay.dkp, xs = lay.xs, L = chunk.length, nv = p.value_heads;
  const int group = nv / p.key_heads;  // value heads per key head
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* const sK = smem + lay.kq;  // [64][xs]
  float* const sQ = sK + kChunkLen * xs;
  float* const sInv = smem + lay.inv;

  // (1) The chunk's raw q and k rows of key head kh; zero rows past L and zero columns past dk.
  const float* const q_src = p.qkv + chunk.row * p.qkv_stride + static_cast<int64_t>(kh) * dk;  // [L][dk], stride
  const float* const k_src = q_src + static_cast<int64_t>(p.key_heads) * dk;
  copy_rows_async<kPrepareThreads>(sK, xs, k_src, p.qkv_stride, L, dk, vec4);
  copy_rows_async<kPrepareThreads>(sQ, xs, q_src, p.qkv_stride, L, dk, vec4);
  cp_async_commit();
  zero_rows<kPrepareThreads>(sK, xs, L, kChunkLen, dkp);
  zero_rows<kPrepareThreads>(sQ, xs, L, kChunkLen, dkp);
  for (int e = threadIdx.x; e < L * (dkp - dk); e += kPrepareThreads) {
    const int r = e / (dkp - dk), x = dk + e % (dkp - dk);
    sK[r * xs + x] = 0.0f;
    sQ[r * xs + x] = 0.0f;
  }
  cp_async_wait<0>();
  __syncthreads();

  // (2) L2-normalize in place, warp w taking rows w, w + 8, ... of K and of Q. Lane l sums the elements 4l .. 4l+3
  // (+ 128 per further block) in order, then the warp butterfly; the scale as the reference rounds it.
  for (int r = warp; r < 2 * kChunkLen; r += kPrepareThreads / 32) {
    const bool is_q = r >= kChunkLen;
    float* const row = (is_q ? sQ : sK) + (r % kChunkLen) * xs;
    float sum = 0.0f;
    for (int x0 = 4 * lane; x0 < dkp; x0 += 128) {
      const float4 v = *reinterpret_cast<const float4*>(row + x0);
      sum = fmaf(v.x, v.x, sum);
      sum = fmaf(v.y, v.y, sum);
      sum = fmaf(v.z, v.z, sum);
      sum = fmaf(v.w, v.w, sum);
    }
    const float inv = __frcp_rn(__fsqrt_rn(__fadd_rn(warp_sum(sum), kGdnL2NormEps)));
    const float scale = is_q ? p.q_scale : 1.0f;  // k: x · inv · 1 is x · inv exactly
    for (int x0 = 4 * lane; x0 < dkp; x0 += 128) {
      float4 v = *reinterpret_cast<const float4*>(row + x0);
      v.x = __fmul_rn(__fmul_rn(v.x, inv), scale);
      v.y = __fmul_rn(__fmul_rn(v.y, inv), scale);
      v.z = __fmul_rn(__fmul_rn(v.z, inv), scale);
      v.w = __fmul_rn(__fmul_rn(v.w, inv), scale);
      *reinterpret_cast<float4*>(row + x0) = v;
    }
    if (lane == 0) sInv[(is_q ? kChunkLen : 0) + r % kChunkLen] = inv;
  }
  __syncthreads();

  // (3) The Gram products' lower tiles in 3xTF32: warps 0-3 K̂ K̂ᵀ, warps 4-7 Q̂ K̂ᵀ, over dk in k-steps of 8. The B
  // fragment of n-tile n is A's layout read from K̂'s rows 8n .. 8n+7: tiles 0-3 of one ldmatrix are k-steps
  // k0 (b0, b1) and k0 + 8 (b0, b1).
  {
    float* const gram = smem + (warp < 4 ? lay.gkk : lay.gqk);
    const int g = lane / 4, t = lane % 4;
    const uint32_t a_rows = shared_address((warp < 4 ? sK : sQ) + a_fragment_offset(xs, lane));
    const uint32_t b_rows = shared_address(sK + (lane % 8) * xs + 4 * (lane / 8));
#pragma unroll
    for (int run_index = 0; run_index < 2; ++run_index) {
      const TileRun run = gram_run(warp % 4, run_index);
      if (run.count == 0) continue;
      float acc[5][4] = {};
      for (int k0 = 0; k0 < dkp; k0 += 16) {
        uint32_t a0[4], a1[4];
        ldmatrix_x4(a0, a_rows + 4 * (16 * run.m * xs + k0));
        ldmatrix_x4(a1, a_rows + 4 * (16 * run.m * xs + k0 + 8));
        const SplitA s0 = split_a(a0), s1 = split_a(a1);
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          if (j < run.count) {
            uint32_t b[4];
            ldmatrix_x4(b, b_rows + 4 * (8 * (run.n0 + j) * xs + k0));
            const SplitA sb = split_a(b);  // {b0, b1} of k-step k0, then of k0 + 8
            mma_3xtf32(acc[j], s0, {sb.hi[0], sb.hi[1]}, {sb.lo[0], sb.lo[1]});
            mma_3xtf32(acc[j], s1, {sb.hi[2], sb.hi[3]}, {sb.lo[2], sb.lo[3]});
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 5; ++j) {
        if (j < run.count) {
          float* const out = gram + (16 * run.m + g) * kGramStride + 8 * (run.n0 + j) + 2 * t;
          *reinterpret_cast<float2*>(out) = make_float2(acc[j][0], acc[j][1]);
          *reinterpret_cast<float2*>(out + 8 * kGramStride) = make_float2(acc[j][2], acc[j][3]);
        }
      }
    }
  }
  __syncthreads();  // K̂ and Q̂ are dead from here: their space holds the pairs' A

  // (4) Warp pair π takes value heads π, π + 4, ... of the key head: gates, A and P, then T.
  const int pair = warp / 2, c = threadIdx.x % 64;  // c: the thread's column in the pair
  float* const sBeta = smem + lay.gates + pair * 4 * kChunkLen;
  float* const sGamma = sBeta + kChunkLen;
  float* const sGexp = sGamma + kChunkLen;
  float* const sWlast = sGexp + kChunkLen;
  float* const sA = smem + lay.kq + pair * kChunkLen * kGramStride;
  const float* const sGkk = smem + lay.gkk;
  const float* const sGqk = smem + lay.gqk;
  for (int member = pair; member < group; member += kPairs) {
    const int h = kh * group + member;
    float* const record = plan.records + (static_cast<int64_t>(blockIdx.x) * nv + h) * kRecordFloats;
    if (warp % 2 == 0) {
      for (int i = lane; i < kChunkLen; i += 32) {
        float beta = 0.0f, g = 0.0f;
        if (i < L) {
          const int64_t at = (chunk.row + i) * nv + h;
          gdn_gates<kFault>(p.a[at], p.b[at], p.A_log[h], p.dt_bias[h], beta, g);
        }
        sBeta[i] = beta;
        sGamma[i] = g;
      }
      __syncwarp();
      if (lane == 0) {
        float gamma[kChunkLen];  // g, then γ_i = g_0 + ... + g_i in order (g = 0 past L), in registers
#pragma unroll
        for (int i = 0; i < kChunkLen; i += 4) {
          const float4 v = *reinterpret_cast<const float4*>(sGamma + i);
          gamma[i] = v.x;
          gamma[i + 1] = v.y;
          gamma[i + 2] = v.z;
          gamma[i + 3] = v.w;
        }
        float running = 0.0f;
#pragma unroll
        for (int i = 0; i < kChunkLen; ++i) {
          // Fault kGdnChunkBoundaryOffByOne restarts the sum one token early: the chunk's last token decays as if it
          // opened the next chunk.
          if constexpr (kFault == KernelFault::kGdnChunkBoundaryOffByOne) {
            if (i == L - 1) running = 0.0f;
          }
          running += gamma[i];
          gamma[i] = running;
        }
#pragma unroll
        for (int i = 0; i < kChunkLen; i += 4)
          *reinterpret_cast<float4*>(sGamma + i) = make_float4(gamma[i], gamma[i + 1], gamma[i + 2], gamma[i + 3]);
      }
      __syncwarp();
      for (int i = lane; i < kChunkLen; i += 32) {
        sGexp[i] = expf(sGamma[i]);
        sWlast[i] = i < L ? expf(sGamma[L - 1] - sGamma[i]) : 0.0f;
      }
    }
    pair_sync(pair);

    // A and P, thread c taking column j = c, masking before the exponential (γ_i − γ_j > 0 above the diagonal could
    // overflow). P goes straight to the record; rows and columns past L come out zero (β, q̂ and k̂ are zero there).
    {
      const int j = c;
      const float gamma_j = sGamma[j];
      for (int i = 0; i < kChunkLen; ++i) {
        float a_ij = 0.0f, p_ij = 0.0f;
        if (i >= j) {
          const float decay = expf(sGamma[i] - gamma_j);
          p_ij = decay * sGqk[i * kGramStride + j];
          if (i > j) a_ij = sBeta[i] * decay * sGkk[i * kGramStride + j];
        }
        sA[i * kGramStride + j] = a_ij;
        record[kRecordP + i * kPStride + j] = p_ij;
      }
      float* const vectors = record + kRecordVectors;
      vectors[kVecBeta * kChunkLen + c] = sBeta[c];
      vectors[kVecGexp * kChunkLen + c] = sGexp[c];
      vectors[kVecWlast * kChunkLen + c] = sWlast[c];
      vectors[kVecInvK * kChunkLen + c] = sInv[c];
      vectors[kVecInvQ * kChunkLen + c] = sInv[kChunkLen + c];
    }
    pair_sync(pair);

    float t_col[kChunkLen];
    solve_column(sA, c, t_col);
#pragma unroll
    for (int i = 0; i < kChunkLen; ++i) record[kRecordT + i * kTStride + c] = t_col[i];
    pair_sync(pair);  // the next head of this pair rewrites the gates and A
  }
}

template <KernelFault kFault>
void launch_prepare_fault(const GatedDeltaRuleParams& p, const GdnChunkedPlan& plan, cudaStream_t stream) {
  const size_t bytes = gdn_chunk_prepare_smem_bytes(p.key_dim);
  // Over 48 KB of dynamic shared memory must be allowed explicitly; a failure shows in the launch's own error.
  cudaFuncSetAttribute(gdn_chunk_prepare_kernel<kFault>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  const bool vec4 = reinterpret_cast<uintptr_t>(p.qkv) % 16 == 0 && p.qkv_stride % 4 == 0 && p.key_dim % 4 == 0;
  const dim3 grid(static_cast<unsigned>(plan.chunk_count), static_cast<unsigned>(p.key_heads));
  launch_kernel(gdn_chunk_prepare_kernel<kFault>, grid, kPrepareThreads, bytes, stream, p, plan, vec4);
}

}  // namespace

size_t gdn_chunk_prepare_smem_bytes(int key_dim) {
  return static_cast<size_t>(PrepareLayout(key_dim).total) * sizeof(float);
}

void launch_gdn_chunk_prepare(const GatedDeltaRuleParams& p, const GdnChunkedPlan& plan, KernelFault fault,
                              cudaStream_t stream) {
  dispatch_fault<KernelFault::kGdnGateSign, KernelFault::kGdnChunkBoundaryOffByOne>(
      fault, [&](auto planted) { launch_prepare_fault<decltype(planted)::value>(p, plan, stream); });
}

}  // namespace plumb::cuda
