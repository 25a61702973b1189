#!/usr/bin/env bash
# Builds the plumb binary that travels to the GPU machine (Release, no tests) into build/device/bin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=OFF >/dev/null
cmake --build build/device --target plumb -j"$(nproc)"
