#!/usr/bin/env bash
# Here (no GPU needed), after scripts/gpu-build.sh configured build/cuda: compiles only the device
# code of a CUDA source that comes before its first line matching STOP (default: linear.cu's
# "// ---- host side"), keeping the kernel instantiations named on the command line, for sm_90a
# with ptxas's report. ~10 s a try where scripts/ptxas-report.sh's whole linear.cu takes ~80.
# Prints ptxas's performance messages (C75xx: C7517, a wait injected before accumulator registers
# are read; C7518, wgmmas serialized) for every kernel compiled, then for the named kernels their
# registers, stack and spills, and their QGMMA / HGMMA count, how many of them commit a group (`gsb0`) and its
# WARPGROUP.DEPBARs (as many commits as MMAs: every wgmma waited for alone). Needs cuobjdump
# (CUOBJDUMP, else the one on PATH) for the last part. Leaves the cubin and PTX in /tmp.
#
#   bash scripts/ptxas-kernels.sh [--source FILE] [--stop REGEX] [--namespace NS] KERNEL...
#   e.g. bash scripts/ptxas-kernels.sh 'ExpertsFp4RegistersTmaKernel<false>' 'ExpertsFp4RegistersTmaKernel<true>'
# KERNEL: a kernel (with its template arguments) visible at STOP, inside the source's anonymous
# namespace within NS (default deepinfer::cuda), where linear.cu's kernels live.
set -euo pipefail
cd "$(dirname "$0")/.."
source=src/kernels/cuda/linear.cu
stop='^// ---- host side'
namespace='deepinfer::cuda'
while [[ $# -gt 0 ]]; do
  case $1 in
    --source) source=$2; shift 2 ;;
    --stop) stop=$2; shift 2 ;;
    --namespace) namespace=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: $0 [--source FILE] [--stop REGEX] [--namespace NS] KERNEL..." >&2; exit 2; }
[[ -f build/cuda/build.ninja ]] || { echo "no build/cuda: run scripts/gpu-build.sh first" >&2; exit 2; }
line=$(grep -n -m1 -E "$stop" "$source" | cut -d: -f1)
[[ -n $line ]] || { echo "no line of $source matches '$stop'" >&2; exit 2; }
work=/tmp/ptxas-kernels
mkdir -p "$work"
cut_source=$work/cut.cu
head -n $((line - 1)) "$source" >"$cut_source"
{
  i=0
  for kernel in "$@"; do
    echo "void* PtxasKernelsKeep$i() { return reinterpret_cast<void*>(&$kernel); }"
    i=$((i + 1))
  done
  echo "}  // namespace"
  echo "void* PtxasKernelsKeep() {"
  echo "  void* all[] = {$(for ((j = 0; j < i; ++j)); do printf 'PtxasKernelsKeep%d(), ' "$j"; done)};"
  echo "  return all[0];"
  echo "}"
  echo "}  // namespace $namespace"
} >>"$cut_source"
name=$(basename "$source")
target=$(cd build/cuda && ninja -t targets all | grep -oE "^[^:]*/${name//./\\.}\.o" | head -1)
[[ -n $target ]] || { echo "no object for $source in build/cuda" >&2; exit 2; }
cmd=$(cd build/cuda && ninja -t commands "$target" | tail -1)
cmd=$(echo "$cmd" | sed -E "s/--generate-code=arch=compute_90a,code=\[(compute_90a,)?sm_90a\]/-arch=sm_90a/; \
  s/ -MD -MT [^ ]+ -MF [^ ]+//; s# -o [^ ]+\.o# -o OUTPUT#; s#[^ ]*${source//./\\.}#$cut_source#")
log=$work/ptxas.log
(cd build/cuda && eval "${cmd/OUTPUT/$work/cut.cubin} -cubin -Xptxas -v" && eval "${cmd/OUTPUT/$work/cut.ptx} -ptx") \
  >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
demangle() { sed -E 's/_ZN9deepinfer4cuda[0-9]+_GLOBAL__N__[0-9a-f]+_[0-9]+_[a-z_]+_cu_[0-9a-f]{8}//g'; }
grep -E "\(C75[0-9]+\)" "$log" | demangle | cut -c1-220 || true
names=$(for kernel in "$@"; do printf '%s|' "${kernel%%<*}"; done)
names=${names%|}
grep -A3 -E "Compiling entry function '[^']*($names)" "$log" | grep -E "Compiling|Used|stack frame" |
  sed -E "s/ptxas info    : Compiling entry function '([^']*)' for 'sm_90a'/\1/" | demangle | cut -c1-160
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[[ -n $cuobjdump ]] || { echo "(no cuobjdump: the MMA counts are left out)"; exit 0; }
"$cuobjdump" -sass "$work/cut.cubin" | python3 -c '
import re, sys
for f in re.split(r"\n\s*Function : ", sys.stdin.read())[1:]:
    name = f.split("\n")[0].strip()
    mma = re.findall(r"[QH]GMMA[^;]*;", f)
    if not mma or not re.search(sys.argv[1], name):
        continue
    commits = sum("gsb0" in m for m in mma)
    waits = len(re.findall(r"WARPGROUP\.DEPBAR", f))
    print("%s: %d wgmma, %d group commits, %d waits" % (name[-90:], len(mma), commits, waits))
' "$names"
