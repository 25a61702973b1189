// Kernels of dense.h. Rows go one per 256-thread block (embedding, slices, row gates, long norm rows) or one per
// warp (short norm rows, 8 per block); flat elementwise work and the random fill run on a capped grid that strides
// over the rest.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/kernels/dense.h"
#include "backends/cuda/kernels/launch.cuh"
#include "core/counter_rng.h"

namespace plumb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

unsigned grid_for(int64_t work_items, int max_blocks) {
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < max_blocks ? blocks : max_blocks));
}

// The CPU reference's sigmoid and SiLU (cpu_backend.h) rounded step by step as it rounds them: expf for std::exp,
// and the addition and division pinned to round-to-nearest so that nothing is fused or approximated.
__device__ __forceinline__ float sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}
__device__ __forceinline__ float silu(float x) {
  return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

// kVec consecutive elements as F32: one 16-byte load when kVec fills it, else element by element.
template <int kVec>
__device__ __forceinline__ void load_vec(const float* src, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 q = *reinterpret_cast<const float4*>(src);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = src[i];
  }
}
template <int kVec>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* src, float (&v)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 q = *reinterpret_cast<const uint4*>(src);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = __bfloat162float(src[i]);
  }
}
template <int kVec>
__device__ __forceinline__ void store_vec(float* dst, const float (&v)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4)
      *reinterpret_cast<float4*>(dst + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) dst[i] = v[i];
  }
}

// Copies n values of one row from src to dst (widened to F32), kVec at a time, by the block's kThreads threads.
template <int kVec, typename Element>
__device__ __forceinline__ void copy_row(const Element* src, float* dst, int64_t n) {
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * kVec; c < n; c += kThreads * kVec) {
    float v[kVec];
    load_vec<kVec>(src + c, v);
    store_vec<kVec>(dst + c, v);
  }
}

// ---- embedding -------------------------------------------------------------------------------------------------

// Block t copies row ids[t] of the table into out[t], widening BF16 exactly. An id outside [0, vocab), which only
// ids read from device memory can hold (the host checks its own), gives a row of NaN instead of a read past the table.
template <typename Element, int kVec, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) embedding_kernel(EmbeddingParams p) {
  wait_for_prior_grid();
  const int64_t t = blockIdx.x;
  int64_t id = p.ids[t];
  float* out = p.out + t * p.hidden;  // [hidden]
  if (id < 0 || id >= p.vocab) {
    for (int64_t i = threadIdx.x; i < p.hidden; i += blockDim.x) out[i] = __int_as_float(0x7fffffff);
    return;
  }
  if constexpr (kFault == KernelFault::kEmbeddingRowOffByOne) id = (id + 1) % p.vocab;
  const Element* row = static_cast<const Element*>(p.table) + id * p.hidden;  // [hidden]
  copy_row<kVec>(row, out, p.hidden);
}

template <KernelFault kFault>
void launch_embedding_as(const EmbeddingParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.tokens));
  if (p.table_bf16) {
    if (p.hidden % 8 == 0 && aligned16(p.table) && aligned16(p.out))
      launch_kernel(embedding_kernel<__nv_bfloat16, 8, kFault>, grid, kThreads, 0, stream, p);
    else
      launch_kernel(embedding_kernel<__nv_bfloat16, 1, kFault>, grid, kThreads, 0, stream, p);
  } else {
    if (p.hidden % 4 == 0 && aligned16(p.table) && aligned16(p.out))
      launch_kernel(embedding_kernel<float, 4, kFault>, grid, kThreads, 0, stream, p);
    else
      launch_kernel(embedding_kernel<float, 1, kFault>, grid, kThreads, 0, stream, p);
  }
}

// ---- RMSNorm ---------------------------------------------------------------------------------------------------

// Elements [4q, 4q + 4) of a row of `dim`: one 16-byte access when kVec (dim % 4 == 0, aligned), else one by one
// with zeros read past the end and nothing written there. Both paths feed the arithmetic the same values.
template <bool kVec>
__device__ __forceinline__ void load_chunk(const float* row, int64_t q, int64_t dim, float (&v)[4]) {
  if constexpr (kVec) {
    const float4 f = reinterpret_cast<const float4*>(row)[q];
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) v[c] = 4 * q + c < dim ? row[4 * q + c] : 0.0f;
  }
}
template <bool kVec>
__device__ __forceinline__ void store_chunk(float* row, int64_t q, int64_t dim, const float (&v)[4]) {
  if constexpr (kVec) {
    reinterpret_cast<float4*>(row)[q] = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (4 * q + c < dim) row[4 * q + c] = v[c];
  }
}

// Chunk q of row `row`'s residual: r, or with a gated branch r + branch · scale, the F32 operations of
// mul_sigmoid_rows then add, in that order.
template <bool kVec>
__device__ __forceinline__ void load_residual_chunk(const RmsNormParams& p, int64_t row, int64_t q, float scale,
                                                    float (&r)[4]) {
  load_chunk<kVec>(p.residual + row * p.dim, q, p.dim, r);
  if (p.branch == nullptr) return;
  float b[4];
  load_chunk<kVec>(p.branch + row * p.dim, q, p.dim, b);
#pragma unroll
  for (int c = 0; c < 4; ++c) r[c] = __fadd_rn(r[c], __fmul_rn(b[c], scale));
}

// Threads per row of a norm, chosen by the row length alone so that a row's reduction never depends on how many
// rows share the call: a warp for short rows (q/k heads, GDN value heads), a whole block for long ones (the hidden
// size), whose loads are then all in flight at once.
constexpr int64_t kNormBlockRowMinDim = 1024;

// The chunks a thread of a norm keeps in registers between its two passes (rows of up to 4 · kRowThreads chunks: the
// hidden size with 256 threads, the heads with a warp). A longer row reads its values and weights again.
constexpr int kNormCachedChunks = 4;

// kRowThreads threads per row (32 or 256). Σx² in an order fixed by dim alone: thread j of the row runs four sums
// (one per chunk slot) over its chunks j, j + kRowThreads, ...; the slots combine as (s0 + s1) + (s2 + s3); a
// xor-shuffle tree over 16, 8, 4, 2, 1 leaves the same bits in every lane; a 256-thread row then adds its 8 warps'
// sums pairwise, ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)). Then y = (x · inv) · (offset + w), or
// ((x · inv) · w) · SiLU(z) when gated, with inv = 1 / sqrt(Σx² / dim + eps): the CPU reference's operations in its
// order, each rounded to nearest. y may be x itself: every element is read and then written by the same thread.
// A row of up to kNormCachedChunks chunks a thread issues all its loads (values, weights, gates) before the reduction
// and keeps them in registers, so the norm waits on memory once, not twice; the values are the same either way.
template <int kRowThreads, bool kGated, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNormParams p) {
  wait_for_prior_grid();
  constexpr int kRowsPerBlock = kThreads / kRowThreads;
  constexpr int kRowWarps = kRowThreads / 32;
  __shared__ float warp_sums[kRowsPerBlock][kRowWarps];
  const int j = threadIdx.x % kRowThreads, slot = threadIdx.x / kRowThreads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + slot;
  if (row >= p.rows) return;  // whole warps, or the whole block when it holds one row
  const int64_t dim = p.dim, chunks = (dim + 3) / 4;
  const float* x = p.x + row * dim;                         // [dim]
  float* y = p.y + row * dim;                               // [dim]
  const float* z_row = kGated ? p.z + row * dim : nullptr;  // [dim]

  // The residual step's gated branch scales by one factor a row, sigmoid(gate), as mul_sigmoid_rows computes it.
  const float branch_scale = p.branch == nullptr                             ? 0.0f
                             : kFault == KernelFault::kAddGatedBranchUngated ? 1.0f
                                                                             : sigmoid(p.branch_gate[row]);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Chunk q's value to normalize: x, or the residual step's sum x + r, which it stores; its square into acc.
  const auto first_pass = [&](int64_t q, float(&v)[4]) {
    load_chunk<kVec>(x, q, dim, v);
    if (p.residual != nullptr) {
      float r[4];
      load_residual_chunk<kVec>(p, row, q, branch_scale, r);
#pragma unroll
      for (int c = 0; c < 4; ++c) v[c] = __fadd_rn(v[c], r[c]);
      if constexpr (kFault != KernelFault::kAddRmsNormKeepsX) store_chunk<kVec>(p.sum + row * dim, q, dim, v);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[c] = __fmaf_rn(v[c], v[c], acc[c]);
  };
  // The row's 1 / sqrt(mean(v²) + eps) from every thread's acc.
  const auto inverse_rms = [&] {
    float sum = __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3]));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(kFullMask, sum, offset));
    if constexpr (kRowWarps > 1) {
      if (j % 32 == 0) warp_sums[slot][j / 32] = sum;
      __syncthreads();
      float w[kRowWarps];
#pragma unroll
      for (int i = 0; i < kRowWarps; ++i) w[i] = warp_sums[slot][i];
#pragma unroll
      for (int width = kRowWarps; width > 1; width /= 2)
#pragma unroll
        for (int i = 0; i < width / 2; ++i) w[i] = __fadd_rn(w[2 * i], w[2 * i + 1]);
      sum = w[0];
    }
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, static_cast<float>(dim)), p.eps)));
  };
  // Chunk q of y from its value v, weights w and (gated) gate logits z.
  const auto second_pass = [&](int64_t q, float inv, const float(&v)[4], const float(&w)[4], const float(&z)[4]) {
    float out[4];
    if constexpr (kGated) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float gate = kFault == KernelFault::kGatedNormGateSign ? silu(-z[c]) : silu(z[c]);
        out[c] = __fmul_rn(__fmul_rn(__fmul_rn(v[c], inv), w[c]), gate);
      }
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        out[c] = kFault == KernelFault::kRmsNormSkipsWeight
                     ? __fmul_rn(v[c], inv)
                     : __fmul_rn(__fmul_rn(v[c], inv), __fadd_rn(p.weight_offset, w[c]));
    }
    store_chunk<kVec>(y, q, dim, out);
  };

  if (chunks <= kNormCachedChunks * kRowThreads) {
    float v[kNormCachedChunks][4], w[kNormCachedChunks][4], z[kNormCachedChunks][4] = {};
#pragma unroll
    for (int i = 0; i < kNormCachedChunks; ++i) {
      const int64_t q = j + static_cast<int64_t>(i) * kRowThreads;
      if (q >= chunks) break;
      first_pass(q, v[i]);
      load_chunk<kVec>(p.w, q, dim, w[i]);
      if constexpr (kGated) load_chunk<kVec>(z_row, q, dim, z[i]);
    }
    const float inv = inverse_rms();
#pragma unroll
    for (int i = 0; i < kNormCachedChunks; ++i) {
      const int64_t q = j + static_cast<int64_t>(i) * kRowThreads;
      if (q >= chunks) break;
      second_pass(q, inv, v[i], w[i], z[i]);
    }
    return;
  }

#pragma unroll 4
  for (int64_t q = j; q < chunks; q += kRowThreads) {
    float v[4];
    first_pass(q, v);
  }
  const float inv = inverse_rms();
  // The row normalized: x, or the residual step's sum, which this thread has just stored (or, under the planted
  // control, recomputes).
  const float* normed = p.residual != nullptr && kFault != KernelFault::kAddRmsNormKeepsX ? p.sum + row * dim : x;
#pragma unroll 4
  for (int64_t q = j; q < chunks; q += kRowThreads) {
    float v[4], w[4], z[4] = {};
    load_chunk<kVec>(normed, q, dim, v);
    if (kFault == KernelFault::kAddRmsNormKeepsX && p.residual != nullptr) {
      float r[4];
      load_residual_chunk<kVec>(p, row, q, branch_scale, r);
#pragma unroll
      for (int c = 0; c < 4; ++c) v[c] = __fadd_rn(v[c], r[c]);
    }
    load_chunk<kVec>(p.w, q, dim, w);
    if constexpr (kGated) load_chunk<kVec>(z_row, q, dim, z);
    second_pass(q, inv, v, w, z);
  }
}

template <int kRowThreads, bool kGated, KernelFault kFault>
void launch_rms_norm_rows(const RmsNormParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kThreads / kRowThreads;
  const dim3 grid(static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock));
  const bool vec = p.dim % 4 == 0 && aligned16(p.x) && aligned16(p.y) && aligned16(p.w) &&
                   (!kGated || aligned16(p.z)) &&
                   (p.residual == nullptr || (aligned16(p.residual) && aligned16(p.sum))) &&
                   (p.branch == nullptr || aligned16(p.branch));
  if (vec)
    launch_kernel(rms_norm_kernel<kRowThreads, kGated, true, kFault>, grid, kThreads, 0, stream, p);
  else
    launch_kernel(rms_norm_kernel<kRowThreads, kGated, false, kFault>, grid, kThreads, 0, stream, p);
}

template <bool kGated, KernelFault kFault>
void launch_rms_norm_as(const RmsNormParams& p, cudaStream_t stream) {
  if (p.dim >= kNormBlockRowMinDim)
    launch_rms_norm_rows<kThreads, kGated, kFault>(p, stream);
  else
    launch_rms_norm_rows<32, kGated, kFault>(p, stream);
}

// ---- slices and elementwise ops --------------------------------------------------------------------------------

// Block r copies columns [begin, begin + width) of row r.
template <int kVec, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) slice_columns_kernel(SliceColumnsParams p) {
  wait_for_prior_grid();
  const int64_t r = blockIdx.x;
  const int64_t begin = kFault == KernelFault::kSliceColumnsOneLate ? p.begin + 1 : p.begin;
  const float* src = p.src + r * p.cols + begin;  // [width]
  float* dst = p.dst + r * p.width;               // [width]
  copy_row<kVec>(src, dst, p.width);
}

template <KernelFault kFault>
void launch_slice_columns_as(const SliceColumnsParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.rows));
  const bool vec = p.cols % 4 == 0 && p.begin % 4 == 0 && p.width % 4 == 0 && aligned16(p.src) && aligned16(p.dst);
  if (vec)
    launch_kernel(slice_columns_kernel<4, kFault>, grid, kThreads, 0, stream, p);
  else
    launch_kernel(slice_columns_kernel<1, kFault>, grid, kThreads, 0, stream, p);
}

// Each block moves kCopyBlockUnits units (16-byte vectors or single bytes) of one region; thread t moves the
// block's units t, t + kThreads, ....
constexpr int64_t kCopyBlockUnits = 4 * kThreads;

template <typename Unit, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) copy_regions_kernel(CopyRegionsParams p) {
  wait_for_prior_grid();
  const int64_t block = blockIdx.x;
  int r = 0;
  while (block >= p.first_block[r + 1]) ++r;
  const CopyRegion& region = p.regions[r];
  const auto* src = static_cast<const Unit*>(region.src);
  auto* dst = static_cast<Unit*>(region.dst);
  const int64_t units = region.bytes / static_cast<int64_t>(sizeof(Unit));
  const int64_t end = kFault == KernelFault::kCopyRegionsDropsTail ? units - 1 : units;
  const int64_t first = (block - p.first_block[r]) * kCopyBlockUnits;
#pragma unroll 4
  for (int64_t i = first + threadIdx.x; i < first + kCopyBlockUnits && i < end; i += kThreads) dst[i] = src[i];
}

template <KernelFault kFault>
void launch_copy_regions_as(const CopyRegionsParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.first_block[p.count]));
  if (p.vec)
    launch_kernel(copy_regions_kernel<uint4, kFault>, grid, kThreads, 0, stream, p);
  else
    launch_kernel(copy_regions_kernel<unsigned char, kFault>, grid, kThreads, 0, stream, p);
}

enum class Binary { kMulSigmoid, kSiluMul, kAdd };

template <Binary kOp, KernelFault kFault>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (kOp == Binary::kMulSigmoid) return __fmul_rn(a, sigmoid(b));
  if constexpr (kOp == Binary::kSiluMul && kFault == KernelFault::kSiluMulActivatesUp) return __fmul_rn(silu(b), a);
  if constexpr (kOp == Binary::kSiluMul) return __fmul_rn(silu(a), b);
  return __fadd_rn(a, b);
}

// out[i] = apply(a[i], b[i]) over whole kVec-element vectors, then the last count % kVec elements one by one. Each
// element is read and written by one thread, so out may be a or b.
template <Binary kOp, int kVec, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(ElementwiseParams p) {
  wait_for_prior_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t vectors = p.count / kVec;
  for (int64_t v = first; v < vectors; v += stride) {
    float a[kVec], b[kVec], out[kVec];
    load_vec<kVec>(p.a + v * kVec, a);
    load_vec<kVec>(p.b + v * kVec, b);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = apply<kOp, kFault>(a[i], b[i]);
    store_vec<kVec>(p.out + v * kVec, out);
  }
  const int64_t tail_end = kFault == KernelFault::kElementwiseDropsTail ? p.count - 1 : p.count;
  for (int64_t i = vectors * kVec + first; i < tail_end; i += stride) p.out[i] = apply<kOp, kFault>(p.a[i], p.b[i]);
}

template <Binary kOp, KernelFault kFault>
void launch_elementwise(const ElementwiseParams& p, cudaStream_t stream) {
  if (aligned16(p.out) && aligned16(p.a) && aligned16(p.b))
    launch_kernel(elementwise_kernel<kOp, 4, kFault>, grid_for(p.count / 4, p.max_blocks), kThreads, 0, stream, p);
  else
    launch_kernel(elementwise_kernel<kOp, 1, kFault>, grid_for(p.count, p.max_blocks), kThreads, 0, stream, p);
}

// Block r scales row r by sigmoid(gate[r]).
template <int kVec, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) mul_sigmoid_rows_kernel(MulSigmoidRowsParams p) {
  wait_for_prior_grid();
  const int64_t r = blockIdx.x;
  const float s = sigmoid(kFault == KernelFault::kMulSigmoidRowsGateSign ? -p.gate[r] : p.gate[r]);
  float* x = p.x + r * p.dim;  // [dim]
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * kVec; c < p.dim; c += kThreads * kVec) {
    float v[kVec];
    load_vec<kVec>(x + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = __fmul_rn(v[i], s);
    store_vec<kVec>(x + c, v);
  }
}

template <KernelFault kFault>
void launch_mul_sigmoid_rows_as(const MulSigmoidRowsParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.rows));
  if (p.dim % 4 == 0 && aligned16(p.x))
    launch_kernel(mul_sigmoid_rows_kernel<4, kFault>, grid, kThreads, 0, stream, p);
  else
    launch_kernel(mul_sigmoid_rows_kernel<1, kFault>, grid, kThreads, 0, stream, p);
}

// ---- random fill -----------------------------------------------------------------------------------------------

template <KernelFault kFault>
__device__ __forceinline__ float uniform_value(const RandomUniformParams& p, int64_t i) {
  const auto counter = static_cast<uint64_t>(kFault == KernelFault::kRandomUniformCounterOffByOne ? i + 1 : i);
  return __fmaf_rn(p.range, uniform_f32_from_counter(p.seed, counter), p.lo);
}

// Each thread fills 16-byte vectors (4 F32 or 8 BF16) on a grid-stride loop, then the tail element by element. The
// counter hash (about 40 integer instructions per element) rather than memory bounds the speed.
template <bool kBf16, int kWidth, KernelFault kFault>
__global__ void __launch_bounds__(kThreads) random_uniform_kernel(RandomUniformParams p) {
  wait_for_prior_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t vectors = p.count / kWidth;
  for (int64_t v = first; v < vectors; v += stride) {
    float vals[kWidth];
#pragma unroll
    for (int j = 0; j < kWidth; ++j) vals[j] = uniform_value<kFault>(p, v * kWidth + j);
    if constexpr (kBf16 && kWidth == 8) {
      uint4 packed;
      auto* pairs = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
      for (int j = 0; j < 4; ++j) pairs[j] = __floats2bfloat162_rn(vals[2 * j], vals[2 * j + 1]);
      static_cast<uint4*>(p.data)[v] = packed;
    } else if constexpr (kBf16) {
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        static_cast<__nv_bfloat16*>(p.data)[v * kWidth + j] = __float2bfloat16_rn(vals[j]);
    } else {
      store_vec<kWidth>(static_cast<float*>(p.data) + v * kWidth, vals);
    }
  }
  for (int64_t i = vectors * kWidth + first; i < p.count; i += stride) {
    if constexpr (kBf16)
      static_cast<__nv_bfloat16*>(p.data)[i] = __float2bfloat16_rn(uniform_value<kFault>(p, i));
    else
      static_cast<float*>(p.data)[i] = uniform_value<kFault>(p, i);
  }
}

// E4M3 codes, one a thread on a grid-stride loop (the counter hash bounds the speed, not the byte stores).
template <KernelFault kFault>
__global__ void __launch_bounds__(kThreads) random_uniform_fp8_kernel(RandomUniformParams p) {
  wait_for_prior_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.count; i += stride)
    static_cast<uint8_t*>(p.data)[i] = __nv_cvt_float_to_fp8(uniform_value<kFault>(p, i), __NV_SATFINITE, __NV_E4M3);
}

template <KernelFault kFault>
void launch_random_uniform_as(const RandomUniformParams& p, cudaStream_t stream) {
  const bool vec = aligned16(p.data);
  if (p.fp8)
    launch_kernel(random_uniform_fp8_kernel<kFault>, grid_for(p.count, p.max_blocks), kThreads, 0, stream, p);
  else if (p.bf16 && vec)
    launch_kernel(random_uniform_kernel<true, 8, kFault>, grid_for(p.count / 8, p.max_blocks), kThreads, 0, stream, p);
  else if (p.bf16)
    launch_kernel(random_uniform_kernel<true, 1, kFault>, grid_for(p.count, p.max_blocks), kThreads, 0, stream, p);
  else if (vec)
    launch_kernel(random_uniform_kernel<false, 4, kFault>, grid_for(p.count / 4, p.max_blocks), kThreads, 0, stream, p);
  else
    launch_kernel(random_uniform_kernel<false, 1, kFault>, grid_for(p.count, p.max_blocks), kThreads, 0, stream, p);
}

}  // namespace

void launch_embedding(const EmbeddingParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kEmbeddingRowOffByOne>(
      fault, [&](auto planted) { launch_embedding_as<decltype(planted)::value>(params, stream); });
}

void launch_rms_norm(const RmsNormParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kRmsNormSkipsWeight, KernelFault::kAddRmsNormKeepsX, KernelFault::kAddGatedBranchUngated>(
      fault, [&](auto planted) { launch_rms_norm_as<false, decltype(planted)::value>(params, stream); });
}

void launch_gated_rms_norm(const RmsNormParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kGatedNormGateSign>(
      fault, [&](auto planted) { launch_rms_norm_as<true, decltype(planted)::value>(params, stream); });
}

void launch_slice_columns(const SliceColumnsParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kSliceColumnsOneLate>(
      fault, [&](auto planted) { launch_slice_columns_as<decltype(planted)::value>(params, stream); });
}

void launch_copy_regions(CopyRegionsParams& params, KernelFault fault, cudaStream_t stream) {
  params.vec = true;
  for (int i = 0; i < params.count; ++i) {
    const CopyRegion& r = params.regions[i];
    params.vec = params.vec && aligned16(r.src) && aligned16(r.dst) && r.bytes % 16 == 0;
  }
  const int64_t unit = params.vec ? 16 : 1;
  for (int i = 0; i < params.count; ++i) {
    const int64_t units = params.regions[i].bytes / unit;
    params.first_block[i + 1] = params.first_block[i] + (units + kCopyBlockUnits - 1) / kCopyBlockUnits;
  }
  if (params.first_block[params.count] == 0) return;
  dispatch_fault<KernelFault::kCopyRegionsDropsTail>(
      fault, [&](auto planted) { launch_copy_regions_as<decltype(planted)::value>(params, stream); });
}

void launch_mul_sigmoid(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kElementwiseDropsTail>(
      fault, [&](auto planted) { launch_elementwise<Binary::kMulSigmoid, decltype(planted)::value>(params, stream); });
}

void launch_silu_mul(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kElementwiseDropsTail, KernelFault::kSiluMulActivatesUp>(
      fault, [&](auto planted) { launch_elementwise<Binary::kSiluMul, decltype(planted)::value>(params, stream); });
}

void launch_add(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kElementwiseDropsTail>(
      fault, [&](auto planted) { launch_elementwise<Binary::kAdd, decltype(planted)::value>(params, stream); });
}

void launch_mul_sigmoid_rows(const MulSigmoidRowsParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kMulSigmoidRowsGateSign>(
      fault, [&](auto planted) { launch_mul_sigmoid_rows_as<decltype(planted)::value>(params, stream); });
}

void launch_random_uniform(const RandomUniformParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kRandomUniformCounterOffByOne>(
      fault, [&](auto planted) { launch_random_uniform_as<decltype(planted)::value>(params, stream); });
}

}  // namespace plumb::cuda
