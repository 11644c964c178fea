// The quantization round trips at the reference's act_quant rule (docs/numerics.md, "FP8
// activations"): the ue8m0 block scale, e4m3 rounding per block of 128, the remainder block, and
// the row-count form of the op. Expected values are worked by hand; the random cases check the
// kernel against an independent oracle (exact ceil-log2 in double, nearest e4m3 code by search).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/ue8m0.h"
#include "ops/ops.h"
#include "tensor/dtype.h"

namespace deepinfer {
namespace {

constexpr int64_t kBlock = 128;

// A block of kBlock values: `head` first, zeros after.
std::vector<float> Block(std::initializer_list<float> head) {
  std::vector<float> b(head);
  b.resize(kBlock, 0.f);
  return b;
}

std::vector<float> RoundTrip(std::vector<float> x, int64_t block = kBlock) {
  cpu::Fp8RoundTrip(x.data(), static_cast<int64_t>(x.size()), block);
  return x;
}

// 2^ceil(log2(v)) for a normal v > 0, exactly: v = m·2^e with m in [0.5, 1).
double ExactPow2Ceil(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  return std::ldexp(1.0, m == 0.5 ? e - 1 : e);
}

// The e4m3 value nearest to q (|q| <= 448), ties to the even code, by searching every code.
float NearestE4m3(float q) {
  float best = 0.f;
  int best_code = 0;
  for (int code = 0; code < 0x7f; ++code) {
    const float v = E4m3ToF32(static_cast<uint8_t>(code));
    const float d = std::fabs(std::fabs(q) - v), bd = std::fabs(std::fabs(q) - best);
    if (d < bd || (d == bd && code % 2 == 0 && best_code % 2 == 1)) best = v, best_code = code;
  }
  return std::copysign(best, q);
}

TEST(Ue8m0Scale, IsTheExactPowerOfTwoCeiling) {
  EXPECT_EQ(cpu::Pow2CeilExact(1.f), 1.f);
  EXPECT_EQ(cpu::Pow2CeilExact(std::nextafter(1.f, 2.f)), 2.f);
  EXPECT_EQ(cpu::Pow2CeilExact(0.75f), 1.f);
  EXPECT_EQ(cpu::Pow2CeilExact(0x1p-126f), 0x1p-126f);
  // f32 log2 of 2^-9·(1 + 2^-23) rounds to -9 itself; the bits say the ceiling is 2^-8.
  EXPECT_EQ(cpu::Pow2CeilExact(std::nextafter(0x1p-9f, 1.f)), 0x1p-8f);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-40, 20);
  for (int i = 0; i < 100000; ++i) {
    const float v = std::ldexp(mantissa(rng), exponent(rng));
    ASSERT_EQ(static_cast<double>(cpu::Pow2CeilExact(v)), ExactPow2Ceil(v)) << v;
  }
}

TEST(Ue8m0Scale, BlockScaleAtAndJustAbove448TimesAPowerOfTwo) {
  for (int k = -20; k <= 10; ++k) {
    const float at = std::ldexp(448.f, k);
    EXPECT_EQ(cpu::Ue8m0BlockScale(at, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax), std::ldexp(1.f, k)) << k;
    EXPECT_EQ(cpu::Ue8m0BlockScale(std::nextafter(at, 1e30f), cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax),
              std::ldexp(1.f, k + 1)) << k;
    EXPECT_EQ(cpu::Ue8m0BlockScale(std::nextafter(at, 0.f), cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax),
              std::ldexp(1.f, k)) << k;
  }
  // amax below the 1e-4 floor (zeros included): 1e-4/448 = 2.2e-7 -> 2^-22.
  EXPECT_EQ(cpu::Ue8m0BlockScale(0.f, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax), 0x1p-22f);
  EXPECT_EQ(cpu::Ue8m0BlockScale(1e-7f, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax), 0x1p-22f);
}

TEST(Fp8ActQuant, AmaxExactly448TimesAPowerOfTwo) {
  // amax 0.875 = 448·2^-9: scale 2^-9. 0.875 is code 448; 0.3 -> 153.6 -> 160 (step 16) -> 0.3125;
  // 3·2^-18 -> 3·2^-9, the subnormal code 3, exact.
  const std::vector<float> y = RoundTrip(Block({0.875f, 0.3f, 0x3p-18f, -0x3p-18f}));
  EXPECT_EQ(y[0], 0.875f);
  EXPECT_EQ(y[1], 0.3125f);
  EXPECT_EQ(y[2], 0x3p-18f);
  EXPECT_EQ(y[3], -0x3p-18f);
}

TEST(Fp8ActQuant, AmaxJustAbove448TimesAPowerOfTwo) {
  // One ulp above 0.875: scale 2^-8 (a rounded-log2 rule would keep 2^-9). 3·2^-18 -> 1.5·2^-9,
  // a tie between subnormal codes 1 and 2 -> 2 (even) -> 2^-16.
  const float above = std::nextafter(0.875f, 1.f);
  const std::vector<float> y = RoundTrip(Block({above, 0.3f, 0x3p-18f, -0x3p-18f}));
  EXPECT_EQ(y[0], 0.875f);  // 224.00002 -> 224
  EXPECT_EQ(y[1], 0.3125f);
  EXPECT_EQ(y[2], 0x1p-16f);
  EXPECT_EQ(y[3], -0x1p-16f);
}

TEST(Fp8ActQuant, TiesRoundToEvenAndNegativesMirror) {
  // amax 448: scale 1, so the values are the e4m3 codes themselves.
  const std::vector<float> y = RoundTrip(
      Block({448.f, 17.f, 19.f, 1.0625f, 1.1875f, -17.f, 300.f, 432.f, 440.f, 0x1p-10f, -0x1p-10f, 0x3p-10f}));
  EXPECT_EQ(y[1], 16.f);       // 8.5 steps of 2 -> 8
  EXPECT_EQ(y[2], 20.f);       // 9.5 -> 10
  EXPECT_EQ(y[3], 1.f);        // 8.5 steps of 1/8 -> 8
  EXPECT_EQ(y[4], 1.25f);      // 9.5 -> 10
  EXPECT_EQ(y[5], -16.f);
  EXPECT_EQ(y[6], 288.f);      // 9.375 steps of 32 -> 9
  EXPECT_EQ(y[7], 448.f);      // 13.5 -> 14
  EXPECT_EQ(y[8], 448.f);
  EXPECT_EQ(y[9], 0.f);        // 2^-10: half the smallest subnormal -> 0
  EXPECT_EQ(y[10], 0.f);
  EXPECT_TRUE(std::signbit(y[10]));
  EXPECT_EQ(y[11], 0x1p-8f);   // 1.5 subnormal steps -> 2
  // A block whose amax is a negative value scales like its magnitude.
  const std::vector<float> z = RoundTrip(Block({-0.875f, 0x3p-18f}));
  EXPECT_EQ(z[0], -0.875f);
  EXPECT_EQ(z[1], 0x3p-18f);
}

TEST(Fp8ActQuant, ZerosAndValuesUnderTheAmaxFloor) {
  const std::vector<float> zeros = RoundTrip(Block({0.f, -0.f}));
  for (float v : zeros) EXPECT_EQ(v, 0.f);
  EXPECT_TRUE(std::signbit(zeros[1]));
  // amax 1e-5 < 1e-4: scale 2^-22. 1e-5 -> 41.9 -> 40 (step 4); 1e-9 -> 2.15 subnormal steps
  // -> 2 -> 2^-30; -3e-6 -> -12.58 -> -13.
  const std::vector<float> y = RoundTrip(Block({1e-5f, 1e-9f, -3e-6f}));
  EXPECT_EQ(y[0], 40.f * 0x1p-22f);
  EXPECT_EQ(y[1], 0x1p-30f);
  EXPECT_EQ(y[2], -13.f * 0x1p-22f);
}

TEST(Fp8ActQuant, RemainderBlockHasItsOwnScale) {
  // K = 200: blocks [0, 128) and [128, 200). The reference asserts K % 128 == 0; our small test
  // configs (w2's K = 64) quantize the shorter remainder on its own.
  std::vector<float> x(200, 0.f);
  x[0] = 448.f;
  x[128] = 0.875f;
  x[129] = 0x3p-18f;
  x[1] = 0x3p-18f;
  const std::vector<float> y = RoundTrip(x);
  EXPECT_EQ(y[129], 0x3p-18f) << "remainder block scaled by its own amax (2^-9)";
  EXPECT_EQ(y[1], 0.f) << "first block scaled by 448 (scale 1): 3·2^-18 is far under half a subnormal";
}

TEST(Fp8ActQuant, MatchesAnIndependentOracle) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> binade(-24, 12);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> x(3 * kBlock);
    const float spread = std::ldexp(1.f, binade(rng));
    for (float& v : x) v = normal(rng) * spread;
    if (trial % 7 == 0) x[5] = std::nextafter(std::ldexp(448.f, binade(rng)), 1e30f);  // amax edge
    const std::vector<float> y = RoundTrip(x);
    for (int64_t b0 = 0; b0 < static_cast<int64_t>(x.size()); b0 += kBlock) {
      float amax = 0.f;
      for (int64_t i = b0; i < b0 + kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float v = std::max(amax, 1e-4f) * (1.f / 448.f);  // the reference's f32 product
      const float scale = static_cast<float>(ExactPow2Ceil(v));
      for (int64_t i = b0; i < b0 + kBlock; ++i) {
        const float q = std::clamp(x[i] / scale, -448.f, 448.f);
        ASSERT_EQ(y[i], NearestE4m3(q) * scale) << "trial " << trial << " index " << i << " value " << x[i];
      }
    }
  }
}

TEST(Fp8ActQuant, RowsOpHonoursTheRowCount) {
  const int64_t rows = 4, k = 256;
  std::vector<float> x(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) x[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  std::vector<float> y = x;
  int32_t count = 2;
  ops::Fp8RoundTripRows(ops::HostContext(), TensorView(y.data(), DType::kF32, {rows, k}), 0, k, kBlock,
                        TensorView(&count, DType::kI32, {1}));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> want = r < count ? RoundTrip(row) : row;
    for (int64_t i = 0; i < k; ++i) ASSERT_EQ(y[r * k + i], want[i]) << "row " << r << " col " << i;
  }
}

// BF16 rounding (the reference's stored rope channels): nearest, ties to even, worked by hand.
// BF16 keeps 8 significant bits, so the spacing above 1 is 2^-7.
TEST(Bf16Round, NearestTiesToEven) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1.f,
                          1.f + 0x1p-8f,              // halfway between 1 and 1 + 2^-7: to 1 (even)
                          1.f + 3 * 0x1p-8f,          // halfway between 1 + 2^-7 and 1 + 2^-6: up (even)
                          1.f + 0x1p-8f + 0x1p-20f,   // just past halfway: up
                          -(1.f + 0x1p-7f + 0x1p-9f), // below halfway: down in magnitude
                          -0.f,
                          3.3961e38f,                 // below halfway to 2^128: the largest BF16
                          3.4e38f,                    // past it: inf
                          -inf,
                          0x1p-130f * 1.5f};          // subnormal: keeps its top 8 bits (1.5 · 2^-130)
  cpu::Bf16Round(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(x[0], 1.f);
  EXPECT_EQ(x[1], 1.f);
  EXPECT_EQ(x[2], 1.f + 0x1p-6f);
  EXPECT_EQ(x[3], 1.f + 0x1p-7f);
  EXPECT_EQ(x[4], -(1.f + 0x1p-7f));
  EXPECT_TRUE(x[5] == 0.f && std::signbit(x[5]));
  EXPECT_EQ(x[6], 0x1.fep127f);
  EXPECT_EQ(x[7], inf);
  EXPECT_EQ(x[8], -inf);
  EXPECT_EQ(x[9], 0x1p-130f * 1.5f);
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  cpu::Bf16Round(nan.data(), 1);
  EXPECT_TRUE(std::isnan(nan[0]));
}

TEST(Bf16Round, RowsOpRoundsOnlyTheChannelRange) {
  const int64_t rows = 3, n = 10;
  std::vector<float> x(rows * n);
  for (int64_t i = 0; i < rows * n; ++i) x[i] = 1.f + static_cast<float>(i) * 0x1p-12f;
  std::vector<float> y = x;
  ops::Bf16RoundRows(ops::HostContext(), TensorView(y.data(), DType::kF32, {rows, n}), 6, n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float want = x[r * n + c];
      if (c >= 6) cpu::Bf16Round(&want, 1);
      ASSERT_EQ(y[r * n + c], want) << "row " << r << " col " << c;
    }
  }
  EXPECT_NE(y[n - 1], x[n - 1]) << "the range was rounded";
}

}  // namespace
}  // namespace deepinfer
