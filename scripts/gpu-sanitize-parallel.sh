#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer over gtest filters, one sanitizer process per job, at most
# J at once (racecheck is bound by the host CPU, one core per process, and holds tens of GB of host
# memory on the engine tests), spread round-robin over the given GPUs (default: all). The
# whole-model tests run at sanitizer sizes (DEEPINFER_SANITIZER_SIZES=1, tests/gpu/gpu_test_util.h):
# the same kernels and shapes, fewer steps, so that racecheck finishes them within a device call.
# A job is TOOL:FILTER (a gtest filter). compute-sanitizer's ways of checking part of a test's
# launches cannot split a test: with --launch-skip / --launch-count, and with --kernel-name /
# --kernel-name-exclude (2026-12-01), racecheck stops with "Internal Sanitizer Error: The
# Sanitizer failed to handle a hardware exception" on tests it passes whole (docs/cuda-backend.md);
# a long test is split into gtest instances instead.
# Logs go to $OUT/sanitize-<n>.log (n: the position of the job); prints one line per job and exits
# non-zero when a process reported an error or did not finish.
#
#   bash scripts/gpu-sanitize-parallel.sh [--timeout SECONDS] [--jobs J] [--gpus 0,1]
#        [--sanitizer-args 'ARGS'] JOB [JOB ...]
#   e.g. racecheck:'ReferenceGoldens/*long*' memcheck:'*'
# --sanitizer-args: more compute-sanitizer options for every job (word-split).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
limit=540
max_jobs=64
gpu_list=''
extra_args=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) limit=$2; shift 2 ;;
    --jobs) max_jobs=$2; shift 2 ;;
    --gpus) gpu_list=$2; shift 2 ;;
    --sanitizer-args) extra_args=$2; shift 2 ;;
    *) break ;;
  esac
done
source scripts/gpu-env.sh
use_test_data
export DEEPINFER_SANITIZER_SIZES=1
if [[ -z $gpu_list ]]; then
  gpu_list=$(seq -s, 0 $(($(nvidia-smi --list-gpus | wc -l) - 1)))
fi
IFS=, read -r -a gpus <<<"${gpu_list:-0}"
n=0
for job in "$@"; do
  while [[ $(jobs -rp | wc -l) -ge $max_jobs ]]; do wait -n; done
  tool=${job%%:*}
  filter=${job#*:}
  log="$out/sanitize-$n.log"
  echo "$job" >"$log.job"
  ( CUDA_VISIBLE_DEVICES=${gpus[n % ${#gpus[@]}]} /usr/bin/time -f "max RSS %M kB, %e s" timeout --kill-after=15 "$limit" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 $extra_args "$dist/deepinfer_gpu_tests" --gtest_filter="$filter" >"$log" 2>&1
    echo $? >"$log.rc" ) &
  n=$((n + 1))
done
wait
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
