// The packed state-row format (kernels/cpu/state_row.h): its byte layout for V4's 584-byte row
// and V4.1's 528-byte one, and decode(encode(x)) against the rounding the state applies today
// (cpu::Fp8RoundTrip on the e4m3 channels, cpu::Bf16Round on the rest), bit for bit, over rows
// spanning many binades, zeros, signed zeros, blocks below the amax floor, values at the code
// range's edges, infinities and NaNs; and that rounded rows decode to themselves. The same for
// §6.2's MXFP4 index rows (cpu::Fp4RowFormat) against cpu::Fp4RoundTrip.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/state_row.h"
#include "tensor/dtype.h"

namespace deepinfer {
namespace {

using cpu::PackedRowFormat;

constexpr PackedRowFormat kV41WindowRow{512, 512, 32};

// What the state holds for x today under kv_fp8.
std::vector<float> RoundedAsTheStateRoundsIt(const PackedRowFormat& f, std::vector<float> x) {
  cpu::Fp8RoundTrip(x.data(), f.fp8_end, f.block);
  cpu::Bf16Round(x.data() + f.fp8_end, f.dim - f.fp8_end);
  return x;
}

std::vector<float> RoundTrip(const PackedRowFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> packed(static_cast<size_t>(f.row_bytes()), 0xAB);
  cpu::EncodePackedRow(f, x.data(), packed.data());
  for (int64_t i = f.scale_offset() + f.scales(); i < f.row_bytes(); ++i) {
    EXPECT_EQ(packed[static_cast<size_t>(i)], 0) << "padding byte " << i;
  }
  std::vector<float> y(static_cast<size_t>(f.dim), 12345.f);
  cpu::DecodePackedRow(f, packed.data(), y.data());
  return y;
}

// Bit equality, except that from channel nan_payloads_free_from on two NaNs are equal whatever
// their payloads.
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, int64_t nan_payloads_free_from) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (static_cast<int64_t>(i) >= nan_payloads_free_from && std::isnan(got[i]) && std::isnan(want[i])) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "channel " << i << ": " << got[i] << " against " << want[i];
  }
}

// Rows whose blocks each take one kind of value: wide random magnitudes, narrow ones, zeros,
// values below the amax floor, e4m3's largest code times a power of two, and ties of e4m3 and BF16.
std::vector<float> MixedRow(const PackedRowFormat& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::uniform_int_distribution<int> binade(-40, 40), kind(0, 6);
  std::vector<float> x(static_cast<size_t>(f.dim));
  for (int64_t b0 = 0; b0 < f.dim; b0 += 32) {
    const int k = kind(rng);
    const float base = std::ldexp(1.f, binade(rng));
    for (int64_t i = b0; i < std::min(f.dim, b0 + 32); ++i) {
      float v = 0.f;
      switch (k) {
        case 0: v = std::ldexp(unit(rng), binade(rng)); break;
        case 1: v = base * unit(rng); break;
        case 2: v = (i % 2 ? -0.f : 0.f); break;
        case 3: v = 1e-6f * unit(rng); break;  // amax below the 1e-4 floor
        case 4: v = (i % 3 == 0 ? 448.f : -1.f) * base; break;
        case 5: v = base * (1.f + 0.0625f * static_cast<float>(i % 16)); break;  // e4m3 ties and codes
        default: v = std::bit_cast<float>(std::bit_cast<uint32_t>(base * unit(rng)) | 0x8000u); break;  // BF16 ties
      }
      x[static_cast<size_t>(i)] = v;
    }
  }
  return x;
}

TEST(PackedRowFormat, Layouts) {
  EXPECT_EQ(cpu::kV4MainRow.row_bytes(), 584);
  EXPECT_EQ(cpu::kV4MainRow.bf16_offset(), 448);
  EXPECT_EQ(cpu::kV4MainRow.scale_offset(), 576);
  EXPECT_EQ(cpu::kV4MainRow.scales(), 7);
  EXPECT_EQ(kV41WindowRow.row_bytes(), 528);
  EXPECT_EQ(kV41WindowRow.scale_offset(), 512);
  EXPECT_EQ(kV41WindowRow.scales(), 16);
  EXPECT_EQ((PackedRowFormat{64, 0, 64}.row_bytes()), 128);  // all BF16
  EXPECT_EQ(cpu::kV4MainRow.row_pitch(), 592);
  EXPECT_EQ(kV41WindowRow.row_pitch(), 528);
  // The tiny goldens' rows: 96 e4m3 channels in a block of 64 and one of 32, 32 BF16 channels.
  const PackedRowFormat tiny{128, 96, 64};
  EXPECT_EQ(tiny.scales(), 2);
  EXPECT_EQ(tiny.scale_offset(), 160);
  EXPECT_EQ(tiny.row_bytes(), 168);
  EXPECT_EQ(tiny.row_pitch(), 176);
  EXPECT_NO_THROW(cpu::kV4MainRow.Validate());
  EXPECT_NO_THROW(tiny.Validate());
  EXPECT_THROW((PackedRowFormat{512, 576, 64}.Validate()), std::exception);  // past dim
  EXPECT_THROW((PackedRowFormat{512, 448, 0}.Validate()), std::exception);
  EXPECT_THROW((PackedRowFormat{0, 0, 64}.Validate()), std::exception);
}

TEST(PackedRow, BytesOfAKnownRow) {
  const PackedRowFormat f{8, 4, 4};  // 4 codes, 4 BF16 values, 1 scale: 4 + 8 + 1 -> 16 bytes
  const std::vector<float> x{1.f, -2.f, 0.5f, 448.f, 1.f, -0.f, 3.140625f, 65536.f};
  std::vector<uint8_t> packed(static_cast<size_t>(f.row_bytes()), 0xAB);
  cpu::EncodePackedRow(f, x.data(), packed.data());
  // amax 448 -> scale 2^0 (byte 127); codes of 1, -2, 0.5, 448 in e4m3fn.
  const std::vector<uint8_t> want{0x38, 0xC0, 0x30, 0x7E, 0x80, 0x3F, 0x00, 0x80,
                                  0x49, 0x40, 0x80, 0x47, 127,  0,    0,    0};
  EXPECT_EQ(packed, want);
}

TEST(PackedRow, DecodesToTheStatesRoundingBitForBit) {
  for (const PackedRowFormat& f :
       {cpu::kV4MainRow, kV41WindowRow, PackedRowFormat{64, 32, 32}, PackedRowFormat{128, 96, 64}}) {
    SCOPED_TRACE(testing::Message() << "dim " << f.dim << ", fp8_end " << f.fp8_end << ", block " << f.block);
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const std::vector<float> x = MixedRow(f, seed);
      const std::vector<float> rounded = RoundedAsTheStateRoundsIt(f, x);
      ExpectSameBits(RoundTrip(f, x), rounded, f.dim);
      // A rounded row (what the state holds today) decodes to itself.
      ExpectSameBits(RoundTrip(f, rounded), rounded, f.dim);
    }
  }
}

TEST(PackedRow, NonFiniteValues) {
  const PackedRowFormat f = cpu::kV4MainRow;
  std::vector<float> x = MixedRow(f, 7);
  x[3] = std::numeric_limits<float>::infinity();              // block 0: scale +inf
  x[70] = std::numeric_limits<float>::quiet_NaN();            // block 1: NaN is not its amax
  x[200] = -std::numeric_limits<float>::infinity();
  x[450] = std::numeric_limits<float>::quiet_NaN();            // a BF16 channel
  x[451] = std::bit_cast<float>(0x7f800001u);                  // a signalling NaN
  x[452] = std::numeric_limits<float>::infinity();
  const std::vector<float> y = RoundTrip(f, x);
  ExpectSameBits(y, RoundedAsTheStateRoundsIt(f, x), f.fp8_end);
  EXPECT_TRUE(std::isnan(y[450]) && std::isnan(y[451]));
  EXPECT_EQ(y[452], std::numeric_limits<float>::infinity());
}

// ---- MXFP4 index rows ----------------------------------------------------------------------

std::vector<float> Fp4RoundTrip(const cpu::Fp4RowFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> packed(static_cast<size_t>(f.row_bytes()), 0xAB);
  cpu::EncodeFp4Row(f, x.data(), packed.data());
  std::vector<float> y(static_cast<size_t>(f.dim), 12345.f);
  cpu::DecodeFp4Row(f, packed.data(), y.data());
  return y;
}

std::vector<float> Fp4Rounded(const cpu::Fp4RowFormat& f, std::vector<float> x) {
  cpu::Fp4RoundTrip(x.data(), f.dim, f.block);
  return x;
}

TEST(Fp4Row, Sizes) {
  EXPECT_EQ(cpu::kV4IndexRow.row_bytes(), 68);  // §6.2: 64 bytes of values and 4 scales
  EXPECT_EQ(cpu::kV4IndexRow.scale_offset(), 64);
  EXPECT_EQ(cpu::kV4IndexRow.scales(), 4);
  EXPECT_EQ(cpu::kV4IndexRow.row_pitch(), 80);
  EXPECT_EQ((cpu::Fp4RowFormat{96, 64}.scales()), 2);  // a partial second block
  EXPECT_NO_THROW(cpu::kV4IndexRow.Validate());
  EXPECT_THROW((cpu::Fp4RowFormat{127, 32}.Validate()), std::exception);  // odd
  EXPECT_THROW((cpu::Fp4RowFormat{128, 0}.Validate()), std::exception);
  EXPECT_THROW((cpu::Fp4RowFormat{0, 32}.Validate()), std::exception);
}

TEST(Fp4Row, BytesOfAKnownRow) {
  const cpu::Fp4RowFormat f{8, 4};
  // Block 0: amax 6, scale 1 (byte 127): codes 1 (0.5), 0xA (-1), 7 (6), 0. Block 1: amax 3, scale
  // 0.5 (byte 126): 3, 6, -4 and 1.5 at that scale, codes 5, 7, 0xE, 3. Channel 2i in the low nibble.
  const std::vector<float> x{0.5f, -1.f, 6.f, 0.f, 1.5f, 3.f, -2.f, 0.75f};
  std::vector<uint8_t> packed(static_cast<size_t>(f.row_bytes()), 0xAB);
  cpu::EncodeFp4Row(f, x.data(), packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xA1, 0x07, 0x75, 0x3E, 127, 126}));
  ExpectSameBits(Fp4RoundTrip(f, x), x, f.dim);  // every value was a code at its scale
}

TEST(Fp4Row, DecodesToFp4RoundTripBitForBit) {
  for (const cpu::Fp4RowFormat& f : {cpu::kV4IndexRow, cpu::Fp4RowFormat{64, 32}, cpu::Fp4RowFormat{96, 64}}) {
    SCOPED_TRACE(testing::Message() << "dim " << f.dim << ", block " << f.block);
    const PackedRowFormat shape{f.dim, f.dim, 32};  // MixedRow's kinds over every channel
    for (uint64_t seed = 1; seed <= 200; ++seed) {
      const std::vector<float> x = MixedRow(shape, seed);
      const std::vector<float> rounded = Fp4Rounded(f, x);
      ExpectSameBits(Fp4RoundTrip(f, x), rounded, f.dim);
      ExpectSameBits(Fp4RoundTrip(f, rounded), rounded, f.dim);  // the state's rows decode to themselves
    }
  }
}

TEST(Fp4Row, NonFiniteValuesAsFp4RoundTrip) {
  const cpu::Fp4RowFormat f = cpu::kV4IndexRow;
  std::vector<float> x = MixedRow(PackedRowFormat{f.dim, f.dim, 32}, 9);
  x[3] = std::numeric_limits<float>::infinity();   // block 0: scale +inf
  x[40] = std::numeric_limits<float>::quiet_NaN();  // block 1: NaN is not its amax; e2m1 has no NaN
  x[100] = -std::numeric_limits<float>::infinity();
  ExpectSameBits(Fp4RoundTrip(f, x), Fp4Rounded(f, x), 0);
}

}  // namespace
}  // namespace deepinfer
