"""Where a replayed step's time goes along its longest kernel path.

    python3 tools/kernel_trace.py TRACE GRAPH [--label TEXT] [--top N]

TRACE: `DEEPINFER_KERNEL_TRACE=FILE deepinfer bench steps ...` (each replay's kernels from CUPTI:
start and end ns, stream, grid, block, name; copies and memsets named in brackets, which the
report counts but never matches to the path or uses for the device's idle gaps).
GRAPH: `DEEPINFER_GRAPH_KERNELS=FILE` from the same
run (each captured graph's longest kernel path: place, grid, name). For each trace whose label
contains TEXT (default: every trace), the path's kernels are matched to the trace's records in
order (same function and grid, the earliest unmatched one starting after the previous match), and
each gets its share of the path: the time from the previous path kernel's end to its own end
(under programmatic launch a kernel starts before its predecessor ends and waits). Prints the
path kernel by kernel, then its time by function, largest first, beside the replay's span.
Standard library only.
"""

import argparse
import re
import sys
from collections import defaultdict


def short_name(name):
    """'void ns::(anonymous namespace)::Foo<1, 2>(float const*, ...)' -> 'Foo<1, 2>'."""
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"^void\s+", "", name)
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    head, sep, args = name.partition("<")
    return head.split("::")[-1] + (sep + args if sep else "")


def read_traces(path):
    """[(label, [dict(start, end, stream, grid, block, name)])]."""
    traces, current = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("trace "):
                current = (line[6:], [])
            elif line == "end":
                if current is not None:
                    traces.append(current)
                current = None
            elif current is not None and line:
                start, end, stream, grid, block, name = line.split("\t", 5)
                current[1].append(dict(start=int(start), end=int(end), stream=int(stream), grid=grid, block=block,
                                       name=short_name(name)))
    return traces


def read_paths(path):
    """Every graph's path: [[(grid 'x,y,z', short name)]]."""
    paths, current = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("graph "):
                current = []
                paths.append(current)
            elif line.startswith("path ") and current is not None:
                _, shape, name = line.split("\t", 2)
                grid = shape.split()[1]  # "grid x,y,z block ..."
                current.append((grid, short_name(name)))
    return paths


def match(path, records):
    """The records of the path's kernels in order, or None where one has no match."""
    order = sorted(range(len(records)), key=lambda i: records[i]["start"])
    used, matched, after = set(), [], -1
    for grid, name in path:
        found = None
        for i in order:
            r = records[i]
            if i not in used and r["start"] > after and r["grid"] == grid and r["name"] == name:
                found = i
                break
        if found is None:
            return None
        used.add(found)
        matched.append(records[found])
        after = records[found]["start"]
    return matched


def idle_gaps(records, least_ns=2000):
    """[(from ns, to ns)]: the stretches of at least least_ns where none of the records ran."""
    gaps, busy_until = [], None
    for r in sorted(records, key=lambda r: r["start"]):
        if busy_until is not None and r["start"] - busy_until >= least_ns:
            gaps.append((busy_until, r["start"]))
        busy_until = r["end"] if busy_until is None else max(busy_until, r["end"])
    return gaps


def report(label, all_records, paths, top):
    copies = [r for r in all_records if r["name"].startswith("[")]
    records = [r for r in all_records if not r["name"].startswith("[")]
    span = max(r["end"] for r in records) - min(r["start"] for r in records)
    print(f"== {label}: {len(records)} kernels, {len(copies)} copies or memsets, first kernel start to last kernel "
          f"end {span / 1e3:.1f} us")
    if copies:
        busy = sum(r["end"] - r["start"] for r in copies)
        print(f"  copies and memsets: {len(copies)}, {busy / 1e3:.1f} us between their starts and ends")
    # Over kernels only: CUPTI stamps a graph's copy nodes on another clock than its kernels (an H100,
    # 2026-12-07: the one upload copy 5 ms before the first kernel of a 1.2 ms replay).
    gaps = idle_gaps(records)
    if gaps:
        origin = min(r["start"] for r in records)
        listed = ", ".join(f"{(a - origin) / 1e3:.1f}-{(b - origin) / 1e3:.1f}" for a, b in gaps[:8])
        print(f"  device idle (nothing running) for {sum(b - a for a, b in gaps) / 1e3:.1f} us in {len(gaps)} gaps "
              f"of 2 us or more: {listed} us")
    chosen = None
    for path in paths:
        if len(path) and sum(1 for _ in path) <= len(records):
            m = match(path, records)
            if m is not None and (chosen is None or len(path) > len(chosen[0])):
                chosen = (path, m)
    if chosen is None:
        print("   no captured path matches this trace's kernels")
        return
    path, m = chosen
    by_function = defaultdict(lambda: [0, 0.0, 0.0])
    previous_end = m[0]["start"]
    print("  place    share us   run us  name  grid")
    for place, r in enumerate(m):
        share = (r["end"] - previous_end) / 1e3
        run = (r["end"] - max(r["start"], previous_end)) / 1e3
        previous_end = r["end"]
        f = by_function[r["name"]]
        f[0] += 1
        f[1] += share
        f[2] += run
        print(f"  {place:5d} {share:10.2f} {run:8.2f}  {r['name']}  {r['grid']}")
    total = (m[-1]["end"] - m[0]["start"]) / 1e3
    print(f"  the path: {len(m)} kernels, {total:.1f} us of the replay's {span / 1e3:.1f}")
    print("  by function (launches, share us, mean share us):")
    for name, (n, share, _) in sorted(by_function.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"    {n:4d} {share:9.1f} {share / n:8.2f}  {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("graph")
    ap.add_argument("--label", default="")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    paths = read_paths(args.graph)
    traces = [t for t in read_traces(args.trace) if args.label in t[0]]
    if not traces:
        sys.exit(f"no trace in {args.trace} has '{args.label}' in its label")
    for label, records in traces:
        report(label, records, paths, args.top)


if __name__ == "__main__":
    main()
