#!/usr/bin/env bash
# scripts/gpu_check.sh's harness step against stand-in harness binaries (no GPU needed): the harness must run with
# PLUMB_REQUIRE_GPU=1, and the step is a pass only for a run that exits 0 with at least one test passed and none
# skipped; a run whose every case skipped (exit 0) is a FAIL.
set -uo pipefail
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/scripts" "$work/build/device/bin"
cp "$source_dir/scripts/gpu_check.sh" "$work/scripts/"
printf '#!/bin/sh\nexit 0\n' >"$work/build/device/bin/plumb"
chmod +x "$work/build/device/bin/plumb"
status=0

# expect WANT EXIT OUTPUT: the harness step's record when its programs (gpu_op_harness, gpu_model_test) print OUTPUT
# and exit with EXIT.
expect() {
  local want=$1 exit_code=$2 output=$3
  {
    echo '#!/usr/bin/env bash'
    echo '[ "${PLUMB_REQUIRE_GPU:-}" = 1 ] || { echo "PLUMB_REQUIRE_GPU is not 1"; exit 3; }'
    printf 'cat <<"LOG"\n%s\nLOG\n' "$output"
    echo "exit $exit_code"
  } >"$work/build/device/bin/gpu_op_harness"
  chmod +x "$work/build/device/bin/gpu_op_harness"
  # The step's second program (the model on the GPU) prints the same.
  cp "$work/build/device/bin/gpu_op_harness" "$work/build/device/bin/gpu_model_test"
  local log
  log=$(env -u PLUMB_REQUIRE_GPU OUT="$work/out" bash "$work/scripts/gpu_check.sh" harness 2>&1)
  local code=$?
  local got
  got=$(sed -n 's/^== harness: //p' <<<"$log")
  if [ "$got" != "$want" ] || { [ "$want" = pass ] && [ $code != 0 ]; } || { [ "$want" = FAIL ] && [ $code = 0 ]; }; then
    echo "gpu_check_test: harness exit $exit_code printing '${output//$'\n'/ | }': recorded '$got' (exit $code), want $want"
    echo "$log"
    status=1
  fi
}

expect pass 0 '[==========] 2 tests from 1 test suite ran. (3 ms total)
[  PASSED  ] 2 tests.'
expect FAIL 0 '[  SKIPPED ] Ops/Cases.MatchesReference/embedding (0 ms)
[  SKIPPED ] Ops/Cases.MatchesReference/linear (0 ms)
[==========] 2 tests from 1 test suite ran. (0 ms total)
[  PASSED  ] 0 tests.
[  SKIPPED ] 2 tests, listed below:'
expect FAIL 0 '[==========] 3 tests from 1 test suite ran. (3 ms total)
[  PASSED  ] 2 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Ops/Cases.MatchesReference/linear'
expect FAIL 0 '[==========] 0 tests from 0 test suites ran. (0 ms total)
[  PASSED  ] 0 tests.'
expect FAIL 1 '[  PASSED  ] 1 test.
[  FAILED  ] 1 test, listed below:'
# A mistyped step is refused by name before anything runs, not recorded as "not run" with exit 0.
log=$(env -u PLUMB_REQUIRE_GPU OUT="$work/out" bash "$work/scripts/gpu_check.sh" harness nvpf4 2>&1)
code=$?
if [ $code != 2 ] || [[ "$log" != *"unknown step 'nvpf4'"* ]] || [[ "$log" == *"== harness"* ]]; then
  echo "gpu_check_test: a mistyped step ran or was not named (exit $code):"
  echo "$log"
  status=1
fi

[ $status = 0 ] && echo "gpu_check_test: the harness step passes only a run with tests passed and none skipped, and an unknown step is refused"
exit $status
