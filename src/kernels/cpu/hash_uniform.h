// A counter-based uniform float per index, identical on the host and the device: benchmarks fill
// model state with it (values, not zeros or constants, so that selections see distinct scores).
#pragma once

#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace deepinfer::cpu {

// splitmix64 of (seed, index).
DI_HOST_DEVICE inline uint64_t HashIndex(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// lo + (hi − lo)·u with u = the hash's top 24 bits / 2^24 in [0, 1). The multiply and the add
// are rounded separately on both sides (no fused multiply-add), so the value is the same bit
// for bit.
DI_HOST_DEVICE inline float HashUniform(uint64_t seed, uint64_t index, float lo, float hi) {
  const float u = static_cast<float>(HashIndex(seed, index) >> 40) * (1.0f / 16777216.0f);
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(hi - lo, u), lo);
#else
  volatile float scaled = (hi - lo) * u;  // a separate rounding even where the compiler could fuse
  return scaled + lo;
#endif
}

}  // namespace deepinfer::cpu
