// Gated DeltaNet on the GPU, part 1: the causal conv1d + SiLU and the token-by-token gated delta rule (decode).
// The chunked prefill kernel is in gdn_chunked.cu.
//
// Both kernels are exact by construction: one thread computes each output from a sum in a fixed order, or a CTA
// reduces in a fixed tree (in-thread, then a warp butterfly, then warps in index order) whose shape depends on dk and
// dv alone. Nothing depends on T, on which sequences share the batch, or on the grid.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/gdn_device.cuh"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/ptx.cuh"

namespace plumb::cuda {
namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Causal depthwise conv1d + SiLU

constexpr int kConvThreads = 128;  // channels per CTA

// grid (tiles, ⌈C / 128⌉): thread c of a CTA owns channel c of one tile of one sequence, keeping the K-1 previous
// inputs in registers as it walks the tile's tokens. Reads of x are coalesced across the channels of a warp.
template <int kWidth, KernelFault kFault>
__global__ void __launch_bounds__(kConvThreads) causal_conv1d_silu_kernel(const CausalConv1dParams p) {
  wait_for_prior_grid();
  constexpr int kHistory = kWidth - 1;  // inputs the state carries
  const int c = blockIdx.y * kConvThreads + threadIdx.x;
  if (c >= p.channels) return;
  const ConvTile tile = p.tiles[blockIdx.x];
  const int64_t C = p.channels;
  const float* const x = p.x + tile.begin * C + c;  // channel c of the sequence's rows: x[t · C] is token t
  float* const y = p.y + tile.begin * C + c;        // likewise
  float* const state = tile.state + c * kHistory;   // [K-1] of channel c, oldest first
  // The input at token t of the sequence: its own rows for t >= 0, the state's last entries before that.
  const auto input = [&](int64_t t) {
    if (t >= 0) return x[t * C];
    return kFault == KernelFault::kConvIgnoresState ? 0.0f : state[kHistory + t];
  };

  float w[kWidth];  // [K]: tap K-1 multiplies the current token
#pragma unroll
  for (int j = 0; j < kWidth; ++j) w[j] = p.w[c * kWidth + j];
  float window[kHistory];  // the inputs at tokens first - (K-1) .. first - 1, oldest first
#pragma unroll
  for (int j = 0; j < kHistory; ++j) window[j] = input(tile.first - kHistory + j);
  // The first tile also rewrites the state with the sequence's last K-1 inputs. It reads them now, before any write:
  // a sequence shorter than K-1 tokens keeps part of its old state, shifted.
  const bool owns_state = tile.first == 0;
  float next_state[kHistory];
#pragma unroll
  for (int j = 0; j < kHistory; ++j) next_state[j] = owns_state ? input(tile.count - kHistory + j) : 0.0f;

  const int64_t end = std::min<int64_t>(tile.first + kConvTileRows, tile.count);
#pragma unroll 4
  for (int64_t t = tile.first; t < end; ++t) {
    const float current = x[t * C];
    float acc = 0.0f;  // Σ_j w[j] · input(t - (K-1) + j), j ascending, as the CPU reference sums
#pragma unroll
    for (int j = 0; j < kHistory; ++j) acc = fmaf(w[j], window[j], acc);
    acc = fmaf(w[kHistory], current, acc);
    y[t * C] = acc / (1.0f + expf(-acc));
#pragma unroll
    for (int j = 0; j + 1 < kHistory; ++j) window[j] = window[j + 1];
    window[kHistory - 1] = current;
    if (t < tile.trail_count) {  // the state after token t: the K-1 inputs that end at it
      float* const trail = tile.trail[t] + c * kHistory;
#pragma unroll
      for (int j = 0; j < kHistory; ++j) trail[j] = window[j];
    }
  }
  if (owns_state) {
#pragma unroll
    for (int j = 0; j < kHistory; ++j) state[j] = next_state[j];
  }
}

template <int kWidth>
void launch_conv_width(const CausalConv1dParams& p, KernelFault fault, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.tile_count),
                  static_cast<unsigned>((p.channels + kConvThreads - 1) / kConvThreads));
  dispatch_fault<KernelFault::kConvIgnoresState>(fault, [&](auto planted) {
    launch_kernel(causal_conv1d_silu_kernel<kWidth, decltype(planted)::value>, grid, kConvThreads, 0, stream, p);
  });
}

// ---------------------------------------------------------------------------------------------------------------------
// Gated delta rule, token by token

constexpr int kRecurrentWarps = 4;
constexpr int kRecurrentThreads = 32 * kRecurrentWarps;
constexpr int kRecurrentCols = 32;                              // value columns (of dv) per CTA
constexpr int kColGroups = kRecurrentCols / 4;                  // 4-column groups: lanes 0-7 of a warp's row
constexpr int kRowLanes = kRecurrentWarps * (32 / kColGroups);  // 16 rows of S in flight across the CTA

// CTAs per SM the register budget is set for. Decode is bound by the state bytes in flight per SM, which the resident
// CTAs bring; the state waits in shared memory, not registers, so at dk <= 128 shared memory bounds the CTAs (8 × 17 KB
// measured as fast as 10 or 11 CTAs with fewer registers) and each gets 64 registers (the scalar state path at dk =
// 128, a generality case, spills 8 bytes since it writes trails; the vector path, decode's, spills nothing). dk > 128
// (34 KB of tile, a generality case) takes the registers of 2, which spill nothing.
constexpr int recurrent_min_ctas(int rows) {
  return rows <= 8 ? 8 : 2;
}

// grid (⌈dv / 32⌉, nv, batch sequences), 128 threads. The CTA owns columns [32·x, 32·x + 32) of value head h's state
// S [dk, dv] and keeps them in shared memory over the sequence's tokens: lane l of warp w owns columns 4·(l % 8) .. +3
// of rows i = 4·w + l / 8 + 16·r (r < kRows). Each thread copies its own pieces in first thing (16-byte cp.async where
// kVec4: a warp reads 4 rows × 128 contiguous bytes, and no register holds them in flight), and only it reads and
// rewrites them, storing them to global memory as it updates them for the last token: the state needs no barrier.
// Per token, each thread reads q and k at its own rows; the sums over dk (Σq², Σk², Sᵀk with the raw k, Sᵀq with
// the raw q, the norms applied after) run in-thread over r, then over the 4 row lanes of the warp (xor 8, xor 16),
// then over the 4 warps in index order through shared memory: a tree fixed by kRows, which is fixed by dk. Two
// barriers per token: before the warps' partials of Σq², Σk² and Sᵀk are read, and before those of Sᵀq.
template <int kRows, bool kVec4, KernelFault kFault>
__global__ void __launch_bounds__(kRecurrentThreads, recurrent_min_ctas(kRows))
    gdn_recurrent_kernel(const GatedDeltaRuleParams p, const GdnSequence* sequences) {
  wait_for_prior_grid();
  __shared__ __align__(16) float tile[kRows * kRowLanes][kRecurrentCols];  // S[i][32·x + c]; zero outside [dk, dv]
  __shared__ float norm_partial[kRecurrentWarps][2];                       // per warp: its rows' Σq², Σk²
  __shared__ float m_partial[kRecurrentWarps][kRecurrentCols];             // per warp: its rows' share of Sᵀk_raw
  __shared__ float o_partial[kRecurrentWarps][kRecurrentCols];             // per warp: its rows' share of Sᵀq_raw

  const GdnSequence seq = sequences[blockIdx.z];
  const int h = blockIdx.y;
  const int kh = h / (p.value_heads / p.key_heads);
  const int dk = p.key_dim, dv = p.value_dim, nv = p.value_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane % kColGroups;
  const int row_lane = warp * (32 / kColGroups) + lane / kColGroups;  // rows row_lane + 16 r
  const int col = blockIdx.x * kRecurrentCols + group * 4;            // the first of this thread's 4 columns
  float* const S = seq.state + static_cast<int64_t>(h) * dk * dv;     // [dk, dv]
  // This thread's 4 columns of row row_lane + 16 r of the tile.
  const auto own = [&](int r) -> float4& {
    return *reinterpret_cast<float4*>(&tile[row_lane + kRowLanes * r][group * 4]);
  };
  // Stores x as this thread's 4 columns of row i of value head h's [dk, dv] at `head`.
  const auto store_row = [&](float* head, int i, const float4& x) {
    float* const dst = head + static_cast<int64_t>(i) * dv + col;
    if constexpr (kVec4) {
      if (i < dk && col < dv) *reinterpret_cast<float4*>(dst) = x;
    } else {
      const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (i < dk && col + e < dv) dst[e] = xs[e];
    }
  };

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = row_lane + kRowLanes * r;
    const float* src = S + static_cast<int64_t>(i) * dv + col;
    if constexpr (kVec4) {
      if (i < dk && col < dv)
        cp_async_16(&own(r).x, src);
      else
        own(r) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
      float* dst = &own(r).x;
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = i < dk && col + e < dv ? src[e] : 0.0f;
    }
  }

  for (int64_t t = 0; t < seq.count; ++t) {
    const int64_t row = seq.begin + t;
    const float* const q = p.qkv + row * p.qkv_stride + kh * dk;                              // [dk]
    const float* const k = p.qkv + row * p.qkv_stride + (p.key_heads + kh) * dk;              // [dk]
    const float* const v = p.qkv + row * p.qkv_stride + 2 * p.key_heads * dk + h * dv + col;  // [4] of [dv]
    float q_raw[kRows], k_raw[kRows];  // q and k at this thread's rows, before the norm; zero past dk
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = row_lane + kRowLanes * r;
      q_raw[r] = i < dk ? q[i] : 0.0f;
      k_raw[r] = i < dk ? k[i] : 0.0f;
    }
    float beta, g;
    gdn_gates<kFault>(p.a[row * nv + h], p.b[row * nv + h], p.A_log[h], p.dt_bias[h], beta, g);
    const float decay = expf(g);
    float value[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) value[e] = col + e < dv ? v[e] : 0.0f;
    if constexpr (kVec4) {
      if (t == 0) cp_async_wait_all();
    }

    // This warp's shares of Σq², Σk² and m = (exp(g)·S)ᵀk_raw.
    float sum_q = 0.0f, sum_k = 0.0f, m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sum_q = fmaf(q_raw[r], q_raw[r], sum_q);
      sum_k = fmaf(k_raw[r], k_raw[r], sum_k);
      const float4 x = own(r);
      m[0] = fmaf(x.x * decay, k_raw[r], m[0]);
      m[1] = fmaf(x.y * decay, k_raw[r], m[1]);
      m[2] = fmaf(x.z * decay, k_raw[r], m[2]);
      m[3] = fmaf(x.w * decay, k_raw[r], m[3]);
    }
    sum_q += __shfl_xor_sync(0xffffffffu, sum_q, 8);
    sum_q += __shfl_xor_sync(0xffffffffu, sum_q, 16);
    sum_k += __shfl_xor_sync(0xffffffffu, sum_k, 8);
    sum_k += __shfl_xor_sync(0xffffffffu, sum_k, 16);
    if (lane == 0) {
      norm_partial[warp][0] = sum_q;
      norm_partial[warp][1] = sum_k;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      m[e] += __shfl_xor_sync(0xffffffffu, m[e], 8);
      m[e] += __shfl_xor_sync(0xffffffffu, m[e], 16);
      if (lane < kColGroups) m_partial[warp][group * 4 + e] = m[e];
    }
    // The partials are read across warps below; fault kGdnMissingBarrier drops this barrier.
    if constexpr (kFault != KernelFault::kGdnMissingBarrier) __syncthreads();

    float total_q = 0.0f, total_k = 0.0f;
#pragma unroll
    for (int w = 0; w < kRecurrentWarps; ++w) {
      total_q += norm_partial[w][0];
      total_k += norm_partial[w][1];
    }
    const float inv_k = 1.0f / sqrtf(total_k + kGdnL2NormEps);
    // delta = beta (v - Sᵀk) with k = k_raw·inv_k; S ← exp(g)·S + k deltaᵀ; this warp's share of Sᵀq_raw.
    float delta[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kRecurrentWarps; ++w) total += m_partial[w][group * 4 + e];
      delta[e] = beta * (value[e] - total * inv_k);
    }
    const bool last = t + 1 == seq.count;  // then S goes straight back to global memory
    // A verification's trail: S after this token also goes to a state of its own.
    float* const trail = t < seq.trail_count ? seq.trail[t] + static_cast<int64_t>(h) * dk * dv : nullptr;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float kr = k_raw[r] * inv_k;
      float4 x = own(r);
      x.x = fmaf(kr, delta[0], x.x * decay);
      x.y = fmaf(kr, delta[1], x.y * decay);
      x.z = fmaf(kr, delta[2], x.z * decay);
      x.w = fmaf(kr, delta[3], x.w * decay);
      if (trail != nullptr)
        store_row(trail, row_lane + kRowLanes * r, kFault == KernelFault::kGdnTrailStale ? own(r) : x);
      if (last)
        store_row(S, row_lane + kRowLanes * r, x);
      else
        own(r) = x;
      o[0] = fmaf(x.x, q_raw[r], o[0]);
      o[1] = fmaf(x.y, q_raw[r], o[1]);
      o[2] = fmaf(x.z, q_raw[r], o[2]);
      o[3] = fmaf(x.w, q_raw[r], o[3]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      o[e] += __shfl_xor_sync(0xffffffffu, o[e], 8);
      o[e] += __shfl_xor_sync(0xffffffffu, o[e], 16);
      if (lane < kColGroups) o_partial[warp][group * 4 + e] = o[e];
    }
    __syncthreads();
    if (warp == 0 && lane < kColGroups) {
      const float q_norm = 1.0f / sqrtf(total_q + kGdnL2NormEps) * p.q_scale;  // o = Sᵀq_raw · q_norm
      float* const out = p.o + (row * nv + h) * dv + col;                      // [4] of o[row, h, :]
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < kRecurrentWarps; ++w) total += o_partial[w][group * 4 + e];
        if (col + e < dv) out[e] = total * q_norm;
      }
    }
    // No third barrier: the next token's first shared writes (norm_partial, m_partial) come after every thread's
    // reads of them above, which precede the barrier just passed; its o_partial writes come after its first
    // barrier, which warp 0 reaches only once it has read this token's o_partial.
  }
}

template <int kRows, bool kVec4, KernelFault kFault>
void launch_recurrent_rows(const GatedDeltaRuleParams& p, const GdnSequence* sequences, dim3 grid,
                           cudaStream_t stream) {
  // The state tiles of the resident CTAs need most of the SM's shared memory: ask for the largest carveout, once.
  static const cudaError_t carveout =
      cudaFuncSetAttribute(gdn_recurrent_kernel<kRows, kVec4, kFault>, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  (void)carveout;  // a hint: without it the kernel still runs, with fewer CTAs resident
  launch_kernel(gdn_recurrent_kernel<kRows, kVec4, kFault>, grid, kRecurrentThreads, 0, stream, p, sequences);
}

template <bool kVec4, KernelFault kFault>
void launch_recurrent_variant(const GatedDeltaRuleParams& p, const GdnSequence* sequences, int count,
                              cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.value_dim + kRecurrentCols - 1) / kRecurrentCols),
                  static_cast<unsigned>(p.value_heads), static_cast<unsigned>(count));
  // kRows · 16 >= dk: the fewest rows of shared memory that hold the CTA's rows of S.
  if (p.key_dim <= 2 * kRowLanes)
    launch_recurrent_rows<2, kVec4, kFault>(p, sequences, grid, stream);
  else if (p.key_dim <= 4 * kRowLanes)
    launch_recurrent_rows<4, kVec4, kFault>(p, sequences, grid, stream);
  else if (p.key_dim <= 8 * kRowLanes)
    launch_recurrent_rows<8, kVec4, kFault>(p, sequences, grid, stream);
  else
    launch_recurrent_rows<16, kVec4, kFault>(p, sequences, grid, stream);
}

template <KernelFault kFault>
void launch_recurrent_fault(const GatedDeltaRuleParams& p, const GdnSequence* sequences, int count,
                            cudaStream_t stream) {
  if (p.state_vec4)
    launch_recurrent_variant<true, kFault>(p, sequences, count, stream);
  else
    launch_recurrent_variant<false, kFault>(p, sequences, count, stream);
}

void launch_recurrent_batch(const GatedDeltaRuleParams& p, const GdnSequence* sequences, int count, KernelFault fault,
                            cudaStream_t stream) {
  dispatch_fault<KernelFault::kGdnGateSign, KernelFault::kGdnMissingBarrier, KernelFault::kGdnTrailStale>(
      fault, [&](auto planted) { launch_recurrent_fault<decltype(planted)::value>(p, sequences, count, stream); });
}

}  // namespace

void launch_causal_conv1d_silu(const CausalConv1dParams& p, KernelFault fault, cudaStream_t stream) {
  switch (p.width) {
    case 2:
      return launch_conv_width<2>(p, fault, stream);
    case 3:
      return launch_conv_width<3>(p, fault, stream);
    case 4:
      return launch_conv_width<4>(p, fault, stream);
    case 5:
      return launch_conv_width<5>(p, fault, stream);
    case 6:
      return launch_conv_width<6>(p, fault, stream);
    case 7:
      return launch_conv_width<7>(p, fault, stream);
    default:
      return launch_conv_width<8>(p, fault, stream);  // the glue checks width <= kConvMaxWidth
  }
}

void launch_gdn_recurrent(const GatedDeltaRuleParams& p, const GdnSequence* sequences, int count, KernelFault fault,
                          cudaStream_t stream) {
  if (count > 0) launch_recurrent_batch(p, sequences, count, fault, stream);
}

}  // namespace plumb::cuda
