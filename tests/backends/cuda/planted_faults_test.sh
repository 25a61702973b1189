#!/usr/bin/env bash
# The planted controls (kernels/fault.h) are compiled only into the op harness: plumb's symbols must name kernels
# (instantiated with kNone, "(plumb::cuda::KernelFault)0") and no faulty twin ("(plumb::cuda::KernelFault)N", N > 0),
# and the harness's must name faulty twins, or the check could not see one. dispatch_fault's own instantiations are
# left out: their template arguments list the faults a launcher would dispatch to, which production compiles to kNone.
#   bash tests/backends/cuda/planted_faults_test.sh PLUMB_BINARY HARNESS_BINARY
set -uo pipefail
plumb=${1:?usage: planted_faults_test.sh PLUMB_BINARY HARNESS_BINARY}
harness=${2:?usage: planted_faults_test.sh PLUMB_BINARY HARNESS_BINARY}
symbols() {  # symbols BINARY: its demangled symbols but dispatch_fault's
  nm -C "$1" | grep -v ' plumb::cuda::dispatch_fault<'
}
count() {  # count BINARY PATTERN: symbols of BINARY matching the extended regex PATTERN
  symbols "$1" | grep -cE "$2"
}
production=$(count "$plumb" 'KernelFault\)0[,>]')
planted_in_plumb=$(count "$plumb" 'KernelFault\)[1-9]')
planted_in_harness=$(count "$harness" 'KernelFault\)[1-9]')
echo "planted_faults_test: plumb: $production kNone kernel symbols, $planted_in_plumb planted;" \
  "gpu_op_harness: $planted_in_harness planted"
status=0
if [ "$production" -eq 0 ]; then
  echo "planted_faults_test: FAILED: no kernel symbol in $plumb (stripped?), so the check sees nothing"
  status=1
fi
if [ "$planted_in_plumb" -ne 0 ]; then
  symbols "$plumb" | grep -E 'KernelFault\)[1-9]' | head -n 5
  echo "planted_faults_test: FAILED: $plumb carries planted kernels (above)"
  status=1
fi
if [ "$planted_in_harness" -eq 0 ]; then
  echo "planted_faults_test: FAILED: $harness carries no planted kernel, so its controls would run production code"
  status=1
fi
exit "$status"
