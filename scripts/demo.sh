#!/usr/bin/env bash
# The main job: installs what plumb needs, builds it (Release), and generates text with the embedded default model
# on the CPU, printing tokens as they come. Extra arguments go to `plumb generate`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLUMB_BUILD_TESTS=OFF >/dev/null
cmake --build build/release --target plumb -j"$(nproc)"
plumb=build/release/bin/plumb
"$plumb" inspect --model models/default --context 1024
echo
if [ $# -eq 0 ]; then
  set -- --prompt "Once upon a time" --max-tokens 48
fi
"$plumb" generate --model models/default "$@"
