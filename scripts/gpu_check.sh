#!/usr/bin/env bash
# The whole GPU check in one call on the H200 machine. Build here first (scripts/build_device.sh), then on the
# device machine, from the repository root, with build/device/bin.tar.xz carried:
#   bash scripts/gpu_check.sh [linear] [boundary] [sampler] [harness] [e2e] [sanitize] [bench] [speculative] [constrained]
#     [fp8] [nvfp4] [serve] [heldout] [demo] [ab] [profile] [stalls] [timeline]
#   (no argument: all; ab only where a baseline is there)
# linear    bench/linear: the BF16 projection kernel's speed per shape (and per K split and streaming kernel at
#           T <= 16), its bit-identity across row counts and splits, and cuBLAS through torch on the same shapes
#           (bench/linear/cublas.py); then the same for FP8 and NVFP4 weights (linear_bench --weights fp8|nvfp4);
#           the weight streams' ceilings (stream_ceiling) and what the FP8 and NVFP4 arithmetic costs a stream
#           (quantized_stream_arith)
# boundary  bench/step/phase_boundary.cu: what a dependency between two phases of a decode step costs as kernel
#           launches replayed from a graph and as grid barriers in one persistent kernel (one-block phases and weight
#           streams of the 35B products; the persistent one also with the next phase's weights in flight across
#           its barrier)
# sampler   bench/sampler/gpu_sampler_bench.cpp: the GPU token draw per sampling setting and row count against the
#           floor of reading the logits, beside the CPU reference's draw of the same rows (same ids counted)
# harness   the op harness (tests/backends/cuda): every kernel against the CPU reference, its planted controls, invariance;
#           gpu_model_test: every prompt length 1..200 bit-identical however its prefill is cut
# e2e       tools/gpu_end_to_end.py: every fixture model on --device cuda (logits bound, greedy ids, hashes)
# sanitize  compute-sanitizer memcheck and racecheck on the harness, the recorded-step tests and one generation
# bench     plumb bench --device cuda --synthetic (decode and prefill) and plumb_kernel_bench (bench/kernels: the main
#           kernels one at a time, CUDA-event timed) for both model shapes, plus torch's BF16 matmul rate as the ceiling
# speculative  plumb bench --speculative-tokens 1,2,3,4 --batches 1,16,64 (35B shapes): a drafting runner's steps at
#           the acceptance length 3.39 (capped at K + 1), each with its verification alone (drafts given by the
#           host), and drafting among the first 32768 ids alone (--draft-vocab), beside the plain decode step of the
#           same run
# constrained  plumb bench --constrained .cache/qwen3-tokenizer --batches 1,64 (35B shapes): a serving runner's decode
#           steps with every row's draw kept to a JSON object grammar over Qwen3's vocabulary (the masks made on the
#           host while the GPU runs the step), beside its unconstrained steps. The tokenizer folder (11 MB) does not
#           fit a call beside the device pack: carry it packed, 1.4 MB, made here by
#           `tar -C .cache -cJf .cache/qwen3-tokenizer.tar.xz qwen3-tokenizer` (carry .cache/qwen3-tokenizer.tar.xz)
# fp8       plumb bench --weights fp8 (decode and prefill, no kernel table): the whole 48-layer Qwen3-Next-80B-A3B and
#           Qwen3.5-35B-A3B (the 80B's FP8 weights, about 82 GB, need an H200)
# nvfp4     the same with --weights nvfp4
# serve     bench/server/load.py against plumb serve --device cuda --synthetic qwen3.5-35b-a3b --max-batch 64 at
#           concurrency 1, 16 and 64 (prompts of 512 token ids, 64 generated; greedy, then sampled at 1 and 64 with
#           the draw on the GPU and, through min_p, on the host), the same served with --speculative-tokens 3 at 1 and
#           16 (--max-batch 16), then bench/server/determinism.py: 1000
#           greedy completions of one prompt under mixed load through plumb serve --device cuda --model models/default
# multiturn bench/server/multiturn.py: 10-turn chats over a 2K system prompt (200 new tokens and a 200-token answer a
#           turn, the next turn 1 s after an answer) at 1 and 16 sessions, with the prefix cache (answers re-run
#           while idle), with prompt states only (--no-prefix-cache-answers) and with --no-prefix-cache (35B shapes;
#           models/default with a 1K system prompt and 6 turns, its context being 4K, cache and no-cache), then
#           load.py with fresh prompts (no hits) at concurrency 16, with and without the cache in alternating rounds
# heldout   plumb (CPU) against transformers on held-out models (tools/heldout_check.py)
# demo      the default model generating text on the GPU
# ab        bench/ab/ab.py: a baseline plumb (A: $PLUMB_AB_BASE, default build/ab-base/bin/plumb, unpacked from
#           a carried build/ab-base/bin.tar.xz) against build/device's (B): plumb bench in alternating rounds (35B shapes, B=1
#           and 16, prefill 2K) and a greedy token A/B on models/default at $PLUMB_AB_LENGTHS (default 2048,4000:
#           its context is 4096 tokens, and generate refuses a prompt plus max tokens past it); $PLUMB_AB_BENCH_ARGS
#           adds flags to the bench (--weights fp8, say)
# profile   ncu's time for every kernel of one replayed decode step (35B shapes, batch 1 and 16), summed by kernel
#           (tools/ncu_summary.py). ncu runs the kernels one at a time with cold caches, so the times here leave
#           out what a replayed graph overlaps (programmatic launches, the second stream of Backend::concurrently).
# stalls    ncu (full set, per-instruction stall samples) on one launch of the FP8 decode product, 12288 x 2048 at one
#           row, production's kernel: its throughput and occupancy lines and the instructions its warps wait on
#           (tools/ncu_stalls.py); not in the default steps
# timeline  a CUPTI kernel trace of replayed decode steps (35B shapes, batch 1 and 16; bench/trace/kernel_trace.cpp
#           preloaded), summed per replay by bench/trace/timeline.py: each kernel's time running and the idle time
#           before it, which ncu cannot see; $PLUMB_TIMELINE_ARGS adds bench flags (--weights fp8, say)
# Logs and JSON go to $OUT (or /tmp/plumb-gpu-check); the last lines printed are a summary table.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=build/device/bin
plumb=$bin/plumb
export LD_LIBRARY_PATH="$root/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A missing or failing device fails the harness's cases instead of skipping them: this check exists to run them.
export PLUMB_REQUIRE_GPU=1
out=${OUT:-/tmp/plumb-gpu-check}
mkdir -p "$out"
ab_base=${PLUMB_AB_BASE:-build/ab-base/bin/plumb}
[ -f build/ab-base/bin.tar.xz ] && tar -C build/ab-base -xJf build/ab-base/bin.tar.xz
default_steps="linear boundary sampler harness e2e sanitize bench speculative constrained fp8 nvfp4 serve multiturn heldout demo profile timeline"
# Every step there is; ab runs by default only where a baseline is there, stalls only when asked for.
known_steps="$default_steps ab stalls"
[ -x "$ab_base" ] && default_steps+=" ab"
steps=${*:-$default_steps}
# A step name this script does not know (a typo) would run nothing and still exit 0: refuse it.
for step in $steps; do
  [[ " $known_steps " == *" $step "* ]] || {
    echo "gpu_check.sh: unknown step '$step' (steps: $known_steps)" >&2
    exit 2
  }
done
declare -A result
want() { [[ " $steps " == *" $1 "* ]]; }
record() { result[$1]=$2; echo "== $1: $2"; }
# The binaries travel packed (scripts/build_device.sh); unpack them beside the archive.
[ -f build/device/bin.tar.xz ] && tar -C build/device -xJf build/device/bin.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader || true
[ -x "$plumb" ] || { echo "gpu_check: $plumb is missing: run scripts/build_device.sh and carry $bin"; exit 1; }
# The commit the binaries were built from (a copy of the tree may carry another .git), else the tree's.
commit=$("$plumb" --version 2>/dev/null | sed -n 's/^commit //p')
[ -n "$commit" ] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

if want linear; then
  echo "== linear"
  "$bin/linear_bench" "$out/linear_bench.json" 2>&1 | tee "$out/linear_bench.log"
  code=${PIPESTATUS[0]}
  for weights in fp8 nvfp4; do
    "$bin/linear_bench" --weights $weights "$out/linear_bench_$weights.json" >"$out/linear_bench_$weights.log" 2>&1 ||
      code=1
    tail -n 1 "$out/linear_bench_$weights.log"
  done
  # cuBLAS through torch on the same shapes, in the same call, against the same copy bandwidth.
  python3 bench/linear/cublas.py "$out/linear_bench.json" "$out/linear_cublas.json" 2>&1 | tee "$out/linear_cublas.log"
  [ "${PIPESTATUS[0]}" = 0 ] || code=1
  # What one launch of each size can reach by only reading its weights (bench/linear/stream_ceiling.cu).
  "$bin/stream_ceiling" "$out/stream_ceiling.json" 2>&1 | tee "$out/stream_ceiling.log"
  [ "${PIPESTATUS[0]}" = 0 ] || code=1
  # What the widening and the MMAs cost an FP8 and an NVFP4 stream, beside E4M3 MMAs on FP8 codes and a byte-permute
  # widening of NVFP4 codes (bench/linear/quantized_stream_arith.cu).
  for weights in fp8 nvfp4; do
    "$bin/quantized_stream_arith" "$weights" "$out/quantized_stream_arith_$weights.json" 2>&1 |
      tee "$out/quantized_stream_arith_$weights.log"
    [ "${PIPESTATUS[0]}" = 0 ] || code=1
  done
  record linear "$([ "$code" = 0 ] && echo pass || echo FAIL)"
fi

if want boundary; then
  echo "== phase boundaries"
  "$bin/phase_boundary" "$out/phase_boundary.json" 2>&1 | tee "$out/phase_boundary.log"
  record boundary "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

if want sampler; then
  echo "== sampler"
  "$bin/plumb_gpu_sampler_bench" "$out/gpu_sampler.json" 2>&1 | tee "$out/gpu_sampler.log"
  record sampler "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

if want harness; then
  echo "== harness"
  "$bin/gpu_op_harness" 2>&1 | tee "$out/harness.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |worst|seed|^\[==' | tail -80
  code=${PIPESTATUS[0]}
  # The model on the GPU: every prompt length 1..200 bit-identical however its prefill is cut (the chunk rule).
  "$bin/gpu_model_test" 2>&1 | tee "$out/gpu_model_test.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==|differ'
  model_code=${PIPESTATUS[0]}
  # A skipped case checked nothing, so one skip (or no test passed at all) fails the step even on exit status 0.
  ok=pass
  for log in harness gpu_model_test; do
    skipped=$(grep -c '^\[  SKIPPED \]' "$out/$log.log")
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\.$/\1/p' "$out/$log.log" | tail -n 1)
    [ "$skipped" = 0 ] || { echo "$log: $skipped SKIPPED lines in $out/$log.log: those cases checked nothing"; ok=FAIL; }
    [ "${passed:-0}" -gt 0 ] || { echo "$log: no test passed"; ok=FAIL; }
  done
  [ "$code" = 0 ] && [ "$model_code" = 0 ] || ok=FAIL
  record harness $ok
fi

if want e2e; then
  echo "== end to end"
  PYTHONUNBUFFERED=1 python3 tools/gpu_end_to_end.py --plumb "$plumb" 2>&1 | tee "$out/e2e.log"
  record e2e "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

if want sanitize; then
  echo "== compute-sanitizer"
  model=tests/fixtures/models/qwen3_next_moe
  ok=pass
  # Every real case under memcheck; racecheck (far slower) skips the largest sizes and the token sampler, whose
  # thread-block clusters it runs at tens of seconds a launch (V=7, one and three rows, took 100 s on the H200 with no
  # hazard reported). The planted controls are left out: two of them race on purpose.
  for tool in memcheck racecheck; do
    filter='Ops/Cases.*'
    [ $tool = racecheck ] && filter='Ops/Cases.*-*large*:*race*:*sample_tokens*'
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/gpu_op_harness" --gtest_filter="$filter" \
      >"$out/sanitize_${tool}_harness.log" 2>&1 || ok=FAIL
    # The recorded steps: arena, step tables and graph replays (tests/backends/cuda/graph_test.cpp).
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/gpu_model_test" \
      --gtest_filter='*GpuStepGraphs*' >"$out/sanitize_${tool}_graphs.log" 2>&1 || ok=FAIL
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$plumb" generate --model $model \
      --ids 1,2,3,4,5,6,7,8,9 --device cuda --max-tokens 8 --ignore-eos --print-ids \
      >"$out/sanitize_${tool}_generate.log" 2>&1 || ok=FAIL
    tail -n 2 "$out/sanitize_${tool}_harness.log" "$out/sanitize_${tool}_graphs.log" "$out/sanitize_${tool}_generate.log"
  done
  record sanitize $ok
fi

if want bench; then
  echo "== bench"
  tflops=$(python3 - <<'PY' 2>/dev/null
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
times.sort()
print(f"{2 * 8192 ** 3 / (times[len(times) // 2] * 1e-3) / 1e12:.1f}")
PY
)
  echo "torch (cuBLAS) BF16 8192^3 matmul on random data: ${tflops:-unknown} TFLOP/s"
  ok=pass
  for model in qwen3.5-35b-a3b qwen3-next-80b-a3b-reduced; do
    "$plumb" bench --device cuda --synthetic --model $model --commit "$commit" ${tflops:+--tensor-rate-tflops $tflops} \
      --json "$out/bench_$model.json" 2>&1 | tee "$out/bench_$model.log" || ok=FAIL
    "$bin/plumb_kernel_bench" --device cuda --model $model --commit "$commit" ${tflops:+--tensor-rate-tflops $tflops} \
      --json "$out/kernel_bench_$model.json" 2>&1 | tee "$out/kernel_bench_$model.log" || ok=FAIL
  done
  record bench $ok
fi

if want speculative; then
  echo "== plumb bench --speculative-tokens: drafting steps at a set acceptance length (35B shapes)"
  timeout 300 "$plumb" bench --device cuda --synthetic --model qwen3.5-35b-a3b --batches 1,16,64 --prefill 64 \
    --prefill-repeats 1 --steps 10 --warmup 3 --speculative-tokens 1,2,3,4 --acceptance-length 3.39 \
    --draft-vocab 32768 --copy-mib 1024 --commit "$commit" --json "$out/bench_speculative.json" 2>&1 |
    tee "$out/bench_speculative.log"
  record speculative "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

if want constrained; then
  echo "== plumb bench --constrained: decode steps drawn under a JSON grammar beside unconstrained ones (35B shapes)"
  [ -f .cache/qwen3-tokenizer.tar.xz ] && tar -C .cache -xJf .cache/qwen3-tokenizer.tar.xz
  [ -f .cache/qwen3-tokenizer/tokenizer.json ] ||
    echo "constrained: no .cache/qwen3-tokenizer here: carry .cache/qwen3-tokenizer.tar.xz (see the step's note above)"
  timeout 300 "$plumb" bench --device cuda --synthetic --model qwen3.5-35b-a3b --batches 1,64 --prefill 64 \
    --prefill-repeats 1 --steps 10 --warmup 3 --constrained .cache/qwen3-tokenizer --copy-mib 1024 \
    --commit "$commit" --json "$out/bench_constrained.json" 2>&1 | tee "$out/bench_constrained.log"
  record constrained "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

for weights in fp8 nvfp4; do
  if want $weights; then
    echo "== plumb bench --weights $weights: Qwen3-Next-80B-A3B (all 48 layers) and Qwen3.5-35B-A3B"
    ok=pass
    for model in qwen3-next-80b-a3b qwen3.5-35b-a3b; do
      "$plumb" bench --device cuda --synthetic --model $model --weights $weights --commit "$commit" \
        --json "$out/bench_${weights}_$model.json" 2>&1 | tee "$out/bench_${weights}_$model.log" || ok=FAIL
    done
    record $weights $ok
  fi
done

if want serve; then
  echo "== plumb serve --device cuda under load (35B shapes, random weights) and its determinism (models/default)"
  ok=pass
  timeout 240 python3 bench/server/load.py --plumb "$plumb" --concurrency 1,16,64 --requests 8,48,128 \
    --prompt-tokens 512 --max-tokens 64 --json "$out/serve_load.json" --server-log "$out/serve_load_server.log" \
    -- --device cuda --synthetic qwen3.5-35b-a3b --max-batch 64 2>&1 | tee "$out/serve_load.md"
  [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  # Sampled decoding, drawn on the GPU inside the step's graph, then the same with min_p, which the host draws (the
  # logits come back): the same call, so the difference is where the draw is made.
  for drawn in gpu host; do
    sampling='{"temperature": 0.8, "top_p": 0.95'$([ $drawn = host ] && echo ', "min_p": 1e-6')'}'
    timeout 150 python3 bench/server/load.py --plumb "$plumb" --concurrency 1,64 --requests 8,128 \
      --prompt-tokens 512 --max-tokens 64 --sampling "$sampling" --json "$out/serve_load_sampled_$drawn.json" \
      -- --device cuda --synthetic qwen3.5-35b-a3b --max-batch 64 2>&1 | tee "$out/serve_load_sampled_$drawn.md"
    [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  done
  # Speculative decoding served (the random head's drafts are almost never kept: a check that a drafting server
  # starts, reserves its verifications' trail slots and answers under load, not a speed figure).
  timeout 150 python3 bench/server/load.py --plumb "$plumb" --concurrency 1,16 --requests 4,32 --prompt-tokens 512 \
    --max-tokens 32 --json "$out/serve_load_speculative.json" \
    -- --device cuda --synthetic qwen3.5-35b-a3b --max-batch 16 --speculative-tokens 3 2>&1 |
    tee "$out/serve_load_speculative.md"
  [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  timeout 170 python3 bench/server/determinism.py --plumb "$plumb" -n 1000 --concurrency 32 \
    --json "$out/serve_determinism.json" --server-log "$out/serve_determinism_server.log" \
    -- --device cuda --model models/default --max-batch 32 2>&1 | tee "$out/serve_determinism.log"
  [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  record serve $ok
fi

if want multiturn; then
  echo "== the prefix cache: multi-turn chat TTFT with and without it, and load with no hits"
  ok=pass
  timeout 600 python3 bench/server/multiturn.py --plumb "$plumb" --concurrency 1,16 --turns 10 --system-tokens 2048 \
    --new-tokens 200 --max-tokens 200 --think-ms 1000 --modes cache,prompt-cache,no-cache \
    --json "$out/multiturn_35b.json" -- --device cuda --synthetic qwen3.5-35b-a3b --max-batch 16 2>&1 |
    tee "$out/multiturn_35b.md"
  [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  timeout 240 python3 bench/server/multiturn.py --plumb "$plumb" --concurrency 1,16 --turns 6 --system-tokens 1024 \
    --new-tokens 200 --max-tokens 200 --think-ms 1000 --json "$out/multiturn_default.json" \
    -- --device cuda --model models/default --max-batch 16 2>&1 | tee "$out/multiturn_default.md"
  [ "${PIPESTATUS[0]}" = 0 ] || ok=FAIL
  # Three rounds each way, alternating, so a drift of the machine does not land on one side.
  for round in 1 2 3; do
    for cache in $([ $((round % 2)) = 1 ] && echo "on off" || echo "off on"); do
      timeout 150 python3 bench/server/load.py --plumb "$plumb" --concurrency 16 --requests 64 --prompt-tokens 512 \
        --max-tokens 64 --json "$out/serve_load_cache_${cache}_$round.json" -- --device cuda \
        --synthetic qwen3.5-35b-a3b --max-batch 16 $([ $cache = off ] && echo --no-prefix-cache) >/dev/null 2>&1 ||
        ok=FAIL
    done
  done
  python3 - "$out" <<'PY' || ok=FAIL
import glob, json, statistics, sys
for cache in ("on", "off"):
    rs = [json.load(open(f))["results"][0] for f in sorted(glob.glob(f"{sys.argv[1]}/serve_load_cache_{cache}_*.json"))]
    tps = [r["tokens_per_s"] for r in rs]
    print(f"load, fresh 512-token prompts, concurrency 16, cache {cache}: tokens/s median {statistics.median(tps):.0f} "
          f"({min(tps):.0f}-{max(tps):.0f}) over {len(tps)} rounds")
PY
  record multiturn $ok
fi

if want heldout; then
  echo "== held-out transformers comparison (CPU backend)"
  PYTHONUNBUFFERED=1 python3 tools/heldout_check.py --plumb "$plumb" --work /tmp/heldout 2>&1 | tee "$out/heldout.log"
  record heldout "$([ "${PIPESTATUS[0]}" = 0 ] && echo pass || echo FAIL)"
fi

if want demo; then
  echo "== the default model on the GPU, text in and out"
  "$plumb" generate --model models/default --chat "Tell me a fortune." --temperature 0.8 --top-p 0.9 --seed 2 \
    --max-tokens 48 --device cuda
  ok=$([ $? = 0 ] && echo pass || echo FAIL)
  echo "== plumb serve --device cuda answering OpenAI clients (curl): one chat, one stream, 16 at once"
  "$plumb" serve --model models/default --device cuda --port 18080 >"$out/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 60); do curl -sf localhost:18080/health >/dev/null && break; sleep 1; done
  body='{"model":"default","messages":[{"role":"user","content":"Tell me a fortune."}],"max_tokens":24,"seed":1}'
  curl -sf localhost:18080/v1/chat/completions -H 'Content-Type: application/json' -d "$body" | tee "$out/serve_chat.json" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print("chat:", repr(r["choices"][0]["message"]["content"]))' \
    || ok=FAIL
  curl -sfN localhost:18080/v1/chat/completions -H 'Content-Type: application/json' \
    -d "${body%\}},\"stream\":true}" | grep -c '^data: ' | xargs echo "stream events:" || ok=FAIL
  clients=()
  for i in $(seq 16); do
    curl -sf localhost:18080/v1/chat/completions -H 'Content-Type: application/json' -d "${body/\"seed\":1/\"seed\":$i}" \
      -o "$out/serve_parallel_$i.json" &
    clients+=($!)
  done
  wait "${clients[@]}"
  answered=$(grep -l '"finish_reason"' "$out"/serve_parallel_*.json 2>/dev/null | wc -l)
  echo "concurrent requests answered: $answered of 16"
  [ "$answered" = 16 ] || ok=FAIL
  kill $server 2>/dev/null
  record demo $ok
fi

if want profile; then
  ok=pass
  for batch in 1 16; do
    echo "== ncu over one replayed decode step, 35B shapes, batch $batch"
    timeout 300 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
      --print-units base "$plumb" bench --device cuda --synthetic --model qwen3.5-35b-a3b --batches $batch --steps 2 \
      --warmup 2 --prefill 64 --profile-last-step >"$out/ncu_step_b$batch.csv" 2>"$out/ncu_step_b$batch.log" ||
      ok=FAIL
    python3 tools/ncu_summary.py "$out/ncu_step_b$batch.csv" | tee "$out/ncu_step_b$batch.txt" || ok=FAIL
  done
  record profile $ok
fi

if want stalls; then
  echo "== ncu on the FP8 decode product's first launch (12288 x 2048, one row, production's kernel and split)"
  ok=pass
  # The first launch of the shared-memory ring in linear_bench --weights fp8 is its first shape's T = 1 row.
  # --kill on ends the bench once the launch is profiled, so its exit status says nothing: the report must exist.
  timeout 300 ncu --set full --import-source no --kill on -k regex:linear_stream_ring_kernel --launch-count 1 -f \
    -o "$out/stalls_fp8" "$bin/linear_bench" --weights fp8 "$out/stalls_linear_bench.json" >"$out/stalls.log" 2>&1
  [ -f "$out/stalls_fp8.ncu-rep" ] || { tail -n 5 "$out/stalls.log"; ok=FAIL; }
  ncu --import "$out/stalls_fp8.ncu-rep" --page details --csv >"$out/stalls_details.csv" 2>>"$out/stalls.log" || ok=FAIL
  ncu --import "$out/stalls_fp8.ncu-rep" --page source --csv --print-source sass >"$out/stalls_source.csv" \
    2>>"$out/stalls.log" || ok=FAIL
  python3 tools/ncu_stalls.py "$out/stalls_source.csv" --details "$out/stalls_details.csv" --top 30 |
    tee "$out/stalls.txt" || ok=FAIL
  record stalls $ok
fi

if want timeline; then
  echo "== kernel timeline of replayed decode steps, 35B shapes, batch 1 and 16"
  ok=pass
  # Through env, so that only plumb is traced, not timeout.
  timeout 300 env PLUMB_KERNEL_TRACE="$out/trace.csv" LD_PRELOAD="$root/$bin/libplumb_kernel_trace.so" "$plumb" bench \
    --device cuda --synthetic --model qwen3.5-35b-a3b ${PLUMB_TIMELINE_ARGS:-} --batches 1,16 --steps 20 --warmup 2 \
    --prefill 64 >"$out/timeline_bench.log" 2>&1 || ok=FAIL
  grep -E "kernel_trace|decode" "$out/timeline_bench.log" | head -n 8
  python3 bench/trace/timeline.py "$out/trace.csv" --sequence 60 --json "$out/timeline.json" | tee "$out/timeline.txt" || ok=FAIL
  gzip -f "$out/trace.csv"
  record timeline $ok
fi

if want ab; then
  echo "== A/B: $ab_base (A) against $plumb (B)"
  ok=pass
  if [ -x "$ab_base" ]; then
    ab=(python3 bench/ab/ab.py)
    sides=(--a "$ab_base" --b "$plumb" --label-a "${PLUMB_AB_LABEL_A:-baseline}" --label-b "$commit")
    # --skip-kernels: a baseline from before bench/kernels took the kernels out of plumb bench would time them too.
    timeout 300 "${ab[@]}" bench "${sides[@]}" --rounds "${PLUMB_AB_ROUNDS:-5}" --json "$out/ab_bench.json" \
      --markdown "$out/ab_bench.md" --work "$out/ab_bench" -- {plumb} bench --device cuda --synthetic \
      --model qwen3.5-35b-a3b ${PLUMB_AB_BENCH_ARGS:-} --batches 1,16 --prefill 2048 --prefill-repeats 1 --steps 5 \
      --warmup 2 --skip-kernels --copy-mib 1024 --json {json} 2>"$out/ab_bench.log" || ok=FAIL
    timeout 200 "${ab[@]}" tokens "${sides[@]}" --model models/default --lengths "${PLUMB_AB_LENGTHS:-2048,4000}" \
      --prompts 3 --max-tokens 32 --device cuda --json "$out/ab_tokens.json" --markdown "$out/ab_tokens.md" \
      --work "$out/ab_tokens" 2>"$out/ab_tokens.log" || ok=FAIL
    [ $ok = pass ] || tail -n 15 "$out/ab_bench.log" "$out/ab_tokens.log"
  else
    echo "ab: no baseline binary at $ab_base (build the baseline commit with scripts/build_device.sh and carry its"
    echo "    bin.tar.xz as build/ab-base/bin.tar.xz, or set PLUMB_AB_BASE)"
    ok=FAIL
  fi
  record ab $ok
fi

echo "== summary ($commit)"
status=0
for step in $steps; do
  echo "  $step: ${result[$step]:-not run}"
  [ "${result[$step]:-}" = pass ] || status=1
done
exit $status
