#!/usr/bin/env bash
# On the GPU machine, with build/gpu-dist carried (scripts/gpu-build.sh): the engine on the GPU
# against the engine on the CPU, same binary, same model, same run; results under $OUT.
#   1. greedy generation from the shipped demo model on both devices: the texts must be equal;
#   2. `deepinfer bench overlap` (synchronous vs overlapped loop) at batch 1 and 64 on both, and on
#      the GPU once more with decode steps as CUDA graphs (--cuda-graphs);
#   3. HF transformers generate on the demo config (random BF16 weights) at the same shapes.
# With --flash instead: the 2-layer DeepSeek-V4-Flash-shaped config (bench/configs) with dummy
# weights, our engine on the GPU against HF transformers (tools/bench_hf_v4.py, random BF16
# weights) at batch 1 and 64, 512-token prompts, 32 new tokens, prefill included.
# With --steps [ARGS]: `deepinfer bench steps` on the 3-layer Flash-shaped config (issue 8), JSON
# and a PNG plot (tools/plot_bench.py, if matplotlib is there), then again with --tensor-cores, with
# --tensor-cores --fp8-activations, and that once more at batch 64 and the prefills with
# DEEPINFER_WGMMA=0 (the mma.sync kernels that the warpgroup-MMA ones replace on sm_90a), and with
# all of the reference's roundings (--kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16 --head-in-bf16
# --norm-out-bf16 too: sparse attention on tensor cores, wo_a, the head and the norms' BF16 products on
# one BF16 part),
# that at batch 64 and the prefills with the FP4 experts pre-folded instead of converted in the
# GEMM's blocks (DEEPINFER_FP4_IN_BLOCK=0) and never pre-folded (DEEPINFER_FP4_PREFOLD=0),
# with the dense FP8 linears never on the TMA kernel (DEEPINFER_TMA=0: version 14's comparison)
# and without --attn-out-bf16 (wo_a on three BF16 parts: version 17's comparison). The columns of
# the TMA-fed grouped kernel at every size and of the TMA-fed experts (versions 15 and 14b,
# measured slower at prefill: DEEPINFER_TMA_GROUPED=1, DEEPINFER_TMA_EXPERTS=64|128) and of
# versions 7-9's switches (DEEPINFER_FP4_FOLD, DEEPINFER_WGMMA_GROUPED) left with the
# switches (docs/performance.md); f32 SIMT with DEEPINFER_GEMV=register (version 2's Linear GEMV,
# within 1% of the default in every run since version 3c) runs when asked.
# the JSON reports, plot and log end up in $OUT/steps-reports.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
source scripts/gpu-env.sh
echo "cuBLASLt (dlopen'ed by the ceilings): ${DEEPINFER_CUBLASLT:-not found}"
bin=$dist/deepinfer
model=models/deepinfer-v4-demo
prompt="The history of the city begins"
status=0
if [[ ${1:-} == --steps ]]; then
  # Issue 8: ceilings, decode steps (batch x context) and prefills on the 3-layer Flash-shaped
  # model, scaled to Flash's 43 layers. Extra arguments go to `deepinfer bench steps`.
  shift
  timeout 330 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy --json "$out/steps.json" "$@" \
    2>>"$out/bench.log" || status=1
  python3 tools/plot_bench.py "$out/steps.json" "$out/steps.png" 2>>"$out/bench.log" || echo "(no plot: see bench.log)"
  echo "== the same with the linears on tensor cores (--tensor-cores)"
  timeout 330 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy --tensor-cores \
    --json "$out/steps-tc.json" "$@" 2>>"$out/bench.log" || status=1
  echo "== and with the reference's FP8 activations on e4m3 tensor cores (--tensor-cores --fp8-activations)"
  timeout 330 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy --tensor-cores --fp8-activations \
    --json "$out/steps-tc-fp8.json" "$@" 2>>"$out/bench.log" || status=1
  echo "== FP8 activations on the mma.sync kernels (DEEPINFER_WGMMA=0)"
  DEEPINFER_WGMMA=0 timeout 200 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy --tensor-cores \
    --fp8-activations --no-ceilings --batches 64 --contexts 8192 --json "$out/steps-tc-fp8-mma.json" \
    2>>"$out/bench.log" || status=1
  echo "== every rounding of the reference (--fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16" \
    "--head-in-bf16 --norm-out-bf16): sparse attention on tensor cores too"
  timeout 330 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy --tensor-cores --fp8-activations \
    --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16 --head-in-bf16 --norm-out-bf16 --no-ceilings \
    --json "$out/steps-tc-ref.json" "$@" 2>>"$out/bench.log" || status=1
  # (The split-BF16 attention's blocks per query, DEEPINFER_ATTENTION_SPLIT=1/8 against the default 2,
  # were swept in the runs of 2026-12-01/02: docs/performance.md, version 11's follow-ups.)
  variants=()
  # name;environment;flags: the FP4 experts converted in the GEMM's blocks at prefill sizes
  # (version 38; the default from 64 rows per expert) against pre-folded per call (version 12) and
  # against never (version 8's kernel, folding per chunk and token tile), and converted in the MMA
  # warpgroups' registers (version 40, the default) against by a converting warpgroup (rs0);
  # Linear's unsplit FP8 products on the TMA kernel (version 14; the default) against the 64-token
  # cp.async kernel; wo_a's input rounded to BF16 (version 17) against f32 (three BF16 parts); the
  # dense split-BF16 linears' K slices over clusters at decode batches (version 20, off by default
  # until measured) against one block per tile; the FP4 experts kept folded for the run
  # (--fold-fp4-experts, version 21, off by default: twice their bytes) against converted per call.
  for variant in "inblock0;DEEPINFER_FP4_IN_BLOCK=0;--attn-out-bf16" "rs0;DEEPINFER_FP4_IN_BLOCK_RS=0;--attn-out-bf16" \
    "prefold0;DEEPINFER_FP4_PREFOLD=0;--attn-out-bf16" \
    "tma0;DEEPINFER_TMA=0;--attn-out-bf16" \
    "attnf32;;" "slices1;DEEPINFER_STAGED_SLICES=1;--attn-out-bf16" "fold;;--attn-out-bf16 --fold-fp4-experts"; do
    IFS=';' read -r name environment flags <<<"$variant"
    echo "== every reference rounding, ${environment:-$name} $flags"
    env $environment timeout 120 $bin bench steps bench/configs/v4-flash-3layer --load-format dummy \
      --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 $flags --no-ceilings --batches 64 --contexts 8192 \
      --json "$out/steps-tc-ref-$name.json" 2>>"$out/bench.log" || status=1
    variants+=("ref-$name=$out/steps-tc-ref-$name.json")
  done
  echo "== side by side (tools/compare_bench.py)"
  python3 tools/compare_bench.py simt="$out/steps.json" tensor-cores="$out/steps-tc.json" tc+fp8-act="$out/steps-tc-fp8.json" \
    tc+fp8-mma.sync="$out/steps-tc-fp8-mma.json" tc+ref-roundings="$out/steps-tc-ref.json" "${variants[@]}" \
    | tee "$out/steps-compare.txt" || status=1
  echo "== HF transformers on the same config (random BF16 weights)"
  timeout 200 python3 tools/bench_hf_steps.py bench/configs/v4-flash-3layer | tee "$out/steps-hf.json" || status=1
  # The device tool returns at most 8 files: the reports travel as one archive.
  (cd "$out" && reports=() && for f in steps*.json steps.png bench.log; do if [[ -e $f ]]; then reports+=("$f"); fi; done &&
    [[ ${#reports[@]} -gt 0 ]] && tar -cJf steps-reports.tar.xz "${reports[@]}" && rm -f "${reports[@]}")
  exit $status
fi
if [[ ${1:-} == --flash ]]; then
  flash=bench/configs/v4-flash-2layer
  for batch in 1 64; do
    for graphs in "" --cuda-graphs "--cuda-graphs --tensor-cores"; do
      echo "== Flash-shaped, 2 layers: deepinfer on cuda $graphs, batch $batch"
      timeout 280 $bin bench overlap $flash --load-format dummy --device cuda $graphs --requests $batch \
        --max-num-seqs $batch --prompt-len 512 --max-tokens 32 --max-num-batched-tokens 8192 --cache-memory-mb 4096 \
        --json "$out/flash-deepinfer-b$batch$(echo "$graphs" | tr -d ' ' | sed 's/--/-/g').json" 2>>"$out/bench.log" || status=1
    done
    echo "== Flash-shaped, 2 layers: HF transformers, batch $batch"
    timeout 280 python3 tools/bench_hf_v4.py $flash --batch $batch --prompt-len 512 --new-tokens 32 \
      | tee "$out/flash-hf-b$batch.json" || status=1
  done
  exit $status
fi
for device in cpu cuda; do
  $bin generate $model --device $device --prompt "$prompt" --max-tokens 48 --temperature 0 >"$out/generate-$device.txt" 2>"$out/generate-$device.log" || status=1
done
if cmp -s "$out/generate-cpu.txt" "$out/generate-cuda.txt"; then
  echo "greedy text: cpu == cuda"; head -c 300 "$out/generate-cuda.txt"; echo
else
  echo "greedy text differs between cpu and cuda"; status=1
  diff "$out/generate-cpu.txt" "$out/generate-cuda.txt" | head -10
fi
for mode in cuda cuda-graphs cpu; do
  device=${mode%%-*}
  graphs=(); [[ $mode == cuda-graphs ]] && graphs=(--cuda-graphs)
  for batch in 1 64; do
    echo "== bench overlap: device $device ${graphs[*]}, batch $batch"
    timeout 200 $bin bench overlap $model --device $device "${graphs[@]}" --requests $batch --max-num-seqs $batch \
      --prompt-len 64 --max-tokens 64 --json "$out/bench-$mode-b$batch.json" 2>>"$out/bench.log" || status=1
  done
done
for batch in 1 64; do
  echo "== HF transformers on the demo config, cuda, batch $batch"
  timeout 200 python3 tools/bench_hf_v4.py $model --batch $batch --prompt-len 64 --new-tokens 64 \
    | tee "$out/hf-demo-b$batch.json" || status=1
done
exit $status
