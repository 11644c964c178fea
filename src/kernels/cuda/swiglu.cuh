// The clamped SwiGLU of one value, shared by elementwise.cu's SwiGLU kernels and the SwiGLU that
// writes the FP4 experts' BF16 input (linear_wgmma_fp4bf16.cuh), so that both give the same bits:
// silu(min(g, limit)) · clamp(u, −limit, limit) · weight, the clamp off for limit <= 0; silu(x) =
// x / (1 + e^−x) with expf and an IEEE division (the reference's SiLU on f32).
#pragma once

namespace deepinfer::cuda {

__device__ __forceinline__ float ClampedSwiGluValue(float gate, float up, float limit, float weight) {
  if (limit > 0.f) {
    gate = fminf(gate, limit);
    up = fminf(fmaxf(up, -limit), limit);
  }
  const float silu = gate / (1.f + expf(-gate));
  return silu * up * weight;
}

}  // namespace deepinfer::cuda
