#!/usr/bin/env bash
# On the GPU machine (1xH200), build/gpu-dist carried: a version's whole check in one device call,
# about 6 minutes. Runs
#   1. scripts/gpu-run.sh: the gpu label, then the GEMV kernel tests with DEEPINFER_GEMV=register;
#   2. scripts/gpu-bench.sh --steps: bench steps with f32 SIMT (auto and register GEMVs), tensor
#      cores, FP8 activations, side by side, and HF transformers;
#   3. scripts/gpu-profile.sh over the batch-1 GEMVs (ncu).
# prints their summaries, and leaves $OUT/session.tar.xz (every log, JSON report and CSV; the
# device tool returns at most 8 files) and $OUT/steps-compare.txt. Exits non-zero when a step
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:-gpu-out}
mkdir -p "$final"
work=$(mktemp -d)
status=0
OUT=$work timeout 220 bash scripts/gpu-run.sh 2>&1 | grep -vE "^\[v4-tiny" | tail -24
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
OUT=$work timeout 300 bash scripts/gpu-bench.sh --steps 2>&1 | sed -n '/side by side/,/scaled to 43/p'
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
OUT=$work timeout 60 bash scripts/gpu-profile.sh b1 'Gemv' 24 -- --batches 1 --contexts 8192 --no-prefill 2>&1 |
  cut -c1-32,88-
tar -C "$work" -cJf "$final/session.tar.xz" .
cp "$work/steps-compare.txt" "$final/" 2>/dev/null || true
exit $status
