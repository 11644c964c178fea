"""Convert a DeepSeek-V4 model dir between the shipped weight formats.

  python3 -m tools.dsv4.convert SRC_DIR DST_DIR --to fp8    # FP8 e4m3 dense (128x128, e8m0 .scale)
                                                             # + FP4 e2m1 routed experts (1x32, e8m0)
  python3 -m tools.dsv4.convert SRC_DIR DST_DIR --to bf16   # dequantize back to BF16

FP8: wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b, shared experts, e_proj, h_proj (as the real
checkpoints). FP4: ffn.experts.E.w{1,2,3}, packed two per byte (low nibble = even column) in I8.
Everything else keeps its shipped dtype (BF16; F32 for hc_*, attn_sink, ape, gate.bias; I64
tid2eid). Tokenizer and generation config files are copied.
"""
import argparse
import os
import shutil

import torch

from .checkpoint import load_model, save_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--to", choices=["fp8", "bf16"], default="fp8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg = load_model(args.src)
    sd = save_model(model, args.dst, args.to)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(args.src, f)):
            shutil.copy(os.path.join(args.src, f), os.path.join(args.dst, f))
    size = os.path.getsize(os.path.join(args.dst, "model.safetensors"))
    kinds = {}
    for t in sd.values():
        kinds[str(t.dtype)] = kinds.get(str(t.dtype), 0) + 1
    print(f"wrote {args.dst}: {len(sd)} tensors {kinds}, model.safetensors {size / 2 ** 20:.1f} MiB")


if __name__ == "__main__":
    main()
