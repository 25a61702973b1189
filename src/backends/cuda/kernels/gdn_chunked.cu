// Gated DeltaNet on the GPU, part 2: the chunked gated delta rule (prefill) on the tensor cores, in two passes.
//
// Per chunk of L <= 64 tokens (cumulative log-decay γ, Γ = exp γ, state S0 entering the chunk), as in the CPU
// reference and ../shared/docs/qwen3-next-spec.md §10:
//   A[i, j] = β_i e^{γ_i − γ_j} k_i·k_j (j < i)        P[i, j] = e^{γ_i − γ_j} q_i·k_j (j <= i)
//   Δ = (I + A)^-1 (diag(β) V − diag(βΓ) K S0)          (the reference's U − W S0)
//   O = diag(Γ) Q S0 + P Δ                              S = Γ_L S0 + Σ_i e^{γ_L − γ_i} k_i Δ_iᵀ
// Pass 1 (gdn_chunked_prepare.cu), every chunk in parallel: the gates, T = (I + A)^-1 and P, into a record per
// (chunk, value head). Pass 2 (here), per (value-column slice, value head, sequence run): the chunks in order, with
// the slice of S in registers; only this pass is sequential, and S's columns are independent, so dv is split over
// CTAs. Every product is a 3xTF32 tensor-core product (gdn_chunked_common.cuh) in F32 accumulators.
//
// Exact by construction: each output element is a fixed sequence of mma k-steps over its reduction index (dk, or the
// chunk's 64 token slots; rows past L are zero) whose tiling depends on dk and dv alone, and chunks start at
// multiples of 64 of the sequence's absolute position. A chunk's arithmetic depends on its own tokens and the state
// entering it, so a prefill split into calls of multiples of 64 tokens, or batched with anything, runs the very same
// chunks and gives the same bits. No atomics; no reduction spans CTAs.
//
// Shared memory: pass 2's 32-column variant takes 224.5 KiB at dk = 128 (sm_90's 227 KB opt-in); larger dk takes
// 8-column slices with one K stage (195 KiB at dk = 256). Pass 1 takes 106.5 KiB at dk = 128 (two CTAs an SM). A
// 99 KB part (sm_89, sm_120) would need pass 2 in 8-column slices with K and Q streamed through in halves of dk (or
// staged as BF16 pairs, with a new bound), and pass 1's K̂ and Q̂ likewise in halves of dk.
#include <cuda_runtime.h>

#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/gdn_chunked_common.cuh"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/launch_choices.h"

namespace plumb::cuda {
namespace {

// The state CTA's shared memory, in floats, for slices of kCols value columns.
template <int kCols>
struct StateLayout {
  static constexpr int kStages = kCols == 32 ? 2 : 1;     // buffers of K and of the record's vectors
  static constexpr int kRowStride = kCols == 8 ? 8 : 40;  // V and ΓQS rows: 8 (mod 32) for C-fragment float2s
  static constexpr int kRtStride = kTStride;              // Rᵀ rows: ldmatrix rows
  static constexpr int kDtStride = kPStride;              // Δᵀ rows: 8 (mod 32) for pair-order float2s
  int dkp, xs;                                            // padded dk; row stride of K, Q and Sᵀ
  int k, q, v, t, pm, vec, st_hi, st_lo, rt_hi, rt_lo, dt_hi, dt_lo, xq, total;
  __host__ __device__ explicit StateLayout(int dk) : dkp(gdn_padded_dim(dk)), xs(dkp + 4) {
    k = 0;                                          // [stages][64][xs]: raw k rows (zero past L and past dk)
    q = k + kStages * kChunkLen * xs;               // [64][xs]: raw q rows
    v = q + kChunkLen * xs;                         // [64][kRowStride]: the slice's v columns (zero past L, dv)
    t = v + kChunkLen * kRowStride;                 // [64][68]: the record's T
    pm = t + kChunkLen * kTStride;                  // [64][72]: the record's P
    vec = pm + kChunkLen * kPStride;                // [stages][5][64]: the record's vectors
    st_hi = vec + kStages * kVecCount * kChunkLen;  // [kCols][xs]: Sᵀ split, the B operand of K S and Q S
    st_lo = st_hi + kCols * xs;
    rt_hi = st_lo + kCols * xs;  // [kCols][68]: Rᵀ split, R = diag(β) V − diag(βΓ) K S0
    rt_lo = rt_hi + kCols * kRtStride;
    dt_hi = rt_lo + kCols * kRtStride;  // [kCols][72]: Δᵀ split
    dt_lo = dt_hi + kCols * kDtStride;
    xq = dt_lo + kCols * kDtStride;  // [64][kRowStride]: diag(Γ) Q̂ S0
    total = xq + kChunkLen * kRowStride;
  }
};

constexpr int kStateThreads = 512;  // 16 warps: 4 per scheduler, to hide the mma and shared-memory latencies

// grid (⌈dv / kCols⌉, nv, runs), 512 threads. Warp w = 8 wn + wm. Per chunk, three barriers split four phases:
//   1. X = [K; Q] S0 on the raw rows (128 × kCols over dk): warp (wm, wn) on rows 16 wm .. 16 wm + 15 of [K; Q] and
//      the wn-th half of the n-tiles; the rows' inverse norms scale the results, which makes K̂ S0 (to R, then Rᵀ)
//      and Q̂ S0 (to diag(Γ) Q̂ S0).
//   2. Δ = T R (64 × kCols over 64, lower triangular): warp w on n-tile w % 4 of m-tile 3, 2, 0, 1 for w / 4 =
//      0 .. 3 (8, 6, 2, 4 k-steps), to Δᵀ.
//   3. S = Γ_L S0 + K̃ᵀ Δ (dk × kCols over 64): warp (wm, wn) updates its tiles of S in registers (x-tiles wm and
//      wm + 8, the n-tiles of phase 1), then Sᵀ.
//   4. O = diag(Γ) Q̂ S0 + P Δ (64 × kCols over 64, lower triangular), the tiles of phase 2, stored to o.
// Inputs of the next chunk stream in (cp.async) as soon as their buffer is dead: K and the vectors at the top (two
// stages), Q and V after phase 1, T after phase 2, P at the top of their own chunk.
template <int kCols, KernelFault kFault>
__global__ void __launch_bounds__(kStateThreads, 1)
    gdn_chunk_state_kernel(const GatedDeltaRuleParams p, const GdnChunkedPlan plan, const bool vec4) {
  wait_for_prior_grid();
  using Layout = StateLayout<kCols>;
  constexpr int kNt = kCols / 8;             // n-tiles of the slice
  constexpr int kHalves = kNt >= 2 ? 2 : 1;  // warps wn = 0 .. kHalves-1 work in phases 1 and 3
  constexpr int kNtw = kNt / kHalves;        // n-tiles per such warp
  constexpr int kStateTiles = 2;             // x-tiles wm and wm + 8 (dkp <= 256)
  constexpr int kRs = Layout::kRowStride, kRts = Layout::kRtStride, kDts = Layout::kDtStride;
  extern __shared__ float4 shared_memory[];
  float* const smem = reinterpret_cast<float*>(shared_memory);
  const Layout lay(p.key_dim);
  const GdnChunkRun run = plan.runs[blockIdx.z];
  const int h = blockIdx.y, nv = p.value_heads;
  const int kh = h / (nv / p.key_heads);
  const int dk = p.key_dim, dv = p.value_dim, dkp = lay.dkp, xs = lay.xs;
  const int col0 = blockIdx.x * kCols;     // the slice's first value column
  const int cols = min(kCols, dv - col0);  // its columns inside dv
  const int x_tiles = dkp / 16;            // m-tiles of S's rows
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = warp % 8, wn = warp / 8;
  const bool tiles_13 = wn < kHalves;  // whether the warp works in phases 1 and 3
  const int n_first = wn * kNtw;       // its first n-tile there
  float* const sK = smem + lay.k;
  float* const sQ = smem + lay.q;
  float* const sV = smem + lay.v;
  float* const sT = smem + lay.t;
  float* const sP = smem + lay.pm;
  float* const sVec = smem + lay.vec;
  float* const sSt_hi = smem + lay.st_hi;
  float* const sSt_lo = smem + lay.st_lo;
  float* const sRt_hi = smem + lay.rt_hi;
  float* const sRt_lo = smem + lay.rt_lo;
  float* const sDt_hi = smem + lay.dt_hi;
  float* const sDt_lo = smem + lay.dt_lo;
  float* const sXQ = smem + lay.xq;
  float* const S = run.state + static_cast<int64_t>(h) * dk * dv;  // [dk, dv]

  // Staging buffers start zero: columns past dk (K, Q) and past dv (V) stay so, rows past L are re-zeroed per chunk.
  for (int e = threadIdx.x; e < lay.t; e += kStateThreads) smem[e] = 0.0f;
  __syncthreads();

  const auto record = [&](int chunk_index) {  // [kRecordFloats]
    return plan.records + (static_cast<int64_t>(chunk_index) * nv + h) * kRecordFloats;
  };
  const auto issue_flat = [&](float* dst, const float* src, int floats) {
    for (int e = threadIdx.x; e < floats / 4; e += kStateThreads) cp_async_16(dst + 4 * e, src + 4 * e);
  };
  const auto issue_k = [&](const GdnChunk& chunk, int chunk_index, int stage) {
    float* const dst = sK + stage * kChunkLen * xs;
    const float* const src = p.qkv + chunk.row * p.qkv_stride + static_cast<int64_t>(p.key_heads + kh) * dk;
    copy_rows_async<kStateThreads>(dst, xs, src, p.qkv_stride, chunk.length, dk, vec4);
    zero_rows<kStateThreads>(dst, xs, chunk.length, kChunkLen, dkp);
    issue_flat(sVec + stage * kVecCount * kChunkLen, record(chunk_index) + kRecordVectors, kVecCount * kChunkLen);
  };
  const auto issue_q_v = [&](const GdnChunk& chunk) {
    const float* const row = p.qkv + chunk.row * p.qkv_stride;  // [2·nk·dk + nv·dv] of the chunk's first token
    copy_rows_async<kStateThreads>(sQ, xs, row + static_cast<int64_t>(kh) * dk, p.qkv_stride, chunk.length, dk, vec4);
    zero_rows<kStateThreads>(sQ, xs, chunk.length, kChunkLen, dkp);
    copy_rows_async<kStateThreads>(sV, kRs, row + static_cast<int64_t>(2 * p.key_heads) * dk + h * dv + col0,
                                   p.qkv_stride, chunk.length, cols, vec4);
    zero_rows<kStateThreads>(sV, kRs, chunk.length, kChunkLen, kCols);
  };

  // S's slice: warp (wm, wn) holds x-tiles wm and wm + 8 and its n-tiles as C fragments (rows past dk and columns
  // past dv zero, and kept zero by the updates). Element (xi, n, e) is row x = 16 (wm + 8 xi) + g + 8 (e / 2),
  // column c = 8 (n_first + n) + 2t + e % 2.
  float s_reg[kStateTiles][kNtw][4];
  const auto owns_tile = [&](int xi) { return tiles_13 && wm + 8 * xi < x_tiles; };
#pragma unroll
  for (int xi = 0; xi < kStateTiles; ++xi)
#pragma unroll
    for (int n = 0; n < kNtw; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = 16 * (wm + 8 * xi) + g + 8 * (e / 2), c = 8 * (n_first + n) + 2 * t + e % 2;
        s_reg[xi][n][e] = owns_tile(xi) && x < dk && c < cols ? S[static_cast<int64_t>(x) * dv + col0 + c] : 0.0f;
      }
  // Sᵀ split for phase 1's B fragments, from the registers.
  const auto publish_state = [&] {
#pragma unroll
    for (int xi = 0; xi < kStateTiles; ++xi) {
      if (!owns_tile(xi)) continue;
#pragma unroll
      for (int n = 0; n < kNtw; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int x = 16 * (wm + 8 * xi) + g + 8 * (e / 2), c = 8 * (n_first + n) + 2 * t + e % 2;
          uint32_t hi, lo;
          split_tf32(s_reg[xi][n][e], hi, lo);
          sSt_hi[c * xs + x] = __uint_as_float(hi);
          sSt_lo[c * xs + x] = __uint_as_float(lo);
        }
    }
  };
  publish_state();

  // Lane-constant fragment addresses (shared space, bytes) of the phases.
  const uint32_t st_frag =
      shared_address((lane < 16 ? sSt_hi : sSt_lo) + 8 * n_first * xs + b_split_fragment_offset(xs, lane));
  const int n_own = warp % 4;                            // phases 2 and 4: n-tile ...
  const int m_own = (0x1023 >> (4 * (warp / 4))) & 0xf;  // ... and m-tile 3, 2, 0, 1 for warp / 4 = 0 .. 3
  const bool tiles_24 = n_own < kNt;
  const uint32_t t_frag = shared_address(sT + 16 * m_own * kTStride + a_fragment_offset(kTStride, lane));
  const uint32_t rt_frag =
      shared_address((lane < 16 ? sRt_hi : sRt_lo) + 8 * n_own * kRts + b_split_fragment_offset(kRts, lane));

  GdnChunk chunk = plan.chunks[run.first_chunk];
  issue_k(chunk, run.first_chunk, 0);
  issue_q_v(chunk);
  issue_flat(sT, record(run.first_chunk) + kRecordT, kChunkLen * kTStride);
  cp_async_commit();

  for (int ci = 0; ci < run.chunk_count; ++ci) {
    const int chunk_index = run.first_chunk + ci;
    const int L = chunk.length;
    const int stage = Layout::kStages == 2 ? ci % 2 : 0;
    const bool has_next = ci + 1 < run.chunk_count;
    const GdnChunk next = has_next ? plan.chunks[chunk_index + 1] : chunk;
    const float* const sKc = sK + stage * kChunkLen * xs;
    const float* const vec = sVec + stage * kVecCount * kChunkLen;

    // This chunk's K, vectors, Q, V and T have landed (each thread waits for its own copies; the barrier publishes
    // them), and every warp is done with the previous chunk.
    cp_async_wait<0>();
    __syncthreads();
    issue_flat(sP, record(chunk_index) + kRecordP, kChunkLen * kPStride);
    if (Layout::kStages == 2 && has_next) issue_k(next, chunk_index + 1, stage ^ 1);
    cp_async_commit();

    // (1) X = [K; Q] S0 on raw rows, dk ascending in k-steps of 8.
    if (tiles_13) {
      const bool is_k = wm < 4;
      const int m = wm % 4;
      const uint32_t a_frag = shared_address((is_k ? sKc : sQ) + 16 * m * xs + a_fragment_offset(xs, lane));
      float acc[kNtw][4] = {};
#pragma unroll 2
      for (int k0 = 0; k0 < dkp; k0 += 8) {
        uint32_t a[4];
        ldmatrix_x4(a, a_frag + 4 * k0);
        const SplitA s = split_a(a);
#pragma unroll
        for (int n = 0; n < kNtw; ++n) {
          uint32_t b[4];
          ldmatrix_x4(b, st_frag + 4 * (8 * n * xs + k0));
          mma_3xtf32(acc[n], s, {b[0], b[1]}, {b[2], b[3]});
        }
      }
      const float* const inv = vec + (is_k ? kVecInvK : kVecInvQ) * kChunkLen;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * m + g + 8 * half;
        const float inv_i = inv[i], gexp = vec[kVecGexp * kChunkLen + i];
#pragma unroll
        for (int n = 0; n < kNtw; ++n) {
          const int c = 8 * (n_first + n) + 2 * t;
          float x0 = __fmul_rn(acc[n][2 * half], inv_i), x1 = __fmul_rn(acc[n][2 * half + 1], inv_i);
          if (is_k) {
            // R_i = β_i v_i − β_i Γ_i (K̂ S0)_i, the right-hand side whose solve is U − W S0.
            const float beta = vec[kVecBeta * kChunkLen + i];
            const float2 v = *reinterpret_cast<const float2*>(sV + i * kRs + c);
            uint32_t hi, lo;
            split_tf32(fmaf(-(beta * gexp), x0, beta * v.x), hi, lo);
            sRt_hi[c * kRts + i] = __uint_as_float(hi);
            sRt_lo[c * kRts + i] = __uint_as_float(lo);
            split_tf32(fmaf(-(beta * gexp), x1, beta * v.y), hi, lo);
            sRt_hi[(c + 1) * kRts + i] = __uint_as_float(hi);
            sRt_lo[(c + 1) * kRts + i] = __uint_as_float(lo);
          } else {
            x0 = __fmul_rn(x0, p.q_scale);
            x1 = __fmul_rn(x1, p.q_scale);
            *reinterpret_cast<float2*>(sXQ + i * kRs + c) = make_float2(gexp * x0, gexp * x1);
          }
        }
      }
    }
    // Phase 2 reads every warp's R; and Q and V are rewritten below. Fault kGdnMissingBarrier drops this barrier.
    if constexpr (kFault != KernelFault::kGdnMissingBarrier) __syncthreads();
    if (has_next) issue_q_v(next);
    cp_async_commit();

    // (2) Δ = T R over the 2 m_own + 2 k-steps that reach the diagonal; Δᵀ split for phases 3 and 4.
    if (tiles_24) {
      float acc[4] = {};
#pragma unroll 2
      for (int kk = 0; kk <= 2 * m_own + 1; ++kk) {
        uint32_t b[4], a[4];
        ldmatrix_x4(b, rt_frag + 32 * kk);
        ldmatrix_x4(a, t_frag + 32 * kk);
        mma_3xtf32(acc, split_a(a), {b[0], b[1]}, {b[2], b[3]});
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * m_own + g + 8 * (e / 2), c = 8 * n_own + 2 * t + e % 2;
        uint32_t hi, lo;
        split_tf32(acc[e], hi, lo);
        sDt_hi[c * kDts + i] = __uint_as_float(hi);
        sDt_lo[c * kDts + i] = __uint_as_float(lo);
      }
    }
    // Phases 3 and 4 read every warp's Δ and this chunk's P; T is rewritten below.
    cp_async_wait<1>();
    __syncthreads();
    if (has_next) issue_flat(sT, record(chunk_index + 1) + kRecordT, kChunkLen * kTStride);
    cp_async_commit();

    // (3) S = Γ_L S0 + K̃ᵀ Δ with K̃_i = (e^{γ_L − γ_i} / ‖k_i‖) k_i, tokens in pair order (k-step kk: tokens
    // 8kk + 2t and 8kk + 2t + 1).
    if (tiles_13) {
      const float gexp_last = vec[kVecGexp * kChunkLen + L - 1];
#pragma unroll
      for (int xi = 0; xi < kStateTiles; ++xi)
#pragma unroll
        for (int n = 0; n < kNtw; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s_reg[xi][n][e] = gexp_last * s_reg[xi][n][e];
#pragma unroll
      for (int kk = 0; kk < kChunkLen / 8; ++kk) {
        const int i0 = 8 * kk + 2 * t, i1 = i0 + 1;
        uint32_t b_hi[kNtw][2], b_lo[kNtw][2];
#pragma unroll
        for (int n = 0; n < kNtw; ++n) {
          const int row = (8 * (n_first + n) + g) * kDts + i0;
          const float2 hi = *reinterpret_cast<const float2*>(sDt_hi + row);
          const float2 lo = *reinterpret_cast<const float2*>(sDt_lo + row);
          b_hi[n][0] = __float_as_uint(hi.x);
          b_hi[n][1] = __float_as_uint(hi.y);
          b_lo[n][0] = __float_as_uint(lo.x);
          b_lo[n][1] = __float_as_uint(lo.y);
        }
        const float f0 = __fmul_rn(vec[kVecWlast * kChunkLen + i0], vec[kVecInvK * kChunkLen + i0]);
        const float f1 = __fmul_rn(vec[kVecWlast * kChunkLen + i1], vec[kVecInvK * kChunkLen + i1]);
#pragma unroll
        for (int xi = 0; xi < kStateTiles; ++xi) {
          if (!owns_tile(xi)) continue;
          const float* const k0 = sKc + i0 * xs + 16 * (wm + 8 * xi) + g;
          const float a[4] = {__fmul_rn(f0, k0[0]), __fmul_rn(f0, k0[8]), __fmul_rn(f1, k0[xs]),
                              __fmul_rn(f1, k0[xs + 8])};
          const SplitA s = split_a(a);
#pragma unroll
          for (int n = 0; n < kNtw; ++n) mma_3xtf32(s_reg[xi][n], s, b_hi[n], b_lo[n]);
        }
      }
      publish_state();  // Sᵀ was last read in phase 1
    }

    // (4) O = diag(Γ) Q̂ S0 + P Δ, the tile of phase 2; P and Δᵀ in pair order (one float2 each).
    if (tiles_24) {
      const int c = 8 * n_own + 2 * t;
      const float2 o_lo = *reinterpret_cast<const float2*>(sXQ + (16 * m_own + g) * kRs + c);
      const float2 o_hi = *reinterpret_cast<const float2*>(sXQ + (16 * m_own + g + 8) * kRs + c);
      float acc[4] = {o_lo.x, o_lo.y, o_hi.x, o_hi.y};
      const float* const dt_hi = sDt_hi + (8 * n_own + g) * kDts + 2 * t;
      const float* const dt_lo = sDt_lo + (8 * n_own + g) * kDts + 2 * t;
      const float* const prow = sP + (16 * m_own + g) * kPStride + 2 * t;
#pragma unroll 2
      for (int kk = 0; kk <= 2 * m_own + 1; ++kk) {
        const float2 b_hi = *reinterpret_cast<const float2*>(dt_hi + 8 * kk);
        const float2 b_lo = *reinterpret_cast<const float2*>(dt_lo + 8 * kk);
        const float2 p_lo = *reinterpret_cast<const float2*>(prow + 8 * kk);
        const float2 p_hi = *reinterpret_cast<const float2*>(prow + 8 * kk + 8 * kPStride);
        const float a[4] = {p_lo.x, p_hi.x, p_lo.y, p_hi.y};
        mma_3xtf32(acc, split_a(a), {__float_as_uint(b_hi.x), __float_as_uint(b_hi.y)},
                   {__float_as_uint(b_lo.x), __float_as_uint(b_lo.y)});
      }
      float* const out = p.o + (chunk.row * nv + h) * dv + col0 + c;  // o[chunk's first row, h, col0 + c]
      const int64_t row_stride = static_cast<int64_t>(nv) * dv;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * m_own + g + 8 * half;
        if (i >= L) continue;
        if (c < cols) out[i * row_stride] = acc[2 * half];
        if (c + 1 < cols) out[i * row_stride + 1] = acc[2 * half + 1];
      }
    }

    if (Layout::kStages == 1 && has_next) {
      __syncthreads();  // the single K and vector buffers are dead only now
      issue_k(next, chunk_index + 1, 0);
      cp_async_commit();
    }
    chunk = next;
  }

#pragma unroll
  for (int xi = 0; xi < kStateTiles; ++xi)
#pragma unroll
    for (int n = 0; n < kNtw; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = 16 * (wm + 8 * xi) + g + 8 * (e / 2), c = 8 * (n_first + n) + 2 * t + e % 2;
        if (owns_tile(xi) && x < dk && c < cols) S[static_cast<int64_t>(x) * dv + col0 + c] = s_reg[xi][n][e];
      }
}

template <int kCols, KernelFault kFault>
void launch_state(const GatedDeltaRuleParams& p, const GdnChunkedPlan& plan, cudaStream_t stream) {
  const size_t bytes = gdn_chunk_state_smem_bytes<kCols>(p.key_dim);
  // Over 48 KB of dynamic shared memory must be allowed explicitly; a failure shows in the launch's own error.
  cudaFuncSetAttribute(gdn_chunk_state_kernel<kCols, kFault>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  const bool vec4 = reinterpret_cast<uintptr_t>(p.qkv) % 16 == 0 && p.qkv_stride % 4 == 0 && p.key_dim % 4 == 0 &&
                    p.value_dim % 4 == 0;
  const dim3 grid(static_cast<unsigned>((p.value_dim + kCols - 1) / kCols), static_cast<unsigned>(p.value_heads),
                  static_cast<unsigned>(plan.run_count));
  launch_kernel(gdn_chunk_state_kernel<kCols, kFault>, grid, kStateThreads, bytes, stream, p, plan, vec4);
}

template <KernelFault kFault>
void launch_state_fault(const GatedDeltaRuleParams& p, const GdnChunkedPlan& plan, cudaStream_t stream) {
  if (choose_gdn_chunk_state_columns(p.key_dim, device_limits()) == 32)
    return launch_state<32, kFault>(p, plan, stream);
  return launch_state<8, kFault>(p, plan, stream);
}

}  // namespace

template <int kCols>
size_t gdn_chunk_state_smem_bytes(int key_dim) {
  return static_cast<size_t>(StateLayout<kCols>(key_dim).total) * sizeof(float);
}
template size_t gdn_chunk_state_smem_bytes<8>(int);
template size_t gdn_chunk_state_smem_bytes<32>(int);

void launch_gdn_chunked(const GatedDeltaRuleParams& p, const GdnChunkedPlan& plan, KernelFault fault,
                        cudaStream_t stream) {
  if (plan.chunk_count == 0) return;
  // The gate faults live in pass 1, the barrier fault in pass 2.
  launch_gdn_chunk_prepare(p, plan, fault, stream);
  dispatch_fault<KernelFault::kGdnMissingBarrier>(
      fault, [&](auto planted) { launch_state_fault<decltype(planted)::value>(p, plan, stream); });
}

}  // namespace plumb::cuda
