#!/usr/bin/env bash
# Installs every system package DeepInfer builds or tests with, from Debian 12's archive.
# Idempotent: packages already present are skipped; safe to run again.
# Usage: scripts/install-deps.sh [--python]   (--python also installs the Python test clients)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 python3-pip
  libboost-dev libboost-system-dev   # Boost.Beast / Asio (HTTP server)
  nlohmann-json3-dev                 # JSON
  libpcre2-dev                       # tokenizer regexes (JIT, Unicode properties)
  libcli11-dev                       # command line
  libspdlog-dev libfmt-dev           # logging / formatting
  libopenblas-dev                    # CPU GEMM
  libxxhash-dev                      # prefix-cache hash chain
  libgtest-dev libgmock-dev          # tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd="sudo"; fi
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "system packages: all present"
fi

if [[ "${1:-}" == "--python" ]]; then
  # Python references and clients the tests drive (never torch: that stays in tools/).
  python3 -m pip install -q -r "$(dirname "$0")/../tests/requirements.txt"
fi
