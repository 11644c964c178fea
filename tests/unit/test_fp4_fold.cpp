// The arithmetic of the folded FP4 codes (kernels/cpu/fp4_fold.h), which the CUDA warpgroup-MMA
// kernels run for FP4 weights: every pass's codes times 2^top give back each weight
// exactly, and the passes of a chunk take every group exactly once, whatever its four exponents.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/fp4_fold.h"

namespace deepinfer::cpu {
namespace {

// The e2m1 value of a nibble (bit 3: sign; bits 0-2: magnitude index).
double E2m1Value(uint32_t nibble) {
  const double m = E2m1Magnitude2(static_cast<int>(nibble & 7u)) / 2.0;
  return (nibble & 8u) != 0u ? -m : m;
}

// The e4m3 value of a code byte (no NaN in the tables).
double E4m3Value(uint32_t code) {
  const double v = std::ldexp(static_cast<double>(E4m3Units(code & 0x7fu)), -9);
  return (code & 0x80u) != 0u ? -v : v;
}

// CUDA's __byte_perm(lo, hi, selector) for selector nibbles 0-7, and the conversion of four nibbles
// the kernels run on top of it (E2m1x4ToE4m3x4Table in kernels/cuda/linear_mma.cuh).
uint32_t BytePerm(uint32_t lo, uint32_t hi, uint32_t selector) {
  const uint64_t bytes = (static_cast<uint64_t>(hi) << 32) | lo;
  uint32_t r = 0;
  for (int b = 0; b < 4; ++b) r |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * b)) & 7u))) & 0xffu) << (8 * b);
  return r;
}
// Appends `count` pseudo-random words of a 64-bit LCG started at `seed` (its high halves).
void AppendRandomWords(std::vector<uint32_t>& words, uint64_t seed, int count) {
  for (int i = 0; i < count; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    words.push_back(static_cast<uint32_t>(seed >> 32));
  }
}
uint32_t ConvertFour(uint32_t nibbles, int shift) {
  const uint32_t signs = ((nibbles & 0x8u) << 4) | ((nibbles & 0x80u) << 8) | ((nibbles & 0x800u) << 12) |
                         ((nibbles & 0x8000u) << 16);
  return BytePerm(FoldedTableWord(shift, 0), FoldedTableWord(shift, 4), nibbles & 0x7777u) | signs;
}

// Shifts -6..-1 are the up-shifted tables' (SliceUpShift).
TEST(Fp4Fold, EveryNibbleAtEveryShiftIsExact) {
  for (int shift = -kFp4FoldMaxUpShift; shift <= kFp4FoldMaxShift; ++shift) {
    for (uint32_t four = 0; four < 0x10000u; ++four) {
      const uint32_t codes = ConvertFour(four, shift);
      for (int b = 0; b < 4; ++b) {
        const uint32_t nibble = (four >> (4 * b)) & 0xfu;
        const double want = std::ldexp(E2m1Value(nibble), -shift);
        const double got = E4m3Value((codes >> (8 * b)) & 0xffu);
        ASSERT_EQ(got, want) << "nibble " << nibble << " shift " << shift;
        ASSERT_EQ(std::signbit(got), (nibble & 8u) != 0u) << "sign of nibble " << nibble;
      }
    }
  }
}

// Every 4-tuple of exponents in 0..40 (the spreads of real and adversarial checkpoints alike):
// the passes take each group once, with a shift of at most 8, each pass's top is the largest
// exponent not yet taken, `more` announces exactly the passes that take something, and no chunk
// needs more than four passes.
TEST(Fp4Fold, PassesTakeEveryGroupOnce) {
  constexpr int kMax = 40;
  std::array<int, 4> e{};
  int64_t tuples = 0, multi_pass = 0;
  for (e[0] = 0; e[0] <= kMax; ++e[0]) {
    for (e[1] = 0; e[1] <= kMax; ++e[1]) {
      for (e[2] = 0; e[2] <= kMax; ++e[2]) {
        for (e[3] = 0; e[3] <= kMax; ++e[3]) {
          const int ex[4] = {e[0], e[1], e[2], e[3]};
          int taken[4] = {0, 0, 0, 0};
          int passes = 0;
          for (int pass = 0; pass < 6; ++pass) {
            const FoldPass f = FoldPassOf(ex, pass);
            if (!f.any) break;
            ++passes;
            int top = -1;
            for (int j = 0; j < 4; ++j) {
              if (FoldPassTakes(f, ex[j])) {
                ++taken[j];
                ASSERT_LE(f.top - ex[j], kFp4FoldMaxShift);
                ASSERT_GE(f.top - ex[j], 0);
              }
              if (taken[j] == 0 || FoldPassTakes(f, ex[j])) top = std::max(top, ex[j]);
            }
            ASSERT_EQ(f.top, top) << "pass " << pass;
            ASSERT_EQ(f.more, FoldPassOf(ex, pass + 1).any) << "pass " << pass;
          }
          for (int j = 0; j < 4; ++j) ASSERT_EQ(taken[j], 1) << e[0] << " " << e[1] << " " << e[2] << " " << e[3];
          ASSERT_LE(passes, 4);
          ++tuples;
          if (passes > 1) ++multi_pass;
        }
      }
    }
  }
  EXPECT_EQ(tuples, 41 * 41 * 41 * 41);
  EXPECT_GT(multi_pass, 0);
}

// Within 8 binades one pass takes all four groups, the common case.
TEST(Fp4Fold, OnePassWithinEightBinades) {
  const int e[4] = {127, 119, 125, 121};
  const FoldPass f = FoldPassOf(e, 0);
  EXPECT_TRUE(f.any);
  EXPECT_FALSE(f.more);
  EXPECT_EQ(f.top, 127);
  for (const int g : e) EXPECT_TRUE(FoldPassTakes(f, g));
  EXPECT_FALSE(FoldPassOf(e, 1).any);
  const int wide[4] = {127, 118, 127, 127};  // 9 binades: two passes
  EXPECT_TRUE(FoldPassOf(wide, 0).more);
  EXPECT_FALSE(FoldPassTakes(FoldPassOf(wide, 0), 118));
  EXPECT_TRUE(FoldPassTakes(FoldPassOf(wide, 1), 118));
  EXPECT_EQ(FoldPassOf(wide, 1).top, 118);
}

// The packed word of each pass the CUDA kernels read per row (pass 0: FirstFoldPassWord; every
// pass: FoldPassWord, the in-block conversion's) says what FoldPassOf(e, pass) says, for every
// exponent 4-tuple in 0..40 and at the ends of e8m0's range (254 is its largest finite exponent).
TEST(Fp4Fold, FirstPassWordMatchesFoldPass) {
  const auto check = [](const int (&e)[4]) {
    ASSERT_EQ(FirstFoldPassWord(e), FoldPassWord(e, 0));
    for (int pass = 0; pass < 4; ++pass) {
      const FoldPass f = FoldPassOf(e, pass);
      const uint32_t word = FoldPassWord(e, pass);
      ASSERT_EQ(FoldWordAny(word), f.any);
      ASSERT_EQ(FoldWordMore(word), f.more);
      if (f.any) ASSERT_EQ(FoldWordTop(word), f.top);
      for (int g = 0; g < 4; ++g) {
        const uint32_t want = FoldPassTakes(f, e[g]) ? static_cast<uint32_t>(f.top - e[g]) : kFoldGroupLeft;
        ASSERT_EQ(FoldWordShift(word, g), want)
            << e[0] << " " << e[1] << " " << e[2] << " " << e[3] << " group " << g << " pass " << pass;
      }
    }
    // Every group is taken by exactly one of the passes (four groups: four passes at most).
    for (int g = 0; g < 4; ++g) {
      int taken = 0;
      for (int pass = 0; pass < 4; ++pass) taken += FoldWordShift(FoldPassWord(e, pass), g) != kFoldGroupLeft;
      ASSERT_EQ(taken, 1) << "group " << g;
    }
  };
  for (int a = 0; a <= 40; ++a) {
    for (int b = 0; b <= 40; ++b) {
      for (int c = 0; c <= 40; ++c) {
        for (int d = 0; d <= 40; ++d) {
          const int e[4] = {a, b, c, d};
          check(e);
        }
      }
    }
  }
  const int high[4] = {254, 246, 245, 0};
  check(high);
  EXPECT_EQ(FoldWordTop(FirstFoldPassWord(high)), 254);
  EXPECT_EQ(FoldWordShift(FirstFoldPassWord(high), 1), 8u);
  EXPECT_EQ(FoldWordShift(FirstFoldPassWord(high), 2), kFoldGroupLeft);
  EXPECT_TRUE(FoldWordMore(FirstFoldPassWord(high)));
  // No word of a real row is the no-row word: pass 0 always takes the top group.
  EXPECT_TRUE(FoldWordAny(FirstFoldPassWord(high)));
  EXPECT_FALSE(FoldWordAny(kFoldNoRowWord));
  for (int g = 0; g < 4; ++g) EXPECT_EQ(FoldWordShift(kFoldNoRowWord, g), kFoldGroupLeft);
}

// A slice's up-shifts: each chunk's top over the slice's lowest, where every chunk is taken whole
// by pass 0, every top is 1-254 and the tops span at most 6 binades; otherwise none.
TEST(Fp4Fold, SliceUpShiftsOnlyWhereTheSliceQualifies) {
  auto words = [](std::initializer_list<std::array<int, 4>> chunks) {
    std::vector<uint32_t> w;
    for (const auto& e : chunks) {
      const int ex[4] = {e[0], e[1], e[2], e[3]};
      w.push_back(FirstFoldPassWord(ex));
    }
    return w;
  };
  const std::vector<uint32_t> spread6 = words({{120, 118, 119, 113}, {126, 126, 125, 124}, {123, 122, 121, 121},
                                              {121, 120, 119, 118}});
  const uint32_t want6[4] = {0, 6, 3, 1};  // tops 120, 126, 123, 121 over 120
  for (int j = 0; j < 4; ++j) EXPECT_EQ(SliceUpShift(spread6.data(), 4, j), want6[j]) << "chunk " << j;
  // Tops 7 binades apart; a later pass (a group 9 below its top); top 0 and top 255.
  const std::vector<uint32_t> spread7 = words({{120, 120, 120, 120}, {127, 127, 127, 127}});
  const std::vector<uint32_t> later = words({{120, 111, 120, 120}, {120, 120, 120, 120}});
  const std::vector<uint32_t> zero = words({{0, 0, 0, 0}, {3, 3, 3, 3}});
  const std::vector<uint32_t> nan = words({{255, 250, 250, 250}, {250, 250, 250, 250}});
  for (const auto* w : {&spread7, &later, &zero, &nan}) {
    for (int j = 0; j < 2; ++j) EXPECT_EQ(SliceUpShift(w->data(), 2, j), kSliceNoUpShift) << "chunk " << j;
  }
  // One chunk (K's last of one): shift 0; a slice of one 9-binade chunk without a later pass.
  const std::vector<uint32_t> one = words({{200, 192, 195, 199}});
  EXPECT_EQ(SliceUpShift(one.data(), 1, 0), 0u);
  // Every up-shifted code stays exact: the shift of a group is top - e_g - u >= -6.
  for (int j = 0; j < 4; ++j) {
    for (int g = 0; g < 4; ++g) {
      const int shift = static_cast<int>(FoldWordShift(spread6[static_cast<size_t>(j)], g)) - static_cast<int>(want6[j]);
      EXPECT_GE(shift, -kFp4FoldMaxUpShift);
    }
  }
}

// The sign-split layout (SignSplitWord) and the kernels' conversion of it (linear_mma.cuh's
// E2m1x8SignSplitToE4m3x8Table, emulated here with byte_perm): for every shift's tables and both
// sign masks (kept, or dropped for a group a pass leaves), its two code words are those of the
// stored word's conversion (E2m1x8ToE4m3x8Table: ConvertFour's codes of nibbles 0-3, then 4-7),
// over every word whose eight nibbles take each of the 16 values in each place (and 4,096 random
// words); and the layout loses no bit (inverted here, round trip).
TEST(Fp4Fold, SignSplitWordsConvertToTheStoredWordsCodes) {
  const auto stored_codes = [](uint32_t word, int shift, uint32_t sign_mask) {
    const uint32_t keep = sign_mask != 0u ? 0xffffffffu : 0x7f7f7f7fu;
    return std::array<uint32_t, 2>{ConvertFour(word & 0xffffu, shift) & keep, ConvertFour(word >> 16, shift) & keep};
  };
  const auto split_codes = [](uint32_t split, int shift, uint32_t sign_mask) {
    const uint32_t lo = FoldedTableWord(shift, 0), hi = FoldedTableWord(shift, 4);
    const uint32_t magnitudes = split & 0x77777777u;
    return std::array<uint32_t, 2>{BytePerm(lo, hi, magnitudes & 0xffffu) | (split & sign_mask),
                                   BytePerm(lo, hi, magnitudes >> 16) | ((split << 4) & sign_mask)};
  };
  const auto unsplit = [](uint32_t split) {
    uint32_t word = split & 0x77777777u;
    for (int j = 0; j < 8; ++j) {
      const int at = j < 4 ? 8 * j + 7 : 8 * (j - 4) + 3;
      word |= ((split >> at) & 1u) << (4 * j + 3);
    }
    return word;
  };
  std::vector<uint32_t> words;
  for (uint32_t value = 0; value < 16; ++value) {
    for (int place = 0; place < 8; ++place) {
      for (const uint32_t others : {0x00000000u, 0x88888888u, 0x12345678u, 0xfedcba98u}) {
        const uint32_t mask = 0xfu << (4 * place);
        words.push_back((others & ~mask) | (value << (4 * place)));
      }
    }
  }
  AppendRandomWords(words, 0x5eed5eedu, 4096);
  for (const uint32_t word : words) {
    const uint32_t split = SignSplitWord(word);
    ASSERT_EQ(unsplit(split), word) << std::hex << word;
    for (int shift = -kFp4FoldMaxUpShift; shift <= kFp4FoldMaxShift; ++shift) {
      for (const uint32_t sign_mask : {0x80808080u, 0u}) {
        ASSERT_EQ(split_codes(split, shift, sign_mask), stored_codes(word, shift, sign_mask))
            << std::hex << "word " << word << " shift " << std::dec << shift << " sign mask " << sign_mask;
      }
    }
  }
}

// The BF16 fast-prefill kernel's placement of a pair of nibbles (fp4bf16::PairOfWord and
// PairOfSignSplitWord, emulated here with byte_perm): for pair P, nibble P's magnitude bits at BF16
// bits 6-8 and its sign at bit 15, nibble P + 4's at bits 22-24 and 31. From the sign-split word the
// signs come by one byte permute of the word and the word shifted left by 4, selector
// (P << 4) | ((4 + P) << 12); from the stored word by one shift of 12 - 4P. Both must place the same
// bits for every word (a wrong selector nibble moves some other nibble's sign there).
TEST(Fp4Fold, SignSplitWordsPlaceTheStoredWordsBf16Pairs) {
  const auto stored_pair = [](uint32_t w, int pair) {
    const int mag_shift = 6 - 4 * pair, sign_shift = 12 - 4 * pair;
    const uint32_t mag = (mag_shift >= 0 ? w << mag_shift : w >> -mag_shift) & 0x01c001c0u;
    return mag | ((w << sign_shift) & 0x80008000u);
  };
  const auto split_pair = [](uint32_t split, int pair) {
    const int mag_shift = 6 - 4 * pair;
    const uint32_t selector = (static_cast<uint32_t>(pair) << 4) | (static_cast<uint32_t>(4 + pair) << 12);
    const uint32_t mag = (mag_shift >= 0 ? split << mag_shift : split >> -mag_shift) & 0x01c001c0u;
    return mag | (BytePerm(split, split << 4, selector) & 0x80008000u);
  };
  std::vector<uint32_t> words = {0u, 0xffffffffu, 0x88888888u, 0x77777777u};
  for (int bit = 0; bit < 32; ++bit) words.push_back(1u << bit);
  AppendRandomWords(words, 0xb16b16u, 4096);
  for (const uint32_t word : words) {
    for (int pair = 0; pair < 4; ++pair) {
      ASSERT_EQ(split_pair(SignSplitWord(word), pair), stored_pair(word, pair))
          << std::hex << "word " << word << " pair " << std::dec << pair;
    }
  }
}

}  // namespace
}  // namespace deepinfer::cpu
