#!/usr/bin/env bash
# Here (no GPU needed), after scripts/gpu-build.sh configured build/cuda: compiles one CUDA source of
# the build for sm_90a alone, with ptxas's report on, and prints per kernel whose mangled name
# matches REGEX its registers, stack and spills, plus every ptxas performance message (C75xx:
# e.g. C7510, wgmma serialized by a function call; C7517, a wait injected before accumulator
# registers are read; C7518, wgmmas serialized), which a normal build does not show. Where
# cuobjdump is found (CUOBJDUMP, else PATH), also each matching kernel's QGMMA / HGMMA count, how
# many of them commit a group (`gsb0`) and its WARPGROUP.DEPBARs: as many commits as MMAs means
# every wgmma waited for alone. Leaves the cubin at $CUBIN (default /tmp/ptxas-report.cubin).
#
#   bash scripts/ptxas-report.sh [SOURCE] [REGEX]
#   e.g. bash scripts/ptxas-report.sh src/kernels/cuda/linear.cu 'ExpertsWgmma|WgmmaLinear'
#
# --alone: only the source's device code before its first line matching STOP (default: linear.cu's
# "// ---- host side"), with the named kernel instantiations kept (each visible there, in the
# source's anonymous namespace within NS, default deepinfer::cuda); REGEX is their names. ~10 s a
# try where the whole linear.cu takes ~80. Also leaves the PTX beside the cubin (.ptx), whose line
# numbers ptxas's C75xx messages give.
#
#   bash scripts/ptxas-report.sh --alone [--stop STOP] [--namespace NS] SOURCE KERNEL...
#   e.g. bash scripts/ptxas-report.sh --alone src/kernels/cuda/linear.cu 'ExpertsFp4RegistersTmaKernel<true>'
set -euo pipefail
cd "$(dirname "$0")/.."
cubin=${CUBIN:-/tmp/ptxas-report.cubin}
alone=0
stop='^// ---- host side'
namespace='deepinfer::cuda'
while [[ ${1:-} == --* ]]; do
  case $1 in
    --alone) alone=1; shift ;;
    --stop) stop=$2; shift 2 ;;
    --namespace) namespace=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source=${1:-src/kernels/cuda/linear.cu}
[[ -f build/cuda/build.ninja ]] || { echo "no build/cuda: run scripts/gpu-build.sh first" >&2; exit 2; }
compiled=$source
if [[ $alone -eq 1 ]]; then
  shift
  [[ $# -ge 1 ]] || { echo "usage: $0 --alone [--stop STOP] [--namespace NS] SOURCE KERNEL..." >&2; exit 2; }
  line=$(grep -n -m1 -E "$stop" "$source" | cut -d: -f1)
  [[ -n $line ]] || { echo "no line of $source matches '$stop'" >&2; exit 2; }
  compiled=${cubin%.cubin}-cut.cu
  head -n $((line - 1)) "$source" >"$compiled"
  {
    for ((i = 1; i <= $#; ++i)); do
      echo "void* PtxasReportKeep$i() { return reinterpret_cast<void*>(&${!i}); }"
    done
    echo "}  // namespace"
    echo "void* PtxasReportKeep() {"
    echo "  void* all[] = {$(for ((i = 1; i <= $#; ++i)); do printf 'PtxasReportKeep%d(), ' "$i"; done)};"
    echo "  return all[0];"
    echo "}"
    echo "}  // namespace $namespace"
  } >>"$compiled"
  regex=$(for kernel in "$@"; do printf '%s|' "${kernel%%<*}"; done)
  regex=${regex%|}
else
  regex=${2:-.}
fi
name=$(basename "$source")
target=$(cd build/cuda && ninja -t targets all | grep -oE "^[^:]*/${name//./\\.}\.o" | head -1)
[[ -n $target ]] || { echo "no object for $source in build/cuda" >&2; exit 2; }
cmd=$(cd build/cuda && ninja -t commands "$target" | tail -1)
cmd=$(echo "$cmd" | sed -E "s/--generate-code=arch=compute_90a,code=\[(compute_90a,)?sm_90a\]/-arch=sm_90a/; \
  s/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -c / -cubin /; s# -o [^ ]+\.o# -o $cubin#")
if [[ $alone -eq 1 ]]; then
  cmd=$(echo "$cmd" | sed -E "s#[^ ]*${source//./\\.}( |$)#$compiled\1#")
fi
log=$(mktemp)
(cd build/cuda && eval "$cmd -Xptxas -v") >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
if [[ $alone -eq 1 ]]; then
  ptx_cmd=$(echo "$cmd" | sed -E "s/ -cubin / -ptx /; s# -o $cubin# -o ${cubin%.cubin}.ptx#")
  (cd build/cuda && eval "$ptx_cmd") >>"$log" 2>&1 || { tail -30 "$log"; exit 1; }
fi
demangle() { sed -E 's/_ZN9deepinfer4cuda[0-9]+_GLOBAL__N__[0-9a-f]+_[0-9]+_[a-z_]+_cu_[0-9a-f]{8}//g'; }
grep -E "\(C75[0-9]+\)" "$log" | demangle | cut -c1-220 || true
grep -A3 -E "Compiling entry function '[^']*($regex)" "$log" | grep -E "Compiling|Used|stack frame" |
  sed -E "s/ptxas info    : Compiling entry function '([^']*)' for 'sm_90a'/\1/" | demangle | cut -c1-160
rm -f "$log"
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[[ -n $cuobjdump ]] || exit 0
"$cuobjdump" -sass "$cubin" | python3 -c '
import re, sys
for f in re.split(r"\n\s*Function : ", sys.stdin.read())[1:]:
    name = f.split("\n")[0].strip()
    mma = re.findall(r"[QH]GMMA[^;]*;", f)
    if mma and re.search(sys.argv[1], name):
        commits = sum("gsb0" in m for m in mma)
        waits = len(re.findall(r"WARPGROUP\.DEPBAR", f))
        print("%s: %d wgmma, %d group commits, %d waits" % (name[-90:], len(mma), commits, waits))
' "$regex"
