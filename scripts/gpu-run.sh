#!/usr/bin/env bash
# On the GPU machine, from the repository root with build/gpu-dist carried (scripts/gpu-build.sh):
# runs the `gpu` tests (and, with --sanitize, compute-sanitizer memcheck and racecheck over them),
# writing logs and JSON under $OUT (default: ./gpu-out).
#
#   bash scripts/gpu-run.sh [--sanitize] [--filter GTEST_FILTER] [--sanitize-filter GTEST_FILTER]
#                           [--racecheck-filter GTEST_FILTER] [--sanitize-timeout SECONDS] [--no-reruns]
# --no-reruns skips the reruns under the switches (each repeats the filter's tests: with a filter
# that holds the Flash-shaped model checks they took 360 of a call's 540 s on 2026-12-02).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
sanitize=0
filter='*'
sanitize_filter=''
racecheck_filter=''
sanitize_timeout=240
reruns=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --sanitize) sanitize=1 ;;
    --filter) filter=$2; shift ;;
    --sanitize-filter) sanitize_filter=$2; shift ;;
    --racecheck-filter) racecheck_filter=$2; shift ;;
    --sanitize-timeout) sanitize_timeout=$2; shift ;;
    --no-reruns) reruns=0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
source scripts/gpu-env.sh
{
  echo "commit: $(cat $dist/COMMIT 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "missing libraries:"; ldd $dist/deepinfer_gpu_tests | grep "not found" || echo "  none"
  echo "cuBLASLt (dlopen'ed by the ceilings): ${DEEPINFER_CUBLASLT:-not found}"
} | tee "$out/machine.txt"
use_test_data
status=0
$dist/deepinfer_gpu_tests --gtest_filter="$filter" --gtest_output="json:$out/gpu-tests.json" \
  2>&1 | tee "$out/gpu-tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error|max \|diff\|" | head -200
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
# The slowest tests (what a sanitizer run will spend its time on).
python3 - "$out/gpu-tests.json" <<'PY' || true
import json, sys
tests = [(float(t.get("time", "0s").rstrip("s")), s["name"] + "." + t["name"])
         for s in json.load(open(sys.argv[1]))["testsuites"] for t in s["testsuite"]]
print("slowest:", ", ".join(f"{n} {t:.1f}s" for t, n in sorted(tests, reverse=True)[:8]))
PY
grep -E "^GPU( runner|, 200| \(tensor)|^mma vs simt|^Flash-shaped 2 layers" "$out/gpu-tests.log" || true
if [[ $reruns -eq 1 ]]; then
  # Linear's GEMV tests again with version 2's register path (DEEPINFER_GEMV, src/kernels/cuda/linear.cu;
  # the experts' GEMV ignores the switch).
  DEEPINFER_GEMV=register $dist/deepinfer_gpu_tests --gtest_filter="$(if [[ $filter == '*' ]]; then echo 'CudaLinear*'; else echo "$filter"; fi)" \
    >"$out/gpu-tests-register.log" 2>&1
  rc=$?
  echo "DEEPINFER_GEMV=register: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-register.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
  # The tests of the warpgroup-MMA paths again with DEEPINFER_WGMMA=0: the mma.sync kernels they
  # replace on sm_90a, which run on every other device (and without scratch) and must hold the same
  # contracts (src/kernels/cuda/linear_wgmma.cuh, linear_wgmma_split.cuh).
  mma_filter='CudaLinearFp8.*:CudaLinearMma.*:CudaExpertsLinearFp8.*:CudaExpertsLinear*:OpsExpertsLinear.*:GpuModel.*TensorCores*:ReferenceGoldens/GpuGolden.TensorCore*:GpuEngine.TensorCore*'
  DEEPINFER_WGMMA=0 $dist/deepinfer_gpu_tests --gtest_filter="$(if [[ $filter == '*' ]]; then echo "$mma_filter"; else echo "$filter"; fi)" \
    >"$out/gpu-tests-mma-sync.log" 2>&1
  rc=$?
  echo "DEEPINFER_WGMMA=0: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-mma-sync.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
  # The FP4 experts pre-folded (version 12) at every row count (DEEPINFER_FP4_PREFOLD=1, with
  # DEEPINFER_FP4_IN_BLOCK=0: by default since 2026-12-04 prefill sizes convert in the GEMM's blocks,
  # version 38; the FP4 experts' suites and the models on FP8 tensor cores, batch invariance
  # included).
  prefold_filter='CudaExpertsLinearFp8.*:OpsExpertsLinear.*:GpuModel.*Fp8TensorCores*:Modes/GpuFlashShapedTwoLayers.MatchCpu/fp8_tensor_cores'
  DEEPINFER_FP4_IN_BLOCK=0 DEEPINFER_FP4_PREFOLD=1 $dist/deepinfer_gpu_tests --gtest_filter="$(if [[ $filter == '*' ]]; then echo "$prefold_filter"; else echo "$filter"; fi)" \
    >"$out/gpu-tests-prefold.log" 2>&1
  rc=$?
  echo "DEEPINFER_FP4_IN_BLOCK=0 DEEPINFER_FP4_PREFOLD=1: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-prefold.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
  # The linears, the experts and the models on tensor cores with the switches of versions 20 and
  # 23-26 flipped: the staged products' K slices over clusters also up to 32 rows
  # (DEEPINFER_STAGED_SLICES=1), the experts' 8/16-token kernels at one block per SM
  # (DEEPINFER_SMALL_TILE_BLOCKS=1), Linear's FP8 products of 1-8 rows back on 64-token tiles
  # (DEEPINFER_LINEAR_SMALL_TILES=0), `wo_a` on 128-row blocks at decode
  # (DEEPINFER_GROUPED_HALF_BLOCKS=0), the dense kernels' MMAs not overlapped
  # (DEEPINFER_DENSE_OVERLAP=0), the FP4 experts' 1-8-row tiles back on the shared-memory kernel
  # (DEEPINFER_EXPERTS_REGISTER_A=0; the last four on by default since 2026-12-02), the prefill's FP4
  # experts on the converting warpgroup's kernel instead of in registers (DEEPINFER_FP4_IN_BLOCK_RS=0;
  # version 40). Each gives the same bits; the tests that compare both sides run both in one process.
  slices_filter='CudaLinearMma.*:CudaLinearFp8.*:CudaLinear.Grouped*:CudaExpertsLinearFp8.*:GpuModel.*TensorCores*:Modes/GpuFlashShapedTwoLayers.MatchCpu/*tensor_cores:GpuEngine.TensorCore*'
  DEEPINFER_STAGED_SLICES=1 DEEPINFER_SMALL_TILE_BLOCKS=1 DEEPINFER_LINEAR_SMALL_TILES=0 DEEPINFER_GROUPED_HALF_BLOCKS=0 \
    DEEPINFER_DENSE_OVERLAP=0 DEEPINFER_EXPERTS_REGISTER_A=0 DEEPINFER_FP4_IN_BLOCK_RS=0 $dist/deepinfer_gpu_tests \
    --gtest_filter="$(if [[ $filter == '*' ]]; then echo "$slices_filter"; else echo "$filter"; fi)" \
    >"$out/gpu-tests-slices.log" 2>&1
  rc=$?
  echo "DEEPINFER_STAGED_SLICES=1 DEEPINFER_SMALL_TILE_BLOCKS=1 DEEPINFER_LINEAR_SMALL_TILES=0 DEEPINFER_GROUPED_HALF_BLOCKS=0 DEEPINFER_DENSE_OVERLAP=0 DEEPINFER_EXPERTS_REGISTER_A=0 DEEPINFER_FP4_IN_BLOCK_RS=0: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-slices.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
  # The same with the pre-folded experts on the TMA-fed kernel at 128-token tiles (the plan cut in
  # 128-row tiles; DEEPINFER_TMA_EXPERTS=128, version 14b, off by default until measured; the tests
  # themselves run 64 and 128 against the other kernels).
  DEEPINFER_FP4_IN_BLOCK=0 DEEPINFER_FP4_PREFOLD=1 DEEPINFER_TMA_EXPERTS=128 $dist/deepinfer_gpu_tests \
    --gtest_filter="$(if [[ $filter == '*' ]]; then echo "$prefold_filter"; else echo "$filter"; fi)" \
    >"$out/gpu-tests-tma-experts.log" 2>&1
  rc=$?
  echo "DEEPINFER_FP4_IN_BLOCK=0 DEEPINFER_FP4_PREFOLD=1 DEEPINFER_TMA_EXPERTS=128: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-tma-experts.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
  # Linear's FP8 and GroupedLinear's split-BF16 tests and the models on tensor cores again with
  # DEEPINFER_TMA=0 DEEPINFER_TMA_GROUPED=1: Linear on the cp.async kernel the TMA-fed one replaces,
  # GroupedLinear on its TMA-fed kernel at every size (by default only where its grid is one wave),
  # the same contracts
  # (src/kernels/cuda/linear_tma.cuh, linear_wgmma_split.cuh).
  tma_filter='CudaLinearFp8.*:CudaLinearMma.*:CudaLinear.Grouped*:GpuModel.*TensorCores*:Modes/GpuFlashShapedTwoLayers.MatchCpu/fp8_tensor_cores'
  DEEPINFER_TMA=0 DEEPINFER_TMA_GROUPED=1 $dist/deepinfer_gpu_tests \
    --gtest_filter="$(if [[ $filter == '*' ]]; then echo "$tma_filter"; else echo "$filter"; fi)" >"$out/gpu-tests-tma0.log" 2>&1
  rc=$?
  echo "DEEPINFER_TMA=0 DEEPINFER_TMA_GROUPED=1: exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/gpu-tests-tma0.log" | head -3 | tr '\n' ' ')"
  [[ $rc -eq 0 ]] || status=1
fi
if [[ $sanitize -eq 1 ]]; then
  export DEEPINFER_SANITIZER_SIZES=1  # the whole-model tests at sanitizer sizes (tests/gpu/gpu_test_util.h)
  for tool in memcheck racecheck; do
    timeout "$sanitize_timeout" compute-sanitizer --tool $tool --error-exitcode 9 $dist/deepinfer_gpu_tests \
      --gtest_filter="$(if [[ $tool == racecheck && -n $racecheck_filter ]]; then echo "$racecheck_filter"; else echo "${sanitize_filter:-$filter}"; fi)" \
      >"$out/sanitizer-$tool.log" 2>&1
    rc=$?
    echo "compute-sanitizer $tool: exit $rc (124: timed out); $(grep -c "^\[       OK \]" "$out/sanitizer-$tool.log") tests ok"
    tail -3 "$out/sanitizer-$tool.log"
    [[ $rc -eq 0 ]] || status=1
  done
fi
exit $status
