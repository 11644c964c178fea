#!/usr/bin/env bash
# Installs the build dependencies, builds the engine (CPU) and runs it on the shipped demo model
# (models/deepinfer-v4-demo, a 17M-parameter DeepSeek-V4 trained on English text):
#   scripts/demo.sh                      a greedy completion of a default prompt
#   scripts/demo.sh "Your prompt" [N]    of your prompt, N tokens (default 48)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu --target deepinfer
prompt=${1:-"<｜begin▁of▁sentence｜><｜User｜>What does \"ocean\" mean?<｜Assistant｜></think>"}
echo "prompt: $prompt"
./build/cpu/deepinfer --log-level warn generate --prompt "$prompt" --max-tokens "${2:-48}" --temperature 0
