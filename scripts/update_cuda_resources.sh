#!/usr/bin/env bash
# Rewrites src/backends/cuda/resource_usage.txt from the current kernels (see tests/cuda_resources.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/test}
[ -f "$build/cuda_resource_flags.txt" ] || { echo "update_cuda_resources: configure $build first (scripts/test.sh)"; exit 1; }
bash tests/cuda_resources.sh write "$build/cuda_resource_flags.txt"
