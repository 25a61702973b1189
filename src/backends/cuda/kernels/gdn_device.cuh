// Device helpers shared by the Gated DeltaNet kernels (gdn.cu, gdn_chunked.cu): the gates and the fixed-order warp
// sums. CUDA only.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// Inside the root of the L2 norm of q and k: x / sqrt(Σx² + eps).
constexpr float kGdnL2NormEps = 1e-6f;

// The gates of one token and value head, as the CPU reference computes them: beta = sigmoid(b) and
// g = -exp(A_log) · softplus(a + dt_bias), softplus passing its argument through above 20 as torch's does.
// Fault kGdnGateSign flips g, so the state grows by exp(-g) where it should decay by exp(g).
template <KernelFault kFault>
__device__ __forceinline__ void gdn_gates(float a, float b, float A_log, float dt_bias, float& beta, float& g) {
  beta = 1.0f / (1.0f + expf(-b));
  const float x = a + dt_bias;
  const float softplus = x > 20.0f ? x : log1pf(expf(x));
  g = -expf(A_log) * softplus;
  if constexpr (kFault == KernelFault::kGdnGateSign) g = -g;
}

// The sum of v over the 32 lanes by a butterfly: every lane ends with the same bits, since each step adds the same
// two operands on both partner lanes and float addition is commutative. The tree depends on nothing but the warp.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace plumb::cuda
