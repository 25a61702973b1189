#include "cli/device.h"

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef PLUMB_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace plumb::cli {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  // The CPU reference with the CUDA backend's BF16 operand rounding, for judging the GPU (tools/gpu_end_to_end.py).
  if (device == "cpu-bf16") return std::make_unique<CpuBackend>(CpuRounding::kBf16Operands);
#ifdef PLUMB_HAVE_CUDA
  if (device == "cuda") return std::make_unique<CudaBackend>();
  PLUMB_FAIL("--device {}: expected cpu, cpu-bf16 or cuda", device);
#else
  PLUMB_FAIL("--device {}: this build of plumb has no CUDA backend (built without nvcc), so it runs on the cpu only",
             device);
#endif
}

}  // namespace plumb::cli
