#!/usr/bin/env bash
# Builds the plumb binary that travels to the GPU machine (Release, no tests) into build/device/bin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=OFF >/dev/null
cmake --build build/device --target plumb -j"$(nproc)"
# The GPU machine lacks some of the Debian libraries plumb links (PCRE2, utf8proc); they travel beside the binary.
ldd build/device/bin/plumb | awk '/libpcre2|libutf8proc/ { print $3 }' | xargs -r -I{} cp -L {} build/device/bin/
