#!/usr/bin/env python3
"""A/B of two plumb binaries on one machine in one call: speed figures and greedy tokens.

  ab.py bench  --a OLD --b NEW [--rounds N] [--figure NAME=PATH:lower|higher] -- CMD ...
  ab.py tokens --a OLD --b NEW --model DIR [--model-b DIR] [--lengths 2048,8192] [--prompts 3] [--max-tokens 32]

bench: CMD is a benchmark command line in which {plumb} stands for the binary and {json} for the JSON file the
command writes (without {json}, the command prints its JSON on stdout). Each side runs once untimed (warm-up), then
N rounds in the order A B, B A, A B, ... so drift of the machine falls on both sides alike. Figures:
  - `plumb bench` JSON (its "benchmark" field): every decode step, prefill, kernel median and the copy bandwidth;
  - a JSON with a top-level "figures" object: {"name": {"value": 1.5, "better": "lower", "unit": "ms"}, ...};
  - --figure NAME=PATH:lower|higher picks values from any JSON, PATH like decode[batch=1].step_s_median or
    prefill[0].median_s (given --figure, only those figures are compared).
Per figure: median and min-max of each side over its rounds; the resolution of a side is max - min of its own
rounds (the spread of one build against itself); the difference is B's median against A's in % of A; the verdict is
"gain" or "loss" only when |median B - median A| exceeds both sides' resolution, else "within resolution".

tokens: both binaries generate greedy continuations (`plumb generate --ignore-eos --print-ids --hash`) of the same
prompts: --prompts rows of seeded random ids per length. Counts rows whose ids differ, the first differing position
of each, and rows whose final state hashes differ (FNV-1a 64 of the ids and of every layer's state, as plumb prints).
--model-b gives B a model folder of its own (the same vocabulary): one binary on a quantized checkpoint against the
model it was made from, say, where the rows whose greedy ids differ are what the quantization changes.

Both write --json FILE and --markdown FILE (a table ready for docs/performance.md). Python 3 standard library only.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

# Linux refuses one command-line argument longer than 32 pages (MAX_ARG_STRLEN, 128 KiB with its NUL): longer id
# lists go to plumb as --ids @FILE.
ARG_LIMIT = 128 * 1024 - 1


class HarnessError(Exception):
    pass


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def side_info(label, path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise HarnessError(f"{path} is not an executable file")
    return {"label": label, "binary": os.path.abspath(path), "sha256": sha256(path)}


def run(argv, log_path, stdout_to_log=True):
    """Runs argv; returns its stdout. Raises HarnessError with the log's tail on a non-zero exit."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        if stdout_to_log:
            log.write(proc.stdout)
        log.write(proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise HarnessError(f"exit {proc.returncode}: {shlex.join(argv)[:300]}\n{tail}\n(log: {log_path})")
    return proc.stdout


def fmt(v):
    return "-" if v is None else f"{v:.4g}"


def meta(args, a, b):
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(),
        "a": a,
        "b": b,
        "same_binary": a["sha256"] == b["sha256"],
    }


def write_outputs(args, result, markdown):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown)


# ---- bench: speed figures ------------------------------------------------------------------------------------------

PATH_SEGMENT = re.compile(r"([^.\[\]]*)((?:\[[^\]]+\])*)")


def lookup(doc, path):
    """The value at PATH: keys joined by '.', each followed by any number of [index] or [field=value]; a PATH that
    starts with a selector addresses a document that is a list (plumb_sampler_bench's)."""
    node = doc
    for key, selectors in PATH_SEGMENT.findall(path):
        if key:
            node = node[key]
        for sel in re.findall(r"\[([^\]]+)\]", selectors):
            if "=" in sel:
                field, want = sel.split("=", 1)
                matches = [x for x in node if str(x.get(field)) == want]
                if len(matches) != 1:
                    raise KeyError(f"{path}: {len(matches)} items with {field}={want}")
                node = matches[0]
            else:
                node = node[int(sel)]
    if not isinstance(node, (int, float)) or isinstance(node, bool):
        raise KeyError(f"{path}: not a number")
    return float(node)


def parse_figure_spec(spec):
    m = re.fullmatch(r"([^=]+)=(.+):(lower|higher)", spec)
    if not m:
        raise HarnessError(f"--figure {spec!r}: expected NAME=PATH:lower or NAME=PATH:higher")
    return {"name": m.group(1), "path": m.group(2), "better": m.group(3)}


def plumb_bench_figures(doc):
    """Every figure of a `plumb bench` JSON: name -> (value, better, unit)."""
    figures = {"copy bandwidth": (doc["copy"]["bandwidth_bytes_per_s"] / 1e9, "higher", "GB/s")}
    for d in doc["decode"]:
        figures[f"decode step B={d['batch']}"] = (d["step_s_median"] * 1e3, "lower", "ms")
        if "queued_step_s_median" in d:
            figures[f"decode queued B={d['batch']}"] = (d["queued_step_s_median"] * 1e3, "lower", "ms")
    for p in doc["prefill"]:
        figures[f"prefill T={p['tokens']}"] = (p["median_s"] * 1e3, "lower", "ms")
    for name, entry in doc.get("kernels", {}).items():
        for item in entry if isinstance(entry, list) else [entry]:
            shape = f"B={item['batch']}" if "batch" in item else item["shape"]
            figures[f"kernel {name} {shape}"] = (item["median_s"] * 1e6, "lower", "us")
    return figures


def extract_figures(doc, specs):
    if specs:
        return {s["name"]: (lookup(doc, s["path"]), s["better"], "") for s in specs}
    if doc.get("benchmark") == "plumb bench":
        return plumb_bench_figures(doc)
    if isinstance(doc.get("figures"), dict):
        out = {}
        for name, f in doc["figures"].items():
            if f.get("better") not in ("lower", "higher"):
                raise HarnessError(f"figure {name!r}: 'better' must be 'lower' or 'higher'")
            out[name] = (float(f["value"]), f["better"], f.get("unit", ""))
        return out
    raise HarnessError("the benchmark's JSON is neither plumb bench's nor has a 'figures' object: give --figure")


def round_order(rounds):
    """Warm-up A, warm-up B, then A B, B A, A B, ...: (side, round index or None for the warm-up)."""
    order = [("a", None), ("b", None)]
    for r in range(rounds):
        order += [("a", r), ("b", r)] if r % 2 == 0 else [("b", r), ("a", r)]
    return order


def compare_figure(name, better, unit, a_values, b_values):
    row = {"figure": name, "better": better, "unit": unit, "a": a_values, "b": b_values}
    for side, values in (("a", a_values), ("b", b_values)):
        row[side + "_median"] = statistics.median(values)
        row[side + "_min"], row[side + "_max"] = min(values), max(values)
        row[side + "_resolution"] = max(values) - min(values)
    delta = row["b_median"] - row["a_median"]
    row["difference"] = delta
    row["difference_percent"] = 100.0 * delta / row["a_median"] if row["a_median"] else None
    if not (abs(delta) > row["a_resolution"] and abs(delta) > row["b_resolution"]):
        row["verdict"] = "within resolution"
    else:
        row["verdict"] = "gain" if (delta < 0) == (better == "lower") else "loss"
    return row


def pct(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def shown_command(argv):
    return " ".join(w if w in ("{plumb}", "{json}") else shlex.quote(w) for w in argv)


def bench_tables(result):
    a, b = result["a"]["label"], result["b"]["label"]
    head = ["figure", "A median", "A min-max", "A res.", "B median", "B min-max", "B res.", "B vs A", "verdict"]
    rows = []
    for r in result["figures"]:
        unit = f" {r['unit']}" if r["unit"] else ""
        diff = r["difference_percent"]
        rows.append(
            [
                f"{r['figure']} ({r['better']} is better)",
                fmt(r["a_median"]) + unit,
                f"{fmt(r['a_min'])}-{fmt(r['a_max'])}",
                pct(r["a_resolution"], r["a_median"]),
                fmt(r["b_median"]) + unit,
                f"{fmt(r['b_min'])}-{fmt(r['b_max'])}",
                pct(r["b_resolution"], r["b_median"]),
                "-" if diff is None else f"{diff:+.2f}%",
                r["verdict"],
            ]
        )
    for name, side in result["unmatched"].items():
        rows.append([name, "", "", "", "", "", "", "", f"only in {side.upper()}"])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in [head] + rows]
    text = f"A = {a}, B = {b}\n" + "\n".join(lines)
    note = (
        f"{result['rounds']} rounds of each side (A B, B A, ...) after one warm-up each; res. = max - min of a "
        f"side's rounds, in % of its median; a gain or loss only where |B - A| exceeds both resolutions."
    )
    md = [
        f"`{shown_command(result['command'])}`, A = {a}, B = {b}, {result['date']}, {result['host']}"
        + (" (the same binary on both sides)" if result["same_binary"] else ""),
        "",
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
    ]
    md += ["| " + " | ".join(line) + " |" for line in rows]
    md += ["", note, ""]
    return text + "\n" + note + "\n", "\n".join(md)


def cmd_bench(args):
    if not args.command:
        raise HarnessError("bench needs the benchmark command after --, e.g. -- {plumb} bench ... --json {json}")
    if args.rounds < 2:
        raise HarnessError("--rounds must be at least 2 (a resolution needs two rounds a side)")
    specs = [parse_figure_spec(s) for s in args.figure]
    sides = {"a": side_info(args.label_a, args.a), "b": side_info(args.label_b, args.b)}
    work = args.work or tempfile.mkdtemp(prefix="plumb-ab-")
    os.makedirs(work, exist_ok=True)
    values = {"a": {}, "b": {}}
    meta_of = {}
    for side, r in round_order(args.rounds):
        tag = f"{side}_{'warmup' if r is None else f'round{r}'}"
        json_path = os.path.join(work, tag + ".json")
        argv = [w.replace("{plumb}", sides[side]["binary"]).replace("{json}", json_path) for w in args.command]
        print(f"ab: {tag}: {shlex.join(argv)[:160]}", file=sys.stderr, flush=True)
        stdout = run(argv, os.path.join(work, tag + ".log"))
        try:
            if "{json}" in " ".join(args.command):
                with open(json_path) as f:
                    doc = json.load(f)
            else:
                doc = json.loads(stdout)
        except (OSError, ValueError) as e:
            raise HarnessError(f"{tag}: no JSON from the benchmark: {e}")
        if r is None:
            continue
        try:
            figures = extract_figures(doc, specs)
        except (KeyError, IndexError, TypeError) as e:
            raise HarnessError(f"{tag}: figure not found: {e}")
        for name, (value, better, unit) in figures.items():
            values[side].setdefault(name, []).append(value)
            meta_of[name] = (better, unit)
    result = dict(meta(args, sides["a"], sides["b"]), command=args.command, rounds=args.rounds, work=work)
    result["resolution"] = "max - min of one side's rounds"
    result["figures"], result["unmatched"] = [], {}
    for name, (better, unit) in meta_of.items():
        a_v, b_v = values["a"].get(name, []), values["b"].get(name, [])
        if len(a_v) == args.rounds and len(b_v) == args.rounds:
            result["figures"].append(compare_figure(name, better, unit, a_v, b_v))
        else:
            result["unmatched"][name] = "a" if len(a_v) == args.rounds else "b"
    text, md = bench_tables(result)
    print(text)
    write_outputs(args, result, md)
    bad = [r["figure"] for r in result["figures"] if r["verdict"] != "within resolution"]
    if args.require_within and (bad or result["unmatched"]):
        print(f"ab: not within resolution: {', '.join(bad + list(result['unmatched']))}", file=sys.stderr)
        return 1
    return 0


# ---- tokens: greedy ids --------------------------------------------------------------------------------------------


def vocab_size(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
        return int(config.get("text_config", config)["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise HarnessError(f"{path}: no vocab_size to make prompts from ({type(e).__name__}: {e})")


def prompt_ids(seed, length, index, vocab):
    # A string seed makes the same ids on every Python 3 (it is hashed with SHA-512).
    rng = random.Random(f"plumb-ab:{seed}:{length}:{index}")
    return [rng.randrange(vocab) for _ in range(length)]


def parse_generate(stdout):
    """`plumb generate --print-ids --hash` output: the ids line, then 'name HEX' lines."""
    lines = stdout.splitlines()
    if not lines:
        raise HarnessError("plumb generate printed nothing")
    ids = [int(x) for x in lines[0].split()]
    hashes = dict(line.split() for line in lines[1:] if line.strip())
    if "tokens" not in hashes:
        raise HarnessError("plumb generate printed no 'tokens' hash: is this plumb with --hash?")
    return ids, hashes


def first_difference(x, y):
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def generate(binary, model, args, ids, work, tag):
    ids_arg = ",".join(map(str, ids))
    if len(ids_arg) > args.ids_file_above:
        path = os.path.join(work, tag + ".ids")
        with open(path, "w") as f:
            f.write(ids_arg + "\n")
        ids_arg = "@" + path
    argv = [binary, "generate", "--model", model, "--ids", ids_arg, "--max-tokens", str(args.max_tokens)]
    argv += ["--ignore-eos", "--print-ids", "--hash", "--device", args.device]
    try:
        stdout = run(argv, os.path.join(work, tag + ".log"), stdout_to_log=False)
    except HarnessError as e:
        if ids_arg.startswith("@"):
            hint = f"a prompt of {len(ids)} ids needs --ids @FILE, which plumb reads from commit 7a0a455 on"
            raise HarnessError(f"{e}\n({hint})")
        raise
    return parse_generate(stdout)


def token_tables(result):
    head = ["prompt tokens", "rows", "ids differ", "first differing positions", "state hashes differ"]
    rows = []
    for length in result["lengths"]:
        mine = [r for r in result["rows"] if r["length"] == length]
        firsts = [str(r["first_difference"]) for r in mine if r["first_difference"] is not None]
        rows.append(
            [
                str(length),
                str(len(mine)),
                str(sum(not r["ids_equal"] for r in mine)),
                ", ".join(firsts) or "-",
                str(sum(not r["states_equal"] for r in mine)),
            ]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in [head] + rows)
    detail = "\n".join(
        f"  T={r['length']} prompt {r['prompt']}: tokens A {r['a_tokens_hash']} B {r['b_tokens_hash']}"
        + ("" if r["first_difference"] is None else f", first difference at generated token {r['first_difference']}")
        + ("" if r["states_equal"] else f", state hashes differ: {', '.join(r['states_differing'][:4])}")
        for r in result["rows"]
    )
    a, b = result["a"]["label"], result["b"]["label"]
    models = f"`{os.path.basename(result['model'])}`"
    if result["model_b"] != result["model"]:
        models = f"{models} (A) and `{os.path.basename(result['model_b'])}` (B)"
    note = (
        f"Greedy, {result['max_tokens']} generated tokens a row (--ignore-eos), {result['prompts']} seeded random "
        f"prompts a length, {models} on {result['device']}; first differing position "
        f"counts generated tokens from 0; state hashes: FNV-1a 64 of every layer's final state."
    )
    md = [f"Token A/B, A = {a}, B = {b}, {result['date']}, {result['host']}", ""]
    md += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    md += ["| " + " | ".join(line) + " |" for line in rows] + ["", note, ""]
    return text + "\n" + detail + "\n" + note + "\n", "\n".join(md)


def cmd_tokens(args):
    sides = {"a": side_info(args.label_a, args.a), "b": side_info(args.label_b, args.b)}
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.prompts < 1 or args.max_tokens < 1 or min(lengths) < 1:
        raise HarnessError("--prompts, --max-tokens and every --lengths entry must be at least 1")
    models = {"a": args.model, "b": args.model_b or args.model}
    vocab = vocab_size(models["a"])
    if vocab_size(models["b"]) != vocab:
        raise HarnessError(f"{models['a']} has a vocabulary of {vocab} ids and {models['b']} of "
                           f"{vocab_size(models['b'])}: the same prompts cannot feed both")
    work = args.work or tempfile.mkdtemp(prefix="plumb-ab-tokens-")
    os.makedirs(work, exist_ok=True)
    rows = []
    for length in lengths:
        for index in range(args.prompts):
            ids = prompt_ids(args.seed, length, index, vocab)
            out = {}
            for side in ("a", "b"):
                tag = f"{side}_T{length}_p{index}"
                print(f"ab: {tag}", file=sys.stderr, flush=True)
                out[side] = generate(sides[side]["binary"], models[side], args, ids, work, tag)
            (a_ids, a_hash), (b_ids, b_hash) = out["a"], out["b"]
            states = sorted(k for k in set(a_hash) | set(b_hash) if k != "tokens" and a_hash.get(k) != b_hash.get(k))
            rows.append(
                {
                    "length": length,
                    "prompt": index,
                    "prompt_hash": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16],
                    "ids_equal": a_ids == b_ids,
                    "first_difference": first_difference(a_ids, b_ids),
                    "a_tokens_hash": a_hash["tokens"],
                    "b_tokens_hash": b_hash["tokens"],
                    "states_equal": not states,
                    "states_differing": states,
                    "a_ids": a_ids,
                    "b_ids": b_ids,
                }
            )
    result = dict(meta(args, sides["a"], sides["b"]), model=os.path.abspath(models["a"]),
                  model_b=os.path.abspath(models["b"]), device=args.device)
    result.update(lengths=lengths, prompts=args.prompts, max_tokens=args.max_tokens, seed=args.seed, work=work)
    result["rows"] = rows
    result["rows_differing"] = sum(not r["ids_equal"] for r in rows)
    result["rows_state_differing"] = sum(not r["states_equal"] for r in rows)
    text, md = token_tables(result)
    print(text)
    write_outputs(args, result, md)
    print(f"ab: {result['rows_differing']} of {len(rows)} rows' ids differ", file=sys.stderr)
    return 1 if args.require_equal and result["rows_differing"] else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--a", required=True, help="binary A (the baseline)")
    common.add_argument("--b", required=True, help="binary B (the change)")
    common.add_argument("--label-a", default="A", help="name of A in the tables (e.g. its commit)")
    common.add_argument("--label-b", default="B", help="name of B in the tables")
    common.add_argument("--json", help="write the result as JSON")
    common.add_argument("--markdown", help="write a markdown table for docs/performance.md")
    common.add_argument("--work", help="folder for each run's log and JSON (default: a new temporary folder)")
    bench = sub.add_parser("bench", parents=[common], help="speed figures, alternating rounds")
    bench.add_argument("--rounds", type=int, default=5, help="timed rounds per side after the warm-up (>= 2)")
    bench.add_argument("--figure", action="append", default=[], help="NAME=PATH:lower|higher (repeatable)")
    bench.add_argument("--require-within", action="store_true", help="exit 1 unless every figure is within resolution")
    bench.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD with {plumb} and {json}")
    tokens = sub.add_parser("tokens", parents=[common], help="greedy ids of both binaries on the same prompts")
    tokens.add_argument("--model", required=True, help="model folder")
    tokens.add_argument("--model-b", help="B's model folder, of the same vocabulary (default: --model)")
    tokens.add_argument("--lengths", default="16,64", help="prompt lengths in tokens, comma-separated")
    tokens.add_argument("--prompts", type=int, default=3, help="prompts per length")
    tokens.add_argument("--max-tokens", type=int, default=32, help="generated tokens per row")
    tokens.add_argument("--device", default="cpu")
    tokens.add_argument("--seed", type=int, default=1, help="seed of the prompts' ids")
    tokens.add_argument("--ids-file-above", type=int, default=ARG_LIMIT, help="pass longer id lists as --ids @FILE")
    tokens.add_argument("--require-equal", action="store_true", help="exit 1 if any row's ids differ")
    args = parser.parse_args(argv)
    if args.what == "bench" and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        return cmd_bench(args) if args.what == "bench" else cmd_tokens(args)
    except HarnessError as e:
        print(f"ab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
