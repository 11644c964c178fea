"""Assemble the shipped demo model from a training run's output.

  python3 -m tools.demo.assemble RUN_DIR [--dst models/deepinfer-v4-demo]

Merges the run's BF16 shards (official V4 names; written in shards only to fit the device
machine's 16 MiB per-file transfer limit) into one model.safetensors, copies config.json and
train_log.json, writes generation_config.json. The tokenizer files are already in DST
(build_corpus.py writes them there).
"""
import argparse
import glob
import json
import os
import shutil

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tools.dsv4.checkpoint import F32_PAT

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--dst", default=os.path.join(REPO, "models", "deepinfer-v4-demo"))
    args = ap.parse_args()
    sd = {}
    for p in sorted(glob.glob(os.path.join(args.run_dir, "bf16-*.safetensors"))):
        with safe_open(p, "pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                # shipped dtypes: F32 for hc_*, attn_sink, ape, gate.bias (a run made before the
                # F32 rule covered per-layer hc_* wrote those as BF16; upcasting is exact)
                sd[k] = t.float() if F32_PAT.match(k) else t
    assert sd, "no bf16-*.safetensors shards in run dir"
    os.makedirs(args.dst, exist_ok=True)
    save_file({k: sd[k].contiguous() for k in sorted(sd)}, os.path.join(args.dst, "model.safetensors"),
              metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(args.run_dir, "config.json")))
    cfg["transformers_version"] = "4.57.1"
    with open(os.path.join(args.dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gen = {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
           "do_sample": True, "temperature": 1.0, "top_p": 1.0}
    with open(os.path.join(args.dst, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    if os.path.exists(os.path.join(args.run_dir, "train_log.json")):
        shutil.copy(os.path.join(args.run_dir, "train_log.json"), os.path.join(args.dst, "train_log.json"))
    n = sum(t.numel() for t in sd.values())
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(args.dst, "*")))
    print(f"{len(sd)} tensors, {n / 1e6:.2f}M values, {args.dst}: {size / 2 ** 20:.1f} MiB in all")


if __name__ == "__main__":
    main()
