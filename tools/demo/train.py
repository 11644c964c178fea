"""Train the DeepInfer demo model (a small DeepSeek-V4) with tools/dsv4, then export and evaluate.

  python3 -m tools.demo.train --out OUT_DIR [--minutes 8] [--batch 64] [--seq 512]

Data: tools/demo/.data/{train,heldout}.bin (uint16 ids) and meta.json from build_corpus.py.
Writes to OUT_DIR: model-0000N.safetensors shards (official V4 names, BF16 + F32/I64 where
shipped; each shard < 16 MiB), config.json, train_log.json (loss curve, final metrics, the
BF16 vs FP8/FP4 held-out comparison).

Losses: next-token CE + 0.5 x MTP CE (slot i: trunk streams at i + embedding of token i+1 ->
token i+2) + lightning-indexer KL (indexer inputs detached: the indexer learns to match the
main attention's distribution over the visible compressed rows, averaged over heads; the rest
of the model never sees this loss). Score-routed layers balance their experts with the
aux-loss-free selection bias (bias += u * sign(mean load - load)); hash layers use a fixed
tid2eid table balanced by training-token frequency.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from tools.dsv4.model import Config, Transformer
from tools.dsv4 import checkpoint as ckpt

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, ".data")


def demo_config(vocab_size: int) -> Config:
    return Config(
        vocab_size=vocab_size, dim=256, n_layers=7, n_heads=8, head_dim=128, rope_dim=64,
        q_lora_rank=128, o_groups=2, o_lora_rank=128, window=64,
        compress_ratios=[0, 0, 4, 128, 4, 128, 4, 0],
        index_n_heads=8, index_head_dim=128, index_topk=32,
        hc_mult=4, hc_iters=20, hc_eps=1e-6,
        n_experts=8, n_shared=1, topk_experts=2, moe_inter=128, n_hash_layers=3,
        route_scale=1.5, swiglu_limit=10.0, norm_eps=1e-6,
        rope_theta=10000.0, compress_rope_theta=160000.0, rope_factor=8.0, original_seq_len=512,
        beta_fast=32, beta_slow=1, n_mtp=1, max_position_embeddings=4096)


def balanced_tid2eid(counts: np.ndarray, n_experts: int, k: int, seed: int) -> torch.Tensor:
    """Each token gets k distinct experts; tokens, most frequent first, go to the least-loaded."""
    rng = np.random.default_rng(seed)
    load = np.zeros(n_experts)
    out = np.zeros((len(counts), k), dtype=np.int64)
    order = np.argsort(-counts, kind="stable")
    for tok in order:
        jitter = rng.random(n_experts) * 1e-6
        pick = np.argsort(load + jitter)[:k]
        out[tok] = pick
        load[pick] += counts[tok] + 1e-3
    return torch.from_numpy(out)


def init_weights(model: Transformer, token_counts: np.ndarray, seed=0):
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    out_std = 0.02 / math.sqrt(2 * (cfg.n_layers + cfg.n_mtp))
    S = cfg.hc_mult
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith("attn_sink") or name.endswith(".ape") or name.endswith("gate.bias"):
                p.zero_()
            elif "hc_" in name and name.endswith("_fn"):
                p.normal_(0, 0.02, generator=g)
            elif "hc_" in name and name.endswith("_scale"):
                p.fill_(0.1)
            elif "hc_" in name and name.endswith("_base"):
                p.zero_()
                if p.numel() == (2 + S) * S:            # comb part starts near the identity
                    p[2 * S:].view(S, S).copy_(torch.eye(S) * 3.0)
            elif name.endswith("wo_b.weight") or name.endswith("w2.weight"):
                p.normal_(0, out_std, generator=g)
            elif p.dim() == 2:
                p.normal_(0, 0.02, generator=g)
        for i, layer in enumerate(model.layers):
            if layer.ffn.gate.hash:
                layer.ffn.gate.tid2eid.copy_(balanced_tid2eid(token_counts, cfg.n_experts, cfg.topk_experts, seed + i))


def param_groups(model, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() == 2 and "hc_" not in n and "embed" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def update_route_bias(model, u=1e-3):
    with torch.no_grad():
        blocks = list(model.layers) + list(model.mtp)
        for b in blocks:
            gate = b.ffn.gate
            if gate.hash or b.ffn.last_sel is None:
                continue
            load = torch.bincount(b.ffn.last_sel.flatten(), minlength=model.cfg.n_experts).float()
            gate.bias += u * torch.sign(load.mean() - load)


def losses(model, win, train=True, mtp_w=0.5, idx_w=1.0):
    ids = win[:, :-1]
    out = model(ids, want_mtp=True, train_indexer=train)
    V = model.cfg.vocab_size
    lm = F.cross_entropy(out["logits"].reshape(-1, V), win[:, 1:].reshape(-1))
    mtp = F.cross_entropy(out["mtp_logits"].reshape(-1, V), win[:, 2:].reshape(-1))
    total = lm + mtp_w * mtp
    il = model.index_loss() if train else None
    if il is not None:
        total = total + idx_w * il
    return total, lm, mtp, il, out


@torch.no_grad()
def evaluate(model, data: torch.Tensor, seq: int, batch: int, max_windows=None, autocast=True):
    """Non-overlapping windows of seq+1 tokens over `data`; returns mean NLL, MTP top-1 acc."""
    model.eval()
    n = (data.numel() - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    nll_sum, cnt, mtp_hit, mtp_cnt, mtp_nll, hit = 0.0, 0, 0, 0, 0.0, 0
    dev = data.device
    for s in range(0, n, batch):
        idx = torch.arange(s, min(n, s + batch), device=dev)[:, None] * seq + torch.arange(seq + 1, device=dev)
        win = data[idx].long()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast and dev.type == "cuda"):
            out = model(win[:, :-1], want_mtp=True)
        V = model.cfg.vocab_size
        nll_sum += F.cross_entropy(out["logits"].float().reshape(-1, V), win[:, 1:].reshape(-1), reduction="sum").item()
        cnt += win[:, 1:].numel()
        hit += (out["logits"].argmax(-1) == win[:, 1:]).sum().item()
        ml = out["mtp_logits"].float()
        mtp_nll += F.cross_entropy(ml.reshape(-1, V), win[:, 2:].reshape(-1), reduction="sum").item()
        mtp_hit += (ml.argmax(-1) == win[:, 2:]).sum().item()
        mtp_cnt += win[:, 2:].numel()
    model.train()
    return {"nll": nll_sum / cnt, "ppl": math.exp(nll_sum / cnt), "tokens": cnt, "top1_acc": hit / cnt,
            "mtp_top1_acc": mtp_hit / mtp_cnt, "mtp_nll": mtp_nll / mtp_cnt}


def save_shards(model, out_dir, fmt="bf16", max_bytes=15 * 2 ** 20):
    from safetensors.torch import save_file
    sd = ckpt.official_state_dict(model, fmt)
    shards, cur, size = [], {}, 0
    for k in sorted(sd):
        b = sd[k].numel() * sd[k].element_size()
        if cur and size + b > max_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k]
        size += b
    shards.append(cur)
    names = []
    for i, sh in enumerate(shards):
        nm = f"{fmt}-{i:05d}.safetensors"
        save_file(sh, os.path.join(out_dir, nm), metadata={"format": "pt"})
        names.append(nm)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=8.0, help="training wall-clock budget")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--compile", action="store_true", help="torch.compile the mHC mixing")
    ap.add_argument("--eval-every", type=float, default=60.0, help="seconds")
    ap.add_argument("--final-eval-windows", type=int, default=0, help="0 = all held-out windows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-export", action="store_true")
    args = ap.parse_args()

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    meta = json.load(open(os.path.join(DATA, "meta.json")))
    train_np = np.fromfile(os.path.join(DATA, "train.bin"), dtype=np.uint16)
    held_np = np.fromfile(os.path.join(DATA, "heldout.bin"), dtype=np.uint16)
    V = meta["vocab_size"]
    counts = np.bincount(train_np, minlength=V).astype(np.float64)
    train = torch.from_numpy(train_np.astype(np.int32)).to(dev)
    held = torch.from_numpy(held_np.astype(np.int32)).to(dev)

    cfg = demo_config(V)
    model = Transformer(cfg)
    init_weights(model, counts, args.seed)
    model.to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in model.mtp.parameters())
    print(f"params {n_params / 1e6:.2f}M (MTP {n_mtp / 1e6:.2f}M), train tokens {train.numel()}, "
          f"heldout tokens {held.numel()}, device {dev}", flush=True)
    if args.compile:
        import tools.dsv4.model as M
        M.hc_pre = torch.compile(M.hc_pre, dynamic=False)

    opt = torch.optim.AdamW(param_groups(model, args.wd), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=dev.type == "cuda")
    budget = args.minutes * 60
    log = {"args": vars(args), "config": cfg.to_hf(), "params": n_params, "curve": [], "evals": []}
    t0 = time.time()
    last_eval = t0
    step = 0
    tokens = 0
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    T, B = args.seq, args.batch
    while True:
        el = time.time() - t0
        prog = el / budget if not args.max_steps else step / args.max_steps
        if prog >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(prog, 1.0))))
        for gp in opt.param_groups:
            gp["lr"] = lr
        starts = torch.randint(0, train.numel() - T - 2, (B,), device=dev, generator=gen)
        win = train[starts[:, None] + torch.arange(T + 1, device=dev)].long()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            total, lm, mtp, il, _ = losses(model, win)
        opt.zero_grad(set_to_none=True)
        total.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        update_route_bias(model)
        step += 1
        tokens += B * T
        if step % 25 == 0 or step <= 3:
            rec = {"step": step, "t": round(time.time() - t0, 1), "tokens": tokens, "lr": lr,
                   "loss": lm.item(), "mtp_loss": mtp.item(), "index_kl": None if il is None else il.item(),
                   "grad_norm": gn.item(), "tok_per_s": round(tokens / (time.time() - t0)),
                   "mem_gb": round(torch.cuda.max_memory_allocated() / 2 ** 30, 1) if dev.type == "cuda" else 0}
            log["curve"].append(rec)
            print(json.dumps(rec), flush=True)
        if time.time() - last_eval > args.eval_every:
            ev = evaluate(model, held, T, B, max_windows=64)
            ev.update(step=step, t=round(time.time() - t0, 1))
            log["evals"].append(ev)
            print("eval", json.dumps(ev), flush=True)
            last_eval = time.time()
    train_time = time.time() - t0
    log["train_seconds"] = train_time
    log["steps"] = step
    log["train_tokens_seen"] = tokens
    print(f"trained {step} steps, {tokens / 1e6:.1f}M tokens in {train_time:.0f}s", flush=True)

    # final numbers: last-100-step train loss, full held-out (fp32 math, no autocast)
    tail = [r["loss"] for r in log["curve"][-4:]]
    log["final_train_loss"] = sum(tail) / len(tail)
    fw = args.final_eval_windows or None
    ev = evaluate(model, held, T, B, max_windows=fw, autocast=False)
    ev_tr = evaluate(model, train[: held.numel()], T, B, max_windows=fw, autocast=False)
    log["final_heldout"] = ev
    log["final_train_subset"] = ev_tr
    log["unigram_heldout_nll"] = meta["unigram_heldout_nll"]
    log["unigram_heldout_ppl"] = meta["unigram_heldout_ppl"]
    print("final heldout", json.dumps(ev), "train-subset", json.dumps(ev_tr), flush=True)

    if not args.no_export:
        # export BF16 (the shipped format) and evaluate exactly those weights; then FP8/FP4
        model.cpu()
        names = save_shards(model, args.out, "bf16")
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(cfg.to_hf(), f, indent=2)
        log["shards"] = names
        for fmt in ("bf16", "fp8"):
            sd = ckpt.official_state_dict(model, fmt)
            import tempfile
            from safetensors.torch import save_file
            with tempfile.TemporaryDirectory() as td:
                save_file(sd, os.path.join(td, "model.safetensors"))
                c = cfg.to_hf()
                json.dump(c, open(os.path.join(td, "config.json"), "w"))
                m2, _ = ckpt.load_model(td, device=dev)
            if fmt == "fp8":
                m2.quant.all(True)
            e = evaluate(m2, held, T, B, max_windows=fw, autocast=False)
            log[f"heldout_{fmt}_export"] = e
            print(f"heldout {fmt} export (fp32 math{', quant sim on' if fmt == 'fp8' else ''})", json.dumps(e), flush=True)
            del m2
    json.dump(log, open(os.path.join(args.out, "train_log.json"), "w"), indent=1)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
