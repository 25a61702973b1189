#!/usr/bin/env python3
"""bench/trace/timeline.py on hand-made kernel traces whose answers are known.

Two graphs (3 and 2 kernels) replayed 3 and 4 times, plus eager kernels each under its own correlation id: the graphs
must be told apart by their kernels, the median replay picked, overlapping kernels counted once in the busy time, and
each kernel's "adds" (its end past everything before it) must sum to the replay's wall time. A trace with no graph
replayed three times must fail, and bad input gets a message naming the file, line and field.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
from checklist import check, verdict  # tests/bench/checklist.py

TIMELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "trace", "timeline.py")


def write_trace(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["start_ns", "end_ns", "correlation", "graph", "stream", "grid", "block", "name"])
        for r in rows:
            w.writerow(r)


def run(path, *extra):
    out = path + ".json"
    proc = subprocess.run([sys.executable, TIMELINE, path, "--json", out, *extra], capture_output=True, text=True)
    doc = json.load(open(out)) if proc.returncode == 0 else None
    return proc, doc


def main():
    work = tempfile.mkdtemp()
    rows, t, correlation = [], 0, 100
    name = "void plumb::cuda::(anonymous namespace)::{}<float, 4>(plumb::cuda::Params)"
    # Graph A: norm 2 us, a product 10 us that starts 1 us before the norm ends (a programmatic launch), then 1 us
    # idle and a 3 us kernel; replay i is stretched by i us in its last kernel, so the median replay is known.
    for i, stretch in enumerate([0, 4000, 2000]):
        correlation += 1
        rows += [(t, t + 2000, correlation, 0, 7, 1, 256, name.format("rms_norm_kernel")),
                 (t + 1000, t + 11000, correlation, 0, 7, 772, 32, name.format("linear_stream_ring_kernel")),
                 (t + 12000, t + 15000 + stretch, correlation, 0, 7, 1, 128, name.format("moe_route_kernel"))]
        t += 100000
        correlation += 1
        rows.append((t, t + 500, correlation, 0, 7, 64, 128, name.format("eager_kernel")))  # not a graph
        t += 10000
    # Graph B: two kernels, 4 replays.
    for _ in range(4):
        correlation += 1
        rows += [(t, t + 1000, correlation, 3, 7, 16, 256, name.format("rms_norm_kernel")),
                 (t + 1000, t + 5000, correlation, 3, 7, 3880, 128, name.format("linear_stream_kernel"))]
        t += 100000
    path = os.path.join(work, "trace.csv")
    write_trace(path, rows)
    proc, doc = run(path, "--sequence", "3")
    check(proc.returncode == 0 and doc is not None, f"a trace with two replayed graphs is summed (exit {proc.returncode})")
    if doc:
        graphs = sorted(doc["graphs"], key=lambda g: g["kernels"])
        check([g["kernels"] for g in graphs] == [2, 3] and [g["replays"] for g in graphs] == [4, 3],
              f"two graphs, of 2 and 3 kernels, replayed 4 and 3 times: {[(g['kernels'], g['replays']) for g in graphs]}")
        a = graphs[1]
        check(abs(a["wall_us"] - 17.0) < 1e-9, f"graph A's median replay is the 2 us stretched one, 17 us: {a['wall_us']}")
        check(abs(a["busy_us"] - 16.0) < 1e-9 and abs(a["idle_us"] - 1.0) < 1e-9,
              f"overlap counted once: busy 16 us, idle 1 us: {a['busy_us']}, {a['idle_us']}")
        adds = {e["kernel"]: e["adds_us"] for e in a["by_kernel"]}
        check(abs(sum(adds.values()) - a["wall_us"]) < 1e-9, f"adds sum to the wall time: {adds}")
        check(adds.get("linear_stream_ring_kernel [772x32]") == 9.0 and adds.get("moe_route_kernel [1x128]") == 6.0,
              f"the product adds 9 us past the norm, the route 6 us (1 idle + 5 run): {adds}")
        seq = a["sequence"]
        check([round(e["after_previous_us"], 3) for e in seq] == [0.0, -1.0, 1.0],
              f"the sequence shows the early start and the idle gap: {seq}")
    write_trace(path, rows[:6])
    proc, doc = run(path)
    check(proc.returncode != 0, f"no graph replayed three times is a failure (exit {proc.returncode})")
    # Bad input: a clear message naming the file (and line and field), never a traceback.
    with open(path, "w") as f:
        f.write("start_ns,end_ns\n1,2\n")
    proc, _ = run(path)
    check(proc.returncode == 1 and "not a kernel trace" in proc.stderr and "Traceback" not in proc.stderr,
          f"a file without the trace's columns is refused by name: {proc.stderr.strip()}")
    write_trace(path, rows[:2] + [(5, "x", 1, 0, 7, 1, 256, "k")])
    proc, _ = run(path)
    check(proc.returncode == 1 and ":4: end_ns is 'x'" in proc.stderr and "Traceback" not in proc.stderr,
          f"a value that is not a number is refused naming line and field: {proc.stderr.strip()}")
    proc, _ = run(os.path.join(work, "missing.csv"))
    check(proc.returncode == 1 and "missing.csv" in proc.stderr and "Traceback" not in proc.stderr,
          f"a missing file is refused by name: {proc.stderr.strip()}")
    return verdict("timeline_test")


if __name__ == "__main__":
    sys.exit(main())
