// Which build of the kernels this is (fault.h): the library the op harness links, with the planted faults, or the
// production one.
#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

bool planted_faults_built() {
  return PLUMB_PLANTED_FAULTS != 0;
}

}  // namespace plumb::cuda
