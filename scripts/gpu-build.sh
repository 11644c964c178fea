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
cmake --preset cuda -DDEEPINFER_TESTS=ON >/dev/null
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
# stream with xz's 64 MiB window stores them once: 7.3 MB where two .xz files took 13.1 (2026-12-01).
ldd "$dist/deepinfer_gpu_tests" | awk '{print "  " $1}'
ls "$dist/lib"
tar -C "$dist" -cf - deepinfer_gpu_tests deepinfer | xz -9e -T1 >"$dist/bins.tar.xz"
rm "$dist/deepinfer_gpu_tests" "$dist/deepinfer"
git rev-parse HEAD > "$dist/COMMIT"
git status --porcelain | grep -q . && echo dirty >> "$dist/COMMIT" || true
du -sh "$dist"
