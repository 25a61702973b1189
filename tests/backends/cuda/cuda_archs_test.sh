#!/usr/bin/env bash
# PLUMB_CUDA_ARCHS below compute capability 9.0 (or not an architecture at all) is refused at configure time with
# plumb's own message (CMakeLists.txt; src/backends/cuda/kernels/arch.cuh says what the kernels use), not left to
# ptxas; architectures from 9.0 configure (the check's control). Configures with the CUDA backend off, which the
# check does not depend on, so each configure takes seconds.
#   bash tests/backends/cuda/cuda_archs_test.sh CMAKE SOURCE_DIR
set -uo pipefail
cmake=${1:?usage: cuda_archs_test.sh CMAKE SOURCE_DIR}
source_dir=${2:?usage: cuda_archs_test.sh CMAKE SOURCE_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
configure() {  # configure NAME ARCHS: configures a fresh build folder; its output goes to $work/NAME.log
  "$cmake" -S "$source_dir" -B "$work/$1" -G Ninja -DPLUMB_CUDA=OFF -DPLUMB_BUILD_TESTS=OFF \
    "-DPLUMB_CUDA_ARCHS=$2" >"$work/$1.log" 2>&1
}
failed=0
for archs in "80" "90a;89" "75" "sm90"; do
  if configure refused "$archs"; then
    echo "cuda_archs_test: FAILED: PLUMB_CUDA_ARCHS=$archs configured"
    failed=1
  elif ! grep -q "is not a GPU architecture plumb's kernels run on" "$work/refused.log"; then
    tail -n 20 "$work/refused.log"
    echo "cuda_archs_test: FAILED: PLUMB_CUDA_ARCHS=$archs was refused without plumb's message"
    failed=1
  fi
done
if ! configure accepted "90a;100;120;121"; then
  tail -n 20 "$work/accepted.log"
  echo "cuda_archs_test: FAILED: PLUMB_CUDA_ARCHS=90a;100;120;121 was refused"
  failed=1
fi
[ "$failed" = 0 ] && echo "cuda_archs_test: 80, 89, 75 and sm90 refused with plumb's message; 90a, 100, 120, 121 configure"
exit "$failed"
