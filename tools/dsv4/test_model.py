"""Agreement tests for tools/dsv4 (CPU, fp32): the training forward (whole sequence) against
the incremental decode path (token by token, and one-shot prefill then decode), trunk and MTP,
plus the FP8/FP4 weight codecs. Not part of CI (needs torch).

  python3 -m tools.dsv4.test_model
"""
import sys

import torch

from .model import Config, Transformer
from .quant import (dequant_fp4_weight, dequant_fp8_weight, quantize_fp4_weight,
                    quantize_fp8_weight, round_e2m1)


def random_model(topk, seed=0):
    # 8 indexer heads: with few heads, many rows score exactly 0 (every head's ReLU is 0) and
    # the two paths may break those ties differently (then everything after diverges)
    cfg = Config(vocab_size=300, dim=64, n_layers=5, n_heads=4, head_dim=64, rope_dim=16, q_lora_rank=32,
                 o_groups=2, o_lora_rank=32, window=16, compress_ratios=[0, 4, 128, 4, 0, 0],
                 index_n_heads=8, index_head_dim=32, index_topk=topk, n_experts=4, topk_experts=2,
                 moe_inter=32, n_hash_layers=2, n_mtp=1, original_seq_len=64)
    m = Transformer(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "hc_" in n and n.endswith("scale"):
                p.fill_(0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() < 2 else p.shape[-1] ** -0.5))
        for l in m.layers:
            if l.ffn.gate.hash:
                l.ffn.gate.tid2eid.copy_(torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(300)]))
    return m.eval()


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    return ok


def main():
    torch.set_num_threads(1)
    good = True
    T = 150                      # > 128 so the HCA layer emits a row; CSA emits 37 rows
    for topk, label in ((64, "no top-k binding"), (8, "top-k binds")):
        m = random_model(topk)
        ids = torch.randint(0, 300, (1, T), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            full = m(ids, want_mtp=True)
        # token by token, with the MTP drafted at every position
        st = m.new_state()
        lg, mt = [], []
        for t in range(T):
            logits, H = m.step(ids[:, t], st)
            lg.append(logits[0])
            if t + 1 < T:
                ml, _ = m.mtp_step(H, ids[:, t + 1], t, st)
                mt.append(ml[0])
        lg, mt = torch.stack(lg), torch.stack(mt)
        e_trunk = (lg - full["logits"][0]).abs().amax(-1)
        e_mtp = (mt - full["mtp_logits"][0]).abs().amax(-1)
        scale = full["logits"].abs().max().item()
        tol = 1e-4 * max(1.0, scale)
        if topk == 64:
            good &= check(f"train forward == token-by-token decode, trunk [{label}]", e_trunk.max() < tol,
                          f"max abs err {e_trunk.max():.2e}, logit scale {scale:.1f}")
            good &= check(f"train forward == token-by-token decode, MTP [{label}]", e_mtp.max() < tol,
                          f"max abs err {e_mtp.max():.2e}")
        else:
            # exact ReLU-zero ties in the indexer may be broken differently by the two paths
            frac = (e_trunk < tol).float().mean().item()
            good &= check(f"train forward ~= token-by-token decode, trunk [{label}]", frac > 0.9,
                          f"{frac:.1%} positions within {tol:.1e}")
        # one-shot prefill of a prefix, then decode, equals the full forward
        P = 100
        logits, st2 = m.prefill(ids[0, :P].tolist())
        errs = [(logits[0] - full["logits"][0, P - 1]).abs().max().item()]
        for t in range(P, T):
            logits, _ = m.step(ids[:, t], st2)
            errs.append((logits[0] - full["logits"][0, t]).abs().max().item())
        errs = torch.tensor(errs)
        if topk == 64:
            good &= check(f"prefill({P}) + decode == train forward [{label}]", errs.max() < tol, f"max abs err {errs.max():.2e}")
        else:
            frac = (errs < tol).float().mean().item()
            good &= check(f"prefill({P}) + decode ~= train forward [{label}]", frac > 0.9, f"{frac:.1%} within tol")
        # batched forward == per-sequence forward
        ids2 = torch.randint(0, 300, (3, 64), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            bat = m(ids2)["logits"]
            one = torch.cat([m(ids2[i:i + 1])["logits"] for i in range(3)])
        good &= check(f"batched == unbatched [{label}]", (bat - one).abs().max() < tol, f"{(bat - one).abs().max():.2e}")

    # codecs
    w = torch.randn(200, 256) * 0.05
    q, s = quantize_fp8_weight(w)
    d = dequant_fp8_weight(q, s)
    good &= check("fp8 128x128 round trip", ((d - w).abs() / w.abs().amax()).max() < 0.07 and s.shape == (2, 2))
    q4, s4 = quantize_fp4_weight(w)
    d4 = dequant_fp4_weight(q4, s4)
    rel = ((d4 - w).norm() / w.norm()).item()
    good &= check("fp4 1x32 round trip", rel < 0.15 and q4.shape == (200, 128) and s4.shape == (200, 8), f"rel {rel:.3f}")
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.6, 7.0])
    good &= check("e2m1 ties to even", round_e2m1(x).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 0.0, -3.0, 6.0],
                  str(round_e2m1(x).tolist()))
    print("ALL PASS" if good else "SOME FAILED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
