#include "cli/version.h"

#include <fmt/format.h>

#ifdef PLUMB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_backend.h"
#endif

namespace plumb::cli {
namespace {

#ifdef PLUMB_HAVE_CUDA
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

std::string cuda_report() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  std::string out = fmt::format("cuda backend: built for {}; runtime {}, driver {}", kPlumbCudaArchs,
                                cuda_version_text(runtime), has_driver ? cuda_version_text(driver) : "none");
  const std::string problem = cuda_device_problem();
  if (!problem.empty()) return out + fmt::format("\ngpu: none usable ({})", problem);
  int count = 0;
  cudaGetDeviceCount(&count);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    out += fmt::format("\ngpu {}: {}, compute capability {}.{}, {:.1f} GiB", d, prop.name, prop.major, prop.minor,
                       static_cast<double>(prop.totalGlobalMem) / static_cast<double>(1ull << 30));
  }
  cudaGetLastError();  // a failed query above leaves a sticky error that later CUDA calls must not see
  return out;
}
#else
std::string cuda_report() {
  return "cuda backend: not built (no nvcc at build time, or -DPLUMB_CUDA=OFF); --device cpu only";
}
#endif

}  // namespace

std::string version_report() {
  return fmt::format("plumb {}\ncommit {}\n{}", kPlumbVersion, kPlumbCommit, cuda_report());
}

}  // namespace plumb::cli
