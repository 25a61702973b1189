// The GPU architectures plumb's kernels are written for: compute capability 9.0 and later (Hopper, Blackwell). Below
// it, instructions they use do not exist: the FP8 products widen weights with a BF16 multiply (mul.bf16x2,
// ptx.cuh's e4m3x2_to_bf16x2, sm_90), the token sampler spreads a row over a thread-block cluster (sample.cu, sm_90),
// and every launch is a programmatic dependent one (launch.cuh, sm_90). Warpgroup MMA is sm_90a's alone: the kernel
// that uses it says so in its name and compiles to nothing elsewhere (linear_wgmma.cu, linear_wgmma_runs).
// CMakeLists.txt refuses such an architecture in PLUMB_CUDA_ARCHS at configure time; this check says the same to a
// compile that gets past it, and kernel_image_problem (device_limits.h) to a device of a lower capability.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error \
    "plumb's kernels need compute capability 9.0 or later (BF16 multiplies, thread-block clusters, programmatic launches): build for 90a, 100, 120 or another architecture from 9.0 (PLUMB_CUDA_ARCHS)"
#endif

namespace plumb::cuda {

// The lowest compute capability (major * 10 + minor) the kernels run on.
inline constexpr int kMinComputeCapability = 90;

}  // namespace plumb::cuda
