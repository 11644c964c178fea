#!/usr/bin/env bash
# On the GPU machine (build/gpu-dist carried): runs each test that GTEST_FILTER selects in its own
# process, so that a kernel fault (a sticky CUDA error) fails that test alone; with --sanitize,
# the failing ones again under compute-sanitizer memcheck (which names the faulting kernel, PC and
# source line). Writes each-*.log and a summary to $OUT (default ./gpu-out).
#
#   bash scripts/gpu-each.sh [--sanitize] GTEST_FILTER
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
sanitize=0
if [[ ${1:-} == --sanitize ]]; then sanitize=1; shift; fi
filter=${1:?a gtest filter}
source scripts/gpu-env.sh
use_test_data
tests=$($dist/deepinfer_gpu_tests --gtest_list_tests --gtest_filter="$filter" |
        awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
for t in $tests; do
  log="$out/each-${t//[^A-Za-z0-9_.]/_}.log"
  if $dist/deepinfer_gpu_tests --gtest_filter="$t" >"$log" 2>&1; then
    echo "ok     $t"
  else
    echo "FAILED $t"
    grep -E "Failure|exception|error" "$log" | head -3 | sed 's/^/       /'
  fi
done | tee "$out/each-summary.txt"
if [[ $sanitize -eq 1 ]]; then
  for t in $(awk '/^FAILED/ {print $2}' "$out/each-summary.txt"); do
    log="$out/memcheck-${t//[^A-Za-z0-9_.]/_}.log"
    timeout 200 compute-sanitizer --tool memcheck --show-backtrace device \
      $dist/deepinfer_gpu_tests --gtest_filter="$t" >"$log" 2>&1
    echo "memcheck $t:"; grep -E -A6 "^========= (Illegal|Invalid|Misaligned|Out|Error|Program hit)" "$log" | head -24
  done
fi
grep -c "^FAILED" "$out/each-summary.txt" | xargs echo "failed:"
