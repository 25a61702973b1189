// The CPU reference's sigmoid and SiLU (cpu_backend.h) rounded step by step as it rounds them: expf for std::exp,
// and the addition and division pinned to round-to-nearest so that nothing is fused or approximated. Shared by every
// kernel that must give the same bits as another (the RMSNorm kernel's gated norm and the fused GDN decode layer's).
// CUDA only.
#pragma once

#include <cuda_runtime.h>

namespace plumb::cuda {

__device__ __forceinline__ float sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}
__device__ __forceinline__ float silu(float x) {
  return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

}  // namespace plumb::cuda
