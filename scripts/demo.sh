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
if [ $# -gt 0 ]; then
  exec "$plumb" generate --model models/default "$@"
fi
# The default model is small: sampling reads better than greedy decoding, which falls into loops.
sample=(--temperature 0.8 --top-p 0.9 --repetition-penalty 1.1 --seed 1 --max-tokens 64)
prompt="And the LORD said unto Moses,"
printf '%s' "$prompt"
"$plumb" generate --model models/default --prompt "$prompt" "${sample[@]}"
echo
printf '> Tell me a fortune.\n'
"$plumb" generate --model models/default --chat "Tell me a fortune." "${sample[@]}"
