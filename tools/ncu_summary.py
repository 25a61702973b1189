#!/usr/bin/env python3
"""Sums an ncu CSV of gpu__time_duration.sum by kernel, to see where a decode step's GPU time goes.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base PROGRAM ... > ncu.csv
    python3 tools/ncu_summary.py ncu.csv [--divide N] [--skip SUBSTRING ...]

--divide N reports per pass when the program ran N identical passes; --skip drops kernels whose name contains a
substring (e.g. random_uniform, which fills synthetic weights).
"""
import argparse
import collections
import csv
import re


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--divide", type=float, default=1.0)
    parser.add_argument("--skip", nargs="*", default=[])
    args = parser.parse_args()
    total, count = collections.Counter(), collections.Counter()
    with open(args.csv) as f:
        rows = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"]
        if any(s in name for s in args.skip):
            continue
        key = re.sub(r"\(.*", "", name.replace("void ", "").replace("plumb::cuda::", "")).strip()
        key = re.sub(r"\(anonymous namespace\)::", "", key)
        total[key] += float(row["Metric Value"].replace(",", "")) / 1e3  # ns -> us
        count[key] += 1
    grand = sum(total.values())
    print(f"{'kernel':70} {'launches':>9} {'us total':>10} {'share':>6}")
    for key, us in total.most_common():
        print(f"{key[:70]:70} {count[key] / args.divide:9.1f} {us / args.divide:10.1f} {us / grand:6.1%}")
    print(f"{'all':70} {sum(count.values()) / args.divide:9.1f} {grand / args.divide:10.1f}")


if __name__ == "__main__":
    main()
