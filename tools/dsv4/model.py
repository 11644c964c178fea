"""DeepSeek-V4 forward in plain PyTorch, written for DeepInfer (training + reference decode).

Written from the math in docs/design dsv4-model.md and the facts (formulas, shapes, names) of
DeepSeek's reference inference code; no code was copied. Parameter names are the OFFICIAL
checkpoint names (no `model.` prefix), so `state_dict()` is directly the shipped layout
(except dtypes, handled by tools/dsv4/checkpoint.py).

Two paths:
  * `Transformer.forward(ids)`: the whole causal sequence from position 0, batched (training,
    one-shot prefill). Compressed rows are built for the whole sequence at once and masked per
    query, as in the reference prefill.
  * `Transformer.step(...)` / `generate`: token-by-token decode with per-layer state (raw kv rows,
    compressor partial state, compressed rows, indexer key rows), as an engine would run it.
tools/dsv4/test_model.py checks that both agree.

Quantization simulation (FP8 activations of the FP8 linears, FP8 round trip of the KV nope
channels, FP4 round trip of the indexer q/keys) is off by default: `model.quant.*`.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .quant import bf16_round, fake_quant


# ---------------------------------------------------------------------------------------------
# Config (HF config.json key names)
# ---------------------------------------------------------------------------------------------

@dataclass
class Config:
    vocab_size: int = 512
    dim: int = 256
    n_layers: int = 7
    n_heads: int = 8
    head_dim: int = 128
    rope_dim: int = 32
    q_lora_rank: int = 128
    o_groups: int = 2
    o_lora_rank: int = 64
    window: int = 32
    compress_ratios: list = field(default_factory=lambda: [0, 0, 4, 128, 4, 128, 4, 0])
    index_n_heads: int = 4
    index_head_dim: int = 64
    index_topk: int = 16
    hc_mult: int = 4
    hc_iters: int = 20
    hc_eps: float = 1e-6
    n_experts: int = 8
    n_shared: int = 1
    topk_experts: int = 3
    moe_inter: int = 64
    n_hash_layers: int = 3
    route_scale: float = 1.5
    swiglu_limit: float = 10.0
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_factor: float = 16.0
    original_seq_len: int = 512
    beta_fast: int = 32
    beta_slow: int = 1
    n_mtp: int = 0
    bos_id: int = 0
    eos_id: int = 1
    max_position_embeddings: int = 8192

    _HF = dict(vocab_size="vocab_size", dim="hidden_size", n_layers="num_hidden_layers",
               n_heads="num_attention_heads", head_dim="head_dim", rope_dim="qk_rope_head_dim",
               q_lora_rank="q_lora_rank", o_groups="o_groups", o_lora_rank="o_lora_rank",
               window="sliding_window", compress_ratios="compress_ratios",
               index_n_heads="index_n_heads", index_head_dim="index_head_dim",
               index_topk="index_topk", hc_mult="hc_mult", hc_iters="hc_sinkhorn_iters",
               hc_eps="hc_eps", n_experts="n_routed_experts", n_shared="n_shared_experts",
               topk_experts="num_experts_per_tok", moe_inter="moe_intermediate_size",
               n_hash_layers="num_hash_layers", route_scale="routed_scaling_factor",
               swiglu_limit="swiglu_limit", norm_eps="rms_norm_eps", rope_theta="rope_theta",
               compress_rope_theta="compress_rope_theta", n_mtp="num_nextn_predict_layers",
               bos_id="bos_token_id", eos_id="eos_token_id",
               max_position_embeddings="max_position_embeddings")

    @classmethod
    def from_hf(cls, d: dict) -> "Config":
        kw = {k: d[v] for k, v in cls._HF.items() if v in d}
        rs = d.get("rope_scaling") or {}
        if rs:
            kw.update(rope_factor=rs["factor"], original_seq_len=rs["original_max_position_embeddings"],
                      beta_fast=rs.get("beta_fast", 32), beta_slow=rs.get("beta_slow", 1))
        else:
            kw.update(original_seq_len=0)
        assert d.get("scoring_func", "sqrtsoftplus") == "sqrtsoftplus"
        assert d.get("num_key_value_heads", 1) == 1
        return cls(**kw)

    def to_hf(self) -> dict:
        d = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
        for k, v in self._HF.items():
            d[v] = getattr(self, k)
        d.update(num_key_value_heads=1, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
                 norm_topk_prob=True, hidden_act="silu", tie_word_embeddings=False,
                 rope_scaling={"type": "yarn", "factor": self.rope_factor,
                               "original_max_position_embeddings": self.original_seq_len,
                               "beta_fast": self.beta_fast, "beta_slow": self.beta_slow},
                 torch_dtype="bfloat16", attention_bias=False, attention_dropout=0.0,
                 initializer_range=0.02, use_cache=True)
        return d


@dataclass
class QuantSim:
    act_fp8: bool = False   # FP8 e4m3 per-128 activations into the FP8 linears and experts
    kv_fp8: bool = False    # KV rows as stored: FP8 nope channels (blocks of 64), BF16 rope; raw + compressed
    idx_fp4: bool = False   # FP4 round trip (blocks of 32) of the indexer q and key rows
    attn_bf16: bool = False  # the attention output rounded to BF16 ahead of wo_a (--attn-out-bf16;
                             # not in all(): the demo model was trained and evaluated without it)

    def all(self, on=True):
        self.act_fp8 = self.kv_fp8 = self.idx_fp4 = on
        return self


# ---------------------------------------------------------------------------------------------
# Small pieces
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * xf).to(x.dtype)


def unweighted_rms(x, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_inv_freq(cfg: Config, ratio: int) -> torch.Tensor:
    """Inverse frequencies [rd/2] (fp32). Ratio-0 layers: rope_theta, no YaRN. Compressed
    layers: compress_rope_theta with the YaRN frequency ramp (no magnitude scaling)."""
    rd = cfg.rope_dim
    if ratio:
        base, orig = cfg.compress_rope_theta, cfg.original_seq_len
    else:
        base, orig = cfg.rope_theta, 0
    freqs = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    if orig > 0:
        def corr_dim(rot):
            return rd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo = max(math.floor(corr_dim(cfg.beta_fast)), 0)
        hi = min(math.ceil(corr_dim(cfg.beta_slow)), rd - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(rd // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
        keep = 1 - ramp
        freqs = freqs / cfg.rope_factor * (1 - keep) + freqs * keep
    return freqs


def rope_cos_sin(inv_freq, positions):
    ang = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin, inverse=False):
    """Interleaved-pair rotation of the LAST rd channels of x. cos/sin broadcast to x[..., rd/2]."""
    rd = cos.shape[-1] * 2
    head, tail = x[..., :-rd], x[..., -rd:]
    t = tail.float().unflatten(-1, (-1, 2))
    a, b = t[..., 0], t[..., 1]
    if inverse:
        sin = -sin
    r = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)
    return torch.cat([head, r], dim=-1)


_HAD = {}


def hadamard(x):
    """Orthonormal Walsh-Hadamard transform along the last dim (Sylvester order)."""
    n = x.shape[-1]
    key = (n, x.device, x.dtype)
    if key not in _HAD:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        assert h.shape[0] == n, "Hadamard size must be a power of two"
        _HAD[key] = (h * n ** -0.5).to(device=x.device, dtype=x.dtype)
    return x @ _HAD[key]


def no_autocast(x):
    return torch.autocast(device_type=x.device.type, enabled=False)


# ---------------------------------------------------------------------------------------------
# mHC
# ---------------------------------------------------------------------------------------------

def hc_pre(X, fn, scale, base, S, iters, eps, norm_eps):
    """X [..., S, D] -> (a [..., D], post [..., S], comb [..., S, S])."""
    with no_autocast(X):
        Xf = X.float()
        z = Xf.flatten(-2)
        mix = (z @ fn.float().t()) * torch.rsqrt(z.square().mean(-1, keepdim=True) + norm_eps)
        pre = torch.sigmoid(mix[..., :S] * scale[0] + base[:S]) + eps
        post = 2 * torch.sigmoid(mix[..., S:2 * S] * scale[1] + base[S:2 * S])
        C = (mix[..., 2 * S:] * scale[2] + base[2 * S:]).unflatten(-1, (S, S))
        C = torch.softmax(C, dim=-1) + eps
        C = C / (C.sum(-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            C = C / (C.sum(-1, keepdim=True) + eps)
            C = C / (C.sum(-2, keepdim=True) + eps)
        a = (pre.unsqueeze(-1) * Xf).sum(-2)
    return a.to(X.dtype), post, C


def hc_post(o, X, post, C):
    """X'_k = post_k * o + sum_j C[j,k] X_j   (the comb matrix used transposed)."""
    with no_autocast(X):
        y = post.unsqueeze(-1) * o.float().unsqueeze(-2) + torch.einsum("...jk,...jd->...kd", C, X.float())
    return y.to(X.dtype)


def hc_head(X, fn, scale, base, eps, norm_eps):
    with no_autocast(X):
        Xf = X.float()
        z = Xf.flatten(-2)
        mix = (z @ fn.float().t()) * torch.rsqrt(z.square().mean(-1, keepdim=True) + norm_eps)
        w = torch.sigmoid(mix * scale + base) + eps
        y = (w.unsqueeze(-1) * Xf).sum(-2)
    return y.to(X.dtype)


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------

class Compressor(nn.Module):
    """Pools `ratio` tokens into one row. ratio 4 = CSA (overlapping 8-slot windows, A/B halves),
    otherwise non-overlapping windows. `rotate` = the indexer's key compressor (Hadamard + FP4)."""

    def __init__(self, cfg: Config, ratio: int, width: int, rotate: bool, quant: QuantSim):
        super().__init__()
        self.cfg, self.ratio, self.width, self.rotate, self.quant = cfg, ratio, width, rotate, quant
        self.overlap = ratio == 4
        c = 2 if self.overlap else 1
        self.ape = nn.Parameter(torch.zeros(ratio, c * width))
        self.wkv = nn.Linear(cfg.dim, c * width, bias=False)
        self.wgate = nn.Linear(cfg.dim, c * width, bias=False)
        self.norm = RMSNorm(width, cfg.norm_eps)

    def project(self, x):
        with no_autocast(x):
            xf = x.float()
            return xf @ self.wkv.weight.float().t(), xf @ self.wgate.weight.float().t()

    def pool(self, kv, sc):
        """kv, sc [..., n, m, c*w] (scores with ape added) -> rows [..., n, w]."""
        w = self.width
        if self.overlap:
            kvA, kvB = kv[..., :w], kv[..., w:]
            scA, scB = sc[..., :w], sc[..., w:]
            prev_kv = F.pad(kvA[..., :-1, :, :], (0, 0, 0, 0, 1, 0), value=0.0)
            prev_sc = F.pad(scA[..., :-1, :, :], (0, 0, 0, 0, 1, 0), value=float("-inf"))
            kv = torch.cat([prev_kv, kvB], dim=-2)
            sc = torch.cat([prev_sc, scB], dim=-2)
        return (kv * torch.softmax(sc, dim=-2)).sum(-2)

    def finish(self, rows, dtype, inv_freq):
        """norm -> RoPE at each row's first token -> (Hadamard + FP4 | FP8 nope round trip)."""
        n = rows.shape[-2]
        return self.finish_at(rows, dtype, inv_freq, torch.arange(n, device=rows.device) * self.ratio)

    def finish_at(self, rows, dtype, inv_freq, pos):
        rows = self.norm(rows.to(dtype))
        cos, sin = rope_cos_sin(inv_freq, pos)
        rows = apply_rope(rows, cos, sin)
        rd = self.cfg.rope_dim
        if self.rotate:
            rows = hadamard(rows)
            if self.quant.idx_fp4:
                rows = fake_quant(rows, 32, "e2m1")
        elif self.quant.kv_fp8:
            rows = torch.cat([fake_quant(rows[..., :-rd], 64, "e4m3"), bf16_round(rows[..., -rd:])], -1)
        return rows

    def forward(self, x, inv_freq, st=None):
        """x [B, T, D] from position 0 -> rows [B, T // ratio, width]. With `st`, leaves the
        decode state behind (every token's projection, scores with ape added)."""
        B, T, _ = x.shape
        m = self.ratio
        n = T // m
        if st is not None:
            kv, sc = self.project(x)
            sc = sc + self.ape.float()[torch.arange(T, device=x.device) % m]
            st["kv"], st["sc"], st["dropped"] = list(kv.unbind(1)), list(sc.unbind(1)), 0
        if n == 0:
            return x.new_zeros(B, 0, self.width)
        kv, sc = self.project(x[:, :n * m])
        kv = kv.view(B, n, m, -1)
        sc = sc.view(B, n, m, -1) + self.ape.float()
        rows = self.pool(kv, sc)
        return self.finish(rows, x.dtype, inv_freq)

    # ---- decode: one token; state holds every token's projection (with ape added) ----------
    def step(self, x, t, st, inv_freq):
        kv, sc = self.project(x)
        sc = sc + self.ape[t % self.ratio].float()
        st.setdefault("kv", []).append(kv)
        st.setdefault("sc", []).append(sc)
        m = self.ratio
        if (t + 1) % m:
            return None
        i = (t + 1) // m - 1
        lo = max(0, (i - 1) * m) if self.overlap else i * m
        kvw = torch.stack(st["kv"][lo:(i + 1) * m], dim=-2)   # [B, m or 2m, c*w]
        scw = torch.stack(st["sc"][lo:(i + 1) * m], dim=-2)
        if self.overlap and i == 0:
            kvw = torch.cat([torch.zeros_like(kvw), kvw], dim=-2)
            scw = torch.cat([torch.full_like(scw, float("-inf")), scw], dim=-2)
        if self.overlap:
            kvw = kvw.unflatten(-2, (2, m))
            scw = scw.unflatten(-2, (2, m))
        else:
            kvw, scw = kvw.unsqueeze(-3), scw.unsqueeze(-3)
        row = self.pool(kvw, scw)[..., -1, :]                  # [B, w]
        # drop what no later row needs
        keep_from = (i * m) if self.overlap else (i + 1) * m
        for k in ("kv", "sc"):
            for j in range(st.get("dropped", 0), keep_from):
                st[k][j] = None
        st["dropped"] = keep_from
        pos = torch.tensor([i * m], device=x.device)
        return self.finish_at(row.unsqueeze(-2), x.dtype, inv_freq, pos).squeeze(-2)


class Indexer(nn.Module):
    def __init__(self, cfg: Config, quant: QuantSim):
        super().__init__()
        self.cfg, self.quant = cfg, quant
        self.nh, self.hd = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = nn.Linear(cfg.q_lora_rank, self.nh * self.hd, bias=False)
        self.weights_proj = nn.Linear(cfg.dim, self.nh, bias=False)
        self.compressor = Compressor(cfg, 4, self.hd, True, quant)
        self.w_scale = (self.hd ** -0.5) * (self.nh ** -0.5)

    def queries(self, x, qr, cos, sin):
        q = self.wq_b(fake_quant(qr, 128, "e4m3") if self.quant.act_fp8 else qr)
        q = q.unflatten(-1, (self.nh, self.hd))
        q = apply_rope(q, cos, sin)
        q = hadamard(q)
        if self.quant.idx_fp4:
            q = fake_quant(q, 32, "e2m1")
        w = self.weights_proj(x).float() * self.w_scale
        return q, w

    @staticmethod
    def scores(q, w, K):
        """q [..., T, h, d], w [..., T, h], K [..., n, d] -> [..., T, n] = sum_h w_h relu(q_h . k)."""
        s = torch.einsum("...thd,...nd->...thn", q.float(), K.float()).relu()
        return (s * w.unsqueeze(-1)).sum(-2)


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer_id: int, quant: QuantSim):
        super().__init__()
        self.cfg, self.quant = cfg, quant
        self.ratio = cfg.compress_ratios[layer_id]
        H, hd = cfg.n_heads, cfg.head_dim
        self.attn_sink = nn.Parameter(torch.zeros(H))
        self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
        self.wq_b = nn.Linear(cfg.q_lora_rank, H * hd, bias=False)
        self.wkv = nn.Linear(cfg.dim, hd, bias=False)
        self.kv_norm = RMSNorm(hd, cfg.norm_eps)
        self.wo_a = nn.Linear(H * hd // cfg.o_groups, cfg.o_groups * cfg.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(cfg.o_groups * cfg.o_lora_rank, cfg.dim, bias=False)
        self.scale = hd ** -0.5
        if self.ratio:
            self.compressor = Compressor(cfg, self.ratio, hd, False, quant)
            self.indexer = Indexer(cfg, quant) if self.ratio == 4 else None
        self.register_buffer("inv_freq", rope_inv_freq(cfg, self.ratio), persistent=False)
        self.index_loss = None     # set by forward when training the indexer

    def qa(self, x):
        return fake_quant(x, 128, "e4m3") if self.quant.act_fp8 else x

    def qkv(self, x, cos, sin, cos_h, sin_h):
        qr = self.q_norm(self.wq_a(self.qa(x)))
        q = self.wq_b(self.qa(qr)).unflatten(-1, (self.cfg.n_heads, self.cfg.head_dim))
        q = unweighted_rms(q, self.cfg.norm_eps)
        q = apply_rope(q, cos_h, sin_h)
        kv = self.kv_norm(self.wkv(self.qa(x)))
        kv = apply_rope(kv, cos, sin)
        if self.quant.kv_fp8:
            rd = self.cfg.rope_dim
            kv = torch.cat([fake_quant(kv[..., :-rd], 64, "e4m3"), bf16_round(kv[..., -rd:])], -1)
        return qr, q, kv

    def out(self, o, cos_h, sin_h):
        o = apply_rope(o, cos_h, sin_h, inverse=True)
        if self.quant.attn_bf16:
            o = bf16_round(o)
        G, R = self.cfg.o_groups, self.cfg.o_lora_rank
        o = o.flatten(-2).unflatten(-1, (G, -1))
        z = torch.einsum("...gd,grd->...gr", o, self.wo_a.weight.view(G, R, -1).to(o.dtype))
        return self.wo_b(self.qa(z.flatten(-2)))

    # ---- whole sequence from position 0 (training / one-shot prefill) ----------------------
    def forward(self, x, pos0=0, train_indexer=False, st=None):
        """With `st` (a fresh dict), leaves the decode state of this prefill behind."""
        B, T, _ = x.shape
        H, W = self.cfg.n_heads, self.cfg.window
        dev = x.device
        pos = torch.arange(T, device=dev) + pos0
        cos, sin = rope_cos_sin(self.inv_freq, pos)
        cos_h, sin_h = cos[:, None, :], sin[:, None, :]
        qr, q, kv = self.qkv(x, cos, sin, cos_h, sin_h)

        t = torch.arange(T, device=dev)
        win_ok = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - W)          # [T, T]
        s = torch.einsum("bthd,bsd->bhts", q, kv) * self.scale
        s = s.masked_fill(~win_ok, float("-inf"))
        parts, vals = [s], [kv]
        self.index_loss = None
        if st is not None:
            st["kv"] = list(kv[:, -W:].unbind(1))
        if self.ratio:
            assert pos0 == 0, "compressed layers need the sequence to start at position 0"
            rows = self.compressor(x, self.inv_freq, None if st is None else st.setdefault("comp", {}))
            n = rows.shape[1]
            if st is not None:
                st["rows"] = list(rows.unbind(1))
                if self.indexer is not None:
                    irows = self.indexer.compressor(x, self.inv_freq, st.setdefault("icomp", {}))
                    st["irows"] = list(irows.unbind(1))
            if n:
                vis = torch.arange(n, device=dev)[None, :] < ((t + 1) // self.ratio)[:, None]   # [T, n]
                sc = torch.einsum("bthd,bnd->bhtn", q, rows) * self.scale
                mask = vis.expand(B, T, n)
                if self.indexer is not None:
                    mask = self._index_select(x, qr, cos_h, sin_h, vis, sc, train_indexer)
                parts.append(sc.masked_fill(~mask[:, None], float("-inf")))
                vals.append(rows)
        sink = self.attn_sink.float().view(1, H, 1, 1).expand(B, H, T, 1)
        p = torch.softmax(torch.cat([pp.float() for pp in parts] + [sink], dim=-1), dim=-1)
        o = torch.einsum("bhts,bsd->bthd", p[..., :T].to(kv.dtype), kv)
        if len(vals) > 1:
            o = o + torch.einsum("bhtn,bnd->bthd", p[..., T:-1].to(kv.dtype), vals[1])
        return self.out(o, cos_h, sin_h)

    def _index_select(self, x, qr, cos_h, sin_h, vis, main_scores, train_indexer):
        idx = self.indexer
        if train_indexer:     # the indexer learns only from its own loss
            x, qr = x.detach(), qr.detach()
        K = idx.compressor(x, self.inv_freq)                                  # [B, n, ihd]
        iq, w = idx.queries(x, qr, cos_h, sin_h)
        score = Indexer.scores(iq, w, K)                                      # [B, T, n]
        B, T, n = score.shape
        k = min(self.cfg.index_topk, n)
        masked = score.masked_fill(~vis, float("-inf"))
        top = masked.topk(k, dim=-1).indices
        sel = torch.zeros(B, T, n, dtype=torch.bool, device=x.device).scatter_(-1, top, True) & vis
        if train_indexer:
            # KL(target || indexer) over the visible rows; target = the main attention's
            # distribution over all visible compressed rows, averaged over heads (detached).
            with torch.no_grad():
                tgt = torch.softmax(main_scores.float().masked_fill(~vis, float("-inf")), -1)
                tgt = torch.nan_to_num(tgt).mean(1)                          # [B, T, n]
            logq = torch.log_softmax(masked.float(), -1)
            has = vis.any(-1)                                                 # [T]
            kl = (tgt * (torch.log(tgt.clamp_min(1e-12)) - logq.masked_fill(~vis, 0.0))).sum(-1)
            self.index_loss = kl[:, has].mean()
        return sel

    # ---- decode one token at position t ----------------------------------------------------
    def step(self, x, t, st):
        """x [B, D]; st: this layer's state dict."""
        H, W = self.cfg.n_heads, self.cfg.window
        cos, sin = rope_cos_sin(self.inv_freq, torch.tensor([t], device=x.device))
        qr, q, kv = self.qkv(x, cos, sin, cos, sin)                           # q [B, H, hd]
        st.setdefault("kv", []).append(kv)
        if len(st["kv"]) > W:
            st["kv"].pop(0)                                                  # ring of W rows
        keys = [torch.stack(st["kv"], dim=1)]                                # [B, <=W, hd]
        if self.ratio:
            row = self.compressor.step(x, t, st.setdefault("comp", {}), self.inv_freq)
            if row is not None:
                st.setdefault("rows", []).append(row)
            if self.indexer is not None:
                irow = self.indexer.compressor.step(x, t, st.setdefault("icomp", {}), self.inv_freq)
                if irow is not None:
                    st.setdefault("irows", []).append(irow)
            if st.get("rows"):
                R = torch.stack(st["rows"], dim=1)                           # [B, n, hd]
                if self.indexer is not None:
                    K = torch.stack(st["irows"], dim=1)
                    iq, w = self.indexer.queries(x, qr, cos, sin)
                    score = Indexer.scores(iq.unsqueeze(1), w.unsqueeze(1), K)[:, 0]   # [B, n]
                    k = min(self.cfg.index_topk, R.shape[1])
                    top = score.topk(k, dim=-1).indices
                    R = torch.gather(R, 1, top.unsqueeze(-1).expand(-1, -1, R.shape[-1]))
                keys.append(R)
        Kall = torch.cat(keys, dim=1)
        s = torch.einsum("bhd,bnd->bhn", q, Kall).float() * self.scale
        sink = self.attn_sink.float().view(1, H, 1).expand(s.shape[0], H, 1)
        p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
        o = torch.einsum("bhn,bnd->bhd", p.to(Kall.dtype), Kall)
        return self.out(o, cos, sin)


# ---------------------------------------------------------------------------------------------
# MoE
# ---------------------------------------------------------------------------------------------

class Expert(nn.Module):
    def __init__(self, dim, inter):
        super().__init__()
        self.w1 = nn.Linear(dim, inter, bias=False)
        self.w2 = nn.Linear(inter, dim, bias=False)
        self.w3 = nn.Linear(dim, inter, bias=False)


def swiglu_clamped(g, u, limit):
    g, u = g.float(), u.float()
    if limit > 0:
        g = g.clamp(max=limit)              # gate: from above only
        u = u.clamp(-limit, limit)          # up: both sides
    return F.silu(g) * u


class Gate(nn.Module):
    def __init__(self, cfg: Config, layer_id: int):
        super().__init__()
        self.cfg = cfg
        self.hash = layer_id < cfg.n_hash_layers
        self.weight = nn.Parameter(torch.zeros(cfg.n_experts, cfg.dim))
        if self.hash:
            self.register_buffer("tid2eid", torch.zeros(cfg.vocab_size, cfg.topk_experts, dtype=torch.int64))
        else:
            self.bias = nn.Parameter(torch.zeros(cfg.n_experts), requires_grad=False)

    def forward(self, x, ids):
        """x [N, D], ids [N] -> (weights [N, k], expert ids [N, k])."""
        with no_autocast(x):
            p = torch.sqrt(F.softplus(x.float() @ self.weight.float().t()))   # sqrtsoftplus
            if self.hash:
                sel = self.tid2eid[ids]
            else:
                sel = (p + self.bias.float()).topk(self.cfg.topk_experts, dim=-1).indices   # bias: selection only
            w = p.gather(1, sel)
            w = w / w.sum(-1, keepdim=True) * self.cfg.route_scale
        return w, sel


class MoE(nn.Module):
    def __init__(self, cfg: Config, layer_id: int, quant: QuantSim):
        super().__init__()
        self.cfg, self.quant = cfg, quant
        self.gate = Gate(cfg, layer_id)
        self.experts = nn.ModuleList([Expert(cfg.dim, cfg.moe_inter) for _ in range(cfg.n_experts)])
        self.shared_experts = Expert(cfg.dim, cfg.moe_inter)
        self.last_sel = None

    def qa(self, x):
        return fake_quant(x, min(128, x.shape[-1]), "e4m3") if self.quant.act_fp8 else x

    def forward(self, x, ids):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, sel = self.gate(x, ids.reshape(-1))
        self.last_sel = sel.detach()
        E, lim = self.cfg.n_experts, self.cfg.swiglu_limit
        # dense dispatch: every expert sees every token, with combine weight 0 where unselected.
        # A hash row may name an expert twice (the golden checkpoints' tid2eid do): the reference
        # then applies that expert ONCE with one slot's weight (its `y[idx] += ...` with repeated
        # idx writes, not accumulates), while both slots still count in the normalisation.
        # scatter_ (not scatter_add) reproduces that; the slots' weights are equal.
        cw = torch.zeros(x.shape[0], E, device=x.device, dtype=torch.float32).scatter(1, sel, w)
        W1 = torch.stack([e.w1.weight for e in self.experts])
        W3 = torch.stack([e.w3.weight for e in self.experts])
        W2 = torch.stack([e.w2.weight for e in self.experts])
        xq = self.qa(x)
        h = swiglu_clamped(torch.einsum("nd,eid->nei", xq, W1.to(xq.dtype)),
                           torch.einsum("nd,eid->nei", xq, W3.to(xq.dtype)), lim)
        h = (h * cw.unsqueeze(-1)).to(x.dtype)          # routing weight applied before w2
        y = torch.einsum("nei,edi->nd", self.qa(h), W2.to(h.dtype)).float()
        se = self.shared_experts
        hs = swiglu_clamped(se.w1(xq), se.w3(xq), lim).to(x.dtype)
        y = y + se.w2(self.qa(hs)).float()
        return y.to(x.dtype).view(shape)


# ---------------------------------------------------------------------------------------------
# Blocks and model
# ---------------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, cfg: Config, layer_id: int, quant: QuantSim):
        super().__init__()
        self.cfg = cfg
        self.layer_id = layer_id
        self.attn = Attention(cfg, layer_id, quant)
        self.ffn = MoE(cfg, layer_id, quant)
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        S = cfg.hc_mult
        mix = (2 + S) * S
        for site in ("attn", "ffn"):
            setattr(self, f"hc_{site}_fn", nn.Parameter(torch.zeros(mix, S * cfg.dim)))
            setattr(self, f"hc_{site}_base", nn.Parameter(torch.zeros(mix)))
            setattr(self, f"hc_{site}_scale", nn.Parameter(torch.ones(3)))

    def _pre(self, X, site):
        c = self.cfg
        return hc_pre(X, getattr(self, f"hc_{site}_fn"), getattr(self, f"hc_{site}_scale"),
                      getattr(self, f"hc_{site}_base"), c.hc_mult, c.hc_iters, c.hc_eps, c.norm_eps)

    def forward(self, X, ids, pos0=0, train_indexer=False, st=None):
        a, post, comb = self._pre(X, "attn")
        X = hc_post(self.attn(self.attn_norm(a), pos0, train_indexer, st), X, post, comb)
        a, post, comb = self._pre(X, "ffn")
        return hc_post(self.ffn(self.ffn_norm(a), ids), X, post, comb)

    def step(self, X, tok, t, st):
        a, post, comb = self._pre(X, "attn")
        X = hc_post(self.attn.step(self.attn_norm(a), t, st), X, post, comb)
        a, post, comb = self._pre(X, "ffn")
        return hc_post(self.ffn(self.ffn_norm(a), tok), X, post, comb)


class MTPBlock(Block):
    def __init__(self, cfg: Config, layer_id: int, quant: QuantSim):
        super().__init__(cfg, layer_id, quant)
        self.quant = quant
        self.e_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.h_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.enorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        S = cfg.hc_mult
        self.hc_head_fn = nn.Parameter(torch.zeros(S, S * cfg.dim))
        self.hc_head_base = nn.Parameter(torch.zeros(S))
        self.hc_head_scale = nn.Parameter(torch.ones(1))

    def mix_in(self, H, e):
        qa = (lambda v: fake_quant(v, 128, "e4m3")) if self.quant.act_fp8 else (lambda v: v)
        return self.e_proj(qa(self.enorm(e))).unsqueeze(-2) + self.h_proj(qa(self.hnorm(H)))

    def collapse(self, X):
        c = self.cfg
        return self.norm(hc_head(X, self.hc_head_fn, self.hc_head_scale, self.hc_head_base, c.hc_eps, c.norm_eps))


class Transformer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.quant = QuantSim()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Block(cfg, i, self.quant) for i in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        S = cfg.hc_mult
        self.hc_head_fn = nn.Parameter(torch.zeros(S, S * cfg.dim))
        self.hc_head_base = nn.Parameter(torch.zeros(S))
        self.hc_head_scale = nn.Parameter(torch.ones(1))
        self.mtp = nn.ModuleList([MTPBlock(cfg, cfg.n_layers + i, self.quant) for i in range(cfg.n_mtp)])

    def logits(self, y):
        with no_autocast(y):
            return y.float() @ self.head.weight.float().t()

    def collapse(self, X):
        c = self.cfg
        return self.norm(hc_head(X, self.hc_head_fn, self.hc_head_scale, self.hc_head_base, c.hc_eps, c.norm_eps))

    # ---- whole sequences ---------------------------------------------------------------------
    def forward(self, ids, want_mtp=True, dump_streams=False, train_indexer=False, mtp_ids=None,
                state=None):
        """ids [B, T] from position 0. Returns dict: logits [B,T,V] (next token), mtp_logits
        [B,T-1,V] (slot i: trunk streams at i + embedding of ids[i+1] -> predicts ids[i+2]),
        streams (list per layer, if dump_streams), final trunk streams."""
        B, T = ids.shape
        h = self.embed(ids)
        X = h.unsqueeze(2).expand(B, T, self.cfg.hc_mult, self.cfg.dim).contiguous()
        out = {"streams": []}
        for i, layer in enumerate(self.layers):
            X = layer(X, ids, 0, train_indexer, None if state is None else state["layers"][i])
            if dump_streams:
                out["streams"].append(X)
        out["hidden"] = X
        out["logits"] = self.logits(self.collapse(X))
        if want_mtp and self.cfg.n_mtp and T > 1:
            nxt = ids[:, 1:] if mtp_ids is None else mtp_ids
            m = self.mtp[0]
            Y = m.mix_in(X[:, :T - 1], self.embed(nxt))
            Y = m(Y, nxt, 0, st=None if state is None else state["mtp"][0])
            out["mtp_logits"] = self.logits(m.collapse(Y))
        if state is not None:
            state["t"] = T
        return out

    def index_loss(self):
        ls = [l.attn.index_loss for l in self.layers if l.attn.index_loss is not None]
        return sum(ls) / len(ls) if ls else None

    # ---- token-by-token decode ----------------------------------------------------------------
    def new_state(self):
        return {"layers": [{} for _ in self.layers], "mtp": [{} for _ in self.mtp], "t": 0}

    @torch.no_grad()
    def step(self, tok, state):
        """tok [B] at position state['t'] -> (logits [B,V], trunk streams [B,S,D])."""
        t = state["t"]
        X = self.embed(tok).unsqueeze(1).expand(-1, self.cfg.hc_mult, -1).contiguous()
        for layer, st in zip(self.layers, state["layers"]):
            X = layer.step(X, tok, t, st)
        state["t"] = t + 1
        return self.logits(self.collapse(X)), X

    @torch.no_grad()
    def mtp_step(self, H, next_tok, t, state):
        """MTP draft at trunk position t: trunk streams H [B,S,D] at t + token t+1 -> logits for t+2."""
        m = self.mtp[0]
        Y = m.mix_in(H, self.embed(next_tok))
        Y = m.step(Y, next_tok, t, state["mtp"][0])
        return self.logits(m.collapse(Y)), Y

    @torch.no_grad()
    def prefill(self, prompt):
        """One-shot prefill of a prompt (list of ids) -> (last logits [1,V], state)."""
        st = self.new_state()
        out = self(torch.tensor([prompt], device=self.embed.weight.device), want_mtp=False, state=st)
        return out["logits"][:, -1], st

    @torch.no_grad()
    def generate(self, prompt, n_new, eos=None, one_shot_prefill=True):
        """Greedy. prompt: list of ids. One-shot prefill (as the reference and an engine do), or
        token by token. Returns (new ids, per-step logits list)."""
        dev = self.embed.weight.device
        if one_shot_prefill:
            logits, st = self.prefill(prompt)
        else:
            st = self.new_state()
            for tok in prompt:
                logits, _ = self.step(torch.tensor([tok], device=dev), st)
        out, steps = [], []
        for _ in range(n_new):
            steps.append(logits[0])
            nxt = int(logits[0].argmax())
            out.append(nxt)
            if eos is not None and nxt == eos:
                break
            logits, _ = self.step(torch.tensor([nxt], device=dev), st)
        return out, steps
