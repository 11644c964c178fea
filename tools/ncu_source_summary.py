"""Where a kernel's warps wait, instruction by instruction, from Nsight Compute's source page.

    python3 tools/ncu_source_summary.py ncu-NAME-source.csv[.xz] [--top N]

The CSV: `ncu --section WarpStateStats --section SourceCounters --page source --print-source sass
--csv ...` (scripts/gpu-profile.sh with NCU_SOURCE=1). Each profiled launch is a table whose header
row names an address column, a source column and one or more "Warp Stall Sampling" columns; the
rows under it are SASS instructions. For each table: the launch's total samples, then its N
instructions with the most samples (address, share of the launch's samples, the instruction),
then the samples summed by opcode. Column names are matched by substring, so the tool does not
depend on the exact headings of one ncu version. Standard library only.
"""

import argparse
import csv
import lzma
import sys
from collections import defaultdict

try:  # as a script from tools/, or as tools.ncu_source_summary
    from ncu_summary import number
except ImportError:
    from tools.ncu_summary import number


def find_column(header, *needles):
    """The index of the first column whose name contains every needle (case-insensitive), or None."""
    for i, name in enumerate(header):
        low = name.lower()
        if all(n.lower() in low for n in needles):
            return i
    return None


def read_tables(lines, names=None):
    """[(header, rows)]: each run of rows under a header that has a source and a stall-sampling column.
    With a list `names`, appends to it each table's kernel (the "Kernel Name" row ncu writes before
    a launch's table; "?" where none came before it)."""
    tables, header, rows = [], None, []
    kernel, table_kernel = "?", "?"

    def close():
        tables.append((header, rows))
        if names is not None:
            names.append(table_kernel)

    for row in csv.reader(lines):
        if len(row) >= 2 and row[0] == "Kernel Name":
            kernel = row[1]
        is_header = find_column(row, "source") is not None and find_column(row, "stall sampling") is not None
        if is_header:
            if header is not None:
                close()
            header, rows, table_kernel = row, [], kernel
        elif header is not None and len(row) == len(header):
            rows.append(row)
        elif header is not None and rows:
            close()
            header, rows = None, []
    if header is not None:
        close()
    return tables


def reason_columns(header):
    """[(index, reason)]: the per-reason stall columns of all samples ("stall_wait", not "stall_wait (Not
    Issued)"), where the page has them (the SourceCounters section with warp-state sampling)."""
    return [(i, name[len("stall_"):]) for i, name in enumerate(header)
            if name.startswith("stall_") and "not issued" not in name.lower()]


def summarize(header, rows, top, out, reasons=0, opcodes=8):
    """Writes the table's total samples, its `top` instructions by samples and the samples summed by
    opcode (the `opcodes` largest). With reasons > 0, each listed instruction also names its `reasons`
    largest stall reasons with their samples, where the page has per-reason columns."""
    samples_col = find_column(header, "stall sampling", "all") or find_column(header, "stall sampling")
    source_col = find_column(header, "source")
    address_col = find_column(header, "address")
    reason_cols = reason_columns(header) if reasons > 0 else []
    instructions = []
    for row in rows:
        samples = number(row[samples_col]) or 0.0
        address = row[address_col] if address_col is not None else ""
        instructions.append((samples, address, row[source_col].strip(), row))
    total = sum(s for s, _, _, _ in instructions)
    out.write(f"== {len(instructions)} instructions, {total:.0f} stall samples ({header[samples_col]})\n")
    if total <= 0:
        return
    for samples, address, source, row in sorted(instructions, key=lambda t: -t[0])[:top]:
        line = f"  {100 * samples / total:5.1f}%  {address:>8}  {source}"
        largest = sorted(((number(row[i]) or 0.0, reason) for i, reason in reason_cols), reverse=True)[:reasons]
        why = " ".join(f"{reason}={v:.0f}" for v, reason in largest if v > 0)
        out.write(f"{line}  [{why}]\n" if why else f"{line}\n")
    by_opcode = defaultdict(float)
    for samples, _, source, _ in instructions:
        words = source.split()
        opcode = next((w for w in words if not w.startswith("@")), "?").split(".")[0]
        by_opcode[opcode] += samples
    ranked = sorted(by_opcode.items(), key=lambda kv: -kv[1])[:opcodes]
    shares = ", ".join(f"{op} {100 * s / total:.1f}%" for op, s in ranked)
    out.write(f"  by opcode: {shares}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    # gpu-profile.sh brings the CSV back xz-compressed (a source page is tens of MB).
    opener = lzma.open if args.csv.endswith(".xz") else open
    with opener(args.csv, "rt", newline="") as f:
        names = []
        tables = read_tables(f, names)
    if not tables:
        sys.exit(f"{args.csv}: no table with a source column and a stall-sampling column")
    for (header, rows), kernel in zip(tables, names):
        sys.stdout.write(f"{kernel}\n")
        summarize(header, rows, args.top, sys.stdout)


if __name__ == "__main__":
    main()
