// CPU row-wise kernels: RMSNorm, embedding gather, RoPE, quantization round trips, Hadamard.
// All activations are fp32; weights may be BF16/F16/F32.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor_view.h"

namespace deepinfer::cpu {

// y[m, :] = w ⊙ x[m, :] / sqrt(mean(x[m, :]²) + eps). `weight` may be empty (no weight: the
// per-head q normalization). x and y: [M, N] f32, may alias. Row strides honored.
void RmsNorm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y);

// y[m, :] = table[ids[m], :] as f32. ids: int32 [M]; table [V, D] BF16/F16/F32; y [M, D] f32.
void Embedding(const int32_t* ids, int64_t num_ids, const TensorView& table, const TensorView& y);

// Per-dimension inverse frequencies of the interleaved RoPE, computed in float32 as the
// reference does: f_i = 1 / base^(2i/dim); with YaRN (original_max_positions > 0) each f_i is
// blended toward f_i / factor by a linear ramp between the beta_fast and beta_slow correction
// dimensions. No magnitude scaling.
std::vector<float> RopeInverseFrequencies(int64_t rope_dim, double base, int64_t original_max_positions,
                                          double factor, double beta_fast, double beta_slow);

// Rotates the pairs (x[2i], x[2i+1]) of the last `rope_dim` channels of every head row by
// angle pos·f_i (or −pos·f_i when `inverse`). x: [M, H, D] f32 (any row stride), positions [M].
void Rope(const TensorView& x, const int64_t* positions, const std::vector<float>& inv_freq,
          bool inverse);

// In place: each block of `block` values is quantized with the reference's power-of-two scale
// Ue8m0BlockScale(amax, 1e-4, 1/448) (kernels/cpu/ue8m0.h), clamped to ±448, rounded to e4m3
// (nearest, ties to even) and scaled back: DeepSeek's act_quant with ue8m0 scales, as a round
// trip. When n is not a multiple of `block` (small test configs; the reference asserts it is)
// the last block is the shorter remainder, with its own scale.
void Fp8RoundTrip(float* x, int64_t n, int64_t block);
// Fp8RoundTrip's two halves for one block, shared with the packed state rows (state_row.h): the
// block's scale from its n values, and one value's e4m3 code at that scale (clamped to ±448).
float E4m3BlockScale(const float* x, int64_t n);
uint8_t E4m3CodeAtScale(float v, float scale);
// In place: each value rounded to the nearest BF16 (ties to even; NaN stays NaN, values past the
// largest BF16 become ±inf): torch's .to(torch.bfloat16), the precision of the reference's stored
// rope channels.
void Bf16Round(float* x, int64_t n);
// In place: blocks of `block` values, scale Ue8m0BlockScale(amax, 6·2^-126, 1/6), clamped to ±6,
// rounded to e2m1 (nearest even) and scaled back.
void Fp4RoundTrip(float* x, int64_t n, int64_t block);
// Fp4RoundTrip's two halves for one block, shared with the packed index rows (state_row.h): the
// block's scale from its n values, and one value's e2m1 code (a nibble) at that scale.
float E2m1BlockScale(const float* x, int64_t n);
uint8_t E2m1CodeAtScale(float v, float scale);
// In place orthonormal Walsh–Hadamard transform of length n (a power of two), scaled 1/sqrt(n):
// x ← x · H_n / sqrt(n) with H_n the Sylvester matrix.
void Hadamard(float* x, int64_t n);

}  // namespace deepinfer::cpu
