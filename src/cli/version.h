// What `plumb --version` prints: the project version, the git commit it was built from, and the CUDA side (runtime,
// driver, compiled architectures, the GPU found) where the CUDA backend is built.
#pragma once

#include <string>

namespace plumb::cli {

// Baked in at build time (version_info.cpp.in): CMake's project version, `git rev-parse --short=12 HEAD` with
// "-dirty" when tracked files differ from it ("unknown" outside a git checkout), and PLUMB_CUDA_ARCHS ("" without
// the CUDA backend).
extern const char* const kPlumbVersion;
extern const char* const kPlumbCommit;
extern const char* const kPlumbCudaArchs;

// The lines `plumb --version` prints (without the last newline). Queries the CUDA runtime, so it is built on demand.
std::string version_report();

}  // namespace plumb::cli
