#!/usr/bin/env python3
"""A stand-in for plumb with a planted difference, for tests/bench/ab_test.py: runs the real binary, then rewrites
what it printed or wrote.

  planted_plumb.py MODE REAL_PLUMB ARGS...

bench modes (the JSON of --json): every time and the copy bandwidth replaced by fixed values that move by 0.3 % from
round to round (a jitter from the round in the JSON's file name, the same for both sides, so a side compared with
itself has equal medians and a resolution of 0.6 %), so verdicts depend neither on this machine's noise nor on the
name of the temporary folder:
  steady  the fixed values;   slow  times x1.1 and bandwidth / 1.1 (a planted loss).
generate modes (--print-ids --hash output):
  flip    prompts of at least 64 ids: generated ids from position 3 on are changed, and the tokens hash with them;
  state   one layer's state hash changed, the ids kept (bits moved, tokens did not).
Any other command, or a mode that does not apply to it, runs the real binary unchanged.
"""
import json
import os
import re
import subprocess
import sys
import zlib


def option(args, name):
    return args[args.index(name) + 1] if name in args else None


def bench(mode, real, args):
    code = subprocess.call([real] + args, stdout=subprocess.DEVNULL)
    path = option(args, "--json")
    if code or not path:
        return code
    with open(path) as f:
        doc = json.load(f)
    # ab.py names the file SIDE_roundN.json (or SIDE_warmup.json): the jitter keys on N alone.
    tag = os.path.basename(path).split("_", 1)[-1]
    rounds = re.findall(r"\d+", tag)
    jitter = 1.0 + ((int(rounds[0]) % 3) - 1) * 0.003 if rounds else 1.0
    factor = jitter * (1.1 if mode == "slow" else 1.0)
    doc["copy"]["bandwidth_bytes_per_s"] = 10e9 / factor
    for i, d in enumerate(doc["decode"]):
        d["step_s_median"] = 0.005 * (i + 1) * factor
        d["queued_step_s_median"] = 0.004 * (i + 1) * factor
    for i, p in enumerate(doc["prefill"]):
        p["median_s"] = 0.03 * (i + 1) * factor
    for entry in doc.get("kernels", {}).values():
        for item in entry if isinstance(entry, list) else [entry]:
            item["median_s"] = 1e-4 * factor
    with open(path, "w") as f:
        json.dump(doc, f)
    return 0


def generate(mode, real, args):
    proc = subprocess.run([real] + args, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        return proc.returncode
    lines = proc.stdout.splitlines()
    prompt = option(args, "--ids") or ""
    if mode == "flip" and prompt.count(",") + 1 >= 64:
        ids = [int(x) for x in lines[0].split()]
        ids[3:] = [x + 1 for x in ids[3:]]
        lines[0] = " ".join(map(str, ids))
        changed = "tokens %016x" % zlib.crc32(lines[0].encode())
        lines = [changed if line.startswith("tokens ") else line for line in lines]
    if mode == "state":
        changed = "layer0.recurrent 0000000000000000"
        lines = [changed if line.startswith("layer0.recurrent ") else line for line in lines]
    print("\n".join(lines))
    return 0


def main():
    mode, real, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if args[:1] == ["bench"] and mode in ("steady", "slow"):
        return bench(mode, real, args)
    if args[:1] == ["generate"] and mode in ("flip", "state"):
        return generate(mode, real, args)
    return subprocess.call([real] + args)


if __name__ == "__main__":
    sys.exit(main())
