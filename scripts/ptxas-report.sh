#!/usr/bin/env bash
# Here (no GPU needed), after scripts/gpu-build.sh configured build/cuda: compiles one CUDA source of
# the build for sm_90a alone, with ptxas's report on, and prints per kernel whose mangled name
# matches REGEX its registers, stack and spills, plus every ptxas performance message (C75xx:
# e.g. C7510, wgmma serialized by a function call; C7517, a wait injected before accumulator
# registers are read), which a normal build does not show. Leaves the cubin at $CUBIN
# (default /tmp/ptxas-report.cubin) for nvdisasm.
#
#   bash scripts/ptxas-report.sh [SOURCE] [REGEX]
#   e.g. bash scripts/ptxas-report.sh src/kernels/cuda/linear.cu 'ExpertsWgmma|WgmmaLinear'
set -euo pipefail
cd "$(dirname "$0")/.."
source=${1:-src/kernels/cuda/linear.cu}
regex=${2:-.}
cubin=${CUBIN:-/tmp/ptxas-report.cubin}
[[ -f build/cuda/build.ninja ]] || { echo "no build/cuda: run scripts/gpu-build.sh first" >&2; exit 2; }
name=$(basename "$source")
target=$(cd build/cuda && ninja -t targets all | grep -oE "^[^:]*/${name//./\\.}\.o" | head -1)
[[ -n $target ]] || { echo "no object for $source in build/cuda" >&2; exit 2; }
cmd=$(cd build/cuda && ninja -t commands "$target" | tail -1)
cmd=$(echo "$cmd" | sed -E "s/--generate-code=arch=compute_90a,code=\[(compute_90a,)?sm_90a\]/-arch=sm_90a/; \
  s/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -c / -cubin /; s# -o [^ ]+\.o# -o $cubin#")
log=$(mktemp)
(cd build/cuda && eval "$cmd -Xptxas -v") >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
demangle() { sed -E 's/_ZN9deepinfer4cuda[0-9]+_GLOBAL__N__[0-9a-f]+_[0-9]+_[a-z_]+_cu_[0-9a-f]{8}//g'; }
grep -E "\(C75[0-9]+\)" "$log" | demangle | cut -c1-220 || true
grep -A3 -E "Compiling entry function '[^']*($regex)" "$log" | grep -E "Compiling|Used|stack frame" |
  sed -E "s/ptxas info    : Compiling entry function '([^']*)' for 'sm_90a'/\1/" | demangle | cut -c1-160
rm -f "$log"
