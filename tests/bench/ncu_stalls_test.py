#!/usr/bin/env python3
"""tools/ncu_stalls.py on hand-made ncu source-page CSVs whose answers are known.

The table as older ncu wrote it (header first) and as newer ncu writes it (a "Kernel Name" line first, and another
kernel's lines after the table) must both give the instructions by stall samples, each with its share; a CSV without
a stall-sampling column must fail with a message that names the columns it found.
"""
import os
import subprocess
import sys
import tempfile
from checklist import check, verdict  # tests/bench/checklist.py

STALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "ncu_stalls.py")
HEADER = '"# Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"\n'
TABLE = ('"0x10","HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24","120","100"\n'
         '"0x20","SYNCS.PHASECHK.TRANS64 P0, [UR5], R3","300","290"\n'
         '"0x30","FADD R1, R2, R3","80","1"\n')


def run(text, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    proc = subprocess.run([sys.executable, STALLS, f.name, *extra], capture_output=True, text=True)
    os.unlink(f.name)
    return proc


def lines_of(proc):
    return [line for line in proc.stdout.splitlines() if "%" in line and "0x" in line]


for name, text in [("header first", HEADER + TABLE),
                   ("kernel name first, another kernel after",
                    '"Kernel Name","void k(int)",""\n' + HEADER + TABLE + '"Kernel Name","void other()",""\n')]:
    proc = run(text, "--top", "2")
    rows = lines_of(proc)
    check(proc.returncode == 0, f"{name}: exits 0 ({proc.stderr.strip()})")
    check("3 instructions, 500 stall samples" in proc.stdout, f"{name}: counts 3 instructions and 500 samples")
    check(len(rows) == 2 and "SYNCS" in rows[0] and "60.0 %" in rows[0] and "HGMMA" in rows[1] and "24.0 %" in rows[1],
          f"{name}: the top two by samples, with their shares: {rows}")

proc = run('"Kernel Name","void k(int)",""\n"# Address","Source"\n"0x10","FADD R1, R2, R3"\n')
check(proc.returncode != 0 and "no stall-sampling" in proc.stderr and "Source" in proc.stderr,
      f"no sampling column: refused, naming the columns found ({proc.stderr.strip()})")

sys.exit(verdict("ncu_stalls_test"))
