// How every kernel is launched: with Hopper's programmatic dependent launch, so that a kernel's launch and the
// scheduling of its blocks overlap the end of the kernel before it instead of following it. Each kernel's first
// statement is wait_for_prior_grid(), which returns once every kernel before it in the stream has finished and its
// memory is visible: nothing a kernel reads or writes can race with its predecessor, and no result depends on the
// overlap. Captured into a CUDA graph, the launches become programmatic edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/kernels/arch.cuh"

namespace plumb::cuda {

// Waits for the grids this one depends on (a no-op where the launch was not programmatic or below sm_90).
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch, its blocks grouped into
// thread-block clusters of `cluster` blocks where that is more than one. Errors surface as the launch's
// cudaGetLastError, which the glue checks.
template <typename... Params, typename... Args>
void launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 cluster, dim3 block, size_t smem,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster.x;
  attributes[1].val.clusterDim.y = cluster.y;
  attributes[1].val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 2 : 1;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_kernel_in_clusters(kernel, grid, dim3(1), block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace plumb::cuda
