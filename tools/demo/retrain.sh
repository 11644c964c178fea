#!/usr/bin/env bash
# One-command retrain of models/deepinfer-v4-demo (see tools/README.md).
#   bash tools/demo/retrain.sh            # on a machine with a CUDA GPU and PyTorch (~10 min)
# Env: MINUTES (training wall-clock budget, default 7.6), RUN (output dir of the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${MINUTES:-7.6}
RUN=${RUN:-tools/demo/.data/run}
PKGS="dict-gcide wordnet-base fortunes fortunes-min debian-handbook dict-jargon dict-devil debian-reference-en debian-faq"
if [ ! -f tools/demo/.data/train.bin ]; then
  if [ ! -f /usr/share/dictd/gcide.index ] || [ ! -f /usr/share/wordnet/data.noun ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS
  fi
  python3 tools/demo/build_corpus.py                 # corpus, tokenizer -> models/deepinfer-v4-demo/, token arrays
fi
python3 -m tools.demo.train --out "$RUN" --minutes "$MINUTES"   # trains, exports BF16 shards, evaluates BF16 and FP8/FP4
python3 -m tools.demo.assemble "$RUN"                # -> models/deepinfer-v4-demo/model.safetensors (BF16), config, generation_config
python3 -m tools.dsv4.convert models/deepinfer-v4-demo "$RUN/fp8" --to fp8   # the shipped format: FP8 dense + FP4 experts
cp "$RUN/fp8/model.safetensors" "$RUN/fp8/config.json" models/deepinfer-v4-demo/
python3 -m tools.demo.make_greedy_golden             # -> tests/data/demo/greedy_golden.json
python3 -m tools.dsv4.check_goldens                  # the implementation still matches DeepSeek's reference
