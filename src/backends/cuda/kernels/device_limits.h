// What the launchers need to know of the device they launch on, read from the driver once per device, and whether
// this build's kernels run on a device at all.
#pragma once

#include <string>

namespace plumb::cuda {

struct DeviceLimits {
  int multiprocessors = 0;
  int smem_per_multiprocessor = 0;  // bytes
  int smem_per_block_optin = 0;     // bytes: the most one block may have, static and dynamic together
  int major = 0;                    // compute capability
  int minor = 0;
};

// The current device's (cudaGetDevice), read on the first call for that device and kept; all zero if the driver
// cannot say (a launch on such a device fails and is reported by its caller).
const DeviceLimits& device_limits();

// "" when the kernels of this build (the GPU architectures it was compiled for, PLUMB_CUDA_ARCHS) run on the current
// device, else a sentence saying which device it is and what the build holds, for plumb's own error message: without
// this check every launch on such a device fails with the driver's "no kernel image is available".
std::string kernel_image_problem();
// kernel_image_problem's sentence for device `device` (`name`, compute capability major.minor) on which the driver
// found no kernel of this build (`driver_error`): below compute capability 9.0, that plumb does not run there at
// all (arch.cuh); else which build would.
std::string kernel_image_message(int device, const std::string& name, int major, int minor,
                                 const std::string& driver_error);

}  // namespace plumb::cuda
