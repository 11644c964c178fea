// Scalar format decoders and encoders against hand-computed values (issue 2, acceptance 4).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "tensor/dtype.h"
#include "tensor/linear_weight.h"

namespace deepinfer {
namespace {

TEST(E4m3, DecodesHandComputedValues) {
  // sign | eeee | mmm, bias 7.
  EXPECT_EQ(E4m3ToF32(0x00), 0.f);
  EXPECT_TRUE(std::signbit(E4m3ToF32(0x80)));  // negative zero keeps its sign
  EXPECT_EQ(E4m3ToF32(0x80), 0.f);
  EXPECT_EQ(E4m3ToF32(0x38), 1.f);       // e=7, m=0
  EXPECT_EQ(E4m3ToF32(0x3c), 1.5f);      // e=7, m=4
  EXPECT_EQ(E4m3ToF32(0xb8), -1.f);
  EXPECT_EQ(E4m3ToF32(0x40), 2.f);       // e=8
  EXPECT_EQ(E4m3ToF32(0x7e), 448.f);     // largest finite: e=15, m=6 -> 1.75 * 2^8
  EXPECT_EQ(E4m3ToF32(0xfe), -448.f);
  EXPECT_EQ(E4m3ToF32(0x08), 0.015625f); // smallest normal 2^-6
  EXPECT_EQ(E4m3ToF32(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(E4m3ToF32(0x07), 7.f / 512.f);   // largest subnormal 0.875 * 2^-6
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(E4m3ToF32(0xff)));
  EXPECT_EQ(E4m3ToF32(0x77), 240.f);  // e=14, m=7: 1.875 * 2^7 (0x78..0x7e are e=15)
}

TEST(E4m3, EncodeRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    const float v = E4m3ToF32(static_cast<uint8_t>(code));
    if (std::isnan(v)) continue;
    EXPECT_EQ(F32ToE4m3(v), code) << "code " << code << " value " << v;
  }
}

TEST(E4m3, EncodeRoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(1.0625f)), 1.f);    // halfway 1 and 1.125 -> even mantissa (1.0)
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(1.1875f)), 1.25f);  // halfway 1.125 and 1.25 -> 1.25 (even)
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(1.07f)), 1.125f);
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(1000.f)), 448.f);
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(-1e9f)), -448.f);
  EXPECT_EQ(E4m3ToF32(F32ToE4m3(0.0009765625f)), 0.f);  // 2^-10: tie between 0 and 2^-9 -> 0
  EXPECT_EQ(F32ToE4m3(-0.f), 0x80);
}

TEST(E8m0, DecodesExtremes) {
  EXPECT_EQ(E8m0ToF32(127), 1.f);
  EXPECT_EQ(E8m0ToF32(128), 2.f);
  EXPECT_EQ(E8m0ToF32(120), 1.f / 128.f);
  EXPECT_EQ(E8m0ToF32(254), std::ldexp(1.f, 127));  // largest: 2^127
  EXPECT_EQ(E8m0ToF32(1), std::ldexp(1.f, -126));   // smallest normal float
  EXPECT_EQ(E8m0ToF32(0), std::ldexp(1.f, -127));   // 2^-127, a float subnormal
  EXPECT_GT(E8m0ToF32(0), 0.f);
  EXPECT_TRUE(std::isnan(E8m0ToF32(255)));
}

TEST(Fp4, DecodesEveryCode) {
  const float expected[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                              -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(Fp4ToF32(static_cast<uint8_t>(c)), expected[c]) << c;
    EXPECT_EQ(std::signbit(Fp4ToF32(static_cast<uint8_t>(c))), c >= 8) << c;
    EXPECT_EQ(F32ToFp4(expected[c]), c) << c;
  }
}

TEST(Fp4, EncodeRoundsToNearestEven) {
  EXPECT_EQ(Fp4ToF32(F32ToFp4(0.25f)), 0.f);   // tie 0 / 0.5 -> 0 (even)
  EXPECT_EQ(Fp4ToF32(F32ToFp4(0.75f)), 1.f);   // tie 0.5 / 1 -> 1 (even)
  EXPECT_EQ(Fp4ToF32(F32ToFp4(1.25f)), 1.f);   // tie 1 / 1.5 -> 1
  EXPECT_EQ(Fp4ToF32(F32ToFp4(2.5f)), 2.f);    // tie 2 / 3 -> 2
  EXPECT_EQ(Fp4ToF32(F32ToFp4(3.5f)), 4.f);    // tie 3 / 4 -> 4
  EXPECT_EQ(Fp4ToF32(F32ToFp4(5.f)), 4.f);     // tie 4 / 6 -> 4
  EXPECT_EQ(Fp4ToF32(F32ToFp4(5.1f)), 6.f);
  EXPECT_EQ(Fp4ToF32(F32ToFp4(100.f)), 6.f);
  EXPECT_EQ(Fp4ToF32(F32ToFp4(-2.9f)), -3.f);
}

// Floats from 0 past the saturation point (every 97th bit pattern, and the 8 floats either side
// of every midpoint and of 6), and their negatives: the code is the nearest e2m1 value, a tie
// goes to the even code, and anything beyond 6 saturates.
TEST(Fp4, EncodeIsTheNearestCodeTiesToEven) {
  float values[8];
  for (int c = 0; c < 8; ++c) values[c] = Fp4ToF32(static_cast<uint8_t>(c));
  auto check = [&](float f) {
    int want = 0;
    for (int c = 1; c < 8; ++c) {
      const float d = std::fabs(values[c] - f), best = std::fabs(values[want] - f);
      if (d < best || (d == best && c % 2 == 0)) want = c;
    }
    EXPECT_EQ(F32ToFp4(f), want) << f;
    EXPECT_EQ(F32ToFp4(-f), want | 0x8) << -f;
    return F32ToFp4(f) == want;
  };
  int64_t checked = 0;
  for (uint32_t bits = 0; bits <= std::bit_cast<uint32_t>(8.f); bits += 97) {
    if (!check(std::bit_cast<float>(bits))) return;
    ++checked;
  }
  for (float t : {.25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, 6.f}) {
    float below = t, above = t;
    ASSERT_TRUE(check(t));
    for (int i = 0; i < 8; ++i) {
      below = std::nextafter(below, 0.f);
      above = std::nextafter(above, 9.f);
      ASSERT_TRUE(check(below) && check(above)) << t;
      checked += 2;
    }
  }
  EXPECT_GT(checked, 10'000'000);
  EXPECT_EQ(F32ToFp4(std::numeric_limits<float>::infinity()), 0x7);
  EXPECT_EQ(F32ToFp4(std::nanf("")), 0x7);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.f);
  EXPECT_EQ(F32ToBf16(1.f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125 -> even (1.0).
  EXPECT_EQ(RoundToBf16(1.00390625f), 1.f);
  EXPECT_EQ(RoundToBf16(1.01171875f), 1.015625f);  // 1 + 3·2^-8: tie -> even mantissa 2
  EXPECT_EQ(F32ToBf16(-0.f), 0x8000);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::nanf("")))));
}

TEST(F16, RoundTrips) {
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    EXPECT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h);
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.f);
}

TEST(LinearWeight, DequantizesFp8BlocksWithE8m0Scales) {
  // W is [130, 4] so rows 128/129 fall in the second scale row.
  std::vector<uint8_t> data(130 * 4, 0x38);  // all 1.0
  data[129 * 4 + 3] = 0xbc;                  // -1.5
  std::vector<uint8_t> scale = {127 + 2, 127 - 3};  // [2, 1]: 4.0 and 0.125
  LinearWeight w;
  w.format = WeightFormat::kFp8;
  w.out_features = 130;
  w.in_features = 4;
  w.data = TensorView(data.data(), DType::kF8E4M3, {130, 4});
  w.scale = TensorView(scale.data(), DType::kF8E8M0, {2, 1});
  float row[4];
  DequantizeRow(w, 0, row);
  EXPECT_EQ(row[0], 4.f);
  DequantizeRow(w, 129, row);
  EXPECT_EQ(row[0], 0.125f);
  EXPECT_EQ(row[3], -1.5f * 0.125f);
}

TEST(LinearWeight, DequantizesFp4LowNibbleFirst) {
  // One row of 64 logical columns = 32 bytes, two 1x32 scale blocks.
  std::vector<uint8_t> data(32, 0);
  data[0] = 0x72;   // col 0 = code 2 (1.0), col 1 = code 7 (6.0)
  data[16] = 0x9f;  // col 32 = code 0xf (-6), col 33 = code 9 (-0.5)
  std::vector<uint8_t> scale = {127, 127 + 1};
  LinearWeight w;
  w.format = WeightFormat::kFp4;
  w.out_features = 1;
  w.in_features = 64;
  w.data = TensorView(data.data(), DType::kI8, {1, 32});
  w.scale = TensorView(scale.data(), DType::kF8E8M0, {1, 2});
  float row[64];
  DequantizeRow(w, 0, row);
  EXPECT_EQ(row[0], 1.f);
  EXPECT_EQ(row[1], 6.f);
  EXPECT_EQ(row[2], 0.f);
  EXPECT_EQ(row[32], -12.f);
  EXPECT_EQ(row[33], -1.f);
}

}  // namespace
}  // namespace deepinfer
