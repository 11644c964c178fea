// ops::Linear and ops::GroupedLinear with a kBf16 input on the host: y = W · bf16(x), x rounded to
// the nearest BF16 (ties to even) in place first, so x is consumed; kAsIs multiplies x as it is;
// kBf16Values (x's values BF16 already) as kAsIs, x untouched; RmsNorm's bf16_out.
// Values are chosen so that every rounding and every sum is exact in f32: the expected outputs are
// exact, and an unrounded or wrongly rounded x gives other ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/ops.h"
#include "tensor/dtype.h"
#include "tensor/linear_weight.h"

namespace deepinfer {
namespace {

constexpr uint16_t kBf16One = 0x3F80, kBf16Two = 0x4000;

// 1 + 2^-10 rounds down to 1; 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (odd) and goes to the
// even 1; 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even) and goes up; -3 is
// exact.
const std::vector<float> kRow = {1.f + std::ldexp(1.f, -10), 1.f + std::ldexp(1.f, -8),
                                 1.f + 3.f * std::ldexp(1.f, -8), -3.f};
const std::vector<float> kRounded = {1.f, 1.f, 1.f + std::ldexp(1.f, -6), -3.f};

// A dense BF16 weight [out, 4]: row o has every value 1 (o even) or 2 (o odd).
struct Bf16Weight {
  std::vector<uint16_t> bits;
  LinearWeight w;
  explicit Bf16Weight(int64_t out) : bits(static_cast<size_t>(out * 4)) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < 4; ++k) bits[o * 4 + k] = o % 2 == 0 ? kBf16One : kBf16Two;
    }
    w.out_features = out;
    w.in_features = 4;
    w.data = TensorView(bits.data(), DType::kBF16, {out, 4});
  }
};

float Sum(const std::vector<float>& v) {
  float s = 0.f;
  for (float x : v) s += x;
  return s;
}

TEST(OpsLinearInput, Bf16InputRoundsXInPlaceBeforeTheProduct) {
  const Bf16Weight weight(2);
  std::vector<float> x = kRow, y(2, -1.f);
  ops::Linear(ops::HostContext(), TensorView(x.data(), DType::kF32, {1, 4}), weight.w,
              TensorView(y.data(), DType::kF32, {1, 2}), ops::LinearInput::kBf16);
  EXPECT_EQ(x, kRounded) << "x is consumed: it holds its rounding";
  EXPECT_EQ(y[0], Sum(kRounded));
  EXPECT_EQ(y[1], 2.f * Sum(kRounded));

  std::vector<float> as_is = kRow;
  ops::Linear(ops::HostContext(), TensorView(as_is.data(), DType::kF32, {1, 4}), weight.w,
              TensorView(y.data(), DType::kF32, {1, 2}), ops::LinearInput::kAsIs);
  EXPECT_EQ(as_is, kRow) << "kAsIs leaves x alone";
  EXPECT_EQ(y[0], Sum(kRow));
  EXPECT_NE(Sum(kRow), Sum(kRounded)) << "the case must tell the two apart";
}

TEST(OpsLinearInput, Bf16InputOfAGroupedLinearToo) {
  const Bf16Weight weight(2);  // two groups of one output row each
  std::vector<float> x = kRow;
  x.insert(x.end(), kRow.begin(), kRow.end());
  std::vector<float> y(2, -1.f);
  ops::GroupedLinear(ops::HostContext(), TensorView(x.data(), DType::kF32, {1, 2, 4}), weight.w, 2,
                     TensorView(y.data(), DType::kF32, {1, 2, 1}), ops::LinearInput::kBf16);
  EXPECT_EQ(y[0], Sum(kRounded));
  EXPECT_EQ(y[1], 2.f * Sum(kRounded));
}

// kBf16Values: x holds BF16 values already, so the products are kAsIs's and x is not written
// (here an x that is not BF16, which such a caller must not pass, shows that nothing rounds it);
// LinearsOfOneInput takes it too, and refuses kBf16 (which would consume an x its products share).
TEST(OpsLinearInput, Bf16ValuesAreMultipliedAsTheyAre) {
  const Bf16Weight weight(2);
  std::vector<float> x = kRow, y(2, -1.f), y2(2, -1.f);
  const TensorView xv(x.data(), DType::kF32, {1, 4});
  ops::Linear(ops::HostContext(), xv, weight.w, TensorView(y.data(), DType::kF32, {1, 2}),
              ops::LinearInput::kBf16Values);
  EXPECT_EQ(x, kRow) << "x is not written";
  EXPECT_EQ(y[0], Sum(kRow));
  EXPECT_EQ(y[1], 2.f * Sum(kRow));

  ops::LinearsOfOneInput(ops::HostContext(), xv,
                         {{&weight.w, TensorView(y.data(), DType::kF32, {1, 2})},
                          {&weight.w, TensorView(y2.data(), DType::kF32, {1, 2})}},
                         TensorView(), ops::LinearInput::kBf16Values);
  EXPECT_EQ(x, kRow);
  EXPECT_EQ(y2[0], Sum(kRow));
  EXPECT_EQ(y2[1], 2.f * Sum(kRow));
  EXPECT_THROW(ops::LinearsOfOneInput(ops::HostContext(), xv, {{&weight.w, TensorView(y.data(), DType::kF32, {1, 2})}},
                                      TensorView(), ops::LinearInput::kBf16),
               std::exception);
}

// A norm with bf16_out stores its values rounded to BF16 (nearest even): a row of four 2s has RMS 2
// (eps 0), so each output is its f32 weight times exactly 1, and the weights carry kRow's rounding
// cases; without bf16_out the same norm stores kRow.
TEST(OpsLinearInput, NormWithBf16OutputsRoundsWhatItStores) {
  std::vector<float> weights = kRow;
  const TensorView norm_weight(weights.data(), DType::kF32, {4});
  std::vector<float> x = {2.f, 2.f, 2.f, 2.f}, y(4, -1.f);
  const TensorView xv(x.data(), DType::kF32, {1, 4}), yv(y.data(), DType::kF32, {1, 4});
  ops::RmsNorm(ops::HostContext(), xv, norm_weight, 0.f, yv, true);
  EXPECT_EQ(y, kRounded);
  ops::RmsNorm(ops::HostContext(), xv, norm_weight, 0.f, yv);
  EXPECT_EQ(y, kRow);
}

}  // namespace
}  // namespace deepinfer
