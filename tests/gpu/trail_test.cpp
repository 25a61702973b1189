// The GDN ops' trails on the GPU (tests/support/trail_check.h): a verification's states after each token are the
// bits the token leaves alone, on the vector and the scalar state paths.
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "need_gpu.h"
#include "support/trail_check.h"

namespace plumb {
namespace {

TEST(GpuGdnTrails, EachTrailStateIsItsTokensStateAlone) {
  PLUMB_NEED_GPU();
  CudaBackend backend;
  for (const std::vector<std::string>& mismatches :
       {test::trail_mismatches(backend, 128, 128, 3), test::trail_mismatches(backend, 16, 18, 4)}) {
    for (const std::string& m : mismatches) ADD_FAILURE() << m;
  }
}

}  // namespace
}  // namespace plumb
