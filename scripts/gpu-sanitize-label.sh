#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: compute-sanitizer over the whole `gpu` label at
# sanitizer sizes, in parallel (scripts/gpu-sanitize-parallel.sh):
#   racecheck: whole-model tests one per process (started first: they take longest): the f32 SIMT
#     greedy path and chunked prefill, the tensor-core golden, static against dynamic shapes,
#     chunked prefill with FP8 activations on e4m3 tensor cores, graph replay against eager,
#     device sampling, the engine's overlapped against synchronous loop, and with CUDA graphs;
#     then every kernel test, grouped by suite (the Flash-shaped experts tests on their own);
#   memcheck: the whole label in four processes.
# Whole-model tests not listed run the same kernels at the same shapes with other numerics flags
# (their extra kernels, the quantization round trips, have kernel tests of their own).
# Prints one line per process, writes $OUT/sanitize-logs.tar.xz, exits non-zero if a process
# reported an error, a failed test, or did not finish.
#
# Run it alone on the 2xH200 kind (both GPUs by default): beside other work on one GPU (2026-12-01)
# its whole-model racechecks ran past 360 s where alone they took 171-282 s. On one H200 the
# label takes more than one call: 12 processes there (the 9 whole-model racechecks and 3 memcheck
# groups, 2026-12-01) finished 4 within 520 s, the others each 1.5-3x slower than alone. --select
# A-B runs jobs A..B of the list below (0-based, in order) and passes the rest of the arguments
# to gpu-sanitize-parallel.sh, e.g. one call per part: --select 0-4, --select 5-8,
# --select 9-17, --select 18-21.
#
#   bash scripts/gpu-sanitize-label.sh [--select A-B] [--timeout SECONDS] [--jobs J] [--gpus 0,1]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
first=0
last=1000
if [[ ${1:-} == --select ]]; then
  [[ ${2:-} =~ ^([0-9]+)-([0-9]+)$ ]] || { echo "--select takes A-B (job numbers), got '${2:-}'" >&2; exit 2; }
  first=${BASH_REMATCH[1]}
  last=${BASH_REMATCH[2]}
  shift 2
fi
golden=ReferenceGoldens/GpuGolden
flash_experts='CudaExpertsLinear.DecodeFlash:CudaExpertsLinear.PrefillFlash'
whole_model="$golden.*:GpuModel.*:GpuRunner.*:GpuEngine.*"
jobs=(
  "racecheck:$golden.GpuLogitsMatchCpuAlongTheGreedyPath/v4_tiny_flashlike"
  "racecheck:$golden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_long"
  "racecheck:$golden.TensorCoreLinearsMatchReference/v4_tiny_flashlike"
  "racecheck:GpuModel.StaticShapesEqualDynamicShapes"
  "racecheck:GpuModel.ChunkedPrefillEqualsOneShotWithFp8TensorCores"
  "racecheck:GpuRunner.CudaGraphReplayEqualsEager"
  "racecheck:GpuRunner.DeviceSampling*"
  "racecheck:GpuEngine.OverlappedEqualsSynchronousOnATinyWorkload"
  "racecheck:GpuEngine.CudaGraphsEqualEagerOnARandomizedWorkload"
  "racecheck:CudaAttention*:CudaCompressor.*:CudaDevice.*:CudaEmbedding.*:CudaFill.*:CudaHadamard.*:Gpu/CudaAttentionRows.*"
  "racecheck:CudaHc.*:CudaIndexer*:CudaMoe*:CudaQuantRoundTrip.*:CudaRmsNorm.*:CudaRope.*:CudaRoute.*:CudaSwiGlu.*:Gpu/RmsNormShapes.*:Gpu/RouteCases.*:Gpu/CudaCopyRows.*"
  "racecheck:CudaSampler.*"
  "racecheck:CudaLinear.*"
  "racecheck:CudaLinearFp8.*:CudaLinearMma.*"
  "racecheck:CudaExpertsLinear.*-$flash_experts"
  "racecheck:CudaExpertsLinear.DecodeFlash"
  "racecheck:CudaExpertsLinear.PrefillFlash"
  "racecheck:CudaExpertsLinearFp8.*:CudaExpertsLinearMma.*:OpsExpertsLinear.*:Ceilings.*:StepBench.*"
  "memcheck:GpuModel.FlashShapedTwoLayersMatchCpu"
  "memcheck:$golden.*"
  "memcheck:GpuModel.*:GpuRunner.*:GpuEngine.*-GpuModel.FlashShapedTwoLayersMatchCpu"
  "memcheck:*-$whole_model"
)
selected=("${jobs[@]:first:last-first+1}")
[[ ${#selected[@]} -gt 0 ]] || { echo "--select $first-$last names no job (there are ${#jobs[@]})" >&2; exit 2; }
logs=$(mktemp -d)
OUT=$logs bash scripts/gpu-sanitize-parallel.sh "$@" "${selected[@]}"
status=$?
mkdir -p "$out"
tar -C "$logs" -cJf "$out/sanitize-logs.tar.xz" .
exit $status
