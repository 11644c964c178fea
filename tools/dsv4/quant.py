"""Quantization helpers for DeepSeek-V4: e4m3 / e2m1 value grids, e8m0 power-of-two scales.

Used in two ways:
  * quantization *simulation* inside the forward (activations rounded in place, optional);
  * checkpoint conversion (BF16 weights -> FP8 128x128 blocks / FP4 1x32 blocks and back).

All scales are powers of two (`scale_fmt: ue8m0`): scale = 2^ceil(log2(amax / qmax)).
"""
import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _pow2_scale(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    return torch.exp2(torch.ceil(torch.log2(amax / qmax)))


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 values (already inside +-448) to the nearest e4m3 value, ties to even."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def _e2m1_bounds(device):
    # Midpoints between neighbouring grid values. Ties go to the value with an even mantissa:
    # 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. bucketize(right=False) puts a tie
    # in the lower bucket, so boundaries whose tie must go up are nudged one ulp down.
    b = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32, device=device)
    up = torch.tensor([False, True, False, True, False, True, False], device=device)
    return torch.where(up, torch.nextafter(b, torch.zeros_like(b)), b)


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """fp32 values inside +-6 -> 4-bit e2m1 codes (sign in bit 3), round to nearest even."""
    a = x.abs().float()
    mag = torch.bucketize(a, _e2m1_bounds(x.device), right=False)
    sign = (x < 0) & (mag > 0)
    return (mag + 8 * sign.to(mag.dtype)).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    grid = E2M1_GRID.to(codes.device)
    mag = grid[(codes & 7).long()]
    return torch.where((codes & 8) > 0, -mag, mag)


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    return e2m1_decode(e2m1_codes(x.clamp(-E2M1_MAX, E2M1_MAX)))


def bf16_round(x: torch.Tensor, ste: bool = True) -> torch.Tensor:
    """fp32 values rounded to the nearest BF16 (ties to even) and back: the reference's stored rope."""
    y = x.to(torch.bfloat16).to(x.dtype)
    return x + (y - x).detach() if ste and x.requires_grad else y


def fake_quant(x: torch.Tensor, block: int, fmt: str, ste: bool = True) -> torch.Tensor:
    """Quantize-dequantize along the last dim in blocks of `block` (power-of-two scales).

    fmt 'e4m3': amax floored at 1e-4 (reference act_quant). fmt 'e2m1': amax floored at 6*2^-126.
    With ste=True the gradient passes straight through (for quantization-aware training).
    """
    xb = x.float().unflatten(-1, (-1, block))
    amax = xb.abs().amax(-1, keepdim=True)
    if fmt == "e4m3":
        s = _pow2_scale(amax.clamp_min(1e-4), E4M3_MAX)
        q = round_e4m3(xb / s) * s
    elif fmt == "e2m1":
        s = _pow2_scale(amax.clamp_min(E2M1_MAX * 2.0 ** -126), E2M1_MAX)
        q = round_e2m1(xb / s) * s
    else:
        raise ValueError(fmt)
    q = q.flatten(-2).to(x.dtype)
    if ste and x.requires_grad:
        return x + (q - x).detach()
    return q


# ---------------------------------------------------------------------------------------------
# Weight formats of the shipped checkpoints
# ---------------------------------------------------------------------------------------------

def e8m0_to_f32(raw_u8: torch.Tensor) -> torch.Tensor:
    """E8M0 byte e -> 2^(e-127). Takes the raw bytes (uint8), never a numeric cast."""
    return torch.exp2(raw_u8.to(torch.float32) - 127.0)


def f32_pow2_to_e8m0(s: torch.Tensor) -> torch.Tensor:
    e = torch.log2(s).round().to(torch.int32) + 127
    assert int(e.min()) >= 0 and int(e.max()) <= 254, "scale out of e8m0 range"
    return e.to(torch.uint8)


def quantize_fp8_weight(w: torch.Tensor, block: int = 128):
    """w [O, I] fp32 -> (e4m3 tensor [O, I], e8m0 bytes [ceil(O/128), ceil(I/128)])."""
    O, I = w.shape
    po, pi = (-O) % block, (-I) % block
    wp = torch.nn.functional.pad(w.float(), (0, pi, 0, po))
    blk = wp.view((O + po) // block, block, (I + pi) // block, block)
    amax = blk.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-4)
    s = _pow2_scale(amax, E4M3_MAX)
    q = (blk / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    q = q.view(O + po, I + pi)[:O, :I].contiguous()
    return q, f32_pow2_to_e8m0(s.squeeze(1).squeeze(-1))


def dequant_fp8_weight(q: torch.Tensor, s_u8: torch.Tensor, block: int = 128) -> torch.Tensor:
    O, I = q.shape
    s = e8m0_to_f32(s_u8).repeat_interleave(block, 0).repeat_interleave(block, 1)[:O, :I]
    return q.to(torch.float32) * s


def quantize_fp4_weight(w: torch.Tensor, block: int = 32):
    """w [O, I] fp32 -> (packed int8 [O, I/2], low nibble = even column; e8m0 bytes [O, I/32])."""
    O, I = w.shape
    blk = w.float().view(O, I // block, block)
    amax = blk.abs().amax(-1, keepdim=True).clamp_min(E2M1_MAX * 2.0 ** -126)
    s = _pow2_scale(amax, E2M1_MAX)
    codes = e2m1_codes((blk / s).clamp(-E2M1_MAX, E2M1_MAX)).view(O, I)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(torch.int8)
    return packed, f32_pow2_to_e8m0(s.squeeze(-1))


def dequant_fp4_weight(packed: torch.Tensor, s_u8: torch.Tensor, block: int = 32) -> torch.Tensor:
    b = packed.view(torch.uint8)
    O, half = b.shape
    codes = torch.stack([b & 15, b >> 4], dim=-1).view(O, 2 * half)
    s = e8m0_to_f32(s_u8).repeat_interleave(block, 1)
    return e2m1_decode(codes) * s
