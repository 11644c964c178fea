"""Summarizes an Nsight Compute CSV (`ncu --csv --page details`, scripts/gpu-profile.sh) per kernel.

    python3 tools/ncu_summary.py ncu-decode-b1.csv

One line per kernel (template arguments dropped, launches of one kernel together): launches,
total and mean duration, and the means over its launches of memory and SM throughput (% of
peak), DRAM throughput, memory throughput in GB/s, achieved occupancy, registers per thread and warp cycles per issued
instruction, when the CSV holds them. Standard library only.
"""

import csv
import re
import sys
from collections import OrderedDict

# (metric name in ncu's details page, unit or None for any) -> column heading. A name can appear in
# two sections with different units ("Memory Throughput": % of peak under Speed Of Light, byte/s
# under Memory Workload Analysis), so the unit picks one.
COLUMNS = OrderedDict([
    (("Memory Throughput", "%"), "mem %"),
    (("DRAM Throughput", "%"), "dram %"),
    (("Memory Throughput", "byte/s"), "GB/s"),
    (("Compute (SM) Throughput", "%"), "sm %"),
    (("Achieved Occupancy", "%"), "occ %"),
    (("Registers Per Thread", None), "regs"),
    (("Warp Cycles Per Issued Instruction", None), "cyc/inst"),
])
# Units scaled for display.
UNIT_SCALE = {"byte/s": 1e-9}

# Duration units -> microseconds.
TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
              "second": 1e6}


def short_name(name):
    """The kernel's name without its return type, namespaces' anonymous parts, template arguments
    or parameters: 'void deepinfer::cuda::(anonymous namespace)::Foo<(Kind)4, 2>(Params)' -> 'Foo<4,2>'."""
    name = re.sub(r"\(anonymous namespace\)::|<?unnamed>::", "", name)
    name = re.sub(r"^void\s+", "", name)
    depth = 0
    cut = len(name)
    for i, ch in enumerate(name):  # the parameter list is the first '(' at template depth 0
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    base, _, args = name.partition("<")
    base = base.split("::")[-1]
    if args:
        args = re.sub(r"\([^)]*\)", "", args.rstrip(">"))
        args = re.sub(r"\s+", "", args)
        return f"{base}<{args}>"
    return base


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_launches(path):
    """{launch id: {'name': kernel, metric: [(value, unit), ...]}} in launch order."""
    launches = OrderedDict()
    with open(path, newline="") as f:
        rows = [line for line in f if line.startswith('"')]  # ncu prints its own lines before the table
    for row in csv.DictReader(rows):
        launch = launches.setdefault(row["ID"], {"name": row["Kernel Name"]})
        value = number(row.get("Metric Value", ""))
        if value is not None:
            launch.setdefault(row["Metric Name"], []).append((value, row.get("Metric Unit", "")))
    return launches


def summarize(launches):
    """Per kernel: [launches, total µs, {heading: mean}]."""
    kernels = OrderedDict()
    for launch in launches.values():
        entry = kernels.setdefault(short_name(launch["name"]), {"n": 0, "us": 0.0, "sums": {}, "counts": {}})
        entry["n"] += 1
        if "Duration" in launch:
            value, unit = launch["Duration"][0]
            entry["us"] += value * TIME_UNITS.get(unit, 1.0)
        for (metric, want_unit), heading in COLUMNS.items():
            found = [(v, u) for v, u in launch.get(metric, []) if want_unit is None or u == want_unit]
            if found:
                value, unit = found[0]
                entry["sums"][heading] = entry["sums"].get(heading, 0.0) + value * UNIT_SCALE.get(unit, 1.0)
                entry["counts"][heading] = entry["counts"].get(heading, 0) + 1
    return kernels


def render(kernels):
    headings = list(COLUMNS.values())
    width = max([len(name) for name in kernels] + [6])
    lines = [f"{'kernel':<{width}} {'n':>4} {'total us':>10} {'mean us':>9} " +
             " ".join(f"{h:>8}" for h in headings)]
    for name, e in sorted(kernels.items(), key=lambda kv: -kv[1]["us"]):
        means = [e["sums"][h] / e["counts"][h] if h in e["counts"] else None for h in headings]
        cells = " ".join(f"{m:>8.1f}" if m is not None else f"{'-':>8}" for m in means)
        lines.append(f"{name:<{width}} {e['n']:>4} {e['us']:>10.1f} {e['us'] / e['n']:>9.2f} {cells}")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python3 tools/ncu_summary.py NCU_DETAILS.csv", file=sys.stderr)
        return 2
    launches = read_launches(argv[1])
    if not launches:
        print(f"{argv[1]}: no kernel launches in the CSV", file=sys.stderr)
        return 1
    print(render(summarize(launches)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
