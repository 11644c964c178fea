set -u
source scripts/gpu-env.sh; use_test_data
( OUT=$OUT/full timeout 440 bash scripts/gpu-sanitize-parallel.sh --timeout 420 racecheck:GpuRunner.CudaGraphReplayEqualsEager racecheck:GpuModel.StaticShapesEqualDynamicShapes racecheck:'ReferenceGoldens/GpuGolden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_long' racecheck:'GpuEngine.*Tiny*' racecheck:'ReferenceGoldens/GpuGolden.GpuLogitsMatchCpuAlongTheGreedyPath/v4_tiny_flashlike' racecheck:'ReferenceGoldens/GpuGolden.TensorCoreLinearsMatchReference/v4_tiny_flashlike' racecheck@0+300:'ReferenceGoldens/GpuGolden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_long' > $OUT/full.txt 2>&1 ) &
sleep 5
( CUDA_LAUNCH_BLOCKING=1 OUT=$OUT/blocking timeout 440 bash scripts/gpu-sanitize-parallel.sh --timeout 420 racecheck@0+300:'ReferenceGoldens/GpuGolden.ChunkedPrefillEqualsOneShotBitForBit/v4_tiny_long' racecheck@600+300:GpuRunner.CudaGraphReplayEqualsEager > $OUT/blocking.txt 2>&1 ) &
wait
cat $OUT/full.txt; echo ==blocking; cat $OUT/blocking.txt
for f in $OUT/full/*.log $OUT/blocking/*.log; do echo "== $f"; grep -m3 -B3 -A12 "Error\|Hazard\|Invalid\|what()" $f | head -30; done
tar -C $OUT -cJf $OUT/diag2.tar.xz full blocking && rm -rf $OUT/full $OUT/blocking
