#!/usr/bin/env bash
# Builds what travels to the GPU machine (Release): the plumb binary, the GPU op harness, the projection-kernel
# benchmarks, the model-kernel benchmark and the GPU token-draw benchmark, stripped and packed with the Debian
# libraries the GPU machine lacks (PCRE2, utf8proc) into build/device/bin.tar.xz (about 20 MB: the unpacked binaries
# would not fit the 64 MiB a device call carries).
# Then:  run(command="bash scripts/gpu_check.sh", carry=["build/device/bin.tar.xz"])
#   PLUMB_DEVICE_PROGRAMS="plumb gpu_op_harness ..."  packs only those programs (the kernel tracer always comes): the
#     whole pack and the tracked tree come near the 64 MiB a call carries, so a call that also carries a baseline
#     packs less.
#   --ab-base-into DIR  builds plumb alone and packs it with its libraries (about 5 MB) as DIR/build/ab-base/bin.tar.xz,
#     the baseline `gpu_check.sh ab` compares against; run it in a worktree of the baseline commit:
#       git worktree add /tmp/plumb-base BASE && (cd /tmp/plumb-base && bash scripts/build_device.sh --ab-base-into "$PWD")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ab_base_into=
if [ "${1:-}" = --ab-base-into ]; then
  [ -n "${2:-}" ] && [ -d "$2" ] || { echo "build_device.sh: --ab-base-into needs an existing folder" >&2; exit 2; }
  ab_base_into=$(cd "$2" && pwd)
elif [ $# -gt 0 ]; then
  echo "build_device.sh: unknown argument $1 (usage: build_device.sh [--ab-base-into DIR])" >&2
  exit 2
fi
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=ON >/dev/null
all="plumb gpu_op_harness gpu_model_test linear_bench stream_ceiling quantized_stream_arith phase_boundary plumb_gpu_sampler_bench
     plumb_kernel_bench"
programs=${PLUMB_DEVICE_PROGRAMS:-$all}
[ -n "$ab_base_into" ] && programs=plumb
# shellcheck disable=SC2086
cmake --build build/device --target $programs -j"$(nproc)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/bin"
for program in $programs; do strip -o "$stage/bin/$program" "build/device/bin/$program"; done
ldd build/device/bin/plumb | awk '/libpcre2|libutf8proc/ { print $3 }' | xargs -r -I{} cp -L {} "$stage/bin/"
if [ -n "$ab_base_into" ]; then
  mkdir -p "$ab_base_into/build/ab-base"
  tar -C "$stage" -cJf "$ab_base_into/build/ab-base/bin.tar.xz" bin
  ls -l "$ab_base_into/build/ab-base/bin.tar.xz"
  exit 0
fi
# The kernel tracer (bench/trace) and the CUPTI it links, for gpu_check.sh timeline.
cmake --build build/device --target plumb_kernel_trace -j"$(nproc)"
strip -o "$stage/bin/libplumb_kernel_trace.so" build/device/bin/libplumb_kernel_trace.so
ldd build/device/bin/libplumb_kernel_trace.so | awk '/libcupti/ { print $3 }' | xargs -r -I{} cp -L {} "$stage/bin/"
tar -C "$stage" -cJf build/device/bin.tar.xz bin
ls -l build/device/bin.tar.xz
