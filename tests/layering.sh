#!/usr/bin/env bash
# Checks the include graph of src/ against the layering in docs/architecture.md: a layer may include headers of
# the layers listed for it and nothing else of plumb's, and a CUDA kernel (backends/cuda/kernels/) nothing of
# plumb's but the files of its own folder and core/counter_rng.h. Prints every violation; exits non-zero if there is
# one, or if it found no source file or no include to check (a wrong folder must not read as a clean one).
#   layering.sh SRC_DIR   (tests/layering_test.sh runs it on planted trees)
set -euo pipefail
src=${1:?usage: layering.sh SRC_DIR}
[ -d "$src" ] || { echo "layering: $src is not a folder"; exit 1; }
src=$(cd "$src" && pwd -P)
declare -A allowed=(
  [core]="core"
  [ops]="core ops"
  [backends]="core ops backends"
  [model]="core ops model"
  [parallel]="core ops model parallel"
  [loader]="core ops model loader"
  [tokenizer]="core tokenizer"
  [grammar]="core grammar"
  [scheduler]="core scheduler"
  [engine]="core ops model parallel loader scheduler engine"
  [server]="core tokenizer grammar engine server"
  [cli]="core ops backends model parallel loader tokenizer grammar scheduler engine server cli"
)
kernels=backends/cuda/kernels
# Every file under src/ is either source (checked) or one of these; a file of any other kind is an error, so a new
# source extension cannot slip past the check unseen. A CMake template of a source file (`.cpp.in`) is source too.
# The chat page's HTML, CSS and JavaScript (server/chat_page/) are compiled in as a string, never included.
source_pattern='\.(h|hh|hpp|hxx|inc|ipp|c|cc|cpp|cxx|cu|cuh)(\.in)?$'
other_pattern='(^|/)CMakeLists\.txt$|\.(txt|md|cmake)$|^server/chat_page/[^/]+\.(html|css|js)$'
# Any preprocessor include: "#", optional blanks, include or include_next, then whatever it names.
directive='^[[:space:]]*#[[:space:]]*include(_next)?([^[:alnum:]_]|$)'
# The two checkable forms; a computed include (#include MACRO) is reported, as it cannot be checked.
named='^[[:space:]]*#[[:space:]]*include(_next)?[[:space:]]*[<"]([^>"]+)[>"]'

status=0
files=0
checked=0
violation() {
  echo "layering: $1"
  status=1
}

# target_of FILE INCLUDED: the path under src/ that the include resolves to, as the compiler would look (the
# including file's folder first, then src/), or nothing for a header that is not plumb's (system, CUDA, library). A
# path that starts with a layer's name is plumb's even where that folder is missing.
target_of() {
  local dir
  dir=$(dirname "$1")
  if [ -f "$dir/$2" ]; then
    local resolved
    resolved=$(realpath -m "$dir/$2")
    [[ $resolved == "$src"/* ]] && echo "${resolved#"$src"/}"
  elif [ -d "$src/${2%%/*}" ] || [ -n "${allowed[${2%%/*}]+x}" ]; then
    echo "$2"
  fi
}

while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  if ! [[ $rel =~ $source_pattern ]]; then
    [[ $rel =~ $other_pattern ]] || violation "$rel is neither a source file nor a known kind of file"
    continue
  fi
  files=$((files + 1))
  layer=${rel%%/*}
  [ "$layer" != "$rel" ] && [ -n "${allowed[$layer]+x}" ] || {
    violation "$rel is in an unknown layer '$layer'"
    continue
  }
  while IFS= read -r line || [ -n "$line" ]; do
    [[ $line =~ $directive ]] || continue
    if ! [[ $line =~ $named ]]; then
      violation "$rel: cannot check the computed include '$line'"
      continue
    fi
    included=${BASH_REMATCH[2]}
    target=$(target_of "$file" "$included")
    [ -n "$target" ] || continue
    checked=$((checked + 1))
    if [[ $target == ../* || $target == */../* ]]; then
      violation "$rel includes '$included', which leaves src/"
    elif [[ $rel == "$kernels"/* ]]; then
      [[ $target == "$kernels"/* || $target == core/counter_rng.h ]] ||
        violation "$rel includes '$included', but a kernel may use only its own folder and core/counter_rng.h"
    elif [[ " ${allowed[$layer]} " != *" ${target%%/*} "* ]]; then
      violation "$rel includes '$included', but $layer may use only: ${allowed[$layer]}"
    fi
  done <"$file"
done < <(find "$src" -type f -print0)

[ "$files" -gt 0 ] || violation "no source file under $src"
[ "$checked" -gt 0 ] || violation "no include of plumb's under $src"
echo "layering: $checked includes in $files files checked"
exit $status
