#!/usr/bin/env python3
"""Summarizes an Nsight Systems kernel trace of replayed decode graphs (scripts/gpu-timeline.sh).

Input: `nsys stats --report cuda_gpu_trace --format csv` output (one row per kernel, start and
duration in ns), and the graph's kernels per step (bench steps' `graph_kernels`). The last
`steps` x `per_step` kernel rows are taken as the replayed steps, in order. Prints, averaged over
those steps:
  - the step's span (first kernel's start to last kernel's end), the time some kernel runs (the
    union of the kernel intervals) and the idle rest: what launch and dependency latency cost;
  - per kernel name: launches a step, microseconds a step and per launch, share of the busy time;
  - the gaps between a kernel's end and the next kernel's start, by size.

  python3 tools/timeline_summary.py TRACE.csv --per-step 192 --steps 10 [--top 30]
"""
import argparse
import csv
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_summary import short_name  # noqa: E402  (the kernel names as the ncu summaries print them)


def read_trace(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    # nsys stats prints a note before its header on some versions: start at the header row.
    start = next((i for i, line in enumerate(lines) if "Start" in line and "Name" in line), None)
    if start is None:
        sys.exit(f"{path}: no header with Start and Name columns")
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        sys.exit(f"{path}: no kernel rows")
    keys = rows[0].keys()
    start_key = next(k for k in keys if k.startswith("Start"))
    dur_key = next(k for k in keys if k.startswith("Duration"))
    kernels = []
    for r in rows:
        name = r["Name"]
        if name.startswith("[CUDA memcpy") or name.startswith("[CUDA memset"):
            continue
        kernels.append((int(float(r[start_key])), int(float(r[dur_key])), short_name(name)))
    kernels.sort()
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--per-step", type=int, required=True, help="the graph's kernel nodes (graph_kernels)")
    ap.add_argument("--steps", type=int, default=10, help="replayed steps at the trace's end to average")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    kernels = read_trace(a.trace)
    need = a.per_step * a.steps
    if len(kernels) < need:
        sys.exit(f"{len(kernels)} kernels in the trace, fewer than {a.steps} steps of {a.per_step}")
    kernels = kernels[-need:]
    spans, busy_total = [], []
    per_name = defaultdict(lambda: [0, 0])  # launches, ns over all steps
    gaps = defaultdict(lambda: [0, 0])      # bucket -> count, ns
    buckets = [(1000, "< 1 us"), (2000, "1-2 us"), (4000, "2-4 us"), (8000, "4-8 us"), (10**18, ">= 8 us")]
    for s in range(a.steps):
        step = kernels[s * a.per_step:(s + 1) * a.per_step]
        first = step[0][0]
        last = max(t + d for t, d, _ in step)
        spans.append(last - first)
        busy, run_end = 0, first
        for t, d, name in step:
            per_name[name][0] += 1
            per_name[name][1] += d
            if t > run_end:  # idle: no kernel of the step runs between run_end and t
                gap = t - run_end
                for limit, label in buckets:
                    if gap < limit:
                        gaps[label][0] += 1
                        gaps[label][1] += gap
                        break
            busy += max(0, t + d - max(t, run_end))
            run_end = max(run_end, t + d)
        busy_total.append(busy)
    n = a.steps
    span = sum(spans) / n / 1e3
    busy = sum(busy_total) / n / 1e3
    print(f"{n} steps of {a.per_step} kernels: span {span:.1f} us, some kernel running {busy:.1f} us "
          f"({100 * busy / span:.1f}%), idle {span - busy:.1f} us")
    print("idle gaps a step, by size:")
    for _, label in buckets:
        count, ns = gaps[label]
        print(f"  {label:>8}: {count / n:6.1f} gaps, {ns / n / 1e3:8.1f} us")
    total_ns = sum(v[1] for v in per_name.values())
    print(f"\n{'kernel':<70} {'a step':>7} {'us/step':>9} {'us each':>8} {'share':>6}")
    for name, (count, ns) in sorted(per_name.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"{name[:70]:<70} {count / n:7.1f} {ns / n / 1e3:9.1f} {ns / count / 1e3:8.2f} "
              f"{100 * ns / total_ns:5.1f}%")
    print(f"kernel time a step (overlapping kernels counted each): {total_ns / n / 1e3:.1f} us")


if __name__ == "__main__":
    main()
