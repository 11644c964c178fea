#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: Nsight Compute (ncu) over chosen kernels of one
# `deepinfer bench steps` point on the 3-layer Flash-shaped model, so that a kernel's time can be
# placed (memory or issue bound, occupancy, stalls) instead of guessed. Clocks are left alone
# (--clock-control none, as the device notes ask). Writes $OUT/ncu-NAME.csv (ncu's details page)
# and $OUT/ncu-NAME.log.
#
#   bash scripts/gpu-profile.sh                      # the default set below
#   bash scripts/gpu-profile.sh NAME KERNEL_REGEX LAUNCHES -- BENCH_STEPS_ARGS...
#   e.g. bash scripts/gpu-profile.sh b1 'Gemv|Experts' 30 -- --batches 1 --contexts 8192 --no-prefill
# Every profile runs eager steps only, without the per-op profile, two timed iterations.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
find_ncu || exit 2
# NCU_SOURCE=1 adds each profile's source page (below).
# NCU_SECTIONS (space-separated section names) replaces the set, e.g. NCU_SECTIONS=SpeedOfLight for a
# whole step's kernel list (fewer replay passes per launch). NCU_TIMEOUT: seconds for one profile
# (180 unless set; a whole batch-1 step, ~190 launches under two sections, did not finish in 125 s
# on an H100, 2026-12-07).
if [[ -n ${NCU_SECTIONS:-} ]]; then
  sections=()
  for s in $NCU_SECTIONS; do sections+=(--section "$s"); done
else
  sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
            --section WarpStateStats --section SchedulerStats)
fi

# One profile: NAME, kernel regex, number of matching launches, then bench steps arguments.
profile() {
  local name=$1 regex=$2 count=$3
  shift 3
  timeout "${NCU_TIMEOUT:-180}" "$ncu" --clock-control none --target-processes all --kernel-name "regex:$regex" \
    --launch-count "$count" "${sections[@]}" --csv --page details \
    "${profiled_bench_steps[@]}" "$@" \
    >"$out/ncu-$name.csv" 2>"$out/ncu-$name.log"
  local rc=$?
  echo "ncu $name: exit $rc, $(grep -c '^"' "$out/ncu-$name.csv") rows; $(tail -1 "$out/ncu-$name.log")"
  python3 tools/ncu_summary.py "$out/ncu-$name.csv" || true
  # NCU_SOURCE=1: a second pass over the same launches for the source page, SASS instruction by
  # instruction with its warp-stall samples ($OUT/ncu-NAME-source.csv.xz; tools/ncu_source_summary.py
  # prints each launch's instructions with the most samples, kept in $OUT/ncu-NAME-source-summary.txt).
  # Keep the launch count small: 12 launches made a 32 MB CSV (2026-12-07), past the 16 MiB a file
  # the device tool brings back, and the summary of the first launches fell out of the output's tail.
  if [[ ${NCU_SOURCE:-0} == 1 ]]; then
    timeout "${NCU_TIMEOUT:-180}" "$ncu" --clock-control none --target-processes all --kernel-name "regex:$regex" \
      --launch-count "$count" --section WarpStateStats --section SourceCounters --page source --print-source sass \
      --csv "${profiled_bench_steps[@]}" "$@" >"$out/ncu-$name-source.csv" 2>"$out/ncu-$name-source.log"
    echo "ncu $name (source page): exit $?; $(tail -1 "$out/ncu-$name-source.log")"
    python3 tools/ncu_source_summary.py "$out/ncu-$name-source.csv" --top 12 | tee "$out/ncu-$name-source-summary.txt" ||
      true
    if command -v xz >/dev/null; then
      xz -T0 -f "$out/ncu-$name-source.csv"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[1] + ".xz", "wb"))' \
        "$out/ncu-$name-source.csv" && rm "$out/ncu-$name-source.csv"
    fi
  fi
}

if [[ $# -ge 4 && $4 == -- ]]; then
  name=$1 regex=$2 count=$3
  shift 4
  profile "$name" "$regex" "$count" "$@"
  exit 0
fi
# Default: decode at batch 1 (f32 SIMT) and 64 (tensor cores), and the attention of an 8k prefill.
profile decode-b1 'Gemv|ExpertsGemv|HcMix|AttentionWithSink|MoeAlign|RmsNorm|Route' 40 \
  --batches 1 --contexts 8192 --no-prefill
profile decode-b64-tc 'Mma|Staged|AttentionWithSink|Indexer' 40 --batches 64 --contexts 8192 --no-prefill --tensor-cores
profile prefill-8k-attention 'AttentionWithSink' 6 --no-decode --prompts 8192
# The FP8-input GEMMs of an 8k prefill's first layer (warpgroup MMAs: 8 Linear, 3 experts).
profile prefill-8k-wgmma 'WgmmaLinearKernel|ExpertsWgmmaKernel' 11 --no-decode --prompts 8192 --tensor-cores \
  --fp8-activations
