#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: the device time of the first COUNT launches of the
# kernels matching KERNEL_REGEX (ncu's gpu__time_duration, clocks not locked) in one `deepinfer
# bench steps` run per variant, each variant its own environment. Launches counted from the run's
# start see the same inputs and routing in every variant, so a variant whose outputs are wrong
# (a probe) is still timed on the same work; later launches are not (its wrong outputs reach the
# next layers' routing). Prints one line per variant and writes $OUT/launch-times.txt.
#
#   bash scripts/gpu-launch-times.sh KERNEL_REGEX COUNT 'NAME;ENV ...' ... -- BENCH_STEPS_ARGS...
#   e.g. bash scripts/gpu-launch-times.sh 'ExpertsFp4TilePair|ExpertsFp4RegistersTma' 2 \
#          'pairs;DEEPINFER_FP4_TILE_PAIRS=1' 'registers;' -- --no-decode --prompts 8192 --tensor-cores ...
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 4 ]] || { echo "usage: $0 KERNEL_REGEX COUNT 'NAME;ENV' ... -- BENCH_STEPS_ARGS..." >&2; exit 2; }
regex=$1 count=$2
shift 2
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do variants+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
out=${OUT:-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
find_ncu || exit 2
for variant in "${variants[@]}"; do
  name=${variant%%;*} env_words=${variant#*;}
  log=$(mktemp)
  # shellcheck disable=SC2086  # ENV is a list of NAME=VALUE words
  env $env_words timeout 200 "$ncu" --clock-control none --target-processes all --kernel-name "regex:$regex" \
    --launch-skip 0 --launch-count "$count" --metrics gpu__time_duration.sum --csv \
    "${profiled_bench_steps[@]}" "$@" >"$log" 2>&1
  times=$(grep -E 'gpu__time_duration' "$log" | awk -F'","' '{gsub(/"/, "", $NF); printf "%s ", $NF}')
  kernels=$(grep -E 'gpu__time_duration' "$log" | awk -F'","' '{print $5}' | sed 's/(.*//' | sort | uniq -c |
    tr -s ' ' | tr '\n' ';')
  echo "$name: ${times:-no launches} (ns; ${kernels})" | tee -a "$out/launch-times.txt"
  [[ -n $times ]] || tail -5 "$log"
  rm -f "$log"
done
