// Gated DeltaNet on the GPU, part 2: the chunked gated delta rule (prefill), on CUDA cores in F32.
//
// Per chunk of L <= 64 tokens (cumulative log-decay γ, Γ = exp γ, state S0 entering the chunk), as in the CPU
// reference and ../shared/docs/qwen3-next-spec.md §10:
//   A[i, j] = β_i e^{γ_i − γ_j} k_i·k_j (j < i)        P[i, j] = e^{γ_i − γ_j} q_i·k_j (j <= i)
//   (I + A) Δ = diag(β) V − diag(βΓ) K S0               (forward substitution, rows in order)
//   O = diag(Γ) Q S0 + P Δ                              S = Γ_L S0 + Σ_i e^{γ_L − γ_i} k_i Δ_iᵀ
// Solving for Δ directly is the reference's Δ = U − W S0 with U and W folded into one right-hand side; it needs
// neither W nor U in memory.
//
// Exact by construction: every output element is one thread's sum in ascending order of its reduction index (x over
// dk, j or i over the chunk), and chunks start at multiples of 64 of the sequence's absolute position, so a prefill
// split into pieces of multiples of 64 tokens runs the very same chunks and gives the same bits.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/gdn_device.cuh"

namespace plumb::cuda {
namespace {

constexpr int kChunkWarps = 8;
constexpr int kChunkThreads = 32 * kChunkWarps;
constexpr int kChunkCols = 32;                // value columns (of dv) per CTA
constexpr int kRows = kGdnChunkRows;          // 64
constexpr int kMatrixStride = kRows + 1;      // sA, sP rows: an odd stride keeps column walks conflict-free
constexpr int kDeltaStride = kChunkCols + 1;  // sR rows: likewise

// The CTA's shared memory, in floats. dkp = dk rounded up to 8 (zero-filled past dk) so the dk loops run in float4
// steps; rows of sK and sQ are dkp + 4 long, an odd number of 16-byte units, so float4 reads of 8 different rows hit
// 8 different bank groups.
struct ChunkLayout {
  int dkp, row;  // padded dk; row stride of sK and sQ
  int k, q, s, a, pm, r, beta, g, gamma, gexp, wlast, total;
  __host__ __device__ explicit ChunkLayout(int dk) : dkp((dk + 7) / 8 * 8), row(dkp + 4) {
    k = 0;                            // sK [64, row]: normalized k of the chunk's tokens (zero rows past L)
    q = k + kRows * row;              // sQ [64, row]: normalized and scaled q
    s = q + kRows * row;              // sS [dkp, 32]: the CTA's columns of S (zero rows past dk)
    a = s + dkp * kChunkCols;         // sA [64, 65]: A, strictly lower
    pm = a + kRows * kMatrixStride;   // sP [64, 65]: P, lower with the diagonal
    r = pm + kRows * kMatrixStride;   // sR [64, 33]: V, then the right-hand side, then Δ
    beta = r + kRows * kDeltaStride;  // [64]: β (0 past L)
    g = beta + kRows;                 // [64]: g (0 past L)
    gamma = g + kRows;                // [64]: γ, the chunk's cumulative g
    gexp = gamma + kRows;             // [64]: Γ = exp γ
    wlast = gexp + kRows;             // [64]: e^{γ_L − γ_i} (0 past L)
    total = wlast + kRows;
  }
};

// 4 bytes global -> shared, asynchronously: every element of the chunk is in flight at once, whatever the alignment
// of the qkv rows.
__device__ __forceinline__ void cp_async_4(float* dst, const float* src) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(src) : "memory");
}
// Waits for this thread's copies; other threads see them after a barrier.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ float dot4(const float4 a, const float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// grid (⌈dv / 32⌉, nv, sequences), 256 threads, one CTA per 32 value columns of one (sequence, value head), walking
// the sequence's chunks in order with its columns of S in shared memory. The dk-wide work of a chunk (A, P) is
// repeated by the ⌈dv / 32⌉ CTAs of a head so that a single long prefill still fills the GPU (32 heads × 4 slices).
template <KernelFault kFault>
__global__ void __launch_bounds__(kChunkThreads, 1) gdn_chunked_kernel(const GatedDeltaRuleParams p) {
  extern __shared__ float4 shared_memory[];
  const ChunkLayout lay(p.key_dim);
  float* const smem = reinterpret_cast<float*>(shared_memory);
  float* const sK = smem + lay.k;
  float* const sQ = smem + lay.q;
  float* const sS = smem + lay.s;
  float* const sA = smem + lay.a;
  float* const sP = smem + lay.pm;
  float* const sR = smem + lay.r;
  float* const sBeta = smem + lay.beta;
  float* const sG = smem + lay.g;
  float* const sGamma = smem + lay.gamma;
  float* const sGexp = smem + lay.gexp;
  float* const sWlast = smem + lay.wlast;

  const GdnSequence seq = p.sequences[blockIdx.z];
  const int h = blockIdx.y;
  const int kh = h / (p.value_heads / p.key_heads);
  const int dk = p.key_dim, dv = p.value_dim, nv = p.value_heads, dkp = lay.dkp, row = lay.row;
  const int col0 = blockIdx.x * kChunkCols;                        // the CTA's first value column
  const int cols = min(kChunkCols, dv - col0);                     // its columns inside dv
  float* const S = seq.state + static_cast<int64_t>(h) * dk * dv;  // [dk, dv]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The 16 × 16 thread grid of the matrix phases: rows ty + 16a, columns tx + 16b.
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  for (int e = threadIdx.x; e < dkp * kChunkCols; e += kChunkThreads) {
    const int x = e / kChunkCols, c = e % kChunkCols;
    sS[e] = x < dk && c < cols ? S[static_cast<int64_t>(x) * dv + col0 + c] : 0.0f;
  }

  for (int64_t t0 = 0; t0 < seq.count;) {
    const int64_t position = seq.past + t0;
    const int L = static_cast<int>(std::min<int64_t>(kRows - position % kRows, seq.count - t0));
    const int64_t row0 = seq.begin + t0;  // the chunk's first row of qkv, a, b, o

    // (1) The chunk's raw q, k (key head kh) and v (the CTA's columns), warp w taking rows w, w + 8, ...; rows past L
    // and the padding columns past dk are zero, so every later loop can run over the full padded tile.
    for (int i = warp; i < kRows; i += kChunkWarps) {
      float* const k_row = sK + i * row;
      float* const q_row = sQ + i * row;
      if (i < L) {
        const float* const src = p.qkv + (row0 + i) * p.qkv_stride;  // [2·nk·dk + nv·dv]
        for (int x = lane; x < dk; x += 32) {
          cp_async_4(q_row + x, src + kh * dk + x);
          cp_async_4(k_row + x, src + (p.key_heads + kh) * dk + x);
        }
        if (lane < cols)
          cp_async_4(sR + i * kDeltaStride + lane, src + 2 * p.key_heads * dk + h * dv + col0 + lane);
        else
          sR[i * kDeltaStride + lane] = 0.0f;
      } else {
        for (int x = lane; x < dk; x += 32) {
          q_row[x] = 0.0f;
          k_row[x] = 0.0f;
        }
        sR[i * kDeltaStride + lane] = 0.0f;
      }
      for (int x = dk + lane; x < dkp; x += 32) {
        q_row[x] = 0.0f;
        k_row[x] = 0.0f;
      }
    }
    // Warp 0 computes the gates and their cumulative sum while the copies are in flight.
    if (warp == 0) {
      for (int i = lane; i < kRows; i += 32) {
        float beta = 0.0f, g = 0.0f;
        if (i < L)
          gdn_gates<kFault>(p.a[(row0 + i) * nv + h], p.b[(row0 + i) * nv + h], p.A_log[h], p.dt_bias[h], beta, g);
        sBeta[i] = beta;
        sG[i] = g;
      }
      __syncwarp();
      if (lane == 0) {
        float running = 0.0f;  // γ_i = g_0 + ... + g_i, summed in order as the CPU reference does
        for (int i = 0; i < kRows; ++i) {
          // Fault kGdnChunkBoundaryOffByOne restarts the sum one token early: the chunk's last token decays as if it
          // opened the next chunk.
          if constexpr (kFault == KernelFault::kGdnChunkBoundaryOffByOne) {
            if (i == L - 1) running = 0.0f;
          }
          running += sG[i];
          sGamma[i] = running;
        }
      }
      __syncwarp();
      for (int i = lane; i < kRows; i += 32) {
        sGexp[i] = expf(sGamma[i]);
        sWlast[i] = i < L ? expf(sGamma[L - 1] - sGamma[i]) : 0.0f;
      }
    }
    // L2-normalize the rows in place. Each lane reads back exactly the elements its own copies wrote, so waiting
    // for its own copies is enough here.
    cp_async_wait_all();
    for (int i = warp; i < L; i += kChunkWarps) {
      float* const k_row = sK + i * row;
      float* const q_row = sQ + i * row;
      float sum_q = 0.0f, sum_k = 0.0f;
      for (int x = lane; x < dk; x += 32) {
        sum_q = fmaf(q_row[x], q_row[x], sum_q);
        sum_k = fmaf(k_row[x], k_row[x], sum_k);
      }
      const float inv_q = 1.0f / sqrtf(warp_sum(sum_q) + kGdnL2NormEps);
      const float inv_k = 1.0f / sqrtf(warp_sum(sum_k) + kGdnL2NormEps);
      for (int x = lane; x < dk; x += 32) {
        q_row[x] = q_row[x] * inv_q * p.q_scale;
        k_row[x] = k_row[x] * inv_k;
      }
    }
    // Every thread reads every row of sK and sQ, and the gates, below; fault kGdnMissingBarrier drops this barrier.
    if constexpr (kFault != KernelFault::kGdnMissingBarrier) __syncthreads();

    // (2) One pass over dk: K Kᵀ and Q Kᵀ (4 × 4 tiles, only those on or below the diagonal), K S0 and Q S0 (4 × 2).
    float kk[4][4], qk[4][4], ks[4][2], qs[4][2];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        kk[a][b] = 0.0f;
        qk[a][b] = 0.0f;
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        ks[a][b] = 0.0f;
        qs[a][b] = 0.0f;
      }
    }
    for (int x = 0; x < dkp; x += 4) {
      float4 ki[4], qi[4], kj[4];
      float sv[4][2];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        ki[a] = *reinterpret_cast<const float4*>(sK + (ty + 16 * a) * row + x);
        qi[a] = *reinterpret_cast<const float4*>(sQ + (ty + 16 * a) * row + x);
        kj[a] = *reinterpret_cast<const float4*>(sK + (tx + 16 * a) * row + x);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int b = 0; b < 2; ++b) sv[u][b] = sS[(x + u) * kChunkCols + tx + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int b = 0; b <= a; ++b) {
          kk[a][b] = dot4(ki[a], kj[b], kk[a][b]);
          qk[a][b] = dot4(qi[a], kj[b], qk[a][b]);
        }
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          ks[a][b] = dot4(ki[a], make_float4(sv[0][b], sv[1][b], sv[2][b], sv[3][b]), ks[a][b]);
          qs[a][b] = dot4(qi[a], make_float4(sv[0][b], sv[1][b], sv[2][b], sv[3][b]), qs[a][b]);
        }
      }
    }
    // A and P, masking before the exponential (γ_i − γ_j > 0 above the diagonal could overflow); and the right-hand
    // side β_i v_i − β_i Γ_i (K S0)_i in place of V.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = ty + 16 * a;
      const float gamma_i = sGamma[i], beta_i = sBeta[i];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int j = tx + 16 * b;
        float a_ij = 0.0f, p_ij = 0.0f;
        if (b <= a && j <= i) {
          const float decay = expf(gamma_i - sGamma[j]);
          p_ij = decay * qk[a][b];
          if (j < i) a_ij = beta_i * decay * kk[a][b];
        }
        sA[i * kMatrixStride + j] = a_ij;
        sP[i * kMatrixStride + j] = p_ij;
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        float* const r = sR + i * kDeltaStride + tx + 16 * b;
        *r = fmaf(-(beta_i * sGexp[i]), ks[a][b], beta_i * *r);
      }
    }
    __syncthreads();

    // (3) (I + A) Δ = R by forward substitution: warp w solves columns 4w .. 4w+3, lane l holding rows l and l + 32.
    // Row j is final once rows < j are subtracted; its owner lane broadcasts it, and every row i > j subtracts
    // A[i, j] Δ_j, so each row takes its terms in ascending j as the CPU reference does.
    {
      const int c = 4 * warp;
      float lo[4], hi[4];  // rows lane and lane + 32
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        lo[e] = sR[lane * kDeltaStride + c + e];
        hi[e] = sR[(lane + 32) * kDeltaStride + c + e];
      }
      for (int j = 0; j < min(L, 32); ++j) {
        const float a_lo = sA[lane * kMatrixStride + j];
        const float a_hi = sA[(lane + 32) * kMatrixStride + j];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float delta_j = __shfl_sync(0xffffffffu, lo[e], j);
          if (lane > j) lo[e] = fmaf(-a_lo, delta_j, lo[e]);
          hi[e] = fmaf(-a_hi, delta_j, hi[e]);
        }
      }
      for (int j = 32; j < L; ++j) {
        const float a_hi = sA[(lane + 32) * kMatrixStride + j];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float delta_j = __shfl_sync(0xffffffffu, hi[e], j - 32);
          if (lane + 32 > j) hi[e] = fmaf(-a_hi, delta_j, hi[e]);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sR[lane * kDeltaStride + c + e] = lo[e];
        sR[(lane + 32) * kDeltaStride + c + e] = hi[e];
      }
    }
    __syncthreads();

    // (4a) O = diag(Γ) Q S0 + P Δ, rows ty + 16a and columns tx + 16b, j ascending.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = ty + 16 * a;
      float acc[2];
#pragma unroll
      for (int b = 0; b < 2; ++b) acc[b] = sGexp[i] * qs[a][b];
      for (int j = 0; j < L; ++j) {
        const float p_ij = sP[i * kMatrixStride + j];
#pragma unroll
        for (int b = 0; b < 2; ++b) acc[b] = fmaf(p_ij, sR[j * kDeltaStride + tx + 16 * b], acc[b]);
      }
      if (i < L) {
        float* const out = p.o + ((row0 + i) * nv + h) * dv + col0;  // [32] of o[row, h, :]
#pragma unroll
        for (int b = 0; b < 2; ++b)
          if (tx + 16 * b < cols) out[tx + 16 * b] = acc[b];
      }
    }
    // (4b) S = Γ_L S0 + Σ_i (e^{γ_L − γ_i} k_i) Δ_iᵀ, rows x = ty + 16u (+ 64 per block of rows), i ascending.
    const float decay_last = sGexp[L - 1];
    for (int x0 = ty; x0 < dk; x0 += 64) {
      float acc[4][2];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int b = 0; b < 2; ++b)
          acc[u][b] = x0 + 16 * u < dk ? decay_last * sS[(x0 + 16 * u) * kChunkCols + tx + 16 * b] : 0.0f;
      for (int i = 0; i < L; ++i) {
        const float w = sWlast[i];
        const float d0 = sR[i * kDeltaStride + tx], d1 = sR[i * kDeltaStride + tx + 16];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (x0 + 16 * u < dk) {
            const float kx = w * sK[i * row + x0 + 16 * u];
            acc[u][0] = fmaf(kx, d0, acc[u][0]);
            acc[u][1] = fmaf(kx, d1, acc[u][1]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int b = 0; b < 2; ++b)
          if (x0 + 16 * u < dk) sS[(x0 + 16 * u) * kChunkCols + tx + 16 * b] = acc[u][b];
    }
    // The next chunk rewrites every tile read above, and reads every row of sS written above.
    __syncthreads();
    t0 += L;
  }

  for (int e = threadIdx.x; e < dk * kChunkCols; e += kChunkThreads) {
    const int x = e / kChunkCols, c = e % kChunkCols;
    if (c < cols) S[static_cast<int64_t>(x) * dv + col0 + c] = sS[e];
  }
}

template <KernelFault kFault>
void launch_chunked_fault(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(ChunkLayout(p.key_dim).total) * sizeof(float);
  // Over 48 KB of dynamic shared memory must be allowed explicitly; a failure shows in the launch's own error.
  cudaFuncSetAttribute(gdn_chunked_kernel<kFault>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  const dim3 grid(static_cast<unsigned>((p.value_dim + kChunkCols - 1) / kChunkCols),
                  static_cast<unsigned>(p.value_heads), static_cast<unsigned>(p.sequence_count));
  gdn_chunked_kernel<kFault><<<grid, kChunkThreads, bytes, stream>>>(p);
}

}  // namespace

void launch_gdn_chunked(const GatedDeltaRuleParams& p, KernelFault fault, cudaStream_t stream) {
  switch (fault) {
    case KernelFault::kGdnGateSign:
      return launch_chunked_fault<KernelFault::kGdnGateSign>(p, stream);
    case KernelFault::kGdnChunkBoundaryOffByOne:
      return launch_chunked_fault<KernelFault::kGdnChunkBoundaryOffByOne>(p, stream);
    case KernelFault::kGdnMissingBarrier:
      return launch_chunked_fault<KernelFault::kGdnMissingBarrier>(p, stream);
    default:
      return launch_chunked_fault<KernelFault::kNone>(p, stream);
  }
}

}  // namespace plumb::cuda
