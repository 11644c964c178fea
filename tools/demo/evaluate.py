"""Held-out evaluation of a model dir with tools/dsv4 (fp32 math; CPU or GPU).

  python3 -m tools.demo.evaluate --model models/deepinfer-v4-demo [--quant-sim] [--windows 16]

Reports mean next-token NLL / perplexity and top-1 accuracy on held-out windows of 512 tokens
(tools/demo/.data/heldout.bin, never trained on), the MTP block's top-1 agreement with the
actual next-next token, and the unigram baseline on the same tokens. --quant-sim turns on the
reference's FP8 activation / KV and FP4 indexer roundings (use with an FP8/FP4 model dir).
"""
import argparse
import json
import math
import os

import numpy as np
import torch

from tools.dsv4.checkpoint import load_model
from tools.demo.train import DATA, evaluate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--windows", type=int, default=16, help="0 = all held-out windows")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--quant-sim", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu":
        torch.set_num_threads(1)
    model, cfg = load_model(args.model, device=dev)
    if args.quant_sim:
        model.quant.all(True)
    held = torch.from_numpy(np.fromfile(os.path.join(DATA, "heldout.bin"), dtype=np.uint16).astype(np.int32)).to(dev)
    train = np.fromfile(os.path.join(DATA, "train.bin"), dtype=np.uint16)
    r = evaluate(model, held, args.seq, 8, max_windows=args.windows or None, autocast=False)
    # unigram baseline on exactly the scored tokens
    cnt = np.bincount(train, minlength=cfg.vocab_size).astype(np.float64) + 1.0
    logp = np.log(cnt / cnt.sum())
    n = r["tokens"] // args.seq
    h = held.cpu().numpy()
    scored = np.concatenate([h[i * args.seq + 1:(i + 1) * args.seq + 1] for i in range(n)])
    r["unigram_nll"] = float(-logp[scored].mean())
    r["unigram_ppl"] = math.exp(r["unigram_nll"])
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
