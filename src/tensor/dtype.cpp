#include "tensor/dtype.h"

#include <array>
#include <limits>

namespace deepinfer {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16: return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E8M0:
    case DType::kFP4E2M1x2: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E8M0: return "F8_E8M0";
    case DType::kFP4E2M1x2: return "F4_E2M1x2";
  }
  return "?";
}

std::optional<DType> ParseSafetensorsDType(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, DType>, 13> kNames = {{
      {"F32", DType::kF32},         {"F16", DType::kF16},         {"BF16", DType::kBF16},
      {"F64", DType::kF64},         {"I64", DType::kI64},         {"I32", DType::kI32},
      {"I16", DType::kI16},         {"I8", DType::kI8},           {"U8", DType::kU8},
      {"BOOL", DType::kBool},       {"F8_E4M3", DType::kF8E4M3},  {"F8_E8M0", DType::kF8E8M0},
      {"F4_E2M1x2", DType::kFP4E2M1x2},
  }};
  for (const auto& [n, t] : kNames) {
    if (n == name) return t;
  }
  return std::nullopt;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.f, -14)) {          // subnormal: multiples of 2^-24
    const float q = std::nearbyint(a * 16777216.f);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t v = std::bit_cast<uint32_t>(a);
  v += 0xfffu + ((v >> 13) & 1u);
  const uint32_t exp = (v >> 23) - 112;
  return sign | static_cast<uint16_t>((exp << 10) | ((v >> 13) & 0x3ff));
}

float E4m3ToF32(uint8_t v) {
  const bool negative = (v & 0x80) != 0;
  const uint32_t exp = (v >> 3) & 0xf;
  const uint32_t man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    r = std::ldexp(1.f + static_cast<float>(man) / 8.f, static_cast<int>(exp) - 7);
  }
  return negative ? -r : r;
}

namespace {
// Rounds |a| onto a grid with `mantissa_bits` fraction bits, a minimum normal exponent
// `min_exp` (values below use the subnormal spacing 2^(min_exp - mantissa_bits)), ties to even.
float RoundToMiniFloat(float a, int mantissa_bits, int min_exp) {
  if (a == 0.f) return 0.f;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // a = 1.x * 2^exp
  if (exp < min_exp) exp = min_exp;
  const float quantum = std::ldexp(1.f, exp - mantissa_bits);
  return std::nearbyint(a / quantum) * quantum;
}
}  // namespace

uint8_t F32ToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.f) return sign | 0x7e;  // saturate
  a = RoundToMiniFloat(a, 3, -6);
  if (a >= 448.f) return sign | 0x7e;
  if (a == 0.f) return sign;
  int e;
  std::frexp(a, &e);
  const int exp = e - 1;
  if (exp < -6) {  // subnormal (only reached for a < 2^-6)
    return sign | static_cast<uint8_t>(std::lround(a * 512.f));
  }
  const int man = static_cast<int>(std::lround((a / std::ldexp(1.f, exp) - 1.f) * 8.f));
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | man);
}

uint8_t F32ToFp4(float f) {
  // e2m1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; round to nearest, ties to the even code (so the
  // midpoints .25, 1.25, 2.5 and 5 round down and .75, 1.75 and 3.5 round up); saturates at 6.
  if (std::isnan(f)) return 0x7;
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fabs(f);
  const int code = (a > .25f) + (a >= .75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.f);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace deepinfer
