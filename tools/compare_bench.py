#!/usr/bin/env python3
"""Side by side: the reports of several `deepinfer bench steps --json` runs of one session.

For each decode point (context, batch) and each prefill length, prints every report's step time,
its ratio to the memory floor, and its speed-up over the first report; then the 43-layer
scaling; then, where the reports hold the per-op profile, the ops' times (ms) side by side at the
longest prefill and at every decode batch at 8k context (else the longest). The first report is the
baseline (e.g. the f32 SIMT kernels), the others the variants (e.g. --tensor-cores,
--tensor-cores --fp8-activations).

    python3 tools/compare_bench.py NAME=steps.json NAME=steps-tc.json ...
"""
import json
import sys


def load(arg):
    """(name, report); a report that is missing or unreadable (a run that failed or was killed)
    becomes an empty column, so the others are still compared."""
    name, _, path = arg.partition("=")
    if not path:
        name, path = arg, arg
    try:
        with open(path) as f:
            return name, json.load(f)
    except (OSError, ValueError) as e:
        print(f"{name}: no report ({e}); its column stays empty", file=sys.stderr)
        return name, {}


def cells(points, fmt, width):
    """One table row's cells: fmt(point) per report, a dash where the report lacks the point."""
    return " ".join(fmt(p) if p is not None else f"{'-':>{width}}" for p in points)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    reports = [load(a) for a in sys.argv[1:]]
    names = [n for n, _ in reports]
    decode = [{(p["context"], p["batch"]): p for p in r.get("decode", []) if "skipped" not in p} for _, r in reports]
    keys = sorted(set().union(*[d.keys() for d in decode]))
    print("decode: ms per step (x floor) [speed-up over " + names[0] + "]")
    print(f"{'context':>8} {'batch':>6} " + " ".join(f"{n:>26}" for n in names))
    for key in keys:
        base = decode[0].get(key)

        def step(p):
            ms = 1e3 * p["step_seconds"]
            floor = p.get("step_over_floor")
            speed = base["step_seconds"] / p["step_seconds"] if base else float("nan")
            return f"{ms:9.3f} ({floor:5.2f}x) [{speed:5.2f}x]" if floor else f"{ms:9.3f} [{speed:5.2f}x]"

        print(f"{key[0]:>8} {key[1]:>6} " + cells([d.get(key) for d in decode], step, 26))
    if any(p.get("graph_kernels") is not None for d in decode for p in d.values()):
        print("\ndecode: the CUDA graph's kernel launches per step (/ the most on one path, where branches overlap)")

        def launches(p):
            text = str(p["graph_kernels"])
            critical = p.get("graph_critical_kernels")
            if critical is not None and critical < p["graph_kernels"]:
                text += f"/{critical}"
            return f"{text:>26}"

        for key in keys:
            print(f"{key[0]:>8} {key[1]:>6} " +
                  cells([d.get(key) if d.get(key, {}).get("graph_kernels") is not None else None for d in decode],
                        launches, 26))
    print("\ndecode scaled to 43 layers: ms per step / output tok/s")
    for key in keys:
        scaled = [d.get(key, {}).get("extrapolated", {}) for d in decode]
        print(f"{key[0]:>8} {key[1]:>6} " +
              cells([e if e.get("ok") else None for e in scaled],
                    lambda e: f"{1e3 * e['step_seconds']:9.2f} ms {e['tokens_per_s']:8.0f} tok/s", 26))
    print("\nprefill: ms, tok/s, linear TFLOP/s (% of the FP8 GEMM rate)")
    prefill = [{p["tokens_per_seq"]: p for p in r.get("prefill", []) if "skipped" not in p} for _, r in reports]

    def run(q):
        frac = q.get("linear_fraction_of_fp8_gemm")
        return (f"{1e3 * q['step_seconds']:9.1f} ms {q['tokens_per_s']:7.0f} tok/s "
                f"{q.get('linear_flops_per_s', 0) / 1e12:6.1f} TF" + (f" ({100 * frac:4.1f}%)" if frac else ""))

    lengths = sorted(set().union(*[p.keys() for p in prefill]))
    for length in lengths:
        print(f"{length:>8} " + cells([p.get(length) for p in prefill], run, 36))

    if lengths:
        print_ops(f"prefill {lengths[-1]}", names, [p.get(lengths[-1]) for p in prefill])
    contexts = sorted({k[0] for k in keys})
    if contexts:
        context = 8192 if 8192 in contexts else contexts[-1]  # issue 8's context where the run has it
        for batch in sorted({k[1] for k in keys if k[0] == context}):
            print_ops(f"decode batch {batch} at {context}", names, [d.get((context, batch)) for d in decode])


def print_ops(title, names, points, top=16):
    """The per-op profile (ms) of one point in every report that has it, the ops most expensive in
    any report first."""
    ops = [(p or {}).get("profile_seconds", {}).get("by_op", {}) for p in points]
    if not any(ops):
        return
    order = sorted(set().union(*[o.keys() for o in ops]), key=lambda op: -max(o.get(op, 0.0) for o in ops))
    print(f"\nper op, {title}: ms (the bench's profile mode: eager, one event pair per op)")
    print(f"{'op':>22} " + " ".join(f"{n:>16}" for n in names))
    for op in order[:top]:
        print(f"{op:>22} " + " ".join(f"{1e3 * o[op]:16.3f}" if op in o else f"{'-':>16}" for o in ops))

if __name__ == "__main__":
    main()
