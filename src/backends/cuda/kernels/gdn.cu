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

namespace plumb::cuda {
namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Causal depthwise conv1d + SiLU

constexpr int kConvThreads = 128;  // channels per CTA

// grid (tiles, ⌈C / 128⌉): thread c of a CTA owns channel c of one tile of one sequence, keeping the K-1 previous
// inputs in registers as it walks the tile's tokens. Reads of x are coalesced across the channels of a warp.
template <int kWidth, KernelFault kFault>
__global__ void __launch_bounds__(kConvThreads) causal_conv1d_silu_kernel(const CausalConv1dParams p) {
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
  if (fault == KernelFault::kConvIgnoresState)
    causal_conv1d_silu_kernel<kWidth, KernelFault::kConvIgnoresState><<<grid, kConvThreads, 0, stream>>>(p);
  else
    causal_conv1d_silu_kernel<kWidth, KernelFault::kNone><<<grid, kConvThreads, 0, stream>>>(p);
}

// ---------------------------------------------------------------------------------------------------------------------
// Gated delta rule, token by token

constexpr int kRecurrentWarps = 4;
constexpr int kRecurrentThreads = 32 * kRecurrentWarps;
constexpr int kRecurrentCols = 32;                              // value columns (of dv) per CTA
constexpr int kColGroups = kRecurrentCols / 4;                  // 4-column groups: lanes 0-7 of a warp's row
constexpr int kRowLanes = kRecurrentWarps * (32 / kColGroups);  // 16 rows of S in flight across the CTA

// CTAs per SM the register budget is set for: 6 (80 registers a thread) keep 6 × 16 KB of state loads in flight per
// SM at dk = 128; the variants that would spill at 80 registers take what they need.
constexpr int recurrent_min_ctas(int rows, bool vec4) {
  return rows <= 4 || (rows <= 8 && vec4) ? 6 : 1;
}

// grid (⌈dv / 32⌉, nv, sequences), 128 threads. The CTA owns columns [32·x, 32·x + 32) of value head h's state S
// [dk, dv]: lane l of warp w holds columns 4·(l % 8) .. +3 of rows i = 4·w + l / 8 + 16·r (r < kRows) in registers,
// loaded once as float4 (a warp reads 4 rows × 128 contiguous bytes), updated token by token and stored once.
// The two sums over dk per token (Sᵀk and Sᵀq) run in-thread over r, then over the 4 lanes sharing the columns
// (xor 8, xor 16), then over the 4 warps in index order: a tree fixed by kRows, which is fixed by dk.
template <int kRows, bool kVec4, KernelFault kFault>
__global__ void __launch_bounds__(kRecurrentThreads, recurrent_min_ctas(kRows, kVec4))
    gdn_recurrent_kernel(const GatedDeltaRuleParams p) {
  __shared__ float q_raw[kGdnMaxHeadDim];                       // this token's q of key head kh, before the norm
  __shared__ float k_raw[kGdnMaxHeadDim];                       // likewise k
  __shared__ float norm_partial[2][kRecurrentWarps];            // per warp: Σq², Σk²
  __shared__ float m_partial[kRecurrentWarps][kRecurrentCols];  // per warp: its rows' share of Sᵀk
  __shared__ float o_partial[kRecurrentWarps][kRecurrentCols];  // per warp: its rows' share of Sᵀq

  const GdnSequence seq = p.sequences[blockIdx.z];
  const int h = blockIdx.y;
  const int kh = h / (p.value_heads / p.key_heads);
  const int dk = p.key_dim, dv = p.value_dim, nv = p.value_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane % kColGroups;
  const int row_lane = warp * (32 / kColGroups) + lane / kColGroups;  // rows row_lane + 16 r
  const int col = blockIdx.x * kRecurrentCols + group * 4;            // the first of this thread's 4 columns
  float* const S = seq.state + static_cast<int64_t>(h) * dk * dv;     // [dk, dv]

  float s[kRows][4];  // S[row_lane + 16 r][col + e]; zero outside [dk, dv]
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = row_lane + kRowLanes * r;
    const float* src = S + static_cast<int64_t>(i) * dv + col;
    if constexpr (kVec4) {
      const float4 v = i < dk && col < dv ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      s[r][0] = v.x;
      s[r][1] = v.y;
      s[r][2] = v.z;
      s[r][3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[r][e] = i < dk && col + e < dv ? src[e] : 0.0f;
    }
  }

  for (int64_t t = 0; t < seq.count; ++t) {
    const int64_t row = seq.begin + t;
    const float* const q = p.qkv + row * p.qkv_stride + kh * dk;                              // [dk]
    const float* const k = p.qkv + row * p.qkv_stride + (p.key_heads + kh) * dk;              // [dk]
    const float* const v = p.qkv + row * p.qkv_stride + 2 * p.key_heads * dk + h * dv + col;  // [4] of [dv]

    // Σq² and Σk² over dk: each thread its elements in order, then the warp butterfly, then the warps in order.
    float sum_q = 0.0f, sum_k = 0.0f;
    for (int x = threadIdx.x; x < dk; x += kRecurrentThreads) {
      const float qx = q[x], kx = k[x];
      q_raw[x] = qx;
      k_raw[x] = kx;
      sum_q = fmaf(qx, qx, sum_q);
      sum_k = fmaf(kx, kx, sum_k);
    }
    sum_q = warp_sum(sum_q);
    sum_k = warp_sum(sum_k);
    if (lane == 0) {
      norm_partial[0][warp] = sum_q;
      norm_partial[1][warp] = sum_k;
    }
    float beta, g;
    gdn_gates<kFault>(p.a[row * nv + h], p.b[row * nv + h], p.A_log[h], p.dt_bias[h], beta, g);
    const float decay = expf(g);
    float value[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) value[e] = col + e < dv ? v[e] : 0.0f;
    // q_raw, k_raw and norm_partial are read across warps below; fault kGdnMissingBarrier drops this barrier.
    if constexpr (kFault != KernelFault::kGdnMissingBarrier) __syncthreads();

    float total_q = 0.0f, total_k = 0.0f;
#pragma unroll
    for (int w = 0; w < kRecurrentWarps; ++w) {
      total_q += norm_partial[0][w];
      total_k += norm_partial[1][w];
    }
    const float inv_q = 1.0f / sqrtf(total_q + kGdnL2NormEps);
    const float inv_k = 1.0f / sqrtf(total_k + kGdnL2NormEps);
    float kr[kRows], qr[kRows];  // normalized k and q (q also scaled) at this thread's rows
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = row_lane + kRowLanes * r;
      kr[r] = i < dk ? k_raw[i] * inv_k : 0.0f;
      qr[r] = i < dk ? q_raw[i] * inv_q * p.q_scale : 0.0f;
    }

    // S ← exp(g)·S, then m = Sᵀk.
    float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[r][e] *= decay;
        m[e] = fmaf(s[r][e], kr[r], m[e]);
      }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      m[e] += __shfl_xor_sync(0xffffffffu, m[e], 8);
      m[e] += __shfl_xor_sync(0xffffffffu, m[e], 16);
      if (lane < kColGroups) m_partial[warp][group * 4 + e] = m[e];
    }
    __syncthreads();

    // delta = beta (v - m); S ← S + k deltaᵀ; o = Sᵀq.
    float delta[4], o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kRecurrentWarps; ++w) total += m_partial[w][group * 4 + e];
      delta[e] = beta * (value[e] - total);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[r][e] = fmaf(kr[r], delta[e], s[r][e]);
        o[e] = fmaf(s[r][e], qr[r], o[e]);
      }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      o[e] += __shfl_xor_sync(0xffffffffu, o[e], 8);
      o[e] += __shfl_xor_sync(0xffffffffu, o[e], 16);
      if (lane < kColGroups) o_partial[warp][group * 4 + e] = o[e];
    }
    __syncthreads();
    if (warp == 0 && lane < kColGroups) {
      float* const out = p.o + (row * nv + h) * dv + col;  // [4] of o[row, h, :]
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < kRecurrentWarps; ++w) total += o_partial[w][group * 4 + e];
        if (col + e < dv) out[e] = total;
      }
    }
    // No barrier needed before the next token: its first shared writes (q_raw, k_raw, norm_partial) were last read
    // before the m_partial barrier above, and m_partial / o_partial are rewritten only after further barriers.
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = row_lane + kRowLanes * r;
    float* const dst = S + static_cast<int64_t>(i) * dv + col;
    if constexpr (kVec4) {
      if (i < dk && col < dv) *reinterpret_cast<float4*>(dst) = make_float4(s[r][0], s[r][1], s[r][2], s[r][3]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (i < dk && col + e < dv) dst[e] = s[r][e];
    }
  }
}

template <bool kVec4, KernelFault kFault>
void launch_recurrent_variant(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.value_dim + kRecurrentCols - 1) / kRecurrentCols),
                  static_cast<unsigned>(p.value_heads), static_cast<unsigned>(p.sequence_count));
  // kRows · 16 >= dk: the fewest registers that hold the CTA's rows of S.
  if (p.key_dim <= 2 * kRowLanes)
    gdn_recurrent_kernel<2, kVec4, kFault><<<grid, kRecurrentThreads, 0, stream>>>(p);
  else if (p.key_dim <= 4 * kRowLanes)
    gdn_recurrent_kernel<4, kVec4, kFault><<<grid, kRecurrentThreads, 0, stream>>>(p);
  else if (p.key_dim <= 8 * kRowLanes)
    gdn_recurrent_kernel<8, kVec4, kFault><<<grid, kRecurrentThreads, 0, stream>>>(p);
  else
    gdn_recurrent_kernel<16, kVec4, kFault><<<grid, kRecurrentThreads, 0, stream>>>(p);
}

template <KernelFault kFault>
void launch_recurrent_fault(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  if (p.state_vec4)
    launch_recurrent_variant<true, kFault>(p, stream);
  else
    launch_recurrent_variant<false, kFault>(p, stream);
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

void launch_gdn_recurrent(const GatedDeltaRuleParams& p, KernelFault fault, cudaStream_t stream) {
  switch (fault) {
    case KernelFault::kGdnGateSign:
      return launch_recurrent_fault<KernelFault::kGdnGateSign>(p, stream);
    case KernelFault::kGdnMissingBarrier:
      return launch_recurrent_fault<KernelFault::kGdnMissingBarrier>(p, stream);
    default:
      return launch_recurrent_fault<KernelFault::kNone>(p, stream);
  }
}

}  // namespace plumb::cuda
