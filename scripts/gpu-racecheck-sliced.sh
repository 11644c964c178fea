#!/usr/bin/env bash
# On the GPU machine (the 2xH200 kind), build/gpu-dist carried: racecheck over whole-model gpu
# tests split by kernel launch, so that no process needs longer than a device call. For each test
# filter, process j < S checks launches [j·N, (j+1)·N) and runs the others unchecked; process S
# checks every launch from S·N on (scripts/gpu-sanitize-parallel.sh's TOOL@SKIP+COUNT jobs). So
# the S + 1 processes check every launch of the test, whatever its launch count: when the last one
# finishes, coverage is complete (it checks nothing, at near-native speed, if the test has fewer
# than S·N launches); when it times out, the test has more launches than the slices were sized
# for. Prints one line per process; writes $OUT/racecheck-logs.tar.xz; exits non-zero if a
# process reported a hazard, a failed test or did not finish.
#
#   bash scripts/gpu-racecheck-sliced.sh [--timeout SECONDS] [--launches N] [--slices S] [--jobs J] FILTER...
#   e.g. bash scripts/gpu-racecheck-sliced.sh --launches 300 --slices 4 'ReferenceGoldens/GpuGolden.ChunkedPrefill*/v4_tiny_long'
# At most J processes at once (default 24: racecheck holds tens of GB of host memory per process on
# the engine tests, and the 2xH200 kind has 256 GiB); keep (S + 1)·filters <= J for one round.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
limit=540
per=200
slices=8
max_jobs=24
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) limit=$2; shift 2 ;;
    --launches) per=$2; shift 2 ;;
    --slices) slices=$2; shift 2 ;;
    --jobs) max_jobs=$2; shift 2 ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--timeout SECONDS] [--launches N] [--slices S] [--jobs J] FILTER..." >&2
  exit 2
fi
jobs=()
for filter in "$@"; do
  for ((j = 0; j < slices; j++)); do jobs+=("racecheck@$((j * per))+$per:$filter"); done
  jobs+=("racecheck@$((slices * per))+:$filter")
done
logs=$(mktemp -d)
OUT=$logs bash scripts/gpu-sanitize-parallel.sh --timeout "$limit" --jobs "$max_jobs" "${jobs[@]}"
status=$?
mkdir -p "$out"
tar -C "$logs" -cJf "$out/racecheck-logs.tar.xz" .
exit $status
