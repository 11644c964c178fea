#!/usr/bin/env bash
# `deepinfer generate MODEL_DIR --prompt-ids ... --max-tokens N` prints the greedy token ids
# (issue 2, acceptance 6): on a reference golden they must be the golden's continuation.
set -euo pipefail
deepinfer=$1 golden_dir=$2 n=$3
ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt_ids'])))" "$golden_dir/golden.json")
want=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['greedy_continuation'][:int(sys.argv[2])])))" "$golden_dir/golden.json" "$n")
got=$("$deepinfer" --log-level warn generate "$golden_dir" --prompt-ids "$ids" --max-tokens "$n" --ignore-eos)
echo "got:  $got"
echo "want: $want"
[[ "$got" == "$want" ]]
