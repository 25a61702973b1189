#!/usr/bin/env bash
# The resource records of plumb's CUDA kernels: for every kernel of src/backends/cuda/kernels/*.cu and every target
# architecture, the registers, shared memory, stack frame and spills ptxas reports. A change in any of them (a new
# spill, a kernel that grew past an occupancy step) must be seen and recorded, not slip by.
#   cuda_resources.sh check FLAGS_FILE   compare with src/backends/cuda/resource_usage.txt (exit 1 and a diff if not)
#   cuda_resources.sh write FLAGS_FILE   rewrite that file
# FLAGS_FILE is written by CMake (build/<dir>/cuda_resource_flags.txt): the -gencode and -I flags of the build.
set -euo pipefail
mode=${1:?usage: cuda_resources.sh check|write FLAGS_FILE}
flags_file=${2:?usage: cuda_resources.sh check|write FLAGS_FILE}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
record=$root/src/backends/cuda/resource_usage.txt
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
read -r -a flags <"$flags_file"

current=$(mktemp)
trap 'rm -f "$current"' EXIT
{
  echo "# ptxas resource usage of every CUDA kernel: arch, kernel, registers, shared memory (bytes), stack frame,"
  echo "# spill stores and loads. Written by scripts/update_cuda_resources.sh; checked by ctest cuda_resource_records."
  for file in "$root"/src/backends/cuda/kernels/*.cu; do
    "$nvcc" "${flags[@]}" --resource-usage -c "$file" -o /dev/null 2>&1 | awk -v src="$(basename "$file")" '
      /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2);
                                   match($0, /for '"'"'[^'"'"']+'"'"'/); arch = substr($0, RSTART + 5, RLENGTH - 6) }
      /bytes stack frame/ { stack = $1; spill_st = $5; spill_ld = $9 }
      /Used [0-9]+ registers/ {
        regs = 0; smem = 0
        for (i = 1; i <= NF; ++i) { if ($(i + 1) ~ /^registers/) regs = $i; if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i }
        printf "%s %s %s registers=%s smem=%s stack=%s spill_stores=%s spill_loads=%s\n", src, arch, name, regs, smem, stack, spill_st, spill_ld
      }'
  done | c++filt | sort
} >"$current"

if [ "$mode" = write ]; then
  cp "$current" "$record"
  echo "cuda_resources: wrote $(grep -vc '^#' "$record") kernel records to $record"
elif diff -u "$record" "$current"; then
  echo "cuda_resources: $(grep -vc '^#' "$record") kernel records match"
else
  echo "cuda_resources: the kernels' resource usage changed (diff above: - recorded, + now)."
  echo "If the change is intended, run scripts/update_cuda_resources.sh and commit the new record with the kernel."
  exit 1
fi
