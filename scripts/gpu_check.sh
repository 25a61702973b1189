#!/usr/bin/env bash
# The whole check on the GPU machine, in one call. Build plumb here first (scripts/build_device.sh), then run on the
# device machine from the repository root:  bash scripts/gpu_check.sh
# Steps: the machine's facts; plumb against Hugging Face transformers on held-out qwen3_next models; the default
# model generating text through its tokenizer and chat template.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
plumb=build/device/bin/plumb
export LD_LIBRARY_PATH="$root/build/device/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${OUT:-/tmp/plumb-gpu-check}
mkdir -p "$out"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
[ -x "$plumb" ] || { echo "gpu_check: $plumb is missing: run scripts/build_device.sh and carry build/device/bin"; exit 1; }
echo "== held-out transformers comparison"
PYTHONUNBUFFERED=1 python3 tools/heldout_check.py --plumb "$plumb" --work /tmp/heldout 2>&1 | tee "$out/heldout.log" \
  || status=1
echo "== the default model, text in and out"
"$plumb" generate --model models/default --chat "Tell me a fortune." --temperature 0.8 --top-p 0.9 --seed 2 \
  --max-tokens 48 || status=1
exit $status
