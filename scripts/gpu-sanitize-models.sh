#!/usr/bin/env bash
# On the GPU machine (the 2xH200 kind: one racecheck process needs up to ~50 GB of host memory):
# racecheck over the whole-model gpu tests at sanitizer sizes, one process per test, plus memcheck
# over the whole label except the Flash 2-layer test (which has its own memcheck figure). Writes
# $OUT/sanitize-logs.tar.xz and prints one line per process (scripts/gpu-sanitize-parallel.sh).
#
#   bash scripts/gpu-sanitize-models.sh [--timeout SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
limit=540
if [[ ${1:-} == --timeout ]]; then limit=$2; shift 2; fi
jobs=()
for t in GpuLogitsMatchCpuAlongTheGreedyPath ChunkedPrefillEqualsOneShotBitForBit TensorCoreLinearsMatchReference \
         TensorCoreChunkedPrefillEqualsOneShotBitForBit; do
  for g in v4_tiny_flashlike v4_tiny_fp8fp4 v4_tiny_long; do jobs+=("racecheck:ReferenceGoldens/GpuGolden.$t/$g"); done
done
logs=$(mktemp -d)
for f in 'GpuRunner.DeviceSampling*' 'GpuRunner.CudaGraphReplayEqualsEager' 'GpuEngine.*Tiny*' 'GpuEngine.*Small*' \
         'GpuEngine.OverlappedEqualsSynchronousOnARandomizedWorkload' 'GpuEngine.CudaGraphsEqualEager*' 'GpuEngine.TensorCore*' \
         'GpuModel.StaticShapesEqualDynamicShapes' 'GpuModel.*Quantization*' 'GpuModel.*TensorCores*' \
         'CudaExpertsLinear.PrefillFlash' 'CudaHc.*:CudaAttention.*:CudaMoeAlign.*'; do
  jobs+=("racecheck:$f")
done
OUT=$logs bash scripts/gpu-sanitize-parallel.sh --timeout "$limit" "${jobs[@]}" 'memcheck:*-GpuModel.FlashShapedTwoLayersMatchCpu'
status=$?
mkdir -p "$out"
tar -C "$logs" -cJf "$out/sanitize-logs.tar.xz" .
exit $status
