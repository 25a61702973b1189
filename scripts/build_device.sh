#!/usr/bin/env bash
# Builds what travels to the GPU machine (Release): the plumb binary, the GPU op harness, the projection-kernel
# benchmarks and the GPU token-draw benchmark, stripped and packed with the Debian libraries the GPU machine lacks
# (PCRE2, utf8proc) into build/device/bin.tar.xz (about 10 MB: the unpacked binaries would not fit the 64 MiB a
# device call carries).
# Then:  run(command="bash scripts/gpu_check.sh", carry=["build/device/bin.tar.xz"])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=ON >/dev/null
programs="plumb gpu_op_harness gpu_model_test linear_bench stream_ceiling phase_boundary plumb_gpu_sampler_bench"
# shellcheck disable=SC2086
cmake --build build/device --target $programs -j"$(nproc)"
stage=$(mktemp -d)
mkdir "$stage/bin"
for program in $programs; do strip -o "$stage/bin/$program" "build/device/bin/$program"; done
# The kernel tracer (bench/trace) and the CUPTI it links, for gpu_check.sh timeline.
cmake --build build/device --target plumb_kernel_trace -j"$(nproc)"
strip -o "$stage/bin/libplumb_kernel_trace.so" build/device/bin/libplumb_kernel_trace.so
ldd build/device/bin/libplumb_kernel_trace.so | awk '/libcupti/ { print $3 }' | xargs -r -I{} cp -L {} "$stage/bin/"
ldd build/device/bin/plumb | awk '/libpcre2|libutf8proc/ { print $3 }' | xargs -r -I{} cp -L {} "$stage/bin/"
tar -C "$stage" -cJf build/device/bin.tar.xz bin
rm -rf "$stage"
ls -l build/device/bin.tar.xz
