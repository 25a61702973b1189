// What the two passes of the chunked gated delta rule share (gdn_chunked_prepare.cu, gdn_chunked.cu): the layout of
// the per-(chunk, value head) record the first pass writes for the second, and the tensor-core arithmetic. CUDA only.
//
// Products run on the tensor cores at about F32 precision as three TF32 products (3xTF32): x = hi + lo with
// hi = tf32(x) and lo = tf32(x − hi), and x·y ≈ hi_x·lo_y + lo_x·hi_y + hi_x·hi_y; the dropped lo_x·lo_y and the
// rounding of lo leave at most 3·2^-22 |x·y|. mma.sync m16n8k8 fragments, with g = lane / 4 and t = lane % 4:
//   A (16 × 8, row major): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B (8 × 8):             b0 = B[t][g], b1 = B[t+4][g]
//   C (16 × 8):            c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// A k-step may also feed k-indices 2t and 2t+1 in place of t and t+4 to both A and B ("pair order"): the mma sums the
// same eight products, and a lane's two values sit side by side in memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/ptx.cuh"

namespace plumb::cuda {

constexpr int kChunkLen = kGdnChunkRows;  // 64

// The record of one (chunk, value head), in floats. Rows past the chunk's length are zero in every field.
//   T [64][68]: (I + A)^-1, A[i][j] = β_i e^{γ_i − γ_j} k_i·k_j (j < i): lower triangular, ones on the diagonal
//   P [64][72]: P[i][j] = e^{γ_i − γ_j} q_i·k_j (j <= i), zero above the diagonal
//   vectors [5][64]: β_i; Γ_i = e^{γ_i}; e^{γ_L − γ_i} (0 past L); 1/‖k_i‖ and 1/‖q_i‖ (with eps, as normalized)
// T's row stride is 4 (mod 8) floats, so ldmatrix's eight rows fall in eight bank groups; P's is 8 (mod 32), so
// 64-bit pair-order loads of a half warp cover all 32 banks.
constexpr int kTStride = 68;
constexpr int kPStride = 72;
constexpr int kRecordT = 0;
constexpr int kRecordP = kRecordT + kChunkLen * kTStride;
constexpr int kRecordVectors = kRecordP + kChunkLen * kPStride;
enum RecordVector : int { kVecBeta = 0, kVecGexp, kVecWlast, kVecInvK, kVecInvQ, kVecCount };
constexpr int kRecordFloats = kRecordVectors + kVecCount * kChunkLen;
static_assert(kRecordFloats == kGdnChunkRecordFloats, "gdn.h's record size is this layout's");
static_assert(kRecordP % 4 == 0 && kRecordVectors % 4 == 0 && kRecordFloats % 4 == 0, "16-byte copies");

// Head dims padded to a multiple of 16 (one mma m-tile; also two k-steps); smem rows of dk values are dkp + 4 long,
// 4 (mod 16) floats, which keeps ldmatrix rows and the pair-order column walks of the state pass conflict-free.
__host__ __device__ constexpr int gdn_padded_dim(int d) {
  return (d + 15) / 16 * 16;
}

// --- 3xTF32 arithmetic ---

// x = hi + lo as two TF32 values, each rounded half away from zero by adding half a TF32 ulp to the magnitude bits
// and clearing the 13 low bits (cvt.rna.tf32 would be emulated by about ten instructions). x − hi is exact in F32.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  constexpr uint32_t kHalfUlp = 0x1000u, kMask = 0xffffe000u;
  hi = (__float_as_uint(x) + kHalfUlp) & kMask;
  lo = (__float_as_uint(__fsub_rn(x, __uint_as_float(hi))) + kHalfUlp) & kMask;
}

// An A fragment split into its TF32 parts.
struct SplitA {
  uint32_t hi[4], lo[4];
};
__device__ __forceinline__ SplitA split_a(const float (&a)[4]) {
  SplitA s;
#pragma unroll
  for (int e = 0; e < 4; ++e) split_tf32(a[e], s.hi[e], s.lo[e]);
  return s;
}
__device__ __forceinline__ SplitA split_a(const uint32_t (&bits)[4]) {
  SplitA s;
#pragma unroll
  for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(bits[e]), s.hi[e], s.lo[e]);
  return s;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a·b for one k-step at about F32 precision: the two small cross products first, then the large one. The order
// is fixed, so the sum's bits depend on the operands alone.
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const SplitA& a, const uint32_t (&b_hi)[2],
                                           const uint32_t (&b_lo)[2]) {
  mma_tf32(c, a.lo, b_hi[0], b_hi[1]);
  mma_tf32(c, a.hi, b_lo[0], b_lo[1]);
  mma_tf32(c, a.hi, b_hi[0], b_hi[1]);
}

// --- Shared-memory fragment loads ---

// ldmatrix_x4 on F32 tiles reads each 8 x 8 tile of 16-bit elements as an 8 × 4 tile of F32: lane (g, t) receives
// word t of row g of tile m in r[m].

// This lane's row address offset, in floats, for ldmatrix_x4 of an A fragment (rows [0, 16), k-step [0, 8)) of a
// row-major tile with row stride `stride`: a[0..3] = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4].
__device__ __forceinline__ int a_fragment_offset(int stride, int lane) {
  return (lane % 8 + 8 * ((lane / 8) % 2)) * stride + 4 * (lane / 16);
}
// Likewise for the hi and lo B fragments of one k-step of one n-tile from pre-split copies of Bᵀ (row n of the
// copy is column n of B): lanes 0-15 address the hi copy, 16-31 the lo one; r = {hi b0, hi b1, lo b0, lo b1}.
__device__ __forceinline__ int b_split_fragment_offset(int stride, int lane) {
  return (lane % 8) * stride + 4 * ((lane / 8) % 2);
}

// Rows [0, rows) of `count` floats each, from src (row stride src_stride) to dst (row stride dst_stride), by a CTA of
// kThreads, warp w taking rows w, w + kThreads / 32, ...; 16-byte pieces when `vec4` (count, both strides and both
// bases multiples of 4 floats).
template <int kThreads>
__device__ __forceinline__ void copy_rows_async(float* dst, int dst_stride, const float* src, int64_t src_stride,
                                                int rows, int count, bool vec4) {
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* s = src + warp * src_stride;
  float* d = dst + warp * dst_stride;
  if (vec4) {
    for (int r = warp; r < rows; r += kWarps, s += kWarps * src_stride, d += kWarps * dst_stride)
      for (int x = 4 * lane; x < count; x += 128) cp_async_16(d + x, s + x);
  } else {
    for (int r = warp; r < rows; r += kWarps, s += kWarps * src_stride, d += kWarps * dst_stride)
      for (int x = lane; x < count; x += 32) cp_async_4(d + x, s + x);
  }
}

// Rows [first, last) of width `count` (stride `stride`) set to zero by a CTA of kThreads, warp by row.
template <int kThreads>
__device__ __forceinline__ void zero_rows(float* dst, int stride, int first, int last, int count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = first + warp; r < last; r += kThreads / 32)
    for (int x = lane; x < count; x += 32) dst[r * stride + x] = 0.0f;
}

// The chunked pass's first launch (gdn_chunked_prepare.cu): one CTA per (chunk, key head) writes the records of the
// key head's value heads.
void launch_gdn_chunk_prepare(const GatedDeltaRuleParams& params, const GdnChunkedPlan& plan, KernelFault fault,
                              cudaStream_t stream);

}  // namespace plumb::cuda
