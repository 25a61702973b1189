#include "cli/device.h"

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"

namespace plumb::cli {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  PLUMB_CHECK(device == "cpu", "--device {}: this build of plumb runs on the cpu only", device);
  return std::make_unique<CpuBackend>();
}

}  // namespace plumb::cli
