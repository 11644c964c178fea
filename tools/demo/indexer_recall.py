"""How well the trained lightning indexer picks rows: on held-out windows, for every CSA query
that sees more compressed rows than index_topk, the share of the main attention's mass (over
ALL visible compressed rows, averaged over heads) that falls on the indexer's top-k rows,
against two baselines: the k most recent rows, and k random visible rows.

  python3 -m tools.demo.indexer_recall [--model models/deepinfer-v4-demo] [--windows 4]
"""
import argparse
import json
import os

import numpy as np
import torch

from tools.dsv4.checkpoint import load_model
from tools.dsv4 import model as M
from tools.demo.train import DATA


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "..", "models", "deepinfer-v4-demo"))
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg = load_model(args.model)
    held = np.fromfile(os.path.join(DATA, "heldout.bin"), dtype=np.uint16).astype(np.int64)
    stats = {}
    orig = M.Attention._index_select

    def spy(self, x, qr, cos_h, sin_h, vis, main_scores, train_indexer):
        sel = orig(self, x, qr, cos_h, sin_h, vis, main_scores, train_indexer)
        k = cfg.index_topk
        tgt = torch.nan_to_num(torch.softmax(main_scores.float().masked_fill(~vis, float("-inf")), -1)).mean(1)
        nvis = vis.sum(-1)                                                   # [T]
        q = nvis > k
        n = vis.shape[-1]
        idx = torch.arange(n)
        recent = vis & (idx[None, :] >= (nvis[:, None] - k))
        g = torch.Generator().manual_seed(0)
        rnd = torch.rand(vis.shape, generator=g).masked_fill(~vis, -1.0)
        rsel = torch.zeros_like(vis).scatter_(-1, rnd.topk(k, -1).indices, True) & vis
        s = stats.setdefault(self.layer_tag, {"indexer": [], "recent": [], "random": []})
        s["indexer"].append((tgt * sel).sum(-1)[:, q].flatten())
        s["recent"].append((tgt * recent).sum(-1)[:, q].flatten())
        s["random"].append((tgt * rsel).sum(-1)[:, q].flatten())
        return sel

    M.Attention._index_select = spy
    for i, l in enumerate(model.layers):
        l.attn.layer_tag = f"layer{i}"
    with torch.no_grad():
        for w in range(args.windows):
            ids = torch.from_numpy(held[w * args.seq:(w + 1) * args.seq])[None]
            model(ids, want_mtp=False)
    out = {L: {k: round(torch.cat(v).mean().item(), 4) for k, v in s.items()} for L, s in stats.items()}
    out["note"] = (f"mean share of main-attention mass over visible compressed rows captured by {cfg.index_topk} "
                   f"rows, for queries seeing > {cfg.index_topk} rows ({args.windows} held-out windows of {args.seq})")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
