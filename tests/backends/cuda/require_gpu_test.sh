#!/usr/bin/env bash
# PLUMB_REQUIRE_GPU against a machine with no usable device: with every device hidden (CUDA_VISIBLE_DEVICES=""), as
# on a GPU machine whose driver fails, the harness's GPU tests must all fail when it is set and all skip when it is
# not. Runs the same on machines with and without a GPU.
#   bash tests/backends/cuda/require_gpu_test.sh build/test/bin/gpu_op_harness
set -uo pipefail
harness=$1
# Every test that needs a device (Registry, Verdict, KernelImage and LaunchChoices need none).
filter='-Registry.*:Verdict.*:KernelImage.*:LaunchChoices.*'
status=0
fail() {
  echo "require_gpu_test: $*"
  status=1
}

out=$(CUDA_VISIBLE_DEVICES="" PLUMB_REQUIRE_GPU=1 "$harness" --gtest_filter="$filter" 2>&1)
code=$?
[ "$code" != 0 ] || fail "PLUMB_REQUIRE_GPU=1 with no device: the harness exited 0"
grep -q 'PLUMB_REQUIRE_GPU is set but no CUDA device is usable' <<<"$out" ||
  fail "PLUMB_REQUIRE_GPU=1 with no device: no failure names the missing device"
! grep -q '^\[  SKIPPED \]' <<<"$out" || fail "PLUMB_REQUIRE_GPU=1 with no device: some tests skipped"
grep -q '^\[  PASSED  \] 0 tests' <<<"$out" || fail "PLUMB_REQUIRE_GPU=1 with no device: some test passed"

out_plain=$(CUDA_VISIBLE_DEVICES="" PLUMB_REQUIRE_GPU="" "$harness" --gtest_filter="$filter" 2>&1)
code_plain=$?
[ "$code_plain" = 0 ] || fail "no device, PLUMB_REQUIRE_GPU unset: the harness exited $code_plain instead of skipping"
grep -q '^\[  SKIPPED \] [0-9]* tests\?, listed below' <<<"$out_plain" ||
  fail "no device, PLUMB_REQUIRE_GPU unset: the tests did not skip"
grep -q '^\[  PASSED  \] 0 tests' <<<"$out_plain" || fail "no device, PLUMB_REQUIRE_GPU unset: some test passed"

if [ $status != 0 ]; then
  echo "--- with PLUMB_REQUIRE_GPU=1 (exit $code):"
  tail -n 30 <<<"$out"
  echo "--- without (exit $code_plain):"
  tail -n 30 <<<"$out_plain"
else
  echo "require_gpu_test: with no device, PLUMB_REQUIRE_GPU=1 fails every GPU test and without it they skip"
fi
exit $status
