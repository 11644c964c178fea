#!/usr/bin/env bash
# Builds the GPU binaries on a CPU-only machine (nvcc cross-compiles for sm_90a) and gathers them
# into build/gpu-dist, small enough to carry to the GPU machine with the working tree:
#
#   scripts/gpu-build.sh                 # configure + build (preset `cuda`), then gather
#   device run: carry ["build/gpu-dist"], command "bash scripts/gpu-run.sh"
#
# The binaries link the CUDA runtime statically; scripts/gpu-run.sh prints `ldd` on the GPU
# machine so any other missing library shows up in the first run.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(deepinfer_gpu_tests deepinfer)
# sm_90a SASS alone (the H200 runs it; no PTX to JIT) and fatbins left uncompressed: nvcc's own
# compression hides the kernels the two binaries (and a base build, below) share from xz, which
# then stores them once (2026-12-02: linear.cu's object, two versions of it, 4.5 MB as xz over
# uncompressed fatbins against 15 MB over nvcc's compressed ones).
cmake --preset cuda -DDEEPINFER_TESTS=ON -DDEEPINFER_CUDA_ARCHS=90a-real -DCMAKE_CUDA_FLAGS=--compress-mode=none >/dev/null
cmake --build build/cuda --target "${targets[@]}"
dist=build/gpu-dist
rm -rf "$dist" && mkdir -p "$dist"
cp build/cuda/tests/gpu/deepinfer_gpu_tests build/cuda/deepinfer "$dist/"
strip --strip-unneeded "$dist"/*
# Libraries the GPU machine (Ubuntu 24.04) lacks travel along: spdlog (fmt, OpenBLAS, xxHash and
# PCRE2 are there).
mkdir -p "$dist/lib"
for lib in $(ldd "$dist"/deepinfer* | awk '/libspdlog/ {print $3}' | sort -u); do cp -L "$lib" "$dist/lib/"; done
# The repository itself takes most of the 64 MiB a device run may carry: ship the binaries as one
# xz stream (scripts/gpu-env.sh unpacks it). Both carry the same kernels, and one single-threaded
# stream whose window spans both stores them once: 7.3 MB where two .xz files took 13.1 (2026-12-01).
# The window is 192 MiB: at 66 MB a binary (2026-12-07) xz -9's 64 MiB no longer reached the
# second binary's copy of a kernel, and the archive doubled (7.0 -> 13.9 MB).
ldd "$dist/deepinfer_gpu_tests" | awk '{print "  " $1}'
ls "$dist/lib"
# BASE_BINARY=PATH (a `deepinfer` built at another commit, e.g. a copy of build/cuda/deepinfer
# made before the change) travels as base/deepinfer: gpu-session.sh --variant 'base;;;build/gpu-dist/base'
# then runs it beside this build in one call.
# EXTRA_BINARIES='NAME=PATH ...' likewise carries more builds, each as NAME/deepinfer
# (--variant 'NAME;;;build/gpu-dist/NAME'), e.g. a compile-time alternative of the change.
members=(deepinfer deepinfer_gpu_tests)
extras=()
[[ -n ${BASE_BINARY:-} ]] && extras+=("base=$BASE_BINARY")
for extra in ${EXTRA_BINARIES:-}; do extras+=("$extra"); done
for extra in "${extras[@]}"; do
  name=${extra%%=*} path=${extra#*=}
  [[ $name =~ ^[A-Za-z0-9_-]+$ && -f $path ]] || { echo "bad extra binary '$extra' (NAME=PATH)" >&2; exit 2; }
  mkdir -p "$dist/$name" && cp "$path" "$dist/$name/deepinfer" && strip --strip-unneeded "$dist/$name/deepinfer"
  members=("$name/deepinfer" "${members[@]}")
done
tar -C "$dist" -cf - "${members[@]}" | xz -T1 --lzma2=preset=9e,dict=192MiB >"$dist/bins.tar.xz"
rm -rf "$dist/deepinfer_gpu_tests" "$dist/deepinfer"
for extra in "${extras[@]}"; do rm -rf "${dist:?}/${extra%%=*}"; done
git rev-parse HEAD > "$dist/COMMIT"
git status --porcelain | grep -q . && echo dirty >> "$dist/COMMIT" || true
du -sh "$dist"
