#!/usr/bin/env bash
# Installs what the tests need (Debian packages, the pinned Python references and clients),
# builds the CPU preset and runs the whole CPU test suite (labels unit, model, e2e). Prints
# CTest's summary; exits non-zero if anything fails.
#   scripts/test.sh            everything
#   scripts/test.sh -L unit    extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --python
cmake --preset cpu
cmake --build --preset cpu
ctest --preset cpu -j "$(nproc)" "$@"
