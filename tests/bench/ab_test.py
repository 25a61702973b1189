#!/usr/bin/env python3
"""bench/ab/ab.py on the CPU at small sizes.

  ab_test.py CASE PLUMB
  same     two copies of one plumb binary: every `plumb bench` figure within resolution, 0 differing token rows
  planted  stand-ins with planted differences (planted_plumb.py) must be caught: slower figures a "loss" (and a
           "gain" the other way round, also through --figure), changed ids counted row by row with their first
           differing position, a changed state hash counted with the ids equal
  file     prompts passed as --ids @FILE (what ab.py does above Linux's 128 KiB argument limit) give the same ids
  models   --model-b: B on a model of its own (the NVFP4 fixture against the model it was made from: every row's
           states differ, both models named), the same folder twice equal, another vocabulary or no config refused
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from checklist import check, verdict  # tests/bench/checklist.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
AB = os.path.join(ROOT, "bench", "ab", "ab.py")
MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "qwen3_next_moe")
BENCH = ["--", "{plumb}", "bench", "--device", "cpu", "--synthetic", "--model", "tiny", "--batches", "1", "--prefill",
         "32", "--steps", "3", "--warmup", "1", "--prefill-repeats", "3", "--skip-kernels", "--copy-mib", "4",
         "--json", "{json}"]


def ab(work, name, *args):
    """Runs ab.py; returns (exit status, its JSON result)."""
    out = os.path.join(work, name + ".json")
    argv = [sys.executable, AB, *args[:1], "--json", out, "--markdown", os.path.join(work, name + ".md"),
            "--work", os.path.join(work, name), *args[1:]]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout)
    if not os.path.exists(out):
        check(False, f"{name}: ab.py wrote no JSON (exit {proc.returncode})")
        return proc.returncode, None
    with open(out) as f:
        return proc.returncode, json.load(f)


def verdicts(result):
    return {r["figure"]: r["verdict"] for r in result["figures"]}


def planted(work, plumb, mode):
    path = os.path.join(work, "plumb_" + mode)
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" "{HERE}/planted_plumb.py" {mode} "{plumb}" "$@"\n')
    os.chmod(path, 0o755)
    return path


def tokens(work, name, a, b, *extra):
    return ab(work, name, "tokens", "--a", a, "--b", b, "--model", MODEL, "--lengths", "16,64", "--prompts", "2",
              "--max-tokens", "8", *extra)


def case_same(work, plumb):
    copy = os.path.join(work, "plumb_copy")
    shutil.copy2(plumb, copy)
    # Nine rounds: for independent noise, a same-build pair is called a gain or loss with probability ~1e-5 a figure.
    code, r = ab(work, "same_bench", "bench", "--a", plumb, "--b", copy, "--rounds", "9", "--require-within", *BENCH)
    if r:
        names = set(verdicts(r))
        check(names == {"copy bandwidth", "decode step B=1", "decode queued B=1", "prefill T=32"},
              f"plumb bench's figures found: {names}")
        check(all(v == "within resolution" for v in verdicts(r).values()) and code == 0,
              f"same binary: every figure within resolution (exit {code})")
        check(r["same_binary"] and all(len(f["a"]) == 9 == len(f["b"]) for f in r["figures"]), "9 rounds a side")
    code, r = tokens(work, "same_tokens", plumb, copy, "--require-equal")
    if r:
        check(code == 0 and r["rows_differing"] == 0 and r["rows_state_differing"] == 0 and len(r["rows"]) == 4,
              f"same binary: 0 of 4 token rows differ, states equal (exit {code})")


def case_planted(work, plumb):
    steady, slow = planted(work, plumb, "steady"), planted(work, plumb, "slow")
    code, r = ab(work, "slow", "bench", "--a", steady, "--b", slow, "--rounds", "3", "--require-within", *BENCH)
    if r:
        v = verdicts(r)
        check(len(v) == 4 and all(x == "loss" for x in v.values()), f"slower figures are a loss: {v}")
        check(code == 1, f"--require-within fails on a loss (exit {code})")
        diff = [f["difference_percent"] for f in r["figures"] if f["figure"] == "decode step B=1"]
        check(diff and 9 < diff[0] < 11, f"the difference is the planted +10 %: {diff}")
    code, r = ab(work, "steady", "bench", "--a", steady, "--b", steady, "--rounds", "3", *BENCH)
    if r:
        check(all(x == "within resolution" for x in verdicts(r).values()), f"steady against itself: {verdicts(r)}")
    spec = "--figure=dec=decode[batch=1].step_s_median:lower"
    code, r = ab(work, "gain", "bench", "--a", slow, "--b", steady, "--rounds", "3", spec, *BENCH)
    if r:
        check(verdicts(r) == {"dec": "gain"}, f"faster through --figure is a gain: {verdicts(r)}")
    # A document that is a list (plumb_sampler_bench's JSON) is addressed from a leading selector.
    sys.path.insert(0, os.path.dirname(AB))
    import ab as harness
    rows = [{"setting": "greedy", "median_ms": 0.25}, {"setting": "temperature 0.7", "median_ms": 5.0}]
    check(harness.lookup(rows, "[setting=temperature 0.7].median_ms") == 5.0 and
          harness.lookup(rows, "[0].median_ms") == 0.25, "a list document is read from a leading selector")
    code, r = tokens(work, "flip", plumb, planted(work, plumb, "flip"), "--require-equal")
    if r:
        rows = [(x["length"], x["first_difference"]) for x in r["rows"] if not x["ids_equal"]]
        check(rows == [(64, 3), (64, 3)] and r["rows_differing"] == 2, f"changed ids: 2 rows, first at 3: {rows}")
        check(all(x["a_tokens_hash"] != x["b_tokens_hash"] for x in r["rows"] if not x["ids_equal"]), "hashes differ")
        check(code == 1, f"--require-equal fails on differing rows (exit {code})")
    code, r = tokens(work, "state", plumb, planted(work, plumb, "state"))
    if r:
        check(r["rows_differing"] == 0 and r["rows_state_differing"] == 4 and code == 0,
              f"a changed state hash with equal ids: 0 rows' ids, 4 rows' states differ (exit {code})")
        check(all(x["states_differing"] == ["layer0.recurrent"] for x in r["rows"]), "the changed state is named")


def case_file(work, plumb):
    code, r = tokens(work, "file", plumb, plumb, "--ids-file-above", "0")
    if r:
        check(code == 0 and r["rows_differing"] == 0, f"--ids @FILE: 0 rows differ (exit {code})")
    _, inline = tokens(work, "inline", plumb, plumb)
    if r and inline:
        check([x["a_ids"] for x in r["rows"]] == [x["a_ids"] for x in inline["rows"]], "@FILE gives the inline ids")


def case_models(work, plumb):
    fixtures = os.path.dirname(MODEL)
    code, r = tokens(work, "model_b_same", plumb, plumb, "--model-b", MODEL, "--require-equal")
    if r:
        check(code == 0 and r["rows_differing"] == 0 and r["rows_state_differing"] == 0,
              f"--model-b naming --model's folder: 0 of 4 rows differ (exit {code})")
    nvfp4 = os.path.join(fixtures, "qwen3_next_nvfp4")
    code, r = tokens(work, "model_b_nvfp4", plumb, plumb, "--model-b", nvfp4)
    if r:
        check(code == 0 and len(r["rows"]) == 4 and r["rows_state_differing"] == 4,
              f"the NVFP4 fixture against its source: 4 rows, every row's states differ (exit {code})")
        check(r["model"] == MODEL and r["model_b"] == nvfp4, f"both models in the JSON: {r['model']}, {r['model_b']}")
        with open(os.path.join(work, "model_b_nvfp4.md")) as f:
            check("`qwen3_next_moe` (A) and `qwen3_next_nvfp4` (B)" in f.read(), "the table names both models")
    for name, other, needle in (("vocab", os.path.join(fixtures, "qwen3_next_chat"), "vocabulary of 200 ids"),
                                ("missing", os.path.join(work, "no_model"), "no_model/config.json")):
        proc = subprocess.run([sys.executable, AB, "tokens", "--a", plumb, "--b", plumb, "--model", MODEL,
                               "--model-b", other, "--work", os.path.join(work, name)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(proc.returncode == 2 and needle in proc.stdout and "Traceback" not in proc.stdout,
              f"--model-b {name} refused in one line naming it (exit {proc.returncode}): {proc.stdout.strip()[-160:]}")


def main():
    case, plumb = sys.argv[1], os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="plumb-ab-test-")
    try:
        {"same": case_same, "planted": case_planted, "file": case_file, "models": case_models}[case](work, plumb)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return verdict(f"ab_test {case}")


if __name__ == "__main__":
    sys.exit(main())
