// The gate every GPU test starts with: where no CUDA device is usable the test skips, or fails under
// PLUMB_REQUIRE_GPU=1 (scripts/gpu_check.sh sets it), so a driver problem on the GPU machine cannot read as a pass.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_backend.h"

namespace plumb::test {

// Why this machine has no usable CUDA device, or "" (probed once).
inline const std::string& device_problem() {
  static const std::string problem = cuda_device_problem();
  return problem;
}

inline bool gpu_required() {
  const char* env = std::getenv("PLUMB_REQUIRE_GPU");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

}  // namespace plumb::test

// Ends the calling test where no CUDA device is usable: skipped, or failed under PLUMB_REQUIRE_GPU.
#define PLUMB_NEED_GPU()                                                                                          \
  do {                                                                                                            \
    if (!::plumb::test::device_problem().empty()) {                                                               \
      if (::plumb::test::gpu_required())                                                                          \
        FAIL() << "PLUMB_REQUIRE_GPU is set but no CUDA device is usable: " << ::plumb::test::device_problem();   \
      GTEST_SKIP() << "no CUDA device here (" << ::plumb::test::device_problem() << "): this GPU test needs one"; \
    }                                                                                                             \
  } while (false)
