#!/usr/bin/env python3
"""Where one profiled kernel's warps wait, from ncu's source page (per SASS instruction stall samples).

    ncu --set full --import-source no -k regex:KERNEL --launch-count 1 -o report PROGRAM ...
    ncu --import report.ncu-rep --page source --csv --print-source sass > source.csv
    ncu --import report.ncu-rep --page details --csv > details.csv
    python3 tools/ncu_stalls.py source.csv [--details details.csv] [--top N]

Prints the N instructions with the most warp-stall samples (all samples, and the column ncu names for the not-issued
ones where present), each with its share of the kernel's samples, address and SASS text. The columns are found by
name ("Sampling" and "All"), so a newer ncu that renames them makes this print the header it found instead of
guessing. --details also prints the kernel's throughput, occupancy and scheduler lines from the details page.
"""
import argparse
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


DETAILS = ("Duration", "DRAM Throughput", "Memory Throughput", "Achieved Occupancy", "Theoretical Occupancy",
           "Registers Per Thread", "Grid Size", "Block Size", "Issue Slots Busy", "Warp Cycles Per Issued Instruction",
           "Eligible Warps Per Scheduler", "Active Warps Per Scheduler", "No Eligible")


def print_details(path):
    with open(path, newline="") as f:
        rows = [line for line in f if line.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") in DETAILS:
            print(f"{r['Metric Name']:>36}: {r.get('Metric Value', '')} {r.get('Metric Unit', '')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--details")
    args = parser.parse_args()
    if args.details:
        print_details(args.details)
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    # Newer ncu puts a "Kernel Name" line before the table: the header is the first row naming a source column.
    start = next((i for i, r in enumerate(rows) if any(c.strip().lower() == "source" for c in r)), 0)
    header = rows[start] if rows else []
    all_col = next((c for c in header if "Sampling" in c and "All" in c), None)
    not_issued_col = next((c for c in header if "Sampling" in c and "Not" in c), None)
    source_col = next((c for c in header if c.strip().lower() == "source"), None)
    address_col = next((c for c in header if "Address" in c), None)
    if all_col is None or source_col is None:
        sys.exit(f"ncu_stalls: no stall-sampling or source column in {args.csv}; its columns: {header}")
    # The table's rows, up to the next kernel's lines (another length).
    table = []
    for r in rows[start + 1 :]:
        if len(r) != len(header):
            break
        table.append(dict(zip(header, r)))
    total = sum(number(r[all_col]) for r in table) or 1.0
    print(f"{len(table)} instructions, {total:.0f} stall samples ({all_col})")
    for r in sorted(table, key=lambda r: -number(r[all_col]))[: args.top]:
        samples = number(r[all_col])
        not_issued = f" not issued {number(r[not_issued_col]):6.0f}" if not_issued_col else ""
        address = r[address_col] if address_col else ""
        print(f"{100 * samples / total:5.1f} % {samples:7.0f}{not_issued}  {address:>8}  {r[source_col].strip()}")


if __name__ == "__main__":
    main()
