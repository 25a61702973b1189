// What opening a model folder on the CPU says: the message of the error it raises, or "(loaded)". Header-only: the
// engine it needs is linked by the tests that use it, not by plumb_test_support.
#pragma once

#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generate.h"

namespace plumb::test {

inline std::string load_error_of(const std::string& dir) {
  try {
    CpuBackend backend;
    open_model(dir, backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace plumb::test
