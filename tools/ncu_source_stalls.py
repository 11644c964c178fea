"""Where one kernel's warps wait: Nsight Compute's stall sampling, per reason and per SASS instruction.

    python3 tools/ncu_source_stalls.py RAW_CSV SOURCE_CSV [TOP]

RAW_CSV is `ncu --import REP --page raw --csv` and SOURCE_CSV `ncu --import REP --page source --csv
--print-source sass` of a report collected with the WarpStateStats and SourceCounters sections
(scripts/gpu-stalls.sh). Prints the sampled stall reasons of each profiled launch (share of all
samples), then for each launch's table of the source page (read as tools/ncu_source_summary.py
reads it) the TOP instructions (default 60) by samples with their address, text and three largest
stall reasons, and the samples per opcode. Standard library only.
"""

import csv
import re
import sys

try:  # as a script from tools/, or as tools.ncu_source_stalls
    from ncu_source_summary import read_tables, summarize
    from ncu_summary import number
except ImportError:
    from tools.ncu_source_summary import read_tables, summarize
    from tools.ncu_summary import number


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
    """Each launch's table of the source page (ncu_source_summary.read_tables): its top instructions
    by samples, each with its three largest stall reasons, and the samples per opcode."""
    with open(path, newline="") as f:
        names = []
        tables = read_tables(f, names)
    if not tables:
        with open(path) as f:
            head = [next(f, "") for _ in range(8)]
        print(f"{path}: no source table; its first lines:")
        print("".join(head), end="")
        return
    for (header, rows), kernel in zip(tables, names):
        print(f"\n{kernel[:120]}")
        summarize(header, rows, top, sys.stdout, reasons=3, opcodes=16)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    stall_reasons(sys.argv[1])
    instructions(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 60)
