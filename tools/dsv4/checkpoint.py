"""Load / save DeepSeek-V4 checkpoints in the shipped (official) naming and formats.

Formats (dsv4-model.md §2): BF16 by default; F32 for hc_*, attn_sink, compressor ape, gate.bias;
I64 for gate.tid2eid; FP8 e4m3 (128x128 blocks, `.scale` E8M0) for the dense FP8 linears;
FP4 e2m1 packed two per byte (low nibble = even column) in I8 with 1x32 E8M0 `.scale` for the
routed experts.
"""
import json
import os
import re

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .model import Config, Transformer
from .quant import (dequant_fp4_weight, dequant_fp8_weight, quantize_fp4_weight,
                    quantize_fp8_weight)

F32_PAT = re.compile(r"((.*\.)?hc_\w+|.*\.attn_sink|.*\.ape|.*\.gate\.bias)$")
FP8_PAT = re.compile(r".*(attn\.wq_a|attn\.wq_b|attn\.wkv|attn\.wo_a|attn\.wo_b|indexer\.wq_b|"
                     r"shared_experts\.w[123]|e_proj|h_proj)\.weight$")
FP4_PAT = re.compile(r".*ffn\.experts\.\d+\.w[123]\.weight$")


def _raw_u8(f, name):
    t = f.get_tensor(name)
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def read_tensors(path):
    """-> {name: fp32/int64 tensor}, dequantizing FP8/FP4 weights with their .scale."""
    out = {}
    with safe_open(path, "pt") as f:
        names = list(f.keys())
        for n in names:
            if n.endswith(".scale"):
                continue
            t = f.get_tensor(n)
            sname = n[:-len(".weight")] + ".scale" if n.endswith(".weight") else None
            if sname in names:
                s = _raw_u8(f, sname)
                if t.dtype == torch.int8 or t.dtype == torch.uint8:
                    t = dequant_fp4_weight(t, s)
                else:
                    t = dequant_fp8_weight(t, s)
            elif t.dtype in (torch.int64, torch.int32):
                t = t.to(torch.int64)
            else:
                t = t.to(torch.float32)
            out[n] = t
    return out


def load_model(model_dir, device="cpu", strict=True):
    cfg = Config.from_hf(json.load(open(os.path.join(model_dir, "config.json"))))
    model = Transformer(cfg)
    files = sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors") and not p.startswith("golden"))
    sd = {}
    for p in files:
        sd.update(read_tensors(os.path.join(model_dir, p)))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if strict:
        assert not unexpected, f"unexpected tensors: {unexpected[:8]}"
        assert not missing, f"missing tensors: {missing[:8]}"
    return model.to(device).eval(), cfg


@torch.no_grad()
def simulate_weight_quant_(model):
    """Round the weights in place to what the FP8/FP4 checkpoint would hold (the weight half of
    the quantization simulation; `model.quant.all()` is the activation half)."""
    for n, p in model.named_parameters():
        if FP4_PAT.match(n):
            p.copy_(dequant_fp4_weight(*quantize_fp4_weight(p.float())).to(p.dtype))
        elif FP8_PAT.match(n):
            p.copy_(dequant_fp8_weight(*quantize_fp8_weight(p.float())).to(p.dtype))
    return model


def official_state_dict(model, fmt="bf16"):
    """fmt 'bf16': BF16 (+F32/I64 where shipped). fmt 'fp8': + FP8 dense linears, FP4 experts."""
    out = {}
    for n, t in model.state_dict().items():
        t = t.detach().cpu()
        if t.dtype == torch.int64:
            out[n] = t.contiguous()
        elif F32_PAT.match(n):
            out[n] = t.float().contiguous()
        elif fmt == "fp8" and FP4_PAT.match(n):
            q, s = quantize_fp4_weight(t.float())
            out[n], out[n[:-len(".weight")] + ".scale"] = q, s.view(torch.float8_e8m0fnu)
        elif fmt == "fp8" and FP8_PAT.match(n):
            q, s = quantize_fp8_weight(t.float())
            out[n], out[n[:-len(".weight")] + ".scale"] = q, s.view(torch.float8_e8m0fnu)
        else:
            out[n] = t.to(torch.bfloat16).contiguous()
    return out


def save_model(model, model_dir, fmt="bf16", extra_config=None):
    os.makedirs(model_dir, exist_ok=True)
    sd = official_state_dict(model, fmt)
    save_file(sd, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.cfg.to_hf()
    if fmt == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
        cfg["expert_dtype"] = "fp4"
    if extra_config:
        cfg.update(extra_config)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return sd
