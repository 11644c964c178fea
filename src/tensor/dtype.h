// Element types, their sizes and names, and scalar conversions to and from float.
//
// Formats (all little-endian):
//   BF16      1-8-7, float32's upper half; conversion from float rounds to nearest even.
//   F16       IEEE half.
//   F8_E4M3   "e4m3fn": bias 7, no infinities, 0x7F/0xFF are NaN, largest finite ±448.
//   F8_E8M0   "ue8m0": unsigned exponent only, value 2^(e-127); 0xFF is NaN. Stored as raw bytes:
//             a numeric cast destroys it.
//   FP4_E2M1  bias 1, values {0,.5,1,1.5,2,3,4,6} and their negatives; two per byte, the element
//             with the even index in the low nibble.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E8M0,
  kFP4E2M1x2,  // packed pairs; one byte holds two elements
};

// Bytes per stored element (a packed FP4 pair counts as one element of one byte).
size_t DTypeSize(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
// Parses a safetensors dtype string; nullopt if unknown.
std::optional<DType> ParseSafetensorsDType(std::string_view name);

// ---- scalar conversions -----------------------------------------------------------------

inline float Bf16ToF32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

// Rounds a float to the nearest bf16 value (ties to even) and returns it as float.
inline float RoundToBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

float F16ToF32(uint16_t v);
uint16_t F32ToF16(float f);

// e4m3fn -> float (exact).
float E4m3ToF32(uint8_t v);
// float -> e4m3fn, round to nearest even, saturating to ±448; NaN -> 0x7F.
uint8_t F32ToE4m3(float f);

// ue8m0 -> float: 2^(e-127); 0xFF -> NaN. e = 0 gives 2^-127 (a float32 subnormal).
inline float E8m0ToF32(uint8_t e) {
  if (e == 0xff) return std::nanf("");
  if (e == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127
  return std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// The e2m1 value of a 4-bit code (bit 3 = sign).
inline float Fp4ToF32(uint8_t nibble) {
  static constexpr float kTable[16] = {0.f,  .5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                       -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  return kTable[nibble & 0xf];
}
// float -> e2m1 code, round to nearest even, saturating to ±6.
uint8_t F32ToFp4(float f);

}  // namespace deepinfer
