#!/usr/bin/env bash
# Builds the tokenizer, tokenizer.json, HTTP request parser, checkpoint (config.json, safetensors header and index) and
# request-body (OpenAI fields, structured-output grammars) libFuzzer targets with clang
# (-fsanitize=fuzzer,address,undefined) and runs each for a bounded time (all but the tokenizer's a quarter of it).
# Exits non-zero on a crash, a hang (-timeout), a sanitizer report, a failed invariant (the harness's own or a
# PLUMB_INTERNAL_CHECK), or fixtures that fail to load, which two planted controls check first; the crashing input is
# left in build-fuzz/ (crash-*, timeout-*) for reproduction with `build-fuzz/tokenizer_fuzz <file>` (or
# tokenizer_json_fuzz, http_fuzz, checkpoint_fuzz, request_fuzz).
#   scripts/fuzz.sh [SECONDS]        (default 60)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
out="$root/build-fuzz"
mkdir -p "$out/corpus"
cd "$out"

cxx=${CXX_FUZZ:-clang++}
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -DFMT_HEADER_ONLY -I"$root/src" $(pkg-config --cflags libpcre2-8 libutf8proc))
sources=("$root"/src/core/error.cpp "$root"/src/core/files.cpp "$root"/src/core/json_depth.cpp "$root"/src/tokenizer/*.cpp "$root"/src/tokenizer/jinja/*.cpp
         "$root"/fuzz/tokenizer_fuzz.cpp)
# Rebuild only when a source is newer than the binary: the fuzzer binary takes a while to compile.
if [ ! -x tokenizer_fuzz ] || [ -n "$(find "$root/src/tokenizer" "$root/src/core" "$root/fuzz" -newer tokenizer_fuzz -name '*.[ch]*' | head -n 1)" ]; then
  echo "fuzz.sh: building tokenizer_fuzz"
  "$cxx" "${flags[@]}" "${sources[@]}" -o tokenizer_fuzz $(pkg-config --libs libpcre2-8 libutf8proc)
fi

# The harness's own controls, before any fuzzing result is believed: an internal check failure planted in every input
# must be reported as a crash, and fixtures that cannot be loaded must abort the run rather than reject every input.
printf '\0control' >control-input
control() {  # control NAME EXPECTED_MESSAGE ENV...: running the input must fail, printing the message
  local name=$1 expected=$2
  shift 2
  # In a subshell, so the shell's own "Aborted" notice lands in the log too.
  if (env "$@" ./tokenizer_fuzz -artifact_prefix=control- control-input; exit $?) >"control-$name.log" 2>&1 ||
    ! grep -qF "$expected" "control-$name.log"; then
    tail -n 20 "control-$name.log"
    echo "fuzz.sh: FAILED: the $name control was not reported (expected a crash saying '$expected')"
    exit 1
  fi
  rm -f control-crash-*
}
control internal_check "internal error: planted by PLUMB_FUZZ_CONTROL=internal" PLUMB_SOURCE_DIR="$root" \
  PLUMB_FUZZ_CONTROL=internal
control missing_fixtures "the fixtures failed to load" PLUMB_SOURCE_DIR="$out/no-such-source-dir"
echo "fuzz.sh: controls reported (a planted internal check failure, missing fixtures)"

# Seeds: fixture texts (selector byte 0), the templates (2) and conversations (3).
python3 - "$root" corpus <<'PY'
import json, os, sys
root, corpus = sys.argv[1], sys.argv[2]
fx = os.path.join(root, "tests/fixtures/tokenizer")
def seed(name, selector, text):
    with open(os.path.join(corpus, name), "wb") as f:
        f.write(bytes([selector]) + text.encode("utf-8"))
for i, r in enumerate(json.load(open(os.path.join(fx, "tiny/encode.json")))[:60]):
    seed(f"text{i}", 0, r["text"])
seed("template-tiny", 2, json.load(open(os.path.join(fx, "tiny/tokenizer_config.json")))["chat_template"])
qwen = os.path.join(root, ".cache/qwen3-tokenizer/tokenizer_config.json")
if os.path.exists(qwen):
    seed("template-qwen3", 2, json.load(open(qwen))["chat_template"])
for i, r in enumerate(json.load(open(os.path.join(fx, "tiny/render.json")))[:10]):
    seed(f"conversation{i}", 3, json.dumps(r["kwargs"], ensure_ascii=False))
PY
# Hand-made seeds (fuzz/seeds, selector byte first): templates and conversations nested past the depth limits.
cp "$root"/fuzz/seeds/* corpus/

echo "fuzz.sh: fuzzing for ${seconds}s (log: $out/fuzz.log)"
# libFuzzer's progress lines go to the log; on failure its tail (the crash report) is printed.
if ! PLUMB_SOURCE_DIR="$root" ./tokenizer_fuzz corpus -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 >fuzz.log 2>&1; then
  tail -n 60 fuzz.log
  echo "fuzz.sh: FAILED (crash input in $out)"
  exit 1
fi
grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done )" fuzz.log || true

# The smaller targets, a quarter of the time each. build_target NAME WATCHED SOURCES...: (re)builds NAME from SOURCES
# when a file under the WATCHED paths (a space-separated list) is newer than it.
small_seconds=$(( seconds / 4 > 5 ? seconds / 4 : 5 ))
build_target() {
  local name=$1 watched=$2
  shift 2
  # shellcheck disable=SC2086 # the watched paths are a list
  if [ ! -x "$name" ] || [ -n "$(find $watched -newer "$name" -name '*.[ch]*' | head -n 1)" ]; then
    echo "fuzz.sh: building $name"
    "$cxx" "${flags[@]}" "$@" -o "$name" $(pkg-config --libs libpcre2-8 libutf8proc)
  fi
}
# run_target NAME SEEDS MAX_LEN WHAT: fuzzes NAME from the seeds in fuzz/SEEDS; a failure prints the crash report.
run_target() {
  local name=$1 seeds=$2 max_len=$3 what=$4
  mkdir -p "$name-corpus"
  cp "$root/fuzz/$seeds"/* "$name-corpus/"
  echo "fuzz.sh: fuzzing $what for ${small_seconds}s (log: $out/$name.log)"
  if ! "./$name" "$name-corpus" -max_total_time="$small_seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -print_final_stats=1 >"$name.log" 2>&1; then
    tail -n 60 "$name.log"
    echo "fuzz.sh: FAILED (crash input in $out)"
    exit 1
  fi
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done )" "$name.log" || true
}

# A model folder's tokenizer.json (fuzz/tokenizer_json_fuzz.cpp), seeded also with the tiny fixture's.
build_target tokenizer_json_fuzz "$root/src/tokenizer $root/src/core $root/fuzz/tokenizer_json_fuzz.cpp" \
  "${sources[@]/%tokenizer_fuzz.cpp/tokenizer_json_fuzz.cpp}"
mkdir -p tokenizer_json_fuzz-corpus
cp "$root/tests/fixtures/tokenizer/tiny/tokenizer.json" tokenizer_json_fuzz-corpus/fixture-tiny.json
run_target tokenizer_json_fuzz tokenizer-json-seeds 32768 "tokenizer.json"

# The HTTP request parser (fuzz/http_fuzz.cpp: whole and split parses must agree).
build_target http_fuzz "$root/src/server/http_parser.cpp $root/src/server/http_parser.h $root/src/server/http.h \
  $root/fuzz/http_fuzz.cpp" "$root"/src/server/http_parser.cpp "$root"/fuzz/http_fuzz.cpp
run_target http_fuzz http-seeds 4096 "the HTTP parser"

# A model folder's config.json, safetensors header and index (fuzz/checkpoint_fuzz.cpp).
build_target checkpoint_fuzz "$root/src/model/config.cpp $root/src/loader $root/src/core $root/fuzz/checkpoint_fuzz.cpp" \
  "$root"/src/core/*.cpp "$root"/src/model/config.cpp "$root"/src/loader/safetensors.cpp "$root"/src/loader/fp8.cpp \
  "$root"/fuzz/checkpoint_fuzz.cpp
run_target checkpoint_fuzz checkpoint-seeds 8192 "config.json, safetensors headers and indexes"

# A client's request body: the OpenAI request fields and the structured-output compilers (fuzz/request_fuzz.cpp).
build_target request_fuzz "$root/src/server/openai_api.cpp $root/src/server/openai_api.h $root/src/grammar \
  $root/src/core $root/fuzz/request_fuzz.cpp" "$root"/src/core/*.cpp "$root"/src/grammar/*.cpp \
  "$root"/src/server/openai_api.cpp "$root"/fuzz/request_fuzz.cpp
run_target request_fuzz request-seeds 4096 "request bodies and their grammars"

echo "fuzz.sh: no crash, hang or sanitizer report"
