// The power-of-two block scale of DeepSeek's reference quantization (its `scale_fmt: ue8m0`),
// shared bit for bit by the CPU and CUDA round trips (docs/numerics.md, "FP8 activations").
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/host_device.h"

namespace deepinfer::cpu {

DI_HOST_DEVICE inline uint32_t F32Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

DI_HOST_DEVICE inline float F32FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// 2^ceil(log2(v)) for a finite v > 0, read off v's bits: its binary exponent, plus one unless
// v's mantissa field is zero (a power of two, or the subnormal case, which gives 2^-126). Exact
// where a rounded log2 is not: for v a few ulps above 2^k the f32 log2 rounds to k itself.
DI_HOST_DEVICE inline float Pow2CeilExact(float v) {
  const uint32_t bits = F32Bits(v);
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127;
  const int32_t k = exponent + ((bits & 0x7fffffu) != 0u ? 1 : 0);
  return F32FromBits(static_cast<uint32_t>(k + 127) << 23);
}

// The scale of one block: 2^ceil(log2(max(amax, amax_floor) · inv_max_code)), the product
// rounded to f32 first. inv_max_code is the f32 reciprocal of the format's largest code
// (1/448 for e4m3, 1/6 for e2m1), multiplied as the reference does rather than divided by.
DI_HOST_DEVICE inline float Ue8m0BlockScale(float amax, float amax_floor, float inv_max_code) {
  const float floored = amax > amax_floor ? amax : amax_floor;
#if defined(__CUDA_ARCH__)
  return Pow2CeilExact(__fmul_rn(floored, inv_max_code));
#else
  return Pow2CeilExact(floored * inv_max_code);
#endif
}

constexpr float kE4m3Max = 448.f;
constexpr float kE4m3InvMax = 1.f / 448.f;
constexpr float kE4m3AmaxFloor = 1e-4f;
constexpr float kE2m1Max = 6.f;
constexpr float kE2m1InvMax = 1.f / 6.f;
constexpr float kE2m1AmaxFloor = 6.f * 0x1p-126f;

}  // namespace deepinfer::cpu
