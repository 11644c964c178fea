#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: an Nsight Systems trace of one decode point's
# replayed CUDA graph (every kernel node timed), summarized by tools/timeline_summary.py: the
# step's span against the time some kernel runs (the idle rest is launch and dependency latency),
# the idle gaps by size, and each kernel's time a step. Writes $OUT/timeline-NAME.txt and the
# trace as CSV ($OUT/timeline-NAME.csv.xz).
#
#   bash scripts/gpu-timeline.sh NAME BATCH [BENCH_STEPS_ARGS...]
#   e.g. bash scripts/gpu-timeline.sh b1 1 --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 \
#          --attn-out-bf16 --attn-in-bf16
# The point runs at an 8k context without the per-op profile, the ceilings or the prefill, so that
# the graph's replays are the trace's last kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: $0 NAME BATCH [BENCH_STEPS_ARGS...]" >&2; exit 2; }
name=$1 batch=$2
shift 2
out=${OUT:-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
[[ -n $nsys ]] || { echo "nsys not found" >&2; exit 2; }
work=$(mktemp -d)
iterations=10
timeout 240 "$nsys" profile --trace=cuda --cuda-graph-trace=node --sample=none --cpuctxsw=none \
  --force-overwrite=true -o "$work/trace" \
  "$dist/deepinfer" bench steps bench/configs/v4-flash-3layer --load-format dummy --no-ceilings --no-profile \
  --no-prefill --contexts 8192 --batches "$batch" --iterations "$iterations" --json "$work/steps.json" "$@" \
  >"$work/profile.log" 2>&1 || { echo "nsys profile failed:"; tail -20 "$work/profile.log"; exit 1; }
"$nsys" stats --report cuda_gpu_trace --format csv --output "$work/kernels" "$work/trace.nsys-rep" \
  >"$work/stats.log" 2>&1 || { echo "nsys stats failed:"; tail -20 "$work/stats.log"; exit 1; }
csv=$(ls "$work"/kernels*.csv | head -1)
per_step=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["decode"][0]["graph_kernels"])' \
  "$work/steps.json")
python3 tools/timeline_summary.py "$csv" --per-step "$per_step" --steps "$iterations" | tee "$out/timeline-$name.txt"
xz -c "$csv" >"$out/timeline-$name.csv.xz" 2>/dev/null || cp "$csv" "$out/timeline-$name.csv"
