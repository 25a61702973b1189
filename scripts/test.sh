#!/usr/bin/env bash
# The whole test suite: installs what plumb needs, builds everything with AddressSanitizer and
# UndefinedBehaviorSanitizer and warnings as errors, runs the bounded tokenizer fuzz run, then every test through ctest.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPLUMB_SANITIZE=ON -DPLUMB_WERROR=ON >/dev/null
cmake --build build/test -j"$(nproc)"
# ASan's leak checker needs ptrace, which some sandboxes refuse; leaks are not what these tests look for.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The bounded fuzz run first, so ctest's summary closes the output.
bash scripts/fuzz.sh
ctest --test-dir build/test --output-on-failure -j"$(nproc)" --timeout 900
