#!/usr/bin/env python3
"""End-to-end checks of the CUDA backend on every fixture model (and models/default), run on the GPU machine.

For each model folder:
  * logits: `plumb logits --device cuda --record-routing` for every reference prefill, against plumb's CPU reference
    run with the GPU's expert choices (`--replay-routing`), held to the BF16 bound below. Same choices, because the
    fixtures' routers have top-k margins down to 3e-6 (they were conditioned for FP32): a BF16 rounding anywhere flips
    some choice, a discrete jump no arithmetic bound describes (docs/kernel-contract.md, "End to end"). The column
    "free/bound" reports the GPU with its own routing against the transformers reference, for the record;
  * greedy: `plumb generate --device cuda` from the reference prompt gives exactly the reference's greedy ids;
  * exactness: `plumb logits --hash` prints the same hashes (logits and every layer's final recurrent, conv and KV
    state) on two runs, among 3 and 64 sequences (--batch) and with the prefill cut into 64-token calls;
    `plumb generate --hash` likewise on two runs.
Prints one line per model and a summary; exits non-zero on any failure.

    python3 tools/gpu_end_to_end.py --plumb build/device/bin/plumb

The BF16 bound. On the GPU every matrix product rounds its activation operand to BF16 and the attention cache holds
BF16 keys and values: each rounding has relative error at most 2^-9. A logit passes through about six such roundings
per layer in series (mixer input, attention cache, mixer output projection input, MLP input, MLP down-projection
input, and the lm_head input), so for the fixtures' 4-5 layers the accumulated relative error stays under
30 · 2^-9 ≈ 6% in the worst case of aligned errors and far below it with random signs. We hold
max |logit_gpu - logit_ref| ≤ 2^-5 · max |logit_ref| (≈ 3%), about half the worst case: tighter than the worst case
because the roundings' signs are independent, and loose enough not to flag honest BF16 arithmetic.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

RELATIVE_BOUND = 2.0 ** -5


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def logits(plumb, model, ids, device, work, extra=()):
    out = work / f"logits_{device}.npy"
    run([plumb, "logits", "--model", str(model), "--ids", ",".join(map(str, ids)), "--device", device,
         "--out", str(out)] + list(extra))
    return np.load(out)


def hashes(plumb, model, ids, extra):
    return run([plumb, "logits", "--model", str(model), "--ids", ",".join(map(str, ids)), "--device", "cuda",
                "--hash"] + extra)


def check_model(plumb, model, work):
    ref = json.loads((model / "reference" / "reference.json").read_text())
    problems, worst_ratio, worst_free = [], 0.0, 0.0
    routing = work / "routing.json"
    for prefill in ref["prefills"]:
        expected = np.load(model / "reference" / prefill["logits"])
        gpu = logits(plumb, model, prefill["ids"], "cuda", work, ["--record-routing", str(routing)])
        cpu = logits(plumb, model, prefill["ids"], "cpu", work, ["--replay-routing", str(routing)])
        bound = RELATIVE_BOUND * float(np.abs(expected).max())
        diff = float(np.abs(gpu - cpu).max())
        worst_ratio = max(worst_ratio, diff / bound)
        worst_free = max(worst_free, float(np.abs(gpu - expected).max()) / bound)
        if not diff <= bound:  # NaN fails
            problems.append(f"logits of {len(prefill['ids'])} tokens differ by {diff:.3g} > bound {bound:.3g}")

    greedy = ref["greedy"] if isinstance(ref["greedy"], list) else [ref["greedy"]]
    greedy_ok = 0
    for g in greedy:
        got = run([plumb, "generate", "--model", str(model), "--ids", ",".join(map(str, g["prompt"])), "--device",
                   "cuda", "--max-tokens", str(len(g["generated"])), "--ignore-eos", "--print-ids"]).split()
        got = [int(x) for x in got]
        if got == g["generated"]:
            greedy_ok += 1
        else:
            first = next(i for i, (a, b) in enumerate(zip(got + [-1] * 999, g["generated"])) if a != b)
            problems.append(f"greedy ids differ from the reference at step {first} (reference min gap "
                            f"{g.get('min_gap', float('nan')):.3g})")

    longest = max(ref["prefills"], key=lambda p: len(p["ids"]))["ids"]
    base = hashes(plumb, model, longest, [])
    variants = {"second run": [], "batch 3": ["--batch", "3"], "batch 64": ["--batch", "64"],
                "prefill chunks of 64": ["--prefill-chunk", "64"]}
    for name, extra in variants.items():
        if hashes(plumb, model, longest, extra) != base:
            problems.append(f"hashes differ: {name}")
    gen = [plumb, "generate", "--model", str(model), "--ids", ",".join(map(str, greedy[0]["prompt"])), "--device",
           "cuda", "--max-tokens", "16", "--ignore-eos", "--temperature", "0.9", "--seed", "7", "--print-ids", "--hash"]
    if run(gen) != run(gen):
        problems.append("generate --hash differs between two runs")
    return problems, worst_ratio, worst_free, greedy_ok, len(greedy)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plumb", required=True)
    parser.add_argument("--models", nargs="*", help="model folders (default: every fixture and models/default)")
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    models = [pathlib.Path(m) for m in args.models] if args.models else sorted(
        p for p in (root / "tests/fixtures/models").iterdir() if (p / "config.json").exists()) + [root / "models/default"]
    failures = 0
    print(f"{'model':28} {'err/bound':>10} {'free/bound':>10} {'greedy':>7}  result")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            try:
                problems, ratio, free, greedy_ok, greedy_n = check_model(args.plumb, model, pathlib.Path(tmp))
            except RuntimeError as e:
                problems, ratio, free, greedy_ok, greedy_n = [str(e)], float("nan"), float("nan"), 0, 0
            failures += bool(problems)
            print(f"{model.name:28} {ratio:10.3f} {free:10.3f} {greedy_ok:>3}/{greedy_n:<3}  "
                  f"{'ok' if not problems else '; '.join(problems)}", flush=True)
    print(f"gpu_end_to_end: {len(models) - failures} of {len(models)} models pass")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
