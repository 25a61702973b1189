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
# One line saying whether this run checks the GPU kernels at all: without a device ctest lists every harness case as
# skipped, which is easy to read past. The probe is the harness's own (the test every case starts with).
harness=build/test/bin/gpu_op_harness
if [ ! -x "$harness" ]; then
  echo "test.sh: GPU KERNEL TESTS NOT BUILT: no CUDA compiler here; scripts/gpu_check.sh checks the kernels on a GPU"
elif probe=$("$harness" --gtest_filter=Device.IsUsable 2>&1) && ! grep -q '^\[  SKIPPED \]' <<<"$probe"; then
  echo "test.sh: GPU kernel tests run on this machine's CUDA device"
else
  why=$(sed -n 's/^\[ device   \] //p' <<<"$probe" | head -n 1)
  echo "test.sh: GPU KERNEL TESTS SKIPPED: no usable CUDA device here (${why:-the probe failed}):" \
    "scripts/gpu_check.sh runs them on a GPU machine"
fi
ctest --test-dir build/test --output-on-failure -j"$(nproc)" --timeout 900
