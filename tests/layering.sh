#!/usr/bin/env bash
# Checks the include graph of src/ against the layering in docs/architecture.md: a layer may include headers of
# the layers listed for it and nothing else of plumb's. Prints every violation; exits non-zero if there is one.
set -euo pipefail
src=${1:?usage: layering.sh SRC_DIR}
declare -A allowed=(
  [core]="core"
  [ops]="core ops"
  [backends]="core ops backends"
  [model]="core ops model"
  [loader]="core ops model loader"
  [tokenizer]="core tokenizer"
  [scheduler]="core scheduler"
  [engine]="core ops model loader scheduler engine"
  [server]="core tokenizer engine server"
  [cli]="core ops backends model loader tokenizer scheduler engine server cli"
)
status=0
checked=0
while IFS= read -r file; do
  layer=${file#"$src"/}
  layer=${layer%%/*}
  [ -n "${allowed[$layer]+x}" ] || { echo "layering: $file is in an unknown layer '$layer'"; status=1; continue; }
  while IFS= read -r included; do
    target=${included%%/*}
    [ -d "$src/$target" ] || continue  # not one of plumb's layers (a system or library header)
    checked=$((checked + 1))
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "layering: $file includes \"$included\", but $layer may use only: ${allowed[$layer]}"
      status=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(find "$src" -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
echo "layering: $checked includes checked"
exit $status
