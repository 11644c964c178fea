#!/usr/bin/env bash
# On the GPU machine (the 2xH200 kind), build/gpu-dist carried: racecheck over whole-model gpu
# tests split by kernel launch, so that no process needs longer than a device call. For each test
# filter, process j < S checks launches [j·N, (j+1)·N) (compute-sanitizer --launch-skip /
# --launch-count) and runs the others unchecked; process S checks every launch from S·N on. So
# the S + 1 processes check every launch of the test, whatever its launch count: when the last one
# finishes, coverage is complete (it checks nothing, at near-native speed, if the test has fewer
# than S·N launches); when it times out, the test has more launches than the slices were sized
# for. The tests run at sanitizer sizes (DEEPINFER_SANITIZER_SIZES=1). Prints one line per
# process; writes $OUT/racecheck-logs.tar.xz; exits non-zero if a process reported a hazard, a
# failed test or did not finish.
#
#   bash scripts/gpu-racecheck-sliced.sh [--timeout SECONDS] [--launches N] [--slices S] [--jobs J] FILTER...
# At most J processes at once (default 24: racecheck holds tens of GB of host memory per process on
# the engine tests, and the 2xH200 kind has 256 GiB).
#   e.g. bash scripts/gpu-racecheck-sliced.sh --launches 150 --slices 8 'ReferenceGoldens/GpuGolden.ChunkedPrefill*/v4_tiny_long'
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
limit=540
per=200
slices=8
jobs=24
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) limit=$2; shift 2 ;;
    --launches) per=$2; shift 2 ;;
    --slices) slices=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--timeout SECONDS] [--launches N] [--slices S] [--jobs J] FILTER..." >&2
  exit 2
fi
source scripts/gpu-env.sh
use_test_data
export DEEPINFER_SANITIZER_SIZES=1
logs=$(mktemp -d)
gpus=$(nvidia-smi --list-gpus | wc -l)
n=0
for filter in "$@"; do
  for ((j = 0; j <= slices; j++)); do
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n; done
    log="$logs/racecheck-$n.log"
    count=(--launch-count "$per")
    range="[$((j * per)), $(((j + 1) * per)))"
    if [[ $j -eq $slices ]]; then count=(); range="[$((j * per)), end)"; fi
    echo "$filter launches $range" >"$log.job"
    ( CUDA_VISIBLE_DEVICES=$((n % (gpus > 0 ? gpus : 1))) timeout "$limit" compute-sanitizer --tool racecheck \
        --error-exitcode 9 --launch-skip $((j * per)) "${count[@]}" \
        "$dist/deepinfer_gpu_tests" --gtest_filter="$filter" >"$log" 2>&1
      echo $? >"$log.rc" ) &
    n=$((n + 1))
  done
done
wait
status=0
for ((i = 0; i < n; i++)); do
  log="$logs/racecheck-$i.log"
  rc=$(cat "$log.rc")
  summary=$(grep -E "RACECHECK SUMMARY" "$log" | tail -1)
  echo "[$rc] $(cat "$log.job"): $(grep -c '^\[       OK \]' "$log") ok, $(grep -c '^\[  FAILED  \]' "$log") failed; ${summary:-no summary}"
  [[ $rc -eq 0 ]] || status=1
done
mkdir -p "$out"
rm -f "$logs"/*.rc "$logs"/*.job
tar -C "$logs" -cJf "$out/racecheck-logs.tar.xz" .
exit $status
