#!/usr/bin/env python3
"""Where a replayed graph's time goes, from a kernel trace (bench/trace/kernel_trace.cpp's CSV).

    python3 bench/trace/timeline.py trace.csv [--json FILE] [--top N]

The kernels of one graph launch share a correlation id; launches with the same kernels are one graph's replays. For every graph
replayed at least three times, the replay of median length is shown: its wall time (first start to last end), the
time some kernel ran (the union of their intervals) and the idle rest, then its kernels summed by name and grid size:
launches, what they add to the replay (from the end of everything earlier to their own end: the replay's wall time is
the sum of this column), time running (from start to end, which with programmatic launches can begin before the
kernel before has ended) and the idle time just before them (from the end of everything earlier to their start). --sequence N lists the first N kernels of that replay in order. Times are CUPTI's, so every kernel carries a little instrumentation.
"""
import argparse
import collections
import csv
import json
import re
import statistics
import sys


def short_name(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    depth, out = 0, []
    for ch in name:  # drop template arguments and the parameter list
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1].strip()


def replay_summary(kernels):
    kernels = sorted(kernels, key=lambda k: k["start"])
    first, last_end = kernels[0]["start"], kernels[0]["start"]
    busy = 0
    by_key = collections.OrderedDict()
    for k in kernels:
        idle = max(0, k["start"] - last_end)
        busy += max(0, k["end"] - max(k["start"], last_end))
        adds = max(0, k["end"] - last_end)
        last_end = max(last_end, k["end"])
        key = f'{short_name(k["name"])} [{k["grid"]}x{k["block"]}]'
        entry = by_key.setdefault(key, {"kernel": key, "launches": 0, "run_us": 0.0, "idle_before_us": 0.0,
                                        "adds_us": 0.0})
        entry["launches"] += 1
        entry["adds_us"] += adds / 1e3
        entry["run_us"] += (k["end"] - k["start"]) / 1e3
        entry["idle_before_us"] += idle / 1e3
    wall = (last_end - first) / 1e3
    sequence = [{"kernel": f'{short_name(k["name"])} [{k["grid"]}x{k["block"]}]', "start_us": (k["start"] - first) / 1e3,
                 "run_us": (k["end"] - k["start"]) / 1e3,
                 "after_previous_us": (k["start"] - p["end"]) / 1e3 if p else 0.0}
                for p, k in zip([None] + kernels[:-1], kernels)]
    return {"kernels": len(kernels), "sequence": sequence, "wall_us": wall, "busy_us": busy / 1e3, "idle_us": wall - busy / 1e3,
            "by_kernel": sorted(by_key.values(), key=lambda e: -e["adds_us"])}


class TraceError(Exception):
    pass


FIELDS = ("start_ns", "end_ns", "correlation", "graph", "grid", "block", "name")


def read_trace(path):
    """The trace's kernels by correlation id; a missing column or a value that is not a whole number is refused with
    the file, line and field named."""
    launches = collections.defaultdict(list)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in FIELDS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: not a kernel trace (no column {', '.join(missing)})")
        for row in reader:
            def number(field):
                try:
                    return int(row[field])
                except (TypeError, ValueError):
                    raise TraceError(f"{path}:{reader.line_num}: {field} is {row[field]!r}, not a whole number")
            launches[number("correlation")].append(
                {"start": number("start_ns"), "end": number("end_ns"), "grid": number("grid"),
                 "block": number("block"), "name": row["name"] or "", "graph": number("graph")})
    return launches


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--json")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sequence", type=int, default=0, help="also list the median replay's first N kernels")
    args = parser.parse_args()
    try:
        launches = read_trace(args.trace)
    except (OSError, TraceError) as e:
        print(f"timeline: {e}", file=sys.stderr)
        return 1
    # A graph: the launches of several kernels under one correlation id, told apart by their kernels' sequence (CUPTI
    # leaves the graph id 0 on some drivers).
    replays = collections.defaultdict(dict)
    for correlation, kernels in launches.items():
        if len(kernels) < 2:
            continue
        kernels.sort(key=lambda k: k["start"])
        signature = (len(kernels), kernels[0]["grid"], kernels[-1]["grid"], kernels[len(kernels) // 2]["grid"])
        replays[signature][correlation] = kernels
    graphs = {i + 1: launches for i, (_, launches) in enumerate(sorted(replays.items()))}
    result = []
    for graph, launches in sorted(graphs.items()):
        if len(launches) < 3:
            continue
        summaries = sorted((replay_summary(k) for k in launches.values()), key=lambda s: s["wall_us"])
        median = summaries[len(summaries) // 2]
        walls = [s["wall_us"] for s in summaries]
        median.update({"graph": graph, "replays": len(summaries), "wall_us_min": walls[0], "wall_us_max": walls[-1],
                       "wall_us_median": statistics.median(walls)})
        result.append(median)
        print(f"graph {graph}: {median['replays']} replays, {median['kernels']} kernels; median replay "
              f"{median['wall_us']:.1f} us (min {walls[0]:.1f}, max {walls[-1]:.1f}): kernels running "
              f"{median['busy_us']:.1f} us, none running {median['idle_us']:.1f} us")
        print(f"  {'kernel [grid x block]':70} {'launches':>8} {'adds us':>9} {'run us':>9} {'idle before':>11}")
        for e in median["by_kernel"][:args.top]:
            print(f"  {e['kernel'][:70]:70} {e['launches']:8d} {e['adds_us']:9.1f} {e['run_us']:9.1f} "
                  f"{e['idle_before_us']:11.1f}")
        rest = median["by_kernel"][args.top:]
        if rest:
            print(f"  {f'{len(rest)} more':70} {sum(e['launches'] for e in rest):8d} "
                  f"{sum(e['adds_us'] for e in rest):9.1f} {sum(e['run_us'] for e in rest):9.1f} "
                  f"{sum(e['idle_before_us'] for e in rest):11.1f}")
        if args.sequence:
            print(f"  first {args.sequence} kernels in order (start, run, start after the previous one's end: "
                  "negative where they overlap):")
            for e in median["sequence"][:args.sequence]:
                print(f"  {e['kernel'][:70]:70} {e['start_us']:9.1f} {e['run_us']:7.1f} {e['after_previous_us']:7.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"graphs": result}, f, indent=1)
    if not result:
        print("timeline: no graph was replayed three times in this trace")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
