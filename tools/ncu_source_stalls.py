"""Where one kernel's warps wait: Nsight Compute's stall sampling, per reason and per SASS instruction.

    python3 tools/ncu_source_stalls.py RAW_CSV SOURCE_CSV [TOP]

RAW_CSV is `ncu --import REP --page raw --csv` and SOURCE_CSV `ncu --import REP --page source --csv
--print-source sass` of a report collected with the WarpStateStats and SourceCounters sections
(scripts/gpu-stalls.sh). Prints the sampled stall reasons of each profiled launch (share of all
samples), then the TOP instructions (default 60) by samples with their address, text and their
three largest stall columns, and the samples per opcode. Standard library only.
"""

import csv
import re
import sys
from collections import Counter


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def stall_reasons(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3:
        print(f"{path}: no launches")
        return
    header = rows[0]
    for row in rows[2:]:  # row 1 holds the units
        record = dict(zip(header, row))
        name = record.get("Kernel Name", "?")[:90]
        samples = {}
        for column, value in record.items():
            m = re.match(r"smsp__pcsamp_warps_issue_stalled_(\w+?)(_not_issued)?$", column)
            v = number(value)
            if m and not m.group(2) and v is not None:
                samples[m.group(1)] = v
        total = sum(samples.values())
        print(f"launch {record.get('ID', '?')}: {name}  ({int(total)} samples)")
        for reason, v in sorted(samples.items(), key=lambda kv: -kv[1])[:14]:
            if v > 0:
                print(f"  {reason:28s} {100 * v / total:5.1f}%")


def instructions(path, top):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if "Address" in line and "Source" in line), None)
    if start is None:
        print(f"{path}: no source table; its first lines:")
        print("\n".join(lines[:8]))
        return
    rows = list(csv.reader(lines[start:]))
    header = [h.strip("# ").strip() for h in rows[0]]
    table = [dict(zip(header, row)) for row in rows[1:] if len(row) == len(header)]
    all_col = next((h for h in header if h.startswith("Warp Stall Sampling (All")), None)
    if all_col is None:
        print("no stall sampling column; columns:", header)
        return
    stall_cols = [h for h in header if h.startswith("stall_") or (h.startswith("Stall ") and "Sampl" not in h)]
    total = sum(number(r.get(all_col)) or 0 for r in table) or 1
    print(f"\n{len(table)} instructions, {int(total)} samples; top {top}:")
    ranked = sorted(table, key=lambda r: -(number(r.get(all_col)) or 0))[:top]
    for r in sorted(ranked, key=lambda r: int(r.get("Address", "0"), 16) if r.get("Address", "").startswith("0x") else 0):
        v = number(r.get(all_col)) or 0
        parts = sorted(((number(r.get(c)) or 0, c) for c in stall_cols), reverse=True)[:3]
        why = " ".join(f"{c.replace('stall_', '')}={int(x)}" for x, c in parts if x > 0)
        print(f"{r.get('Address', '?'):>8} {100 * v / total:5.1f}%  {r.get('Source', '')[:70]:70s} {why}")
    by_op = Counter()
    for r in table:
        op = (r.get("Source", "").split() or ["?"])[0]
        if op.startswith("@"):
            op = (r.get("Source", "").split() + ["?", "?"])[1]
        by_op[op.split(".")[0]] += number(r.get(all_col)) or 0
    print("\nsamples per opcode:", ", ".join(f"{op} {100 * v / total:.1f}%" for op, v in by_op.most_common(16)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    stall_reasons(sys.argv[1])
    instructions(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 60)
