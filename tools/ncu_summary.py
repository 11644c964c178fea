"""Summarizes an Nsight Compute CSV (`ncu --csv --page details`, scripts/gpu-profile.sh) per kernel.

    python3 tools/ncu_summary.py ncu-decode-b1.csv
    python3 tools/ncu_summary.py ncu-d1ref.csv --floor-tbs 4.26


One line per kernel (template arguments dropped, launches of one kernel together): launches,
total and mean duration, and the means over its launches of memory and SM throughput (% of
peak), DRAM throughput, memory throughput in GB/s, achieved occupancy, registers per thread and warp cycles per issued
instruction, when the CSV holds them. With --floor-tbs R (TB/s, e.g. the copy rate `bench steps`
measured beside it), also each kernel's floor, its launches' memory bytes (Memory Throughput in
byte/s times Duration) at R, and its excess, the time over that floor, ordered by total excess:
the kernels whose time is not their bytes'. Standard library only.
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


def launch_bytes(launch):
    """The launch's memory bytes (Memory Throughput in byte/s times Duration), or None."""
    rate = [v for v, u in launch.get("Memory Throughput", []) if u == "byte/s"]
    if not rate or "Duration" not in launch:
        return None
    value, unit = launch["Duration"][0]
    return rate[0] * value * TIME_UNITS.get(unit, 1.0) * 1e-6


def summarize(launches, floor_bytes_per_us=None):
    """Per kernel: {'n', 'us', 'sums', 'counts'} and, with floor_bytes_per_us, 'floor_us' (its
    launches' bytes at that rate; launches without a byte count add their whole time as excess)."""
    kernels = OrderedDict()
    for launch in launches.values():
        entry = kernels.setdefault(short_name(launch["name"]),
                                   {"n": 0, "us": 0.0, "floor_us": 0.0, "sums": {}, "counts": {}})
        entry["n"] += 1
        if "Duration" in launch:
            value, unit = launch["Duration"][0]
            entry["us"] += value * TIME_UNITS.get(unit, 1.0)
        if floor_bytes_per_us:
            nbytes = launch_bytes(launch)
            if nbytes is not None:
                entry["floor_us"] += nbytes / floor_bytes_per_us
        for (metric, want_unit), heading in COLUMNS.items():
            found = [(v, u) for v, u in launch.get(metric, []) if want_unit is None or u == want_unit]
            if found:
                value, unit = found[0]
                entry["sums"][heading] = entry["sums"].get(heading, 0.0) + value * UNIT_SCALE.get(unit, 1.0)
                entry["counts"][heading] = entry["counts"].get(heading, 0) + 1
    return kernels


def render(kernels, with_floor=False):
    headings = list(COLUMNS.values())
    width = max([len(name) for name in kernels] + [6])
    floor_head = f" {'floor us':>9} {'excess us':>10}" if with_floor else ""
    lines = [f"{'kernel':<{width}} {'n':>4} {'total us':>10} {'mean us':>9}{floor_head} " +
             " ".join(f"{h:>8}" for h in headings)]
    order = (lambda kv: -(kv[1]["us"] - kv[1]["floor_us"])) if with_floor else (lambda kv: -kv[1]["us"])
    total_us = total_floor = 0.0
    for name, e in sorted(kernels.items(), key=order):
        means = [e["sums"][h] / e["counts"][h] if h in e["counts"] else None for h in headings]
        cells = " ".join(f"{m:>8.1f}" if m is not None else f"{'-':>8}" for m in means)
        floor = f" {e['floor_us']:>9.1f} {e['us'] - e['floor_us']:>10.1f}" if with_floor else ""
        lines.append(f"{name:<{width}} {e['n']:>4} {e['us']:>10.1f} {e['us'] / e['n']:>9.2f}{floor} {cells}")
        total_us += e["us"]
        total_floor += e["floor_us"]
    if with_floor:
        lines.append(f"{'all':<{width}} {sum(e['n'] for e in kernels.values()):>4} {total_us:>10.1f} {'':>9}"
                     f" {total_floor:>9.1f} {total_us - total_floor:>10.1f}")
    return "\n".join(lines)


def main(argv):
    args = argv[1:]
    floor_tbs = None
    if len(args) == 3 and args[1] == "--floor-tbs":
        floor_tbs = number(args[2])
        if floor_tbs is None or floor_tbs <= 0:
            print(f"--floor-tbs takes a positive rate in TB/s, got '{args[2]}'", file=sys.stderr)
            return 2
        args = args[:1]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python3 tools/ncu_summary.py NCU_DETAILS.csv [--floor-tbs TB_PER_S]", file=sys.stderr)
        return 2
    launches = read_launches(args[0])
    if not launches:
        print(f"{args[0]}: no kernel launches in the CSV", file=sys.stderr)
        return 1
    floor_bytes_per_us = floor_tbs * 1e6 if floor_tbs else None  # 1 TB/s = 1e6 bytes a µs
    print(render(summarize(launches, floor_bytes_per_us), with_floor=floor_tbs is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
