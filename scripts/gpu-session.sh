#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: a version's whole check in one device call. Runs
#   1. scripts/gpu-run.sh: the gpu label, then the GEMV kernel tests with DEEPINFER_GEMV=register;
#   2. scripts/gpu-bench.sh --steps: bench steps with f32 SIMT (auto and register GEMVs), tensor
#      cores, FP8 activations, side by side, and HF transformers;
#   3. scripts/gpu-profile.sh over the batch-1 GEMVs (ncu), unless --no-profile;
# and with --sanitize SECONDS on a machine of two or more GPUs, at the same time on the last GPU:
#   4. scripts/gpu-sanitize-label.sh (racecheck and memcheck over the label, SECONDS per process),
#      while 1-3 run on GPU 0 alone (so the timings are not shared with the sanitizers' kernels).
# Prints their summaries, and leaves $OUT/session.tar.xz (every log, JSON report and CSV; the
# device tool returns at most 8 files), $OUT/steps-compare.txt and, with 4,
# $OUT/sanitize-logs.tar.xz. About 6 minutes for 1-3. Exits non-zero when a step failed.
#
#   bash scripts/gpu-session.sh [--no-profile] [--sanitize SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
profile=1
sanitize=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-profile) profile=0; shift ;;
    --sanitize) sanitize=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
final=${OUT:-gpu-out}
mkdir -p "$final"
work=$(mktemp -d)
status=0
# Unpack the binaries and the goldens once, before anything runs in parallel.
source scripts/gpu-env.sh
use_test_data
gpus=$(nvidia-smi --list-gpus | wc -l)
sanitizer_pid=
if [[ $sanitize -gt 0 ]]; then
  if [[ $gpus -lt 2 ]]; then
    echo "--sanitize needs two GPUs (this machine has $gpus)" >&2
    exit 2
  fi
  OUT=$final bash scripts/gpu-sanitize-label.sh --timeout "$sanitize" --gpus $((gpus - 1)) >"$work/sanitize.txt" 2>&1 &
  sanitizer_pid=$!
  export CUDA_VISIBLE_DEVICES=0
fi
OUT=$work timeout 220 bash scripts/gpu-run.sh 2>&1 | grep -vE "^\[v4-tiny" | tail -24
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
OUT=$work timeout 300 bash scripts/gpu-bench.sh --steps 2>&1 | sed -n '/side by side/,/scaled to 43/p'
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
if [[ $profile -eq 1 ]]; then
  OUT=$work timeout 60 bash scripts/gpu-profile.sh b1 'Gemv' 24 -- --batches 1 --contexts 8192 --no-prefill 2>&1 |
    cut -c1-32,88-
fi
if [[ -n $sanitizer_pid ]]; then
  wait "$sanitizer_pid" || status=1
  echo "== sanitizers (scripts/gpu-sanitize-label.sh, last GPU)"
  cat "$work/sanitize.txt"
fi
tar -C "$work" -cJf "$final/session.tar.xz" .
cp "$work/steps-compare.txt" "$final/" 2>/dev/null || true
exit $status
