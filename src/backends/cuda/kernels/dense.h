// The small per-token ops on the GPU: embedding gather, RMSNorm (plain and gated), column slices, elementwise gates,
// residual adds and the uniform random fill. All are memory-bound; each moves 16-byte vectors when every pointer
// involved is 16-byte aligned and the row length allows it, and computes exactly the same values when it does not.
//
// Exactness: elementwise ops compute each element from its inputs alone. RMSNorm reduces a row's squares with a warp
// (D < 1024) or a 256-thread block (D >= 1024) in an order fixed by the row length D alone (thread j owns the
// 4-element chunks j, j + threads, ...; one running sum per chunk slot, then fixed shuffle and pairwise trees), so a
// row's result never depends on how many rows share the call. The arithmetic mirrors the CPU reference's formula and
// rounding order; only the sum of squares is ordered differently.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// out[t, :] = table[ids[t], :].
struct EmbeddingParams {
  const void* table = nullptr;  // [vocab, hidden] BF16 bits or F32
  bool table_bf16 = true;
  const int32_t* ids = nullptr;  // [tokens] device; a row whose id is outside [0, vocab) becomes NaN
  float* out = nullptr;          // [tokens, hidden]
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
};
void launch_embedding(const EmbeddingParams& params, KernelFault fault, cudaStream_t stream);

// Per row: y = x / sqrt(mean(x²) + eps) ⊙ (weight_offset + w), or for the gated norm ⊙ w ⊙ SiLU(z).
struct RmsNormParams {
  const float* x = nullptr;  // [rows, dim]
  const float* z = nullptr;  // [rows, dim], gated norm only
  const float* w = nullptr;  // [dim]
  float* y = nullptr;        // [rows, dim]; may be x itself
  // The residual step (plain norm only): when residual is set, the row normalized is x + residual, which is also
  // stored into sum (x itself in the residual step; y is then neither). The sum is the F32 add of the add op. With a
  // branch, the residual is residual + branch · sigmoid(branch_gate[row]) (mul_sigmoid_rows, then add).
  const float* residual = nullptr;     // [rows, dim]
  float* sum = nullptr;                // [rows, dim]
  const float* branch = nullptr;       // [rows, dim]
  const float* branch_gate = nullptr;  // [rows]
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 0.0f;
  float weight_offset = 0.0f;  // 1 for zero-centred weights, 0 for plain ones (unused by the gated norm)
};
void launch_rms_norm(const RmsNormParams& params, KernelFault fault, cudaStream_t stream);
void launch_gated_rms_norm(const RmsNormParams& params, KernelFault fault, cudaStream_t stream);

// dst[r, :] = src[r, begin : begin + width].
struct SliceColumnsParams {
  const float* src = nullptr;  // [rows, cols]
  float* dst = nullptr;        // [rows, width]
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t begin = 0;
  int64_t width = 0;
};
void launch_slice_columns(const SliceColumnsParams& params, KernelFault fault, cudaStream_t stream);

// Several copies in one launch: region i's dst becomes its src, byte for byte. A slot's state snapshot is a conv and
// a recurrent tensor in every GDN layer (60 on Qwen3.5-35B-A3B); one launch instead of a copy each keeps the step
// thread's host time and the GPU's gaps between copies off the step that keeps it.
inline constexpr int kMaxCopyRegions = 64;
struct CopyRegion {
  const void* src = nullptr;
  void* dst = nullptr;  // must not overlap src or another region's dst
  int64_t bytes = 0;
};
struct CopyRegionsParams {
  CopyRegion regions[kMaxCopyRegions];
  // Region i is copied by blocks [first_block[i], first_block[i + 1]), each of a fixed number of bytes.
  int64_t first_block[kMaxCopyRegions + 1] = {};
  int count = 0;
  bool vec = false;  // every pointer 16-byte aligned and every size a multiple of 16: 16-byte moves
};
// Fills first_block and vec from regions and count, and launches.
void launch_copy_regions(CopyRegionsParams& params, KernelFault fault, cudaStream_t stream);

// out = f(a, b) elementwise over count elements; out may be a (or b) itself.
struct ElementwiseParams {
  float* out = nullptr;      // [count]
  const float* a = nullptr;  // [count]
  const float* b = nullptr;  // [count]
  int64_t count = 0;
  int max_blocks = 1;  // grid cap (a few blocks per multiprocessor); the grid strides over the rest
};
void launch_mul_sigmoid(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream);  // a ⊙ sigmoid(b)
void launch_silu_mul(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream);     // SiLU(a) ⊙ b
void launch_add(const ElementwiseParams& params, KernelFault fault, cudaStream_t stream);          // a + b

// x[r, :] ← x[r, :] · sigmoid(gate[r]).
struct MulSigmoidRowsParams {
  float* x = nullptr;           // [rows, dim]
  const float* gate = nullptr;  // [rows]
  int64_t rows = 0;
  int64_t dim = 0;
};
void launch_mul_sigmoid_rows(const MulSigmoidRowsParams& params, KernelFault fault, cudaStream_t stream);

// data[i] = fma(range, uniform_f32_from_counter(seed, i), lo), rounded to nearest even for BF16 and E4M3 (saturating
// at ±448). The host reference (CpuBackend::random_uniform) evaluates the same single fused multiply-add, so both give
// the same bits.
struct RandomUniformParams {
  void* data = nullptr;  // [count] F32, BF16 bits (bf16) or E4M3 codes (fp8)
  bool bf16 = false;
  bool fp8 = false;
  int64_t count = 0;
  uint64_t seed = 0;
  float lo = 0.0f;
  float range = 0.0f;  // hi - lo, rounded to float once on the host
  int max_blocks = 1;  // grid cap; the grid strides over the rest
};
void launch_random_uniform(const RandomUniformParams& params, KernelFault fault, cudaStream_t stream);

}  // namespace plumb::cuda
