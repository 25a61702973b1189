#!/usr/bin/env bash
# The resource records of plumb's CUDA kernels: for every kernel of src/backends/cuda/kernels/*.cu and every target
# architecture, the registers, static shared memory, stack frame and spills ptxas reports, and for every kernel
# launched with dynamic shared memory the bytes its launcher computes (ptxas cannot see those). A change in any of
# them (a new spill, a kernel that grew past an occupancy step) must be seen and recorded, not slip by.
#   cuda_resources.sh check COMPILE_COMMANDS DYNAMIC_SMEM_TOOL   compare with src/backends/cuda/resource_usage.txt
#                                                                and resource_usage_planted.txt
#   cuda_resources.sh write COMPILE_COMMANDS DYNAMIC_SMEM_TOOL   rewrite those files
# COMPILE_COMMANDS is the build's compile_commands.json: each kernel file is compiled again with exactly the command
# the build compiles it with (flags, -gencode targets, defines), plus --resource-usage. DYNAMIC_SMEM_TOOL is the
# build's plumb_cuda_dynamic_smem (tests/backends/cuda/cuda_dynamic_smem.cpp).
set -euo pipefail
usage="usage: cuda_resources.sh check|write COMPILE_COMMANDS DYNAMIC_SMEM_TOOL"
mode=${1:?$usage}
compile_commands=${2:?$usage}
dynamic_tool=${3:?$usage}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
record=$root/src/backends/cuda/resource_usage.txt
# Two records, one per kernels library (kernels/fault.h): resource_usage.txt, the production library plumb runs
# (plumb_cuda_kernels: ptxas records, and dynamic ones from DYNAMIC_SMEM_TOOL, which links it), and
# resource_usage_planted.txt, the planted controls only the op harness's library (plumb_cuda_kernels_planted) carries:
# its kernels with a fault other than kNone; its kNone kernels are the production ones.
# Today's counts are 114 production ptxas records, 19 dynamic ones and 226 planted ones. Fewer means kernels fell out
# of the compile unseen (a target architecture or a file dropped, output that no longer parses); a deliberate removal
# lowers these with it.
min_ptxas_records=105
min_dynamic_records=18
min_planted_records=200
planted_record=$root/src/backends/cuda/resource_usage_planted.txt

ptxas=$(mktemp)
dynamic=$(mktemp)
current=$(mktemp)
current_planted=$(mktemp)
trap 'rm -f "$ptxas" "$dynamic" "$current" "$current_planted"' EXIT

# ptxas_records LIBRARY: every kernel file, compiled as the build compiles it into LIBRARY, its ptxas report after a
# "== FILE" line, as sorted records.
ptxas_records() {
  python3 - "$compile_commands" "$root/src/backends/cuda/kernels" "$1" >"$ptxas" <<'PY'
import glob, json, os, shlex, subprocess, sys
commands, kernels, library = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
entries = {}
for e in json.load(open(commands)):
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    if "-o" in args and f"/{library}.dir/" in args[args.index("-o") + 1]:
        entries[os.path.realpath(os.path.join(e["directory"], e["file"]))] = (e, args)
files = sorted(glob.glob(os.path.join(kernels, "*.cu")))
if not files:
    sys.exit(f"cuda_resources: no kernel file in {kernels}")
for path in files:
    if os.path.realpath(path) not in entries:
        sys.exit(f"cuda_resources: {path} is not compiled into {library} in {commands}; reconfigure the build")
    entry, args = entries[os.path.realpath(path)]
    # The build's own command, its object written nowhere.
    out = args.index("-o")
    args = args[:out] + args[out + 2:] + ["-o", os.devnull, "--resource-usage"]
    run = subprocess.run(args, cwd=entry["directory"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        sys.exit(f"cuda_resources: compiling {path} failed:\n{run.stdout}")
    print(f"== {os.path.basename(path)}")
    print(run.stdout)
PY
  awk '
    /^== / { src = $2; next }
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2);
                                 match($0, /for '"'"'[^'"'"']+'"'"'/); arch = substr($0, RSTART + 5, RLENGTH - 6) }
    /bytes stack frame/ { stack = $1; spill_st = $5; spill_ld = $9 }
    /Used [0-9]+ registers/ {
      regs = 0; smem = 0
      for (i = 1; i <= NF; ++i) { if ($(i + 1) ~ /^registers/) regs = $i; if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i }
      printf "%s %s %s registers=%s smem=%s stack=%s spill_stores=%s spill_loads=%s\n", src, arch, name, regs, smem, stack, spill_st, spill_ld
    }' "$ptxas" | c++filt | sort
}
"$dynamic_tool" >"$dynamic"

{
  echo "# Resource usage of every CUDA kernel of plumb_cuda_kernels, the kernels plumb runs. ptxas, as the build compiles"
  echo "# each file: arch, kernel, registers, static shared memory (bytes), stack frame, spill stores and loads. dynamic:"
  echo "# the shared memory (bytes) a kernel's launch asks for, as its launcher computes it, per configuration"
  echo "# (tests/backends/cuda/cuda_dynamic_smem.cpp). The op harness's planted controls: resource_usage_planted.txt."
  echo "# Written by scripts/update_cuda_resources.sh; checked by ctest cuda_resource_records."
  ptxas_records plumb_cuda_kernels
  sort "$dynamic"
} >"$current"
{
  echo "# Resource usage of the planted controls (kernels/fault.h), compiled only into plumb_cuda_kernels_planted, the op"
  echo "# harness's kernels: its kernels with a fault other than kNone (the rest are resource_usage.txt's), in the same"
  echo "# columns. Written by scripts/update_cuda_resources.sh; checked by ctest cuda_resource_records."
  ptxas_records plumb_cuda_kernels_planted | grep -E 'KernelFault\)[1-9]'
} >"$current_planted"

ptxas_records=$(grep -vc -e '^#' -e '^[^ ]* dynamic ' "$current" || true)
dynamic_records=$(grep -c '^[^ ]* dynamic ' "$current" || true)
planted_records=$(grep -vc '^#' "$current_planted" || true)
status=0
if [ "$ptxas_records" -lt "$min_ptxas_records" ] || [ "$dynamic_records" -lt "$min_dynamic_records" ] ||
  [ "$planted_records" -lt "$min_planted_records" ]; then
  echo "cuda_resources: found $ptxas_records ptxas, $dynamic_records dynamic and $planted_records planted records;" \
    "at least $min_ptxas_records, $min_dynamic_records and $min_planted_records expected"
  status=1
fi
# No planted fault in the production library's kernels.
if grep -E 'KernelFault\)[1-9]' "$current"; then
  echo "cuda_resources: plumb_cuda_kernels compiled the planted kernels above"
  status=1
fi
# A dynamic record must name a kernel ptxas compiled in that file, so the two halves cannot drift apart unseen.
while read -r file _ kernel _; do
  awk -v file="$file" -v kernel="::${kernel%%<*}<" '$1 == file && $2 ~ /^sm_/ && index($0, kernel) { found = 1 }
                                                    END { exit !found }' "$current" || {
    echo "cuda_resources: the dynamic record of $kernel names no kernel ptxas compiled in $file"
    status=1
  }
done < <(grep '^[^ ]* dynamic ' "$current")
[ "$status" -eq 0 ] || exit 1

if [ "$mode" = write ]; then
  cp "$current" "$record"
  cp "$current_planted" "$planted_record"
  echo "cuda_resources: wrote $ptxas_records ptxas and $dynamic_records dynamic records to $record," \
    "$planted_records to $planted_record"
elif diff -u "$record" "$current" && diff -u "$planted_record" "$current_planted"; then
  echo "cuda_resources: $ptxas_records ptxas, $dynamic_records dynamic and $planted_records planted records match"
else
  echo "cuda_resources: the kernels' resource usage changed (diff above: - recorded, + now)."
  echo "If the change is intended, run scripts/update_cuda_resources.sh and commit the new record with the kernel."
  exit 1
fi
