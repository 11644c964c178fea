// The packed state rows of kernels/cpu/state_row.h on the device: reading four channels of a row,
// and the argument block the kernels take for a format.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cpu/state_row.h"

namespace deepinfer::cuda {

// A cpu::PackedRowFormat as kernel arguments; fp8_end < 0 marks f32 rows (no format).
struct PackedRowArgs {
  int fp8_end = -1;
  int block = 0;
  int scale_offset = 0;  // bytes
};

inline PackedRowArgs ToPackedRowArgs(const cpu::PackedRowFormat* f) {
  if (f == nullptr) return PackedRowArgs{};
  return PackedRowArgs{static_cast<int>(f->fp8_end), static_cast<int>(f->block), static_cast<int>(f->scale_offset())};
}

// What the attention kernels' decoders need of a format: 16-channel groups that lie in one scale
// block or in the BF16 channels, read with 16-byte loads (row starts 16-byte aligned).
inline bool PackedRowsDecodable(const cpu::PackedRowFormat& f) {
  return f.dim % 16 == 0 && f.fp8_end % 16 == 0 && f.block % 16 == 0;
}

#if defined(__CUDACC__)
// e4m3 code to f32, exactly (through the half conversion: every e4m3 value is a half).
__device__ __forceinline__ float2 E4m3PairToFloat2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Four e4m3 codes (channel order from the low byte) times their block's scale, one f32 multiply
// each: cpu::DecodePackedRow's values.
__device__ __forceinline__ float4 DecodeE4m3x4(uint32_t codes, float scale) {
  const float2 lo = E4m3PairToFloat2(static_cast<uint16_t>(codes & 0xffffu));
  const float2 hi = E4m3PairToFloat2(static_cast<uint16_t>(codes >> 16));
  return make_float4(__fmul_rn(lo.x, scale), __fmul_rn(lo.y, scale), __fmul_rn(hi.x, scale), __fmul_rn(hi.y, scale));
}

// Channels 4·c4 … 4·c4 + 3 of the packed row at `row` (16-byte aligned): cpu::DecodePackedRow's
// values bit for bit (code value times the block's scale, one f32 multiply; BF16 widened).
__device__ __forceinline__ float4 DecodePacked4(const uint8_t* row, int c4, const PackedRowArgs& p) {
  const int c = 4 * c4;
  float4 v;
  if (c < p.fp8_end) {
    const uint32_t codes = *reinterpret_cast<const uint32_t*>(row + c);
    v = DecodeE4m3x4(codes, __uint_as_float(static_cast<uint32_t>(row[p.scale_offset + c / p.block]) << 23));
  } else {
    // BF16 channel c at byte fp8_end + 2·(c − fp8_end).
    const uint2 h = *reinterpret_cast<const uint2*>(row + 2 * c - p.fp8_end);
    v.x = __uint_as_float(h.x << 16);
    v.y = __uint_as_float(h.x & 0xffff0000u);
    v.z = __uint_as_float(h.y << 16);
    v.w = __uint_as_float(h.y & 0xffff0000u);
  }
  return v;
}
#endif

}  // namespace deepinfer::cuda
