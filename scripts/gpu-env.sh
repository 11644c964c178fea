# Sourced by scripts/gpu-run.sh, gpu-bench.sh and gpu-sanitize-parallel.sh on the GPU machine:
# unpacks build/gpu-dist, points the loader at the libraries it carries, finds cuBLASLt for the
# ceilings (dlopen'ed: bench/ceilings.h) unless DEEPINFER_CUBLASLT already names it, and defines
# use_test_data (what the test binary reads from the repository).
# DEEPINFER_DIST names another unpacked-here build (gpu-session.sh's variants of another commit).
dist=${DEEPINFER_DIST:-build/gpu-dist}
export LD_LIBRARY_PATH=$PWD/$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Binaries travel as one xz-compressed tar (scripts/gpu-build.sh; older builds: one .xz each);
# Python unpacks them where xz is missing.
if [[ -e $dist/bins.tar.xz ]]; then
  if command -v xz >/dev/null; then
    tar -C "$dist" -xJf "$dist/bins.tar.xz"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$dist/bins.tar.xz" "$dist"
  fi && rm "$dist/bins.tar.xz"
fi
for f in $dist/*.xz; do
  [[ -e "$f" ]] || continue
  if command -v xz >/dev/null; then
    xz -d -f "$f"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], "wb"))' "$f" &&
      rm "$f" && chmod +x "${f%.xz}"
  fi
done
if [[ -z ${DEEPINFER_CUBLASLT:-} ]]; then
  for lib in $(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13/ {print $NF}') /usr/local/cuda/lib64/libcublasLt.so.13 \
             /usr/local/cuda-13*/lib64/libcublasLt.so.13 \
             $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cublas/lib/libcublasLt.so.13") for p in nvidia.__path__))' 2>/dev/null); do
    if [[ -e $lib ]]; then export DEEPINFER_CUBLASLT=$lib; break; fi
  done
fi

# CUPTI for DEEPINFER_KERNEL_TRACE (bench/kernel_trace.h; dlopen'ed): the toolkit's, else the
# nvidia-cuda-cupti wheel's.
if [[ -z ${DEEPINFER_CUPTI:-} ]]; then
  for lib in $(ldconfig -p 2>/dev/null | awk '/libcupti\.so\.13/ {print $NF}') /usr/local/cuda/lib64/libcupti.so.13 \
             /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
             $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib/libcupti.so.13") for p in nvidia.__path__ for d in ("cu13", "cuda_cupti")))' 2>/dev/null); do
    if [[ -e $lib ]]; then export DEEPINFER_CUPTI=$lib; break; fi
  done
fi

# For the gpu tests: the repository (DEEPINFER_SOURCE_DIR) and the reference goldens, which travel
# as archives, unpacked where the model tests read them (DEEPINFER_GOLDENS_DIR).
use_test_data() {
  export DEEPINFER_SOURCE_DIR=$PWD
  export DEEPINFER_GOLDENS_DIR=/tmp/deepinfer-goldens
  # Once per machine: scripts running at the same time (gpu-session.sh) must not rewrite files
  # that the other's tests are reading.
  if [[ ! -e $DEEPINFER_GOLDENS_DIR/.unpacked ]]; then
    mkdir -p "$DEEPINFER_GOLDENS_DIR"
    for a in tests/data/goldens-v4/*.tgz; do tar -xzf "$a" -C "$DEEPINFER_GOLDENS_DIR"; done
    touch "$DEEPINFER_GOLDENS_DIR/.unpacked"
  fi
}

# For Nsight Compute (gpu-profile.sh, gpu-stalls.sh): the ncu binary, or an error.
find_ncu() {
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [[ -n $ncu ]] || { echo "ncu not found" >&2; return 2; }
}
# The profiled run: eager `bench steps` on the 3-layer Flash-shaped model, without the per-op
# profile or the ceilings, two timed iterations; arguments follow it.
profiled_bench_steps=("$dist/deepinfer" bench steps bench/configs/v4-flash-3layer --load-format dummy --no-ceilings
                      --no-graphs --no-profile --iterations 2 --prefill-iterations 1)
