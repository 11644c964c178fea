// Exact f32 products on BF16 tensor cores: an f32 value as the sum of three BF16 parts, and the
// mma.sync m16n8k16 BF16 MMA with f32 accumulation they feed (sm_80 and later). Shared by the
// split-BF16 linears (linear_mma.cuh, linear_wgmma_split.cuh) and attention (attention_mma.cu).
//
// A value that is exact in BF16 (an FP8 or FP4 code times a power-of-two scale, a BF16 weight)
// times the three parts gives three exact products, so y = Σ w·hi + w·mid + w·lo differs from an
// f32 dot product only in how the sums are rounded.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace deepinfer::cuda {

// Two values truncated to BF16 (toward zero: a finite f32 never becomes inf, as it can under
// round-to-nearest above 3.3962e38), as one pair.
__device__ __forceinline__ __nv_bfloat162 TruncPair(float a, float b) {
  return __halves2bfloat162(__float2bfloat16_rz(a), __float2bfloat16_rz(b));
}

// The three BF16 parts of x0, x1 (one pair each, x0 in the low half): hi takes the top 8
// significant bits of x, mid the next 8 of the exact remainder, lo the rest (at most 8 bits), so
// hi + mid + lo == x (each difference is exact in f32; exact for |x| >= 2^-110).
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  const __nv_bfloat162 h = TruncPair(x0, x1);
  const float r0 = __fsub_rn(x0, __low2float(h)), r1 = __fsub_rn(x1, __high2float(h));
  const __nv_bfloat162 m = TruncPair(r0, r1);
  const float s0 = __fsub_rn(r0, __low2float(m)), s1 = __fsub_rn(r1, __high2float(m));
  const __nv_bfloat162 l = TruncPair(s0, s1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  mid = *reinterpret_cast<const uint32_t*>(&m);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// d += A·B for one m16n8k16 tile: A row-major 16×16 BF16 in a0..a3, B 16×8 ("col": k fastest) in
// b0, b1, f32 d in the MMA's accumulator layout (PTX ISA, mma.m16n8k16 fragments).
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8×8 BF16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

}  // namespace deepinfer::cuda
