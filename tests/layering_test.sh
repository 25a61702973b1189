#!/usr/bin/env bash
# The layering checker checked: tests/layering.sh must pass a clean tree that uses every allowed include form, and
# fail, naming the file, on each planted violation of a copy of it (one per way around the check it once had), and on
# an empty folder.
#   layering_test.sh [CHECKER]   (default: tests/layering.sh next to this script)
set -euo pipefail
checker=${1:-$(dirname "${BASH_SOURCE[0]}")/layering.sh}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# plant ROOT PATH LINE...: writes the lines to ROOT/src/PATH.
plant() {
  local file=$1/src/$2
  shift 2
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$@" >"$file"
}

clean=$work/clean
plant "$clean" core/tensor.h '#pragma once' '#include <cstdint>'
plant "$clean" core/counter_rng.h '#pragma once'
plant "$clean" server/server.h '#pragma once' '#include "core/tensor.h"'
plant "$clean" server/http.hpp '#pragma once' '#  include <core/tensor.h>'
plant "$clean" server/server.cpp '#include "server/server.h"' '  #include"server/http.hpp"' '#include <vector>'
plant "$clean" tokenizer/jinja/lexer.h '#pragma once'
plant "$clean" tokenizer/jinja/lexer.cpp '#include "lexer.h"' '#include "core/tensor.h"'
plant "$clean" grammar/matcher.h '#pragma once' '#include "core/tensor.h"'
plant "$clean" server/generation.cpp '#include "grammar/matcher.h"'
plant "$clean" backends/cuda/kernels/attention.h '#pragma once' '#include <cstdint>'
plant "$clean" backends/cuda/kernels/attention.cu '#include "backends/cuda/kernels/attention.h"' \
  '#include "core/counter_rng.h"' '#include <cuda_runtime.h>'
plant "$clean" backends/cuda/kernels/common.cuh '#include "attention.h"'
plant "$clean" backends/cuda/glue.cpp '#include "backends/cuda/kernels/attention.h"' '#include "core/tensor.h"'
plant "$clean" backends/cuda/CMakeLists.txt 'add_library(x)'
plant "$clean" backends/cuda/resource_usage.txt 'records'
plant "$clean" server/chat_page/chat.js '"use strict";'

failures=0
fail() {
  echo "layering_test: FAILED: $1"
  failures=$((failures + 1))
}

if ! out=$(bash "$checker" "$clean/src" 2>&1); then
  fail "the clean tree is rejected:"$'\n'"$out"
fi

# expect_rejected NAME PATH LINE...: a copy of the clean tree with PATH written must fail, naming PATH.
expect_rejected() {
  local name=$1 path=$2
  shift 2
  local tree=$work/$name
  cp -r "$clean" "$tree"
  plant "$tree" "$path" "$@"
  if out=$(bash "$checker" "$tree/src" 2>&1); then
    fail "$name: the checker passed a tree with src/$path: $*"
  elif [[ $out != *"$path"* ]]; then
    fail "$name: the checker failed without naming src/$path:"$'\n'"$out"
  fi
}

expect_rejected angle_brackets core/a.cpp '#include <server/server.h>'
expect_rejected indented core/a.cpp '  #include "server/server.h"'
expect_rejected space_after_hash core/a.cpp '#  include "server/server.h"'
expect_rejected no_space core/a.cpp '#include"server/server.h"'
expect_rejected tab core/a.cpp $'#\tinclude\t"server/server.h"'
expect_rejected include_next core/a.cpp '#include_next <server/server.h>'
expect_rejected hpp core/a.hpp '#include "server/server.h"'
expect_rejected cu core/a.cu '#include "server/server.h"'
expect_rejected cuh core/a.cuh '#include "server/server.h"'
expect_rejected cc core/a.cc '#include "server/server.h"'
expect_rejected relative_path server/b.cpp '#include "../cli/main.h"'
expect_rejected computed_include core/a.cpp '#include PLUMB_HEADER'
expect_rejected unknown_extension core/a.cppm '#include "server/server.h"'
expect_rejected template_of_source core/a.cpp.in '#include "server/server.h"'
expect_rejected grammar_includes_tokenizer grammar/a.cpp '#include "tokenizer/jinja/lexer.h"'
expect_rejected engine_includes_grammar engine/a.cpp '#include "grammar/matcher.h"'
expect_rejected web_file_outside_the_chat_page core/a.js '"use strict";'
expect_rejected unknown_layer util/a.cpp '#include "core/tensor.h"'
expect_rejected kernel_includes_core backends/cuda/kernels/b.cu '#include "core/tensor.h"'
expect_rejected kernel_header_includes_ops backends/cuda/kernels/b.cuh '#include <ops/backend.h>'
expect_rejected kernel_includes_glue backends/cuda/kernels/b.cu '#include "backends/cuda/glue.h"'
# The missing newline must really be missing: printf in plant adds one, so this tree is written by hand.
cp -r "$clean" "$work/no_final_newline"
printf '#include <vector>\n#include "server/server.h"' >"$work/no_final_newline/src/core/a.cpp"
bash "$checker" "$work/no_final_newline/src" >/dev/null 2>&1 && fail "no_final_newline: a last line with no newline is not checked"

mkdir -p "$work/empty/src"
bash "$checker" "$work/empty/src" >/dev/null 2>&1 && fail "empty: the checker passed a folder with no source file"
cp -r "$clean" "$work/no_includes"
find "$work/no_includes/src" -type f -exec sh -c 'echo "#pragma once" >"$1"' _ {} \;
bash "$checker" "$work/no_includes/src" >/dev/null 2>&1 && fail "no_includes: the checker passed a tree with no include"
bash "$checker" "$work/missing" >/dev/null 2>&1 && fail "missing: the checker passed a folder that does not exist"

if [ "$failures" -gt 0 ]; then
  echo "layering_test: $failures failed"
  exit 1
fi
echo "layering_test: the clean tree passes and every planted violation is caught"
