#!/usr/bin/env bash
# Builds what travels to the GPU machine into build/device/bin (Release): the plumb binary and the GPU op harness.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=ON >/dev/null
cmake --build build/device --target plumb gpu_op_harness -j"$(nproc)"
# The GPU machine lacks some of the Debian libraries plumb links (PCRE2, utf8proc); they travel beside the binary.
ldd build/device/bin/plumb | awk '/libpcre2|libutf8proc/ { print $3 }' | xargs -r -I{} cp -L {} build/device/bin/
