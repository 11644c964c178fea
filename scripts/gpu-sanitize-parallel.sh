#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer over gtest filters, one sanitizer process per filter, all
# at once (racecheck is bound by the host CPU, one core per process; the H200 machine has 16),
# spread round-robin over the machine's GPUs. The whole-model tests run at sanitizer sizes
# (DEEPINFER_SANITIZER_SIZES=1, tests/gpu/gpu_test_util.h): the same kernels and shapes, fewer
# steps, so that racecheck finishes them within a device call.
# Logs go to $OUT/sanitize-<n>.log (n: the position of the filter); prints one line per filter and exits non-zero when a
# process reported an error or did not finish.
#
#   bash scripts/gpu-sanitize-parallel.sh [--timeout SECONDS] TOOL:FILTER [TOOL:FILTER ...]
#   e.g. racecheck:'ReferenceGoldens/*long*' memcheck:'*'
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
limit=540
if [[ ${1:-} == --timeout ]]; then limit=$2; shift 2; fi
source scripts/gpu-env.sh
use_test_data
export DEEPINFER_SANITIZER_SIZES=1
gpus=$(nvidia-smi --list-gpus | wc -l)
n=0
pids=()
for job in "$@"; do
  tool=${job%%:*}
  filter=${job#*:}
  log="$out/sanitize-$n.log"
  echo "$tool $filter" >"$log.job"
  # Processes go round-robin over the GPUs (the 2xH200 kind has two).
  ( CUDA_VISIBLE_DEVICES=$((n % (gpus > 0 ? gpus : 1))) /usr/bin/time -f "max RSS %M kB, %e s" timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$dist/deepinfer_gpu_tests" --gtest_filter="$filter" >"$log" 2>&1
    echo $? >"$log.rc" ) &
  pids+=($!)
  n=$((n + 1))
done
wait "${pids[@]}"
status=0
for ((i = 0; i < n; i++)); do
  log="$out/sanitize-$i.log"
  rc=$(cat "$log.rc")
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  echo "[$rc] $(cat "$log.job"): $(grep -c '^\[       OK \]' "$log") ok, $(grep -c '^\[  FAILED  \]' "$log") failed; ${summary:-no summary}; $(tail -1 "$log")"
  [[ $rc -eq 0 ]] || status=1
done
rm -f "$out"/*.rc "$out"/*.job
exit $status
