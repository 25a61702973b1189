// device_limits.h: the device's limits read once, and the check that this build's kernels run on it.
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "backends/cuda/kernels/arch.cuh"
#include "backends/cuda/kernels/device_limits.h"

namespace plumb::cuda {
namespace {

// Compiled for every architecture of the build like every kernel: whether the driver finds its image on a device is
// whether it finds the others'.
__global__ void kernel_image_probe() {}

}  // namespace

const DeviceLimits& device_limits() {
  static std::mutex mutex;
  static std::map<int, DeviceLimits> devices;  // node-based: references stay valid as devices are added
  int device = 0;
  cudaGetDevice(&device);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = devices.find(device);
  if (it == devices.end()) {
    DeviceLimits limits;
    cudaDeviceGetAttribute(&limits.multiprocessors, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&limits.smem_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    cudaDeviceGetAttribute(&limits.smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&limits.minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaGetLastError();  // a failed query leaves zeros, not a sticky error for the next launch's check
    it = devices.emplace(device, limits).first;
  }
  return it->second;
}

std::string kernel_image_message(int device, const std::string& name, int major, int minor,
                                 const std::string& driver_error) {
  const std::string which = "device " + std::to_string(device) + " (" + name + ") has compute capability " +
                            std::to_string(major) + "." + std::to_string(minor);
  if (major * 10 + minor < kMinComputeCapability) {
    return which + ", and plumb's kernels need 9.0 or later (Hopper or Blackwell: arch.cuh says what they use)";
  }
  return which +
         ", and this plumb holds kernels for the GPU architectures " PLUMB_CUDA_ARCHS_TEXT " only (the driver says: " +
         driver_error + "); build plumb for this device with cmake -DPLUMB_CUDA_ARCHS=" + std::to_string(major) +
         std::to_string(minor) + (major == 9 && minor == 0 ? "a" : "");
}

std::string kernel_image_problem() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel_image_probe);
  if (status == cudaSuccess) return "";
  cudaGetLastError();
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, device);
  return kernel_image_message(device, properties.name, properties.major, properties.minor, cudaGetErrorString(status));
}

}  // namespace plumb::cuda
