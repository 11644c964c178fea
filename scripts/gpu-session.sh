#!/usr/bin/env bash
# On the GPU machine, build/gpu-dist carried: a version's whole check in one device call. Runs
#   1. scripts/gpu-run.sh: the gpu label, then its reruns under the switches (DEEPINFER_GEMV=register,
#      DEEPINFER_WGMMA=0, DEEPINFER_FP4_IN_BLOCK=0 with DEEPINFER_FP4_PREFOLD=1, and with
#      DEEPINFER_TMA_EXPERTS=128, DEEPINFER_TMA=0 with DEEPINFER_TMA_GROUPED=1);
#   2. scripts/gpu-bench.sh --steps: bench steps with f32 SIMT, tensor cores, FP8 activations, its
#      mma.sync column and all of the reference's roundings, side by side, and HF transformers;
#   3. scripts/gpu-profile.sh (ncu) over the warpgroup-MMA GEMMs of an 8k prefill's first layer
#      with FP8 activations (dense, FP4 experts converted in the blocks, grouped split-BF16), every kernel of a
#      batch-1 decode step, the prefill's row kernels and dense-weight linears with all of the
#      reference's roundings, and the TMA-fed experts at 128-token tiles, unless --no-profile.
#      (The batch-1 GEMVs: `gpu-profile.sh b1 'Gemv' 24 -- --batches 1 --contexts 8192
#      --no-prefill`, and tools/sass_histogram.py over cuobjdump's SASS; out of the session since
#      2026-12-01 to keep it within one call.)
# Prints their summaries, and leaves in $OUT one archive per step as it ends (session-run.tar.xz,
# session-bench.tar.xz, session-profile.tar.xz: every log, JSON report and CSV; the device tool
# returns at most 8 files, and what a killed call left under $OUT) and steps-compare.txt. Steps 1
# and 2 took 388 s at 7047f65 (2026-12-01, two switch reruns, five bench columns), so the profile
# (up to 210 s) may not fit the same 600 s call:
# --no-profile, then the profile alone in the next call (--only-profile). Exits non-zero when a
# step failed. The sanitizers need calls of their own (scripts/gpu-sanitize-label.sh): run
# beside this on the second GPU of the 2xH200 kind (2026-12-01), their 22 host-bound processes
# slowed these steps past a 440 s call and themselves past 360 s (docs/cuda-backend.md).
#
# --only-run and --only-bench run step 1 or step 2 alone (with 4-5 bench columns of switches the
# two no longer fit one 600 s call with certainty: 477 s at cc5395b with three).
#
# --quick: one call of ~200 s (2026-12-02: 119 s plus the machine's start), for a change's first
# check when device time is short: the tensor-core suites, the model, golden and engine tests and
# the 2-layer Flash-shaped check on e4m3 tensor cores (gpu-run.sh --no-reruns), then `bench steps`
# with every reference rounding (reference_roundings) at batches 1, 64 and 256 and an 8k prompt ($OUT/steps.json,
# bench.txt), after `bench read-patterns`, `bench phases` and `bench ceilings --prefill-tokens
# 8192` (their text in $OUT/micro.txt, their JSON in $OUT/data.tar.xz).
# DEEPINFER_* switches in the environment apply to both; arguments after `--` go to
# `bench steps` (e.g. -- --fold-fp4-experts). Each `--variant 'NAME;ENV;FLAGS'` (ENV e.g.
# DEEPINFER_STAGED_SLICES=1, FLAGS e.g. --fold-fp4-experts, or !--head-in-bf16 to drop that one of the
# reference roundings; either may be empty) adds one more
# bench of the same points without the ceilings (steps-NAME.json in $OUT/data.tar.xz, one
# file whatever their number), and tools/compare_bench.py prints them beside the first
# ($OUT/compare.txt). A fourth field, `NAME;ENV;FLAGS;DIR`, runs DIR's `deepinfer` instead (e.g.
# build/gpu-dist/base: the base commit's binary that `BASE_BINARY=PATH scripts/gpu-build.sh` packed
# beside this build; code changes without a switch measured in one call). Each variant adds ~25 s. `--tests FILTER` runs that gtest filter instead of
# the quick suites (a kernel's own tests when device time is short). QUICK_TRACE=1 adds batch 1's
# replayed graph under CUPTI: each kernel of its longest path with its share of the replay
# (tools/kernel_trace.py; ~20 s); QUICK_TRACE_BATCH=N traces batch N's instead.
#
#   bash scripts/gpu-session.sh [--no-profile | --only-profile | --only-run | --only-bench |
#                                --quick [--tests FILTER] [--variant 'NAME;ENV;FLAGS[;DIR]' ...] [-- ARGS]]
set -uo pipefail
cd "$(dirname "$0")/.."
profile=1
run=1
bench=1
bench_args=()
variants=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-profile) profile=0; shift ;;
    --only-profile) run=0; bench=0; shift ;;
    --only-run) bench=0; profile=0; shift ;;
    --only-bench) run=0; profile=0; shift ;;
    --quick) quick=1; shift ;;
    --variant) variants+=("$2"); shift 2 ;;
    --tests) tests_filter=$2; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
final=${OUT:-gpu-out}
mkdir -p "$final"
status=0
if [[ ${quick:-0} -eq 1 ]]; then
  quick_filter='CudaLinearFp8.*:CudaLinearMma.*:CudaLinear.Grouped*:CudaExpertsLinear*:CudaAttentionSplitBf16.*'
  quick_filter+=':GpuModel.*:ReferenceGoldens/GpuGolden.*:GpuEngine.*:Modes/GpuFlashShapedTwoLayers.MatchCpu/fp8_tensor_cores'
  quick_filter=${tests_filter:-$quick_filter}
  # QUICK_TESTS_TIMEOUT: seconds for the tests (170 unless set; the whole label, --tests '*', wants ~260).
  # QUICK_BATCHES: the decode batches of every bench (unset: 1 64 256; each more adds seconds a bench).
  quick_batches=${QUICK_BATCHES:-1 64 256}
  OUT=$final timeout "${QUICK_TESTS_TIMEOUT:-170}" bash scripts/gpu-run.sh --no-reruns --filter "$quick_filter" 2>&1 |
    tail -16
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  source scripts/gpu-env.sh
  # Every rounding of the reference on tensor cores that binary $1 takes: --head-in-bf16 and
  # --norm-out-bf16 (versions 71-72) where it knows them, so that an older base binary runs too
  # (its column then lacks them; each steps JSON records its flags under "model").
  reference_roundings() {
    local flags="--tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16" help flag
    help=$("$1" bench steps --help 2>/dev/null)
    for flag in --head-in-bf16 --norm-out-bf16; do
      if grep -q -- "$flag" <<<"$help"; then flags+=" $flag"; fi
    done
    echo "$flags"
  }
  # The device tool returns at most 8 files: the micro-benchmarks' text goes to one file (micro.txt),
  # their JSON and the variants' into data.tar.xz at the end.
  data=$(mktemp -d)
  # The decode kernels' weight reads without their arithmetic, row-major and tiled (~5 s); a
  # batch-1 layer's chain of phases as graph kernels and one persistent kernel; cuBLASLt's
  # block-scaled FP8 GEMM at the 8k prefill's projection shapes, beside its 8192^3 ceiling.
  # QUICK_NO_MICRO=1 skips them (~60 s) for an A/B call short of device time (no floors then).
  [[ ${QUICK_NO_MICRO:-0} -eq 1 ]] || {
    timeout 60 "$dist/deepinfer" bench read-patterns --json "$data/read-patterns.json" 2>&1 || status=1
    timeout 60 "$dist/deepinfer" bench phases --json "$data/phases.json" 2>&1 || status=1
    timeout 90 "$dist/deepinfer" bench ceilings --prefill-tokens 8192 --json "$data/ceilings-prefill.json" 2>&1 ||
      status=1
  } >"$final/micro.txt"
  grep -vE "^(head|experts)_[a-z_]+: |^(bf16|fp8)" "$final/micro.txt" 2>/dev/null
  timeout 150 "$dist/deepinfer" bench steps bench/configs/v4-flash-3layer --load-format dummy \
    $(reference_roundings "$dist/deepinfer") --batches $quick_batches --contexts 8192 --prompts 8192 \
    --json "$final/steps.json" "${bench_args[@]}" >"$final/bench.txt" 2>&1 || status=1
  grep -vE "^\[v4" "$final/bench.txt" | tail -14
  if [[ ${#variants[@]} -gt 0 ]]; then
    columns=("this=$final/steps.json")  # this build under the caller's environment; a base binary is a variant
    work=$data
    for variant in "${variants[@]}"; do
      IFS=';' read -r name environment flags variant_dist <<<"$variant"
      binary=$dist/deepinfer
      if [[ -n ${variant_dist:-} ]]; then  # another build, carried beside build/gpu-dist
        (DEEPINFER_DIST=$variant_dist; source scripts/gpu-env.sh) && binary=$variant_dist/deepinfer
      fi
      # A FLAGS word !FLAG drops FLAG from the reference roundings (e.g. !--head-in-bf16: the exact head).
      added=() dropped=() roundings=()
      for flag in $flags; do [[ $flag == '!'* ]] && dropped+=("${flag#!}") || added+=("$flag"); done
      for flag in $(reference_roundings "$binary"); do
        [[ " ${dropped[*]} " == *" $flag "* ]] || roundings+=("$flag")
      done
      env $environment timeout 120 "$binary" bench steps bench/configs/v4-flash-3layer --load-format dummy \
        "${roundings[@]}" --no-ceilings --batches $quick_batches \
        --contexts 8192 --prompts 8192 --json "$work/steps-$name.json" "${added[@]}" "${bench_args[@]}" \
        >>"$final/bench.txt" 2>&1 || status=1
      columns+=("$name=$work/steps-$name.json")
    done
    python3 tools/compare_bench.py "${columns[@]}" | tee "$final/compare.txt" || status=1
  fi
  # QUICK_TRACE=1: batch QUICK_TRACE_BATCH's (unset: 1) graph replayed under CUPTI
  # (DEEPINFER_KERNEL_TRACE) with its longest kernel path listed (DEEPINFER_GRAPH_KERNELS), and each
  # path kernel's share of the replay (tools/kernel_trace.py; its last 30 lines printed, the files
  # and the whole summary in data.tar.xz, named by the batch: trace-bN.txt, graph-bN.txt).
  if [[ ${QUICK_TRACE:-0} -eq 1 ]]; then
    trace_batch=${QUICK_TRACE_BATCH:-1}
    rm -f "$data/trace-b$trace_batch.txt" "$data/graph-b$trace_batch.txt"
    DEEPINFER_KERNEL_TRACE=$data/trace-b$trace_batch.txt DEEPINFER_GRAPH_KERNELS=$data/graph-b$trace_batch.txt \
      timeout 90 "$dist/deepinfer" bench steps bench/configs/v4-flash-3layer --load-format dummy \
      $(reference_roundings "$dist/deepinfer") --no-ceilings --batches "$trace_batch" --contexts 8192 --no-prefill \
      "${bench_args[@]}" >"$data/trace-bench.txt" 2>&1 || { status=1; tail -5 "$data/trace-bench.txt"; }
    python3 tools/kernel_trace.py "$data/trace-b$trace_batch.txt" "$data/graph-b$trace_batch.txt" \
      --label 'replay 2' | tee "$data/trace-summary.txt" | tail -30 || status=1
  fi
  tar -C "$data" -cJf "$final/data.tar.xz" . && rm -rf "$data"
  exit $status
fi
# keep STEP DIR: archives a step's outputs (DIR, its own folder) into $OUT as soon as it ends.
keep() { tar -C "$2" -cJf "$final/session-$1.tar.xz" . && rm -rf "$2"; }
if [[ $run -eq 1 ]]; then
  work=$(mktemp -d)
  # 300 s beside the bench (one call), 500 s alone: at cc5395b the label's tests took 144 s and
  # steps 1 and 2 together 477 s with three reruns; two reruns were added since.
  OUT=$work timeout $([[ $bench -eq 1 ]] && echo 300 || echo 500) bash scripts/gpu-run.sh 2>&1 |
    grep -vE "^\[v4-tiny" | tail -26
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  keep run "$work"
fi
if [[ $bench -eq 1 ]]; then
  work=$(mktemp -d)
  OUT=$work timeout 400 bash scripts/gpu-bench.sh --steps 2>&1 | sed -n '/side by side/,/== HF transformers/p'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  cp "$work/steps-compare.txt" "$final/" 2>/dev/null || true
  keep bench "$work"
fi
if [[ $profile -eq 1 ]]; then
  work=$(mktemp -d)
  OUT=$work timeout 120 bash scripts/gpu-profile.sh pf8k 'TmaLinearKernel|WgmmaLinearKernel|ExpertsWgmmaKernel|ExpertsPreFoldedKernel|ExpertsPreFoldedTmaKernel|ExpertsFp4InBlockKernel|ExpertsFp4RegistersTmaKernel|PreFoldKernel|SplitBf16GroupedKernel|SplitBf16GroupedTmaKernel' 16 -- \
    --no-decode --prompts 8192 --tensor-cores --fp8-activations 2>&1 | cut -c1-32,88-
  # Every kernel of a batch-1 decode step at 8k with every reference rounding (~110 launches a
  # step: which of them hold the step's 2.5 ms against its 0.41 ms floor).
  OUT=$work timeout 200 bash scripts/gpu-profile.sh d1ref '.' 130 -- --batches 1 --contexts 8192 --no-prefill \
    --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16 2>&1 | cut -c1-32,88-
  # The row kernels of an 8k prefill's first layer (hc mixes and posts, norms, round trips).
  OUT=$work timeout 90 bash scripts/gpu-profile.sh pf8k-rows 'HcMix|HcSinkhorn|HcPost|RmsNorm|RoundTrip' 12 -- \
    --no-decode --prompts 8192 --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16 2>&1 | cut -c1-32,88-
  # The dense-weight linears (`dense_linear`: the compressors' and the indexer's BF16 linears)
  # on warpgroup-MMA split-BF16 (DenseSplitKernel, version 22), layers 0-1.
  OUT=$work timeout 90 bash scripts/gpu-profile.sh pf8k-dense 'DenseSplit' 8 -- \
    --no-decode --prompts 8192 --tensor-cores --fp8-activations --kv-fp8 --indexer-fp4 --attn-out-bf16 --attn-in-bf16 2>&1 | cut -c1-32,88-
  # The TMA-fed pre-folded experts at 128-token tiles (14b, off by default: slower, 51.6 against
  # 46.6 ms; where its time goes: stalls, occupancy at 255 registers and spills).
  DEEPINFER_TMA_EXPERTS=128 OUT=$work timeout 90 bash scripts/gpu-profile.sh pf8k-experts128 \
    'ExpertsPreFoldedTmaKernel' 3 -- --no-decode --prompts 8192 --tensor-cores --fp8-activations 2>&1 | cut -c1-32,88-
  keep profile "$work"
fi
exit $status
