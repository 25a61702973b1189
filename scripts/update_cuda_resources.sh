#!/usr/bin/env bash
# Rewrites src/backends/cuda/resource_usage.txt and resource_usage_planted.txt from the current kernels, compiled
# with the commands of a configured build (see tests/backends/cuda/cuda_resources.sh).
#   scripts/update_cuda_resources.sh [BUILD_DIR]   (default build/test, the build scripts/test.sh makes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build/test}
[ -f "$build/compile_commands.json" ] || { echo "update_cuda_resources: configure $build first (scripts/test.sh)"; exit 1; }
cmake --build "$build" --target plumb_cuda_dynamic_smem
bash tests/backends/cuda/cuda_resources.sh write "$build/compile_commands.json" "$build/bin/plumb_cuda_dynamic_smem"
