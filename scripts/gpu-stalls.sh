#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: where one kernel's warps stall, per reason and per
# SASS instruction (Nsight Compute's warp-state sampling), for one `deepinfer bench steps` point
# on the 3-layer Flash-shaped model. Writes $OUT/stalls-NAME.txt (tools/ncu_source_stalls.py's
# summary) and $OUT/stalls-NAME.csv.xz (the full per-instruction table).
#
#   bash scripts/gpu-stalls.sh NAME KERNEL_REGEX SKIP -- BENCH_STEPS_ARGS...
#   e.g. bash scripts/gpu-stalls.sh rs64 ExpertsFp4Registers 7 -- --batches 64 --contexts 8192 --no-prefill \
#          --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16
#   bash scripts/gpu-stalls.sh wob TmaLinearWs 80 -- ceilings --prefill-tokens 8192
# (`-- ceilings ARGS`: profiles `deepinfer bench ceilings ARGS` instead, whose DeepInfer linears at
# the prefill shapes run 24 launches each, wq_a first: wo_b's are launches 72-95.)
# SKIP matching launches are passed over (warm-up), then one is profiled. The regex sees the
# function name without template arguments: ExpertsFp4RegistersKernel<16, 2> and <8, 3> both
# match, each ExpertsLinear call launching the 16-token form first (empty at batch 64), so an odd
# SKIP lands on the 8-token one there (2026-12-02).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 4 && $4 == -- ]] || { echo "usage: $0 NAME KERNEL_REGEX SKIP -- BENCH_STEPS_ARGS..." >&2; exit 2; }
name=$1 regex=$2 skip=$3
shift 4
out=${OUT:-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
find_ncu || exit 2
work=$(mktemp -d)
profiled=("${profiled_bench_steps[@]}")
if [[ ${1:-} == ceilings ]]; then
  profiled=("$dist/deepinfer" bench ceilings)
  shift
fi
timeout 240 "$ncu" --clock-control none --target-processes all --kernel-name "regex:$regex" \
  --launch-skip "$skip" --launch-count 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --import-source no -o "$work/rep" \
  "${profiled[@]}" "$@" >"$work/ncu.log" 2>&1
rc=$?
echo "ncu $name: exit $rc; $(grep -E '^==PROF==|Error' "$work/ncu.log" | tail -2)"
[[ -f $work/rep.ncu-rep ]] || { echo "no report; the log's end:"; tail -6 "$work/ncu.log"; }
"$ncu" --import "$work/rep.ncu-rep" --page raw --csv >"$work/raw.csv" 2>&1
"$ncu" --import "$work/rep.ncu-rep" --page source --csv --print-source sass >"$work/source.csv" 2>&1 ||
  "$ncu" --import "$work/rep.ncu-rep" --page source --csv >"$work/source.csv" 2>&1
python3 tools/ncu_source_stalls.py "$work/raw.csv" "$work/source.csv" 70 >"$out/stalls-$name.txt" 2>&1
"$ncu" --import "$work/rep.ncu-rep" --page details >"$out/details-$name.txt" 2>&1
head -40 "$out/stalls-$name.txt"
xz -c "$work/source.csv" >"$out/stalls-$name.csv.xz"
rm -rf "$work"
