#!/usr/bin/env python3
"""Draws the report of `deepinfer bench steps --json F` as a PNG.

Left: decode step time against batch size, one line per context, with the memory floor
(weights touched + state read over the measured copy bandwidth) dashed. Right: the same scaled
to the 43-layer DeepSeek-V4-Flash (the report's layer mix).

    python3 tools/plot_bench.py report.json report.png      # needs matplotlib (PyPI)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    report = json.load(open(sys.argv[1]))
    points = [p for p in report.get("decode", []) if "skipped" not in p]
    contexts = sorted({p["context"] for p in points})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ctx in contexts:
        row = sorted((p for p in points if p["context"] == ctx), key=lambda p: p["batch"])
        batches = [p["batch"] for p in row]
        line, = axes[0].plot(batches, [1e3 * p["step_seconds"] for p in row], marker="o", label=f"context {ctx}")
        if all("memory_floor_seconds" in p for p in row):
            axes[0].plot(batches, [1e3 * p["memory_floor_seconds"] for p in row], linestyle="--", color=line.get_color())
        scaled = [p for p in row if p.get("extrapolated", {}).get("ok")]
        if scaled:
            b = [p["batch"] for p in scaled]
            line, = axes[1].plot(b, [1e3 * p["extrapolated"]["step_seconds"] for p in scaled], marker="o",
                                 label=f"context {ctx}")
            axes[1].plot(b, [1e3 * p["extrapolated"]["floor_seconds"] for p in scaled], linestyle="--",
                         color=line.get_color())
    model = report.get("model", {})
    axes[0].set_title(f"decode step, {model.get('layers', '?')}-layer model (dashed: memory floor)")
    axes[1].set_title("scaled to the layer mix " + ", ".join(f"{k}:{v}" for k, v in report.get("layer_mix", {}).items()))
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel("ms per step")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
