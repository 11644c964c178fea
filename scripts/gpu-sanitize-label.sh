#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: compute-sanitizer over the whole `gpu` label at
# sanitizer sizes, in parallel (scripts/gpu-sanitize-parallel.sh):
#   racecheck: whole-model tests one per process (started first: they take longest): the f32 SIMT
#     greedy path and chunked prefill, the tensor-core golden, static against dynamic shapes,
#     chunked prefill with FP8 activations on e4m3 tensor cores, graph replay against eager,
#     device sampling, the engine's overlapped against synchronous loop, and with CUDA graphs;
#     then every kernel test, grouped by suite (the Flash-shaped experts tests on their own);
#   memcheck: the whole label in six processes (memcheck holds little host memory: 0.3 GB for the
#     goldens, 18.5 GB for the Flash-shaped model; time is what splits it).
# Jobs 0-23 were the label's first cover (the other whole-model tests run the same kernels with
# other weights and flags); jobs 24-43 racecheck those 20 too: the 44 jobs cover every test twice.
# Jobs 44-46 racecheck the Flash-shaped model's other modes (job 40 runs its f32 SIMT one).
# Prints one line per process, writes $OUT/sanitize-logs.tar.xz, exits non-zero if a process
# reported an error, a failed test, or did not finish.
#
# Run it alone on the 2xH200 kind (both GPUs by default): beside other work on one GPU (2026-12-01)
# its whole-model racechecks ran past 360 s where alone they took 171-282 s. On one H200 the
# label takes more than one call, and host memory bounds what runs together: racecheck of jobs 5,
# 6 and 8 peaked at 71, 87 and 80 GB (128 GiB on the 1xH200 machine; a4d9ac8, docs/cuda-backend.md),
# so give each of them a call of its own or only memcheck jobs beside it (0.3-1 GB each but 18). --select LIST runs the jobs
# of LIST (0-based positions in the list below: numbers and A-B ranges, comma-separated, e.g.
# --select 3,6,14-17) and passes the rest of the arguments to gpu-sanitize-parallel.sh.
#
#   bash scripts/gpu-sanitize-label.sh [--select LIST] [--timeout SECONDS] [--jobs J] [--gpus 0,1]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
select=''
if [[ ${1:-} == --select ]]; then
  [[ ${2:-} =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] ||
    { echo "--select takes job numbers and ranges, e.g. 3,6,14-17; got '${2:-}'" >&2; exit 2; }
  select=$2
  shift 2
fi
golden=ReferenceGoldens/GpuGolden
flash_experts='CudaExpertsLinear.DecodeFlash:CudaExpertsLinear.PrefillFlash'
flash_model=Modes/GpuFlashShapedTwoLayers.MatchCpu
whole_model="$golden.*:GpuModel.*:$flash_model/*:GpuRunner.*:GpuEngine.*"
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
  "memcheck:$flash_model/*"
  "memcheck:$golden.*"
  "memcheck:GpuEngine.*"
  "memcheck:GpuModel.*"
  "memcheck:GpuRunner.*"
  "memcheck:*-$whole_model"
  # racecheck of the other 20 whole-model tests, one per process (jobs 24-43; host memory as
  # jobs 0-8: 5-87 GB each): the goldens of the two other tiny models, the other static-shape,
  # chunked-prefill and engine variants, and the Flash-shaped model.
  "racecheck:$golden.GpuLogitsMatchCpuAlongTheGreedyPath/v4_tiny_fp8fp4"
  "racecheck:$golden.GpuLogitsMatchCpuAlongTheGreedyPath/v4_tiny_long"
  "racecheck:$golden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_flashlike"
  "racecheck:$golden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_fp8fp4"
  "racecheck:$golden.TensorCoreLinearsMatchReference/v4_tiny_fp8fp4"
  "racecheck:$golden.TensorCoreLinearsMatchReference/v4_tiny_long"
  "racecheck:$golden.TensorCoreChunkedPrefillEqualsOneShotBitForBit/v4_tiny_flashlike"
  "racecheck:$golden.TensorCoreChunkedPrefillEqualsOneShotBitForBit/v4_tiny_fp8fp4"
  "racecheck:$golden.TensorCoreChunkedPrefillEqualsOneShotBitForBit/v4_tiny_long"
  "racecheck:$golden.LayerStreamsLogitsAndGreedyMatchReference/v4_tiny_flashlike"
  "racecheck:$golden.LayerStreamsLogitsAndGreedyMatchReference/v4_tiny_fp8fp4"
  "racecheck:$golden.LayerStreamsLogitsAndGreedyMatchReference/v4_tiny_long"
  "racecheck:GpuModel.ChunkedPrefillEqualsOneShotWithTheReferenceQuantization"
  "racecheck:GpuModel.StaticShapesEqualDynamicShapesOnTensorCores"
  "racecheck:GpuModel.StaticShapesEqualDynamicShapesWithTheReferenceQuantization"
  "racecheck:GpuModel.StaticShapesEqualDynamicShapesWithFp8TensorCores"
  "racecheck:$flash_model/f32_simt"
  "racecheck:GpuEngine.OverlappedEqualsSynchronousOnARandomizedWorkload"
  "racecheck:GpuEngine.OverlappedEqualsSynchronousOnASmallWorkload"
  "racecheck:GpuEngine.TensorCoreLinearsOverlappedEqualsSynchronous"
  # Jobs 44-46: the other three kernel modes of the Flash-shaped model (job 40 is its f32 SIMT
  # mode): the four modes did not finish in one 550 s racecheck process (2026-12-01).
  "racecheck:$flash_model/tensor_cores"
  "racecheck:$flash_model/fp8_simt"
  "racecheck:$flash_model/fp8_tensor_cores"
)
selected=()
if [[ -z $select ]]; then
  selected=("${jobs[@]}")
else
  IFS=, read -r -a parts <<<"$select"
  for part in "${parts[@]}"; do
    first=${part%-*}
    last=${part#*-}
    for ((j = first; j <= last; j++)); do
      [[ $j -lt ${#jobs[@]} ]] || { echo "--select: no job $j (there are ${#jobs[@]}, 0-$((${#jobs[@]} - 1)))" >&2; exit 2; }
      selected+=("${jobs[j]}")
    done
  done
fi
[[ ${#selected[@]} -gt 0 ]] || { echo "--select $select names no job" >&2; exit 2; }
logs=$(mktemp -d)
OUT=$logs bash scripts/gpu-sanitize-parallel.sh "$@" "${selected[@]}"
status=$?
mkdir -p "$out"
tar -C "$logs" -cJf "$out/sanitize-logs.tar.xz" .
exit $status
