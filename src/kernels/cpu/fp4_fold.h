// FP4 (e2m1) weights with e8m0 group scales turned into e4m3 codes with the group scales folded
// in: the arithmetic the CUDA warpgroup-MMA kernels use for FP4 weights
// (kernels/cuda/linear_wgmma.cuh, "FP4: the group scales folded into the codes"), kept here
// without CUDA so that the CPU tests check it exhaustively (tests/unit/test_fp4_fold.cpp).
//
// An e2m1 magnitude m (0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^-d is an e4m3 value exactly for
// 0 <= d <= 8: e4m3's subnormals are the multiples of 2^-9 and m has one fractional bit. A
// 128-column chunk of one weight row holds four 32-column groups with e8m0 exponents e_0..e_3; a
// pass over the chunk takes the groups within 8 binades of its top exponent, codes each taken
// nibble as m · 2^-(top - e_g) and leaves the others zero, so that the pass's dot product times
// 2^top is the taken groups' exact contribution.
#pragma once

#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace deepinfer::cpu {

// Largest shift of a group below its pass's top exponent that keeps every code exact.
inline constexpr int kFp4FoldMaxShift = 8;
// Largest shift up (d = -6): 6 · 2^6 = 384 is still an e4m3 value (448 the largest). Used where a
// row's chunks of one slice share one scale (SliceUpShift).
inline constexpr int kFp4FoldMaxUpShift = 6;

// The e4m3 code (sign clear) of m · 2^-d with m = m2 / 2, for -6 <= d <= 8: in units of 2^-9 the
// value is n = m2 · 2^(8 - d), an integer; below 8 units it is subnormal (code n), else it is
// (8 + mantissa) · 2^(E - 1) units with exponent field E.
DI_HOST_DEVICE constexpr uint32_t FoldedE4m3(uint32_t m2, int d) {
  const uint32_t n = m2 << (kFp4FoldMaxShift - d);
  if (n < 8) return n;
  int shift = 0;
  while ((n >> shift) >= 16) ++shift;
  return static_cast<uint32_t>((shift + 1) << 3) | ((n >> shift) - 8);
}

// Twice the e2m1 magnitude of code index i (0..7): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
DI_HOST_DEVICE constexpr uint32_t E2m1Magnitude2(int i) {
  constexpr uint32_t kM2[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return kM2[i];
}

// The byte_perm table word of shift d: the e4m3 codes of magnitudes first .. first + 3, byte b
// holding magnitude first + b (first = 0 or 4).
DI_HOST_DEVICE constexpr uint32_t FoldedTableWord(int d, int first) {
  uint32_t word = 0;
  for (int b = 0; b < 4; ++b) word |= FoldedE4m3(E2m1Magnitude2(first + b), d) << (8 * b);
  return word;
}

// The value of e4m3 code `code` (sign clear) in units of 2^-9.
DI_HOST_DEVICE constexpr uint32_t E4m3Units(uint32_t code) {
  const uint32_t exponent = code >> 3, mantissa = code & 7u;
  return exponent == 0 ? mantissa : (8u + mantissa) << (exponent - 1);
}

// Every table entry decodes to m · 2^-d exactly and is a finite e4m3 code (not 0x7f).
DI_HOST_DEVICE constexpr bool FoldedTablesExact() {
  for (int d = -kFp4FoldMaxUpShift; d <= kFp4FoldMaxShift; ++d) {
    for (int i = 0; i < 8; ++i) {
      const uint32_t code = FoldedE4m3(E2m1Magnitude2(i), d);
      if (code > 0x7eu || E4m3Units(code) != E2m1Magnitude2(i) << (kFp4FoldMaxShift - d)) return false;
    }
  }
  return true;
}
static_assert(FoldedTablesExact(), "the folded FP4 tables are exact for shifts -6 to 8");
static_assert(FoldedTableWord(0, 0) == 0x3c383000u && FoldedTableWord(0, 4) == 0x4c484440u,
              "shift 0 is the plain e2m1 -> e4m3 table");

// Pass `pass` over one row's chunk with group exponents e[0..3]: pass 0 takes the groups within
// 8 binades of the largest exponent; each later pass, of the groups left, those within 8 binades
// of the largest one left.
struct FoldPass {
  int top = 0;        // the pass's scale exponent (meaningful where any)
  int below = 0;      // groups with e_g >= below were taken by earlier passes
  bool any = false;   // the pass takes a group of this row
  bool more = false;  // groups are left for a later pass
};

DI_HOST_DEVICE inline FoldPass FoldPassOf(const int (&e)[4], int pass) {
  FoldPass f;
  int below = 1 << 30;
  for (int k = 0; k <= pass; ++k) {
    int top = -1;
    for (int j = 0; j < 4; ++j) top = e[j] < below && e[j] > top ? e[j] : top;
    if (top < 0) return FoldPass{};  // every group taken
    f.top = top;
    f.below = below;
    f.any = true;
    below = top - kFp4FoldMaxShift;
  }
  for (int j = 0; j < 4; ++j) f.more = f.more || e[j] < f.top - kFp4FoldMaxShift;
  return f;
}

// Whether pass f takes a group of exponent e_g; its shift is then f.top - e_g (0..8).
DI_HOST_DEVICE inline bool FoldPassTakes(const FoldPass& f, int e_g) {
  return f.any && e_g < f.below && e_g >= f.top - kFp4FoldMaxShift;
}

// Pass 0 of one row's chunk packed in a word, as the CUDA kernel keeps it per (row, chunk) for its
// conversion and its row scale: bits 4g..4g+3 the shift top - e_g of group g (0-8), or
// kFoldGroupLeft where pass 0 leaves the group (its codes are zeros there); bits 16-23 the pass's
// top exponent; bit 24 whether it takes a group; bit 25 whether groups are left for a later pass.
// kFoldNoRowWord: a row past the weight (no group, scale 1).
inline constexpr uint32_t kFoldGroupLeft = 0xfu;
inline constexpr uint32_t kFoldNoRowWord = 0xffffu;

// FoldPassWord: the same word for pass `pass` (shifts from that pass's top; "left" for the groups it
// does not take, those of earlier passes included).
DI_HOST_DEVICE inline uint32_t FoldPassWord(const int (&e)[4], int pass) {
  const FoldPass f = FoldPassOf(e, pass);
  uint32_t word = 0u;
  for (int j = 0; j < 4; ++j) {
    word |= (FoldPassTakes(f, e[j]) ? static_cast<uint32_t>(f.top - e[j]) : kFoldGroupLeft) << (4 * j);
  }
  return word | (static_cast<uint32_t>(f.top) & 0xffu) << 16 | static_cast<uint32_t>(f.any) << 24 |
         static_cast<uint32_t>(f.more) << 25;
}
DI_HOST_DEVICE inline uint32_t FirstFoldPassWord(const int (&e)[4]) { return FoldPassWord(e, 0); }
DI_HOST_DEVICE inline uint32_t FoldWordShift(uint32_t word, int group) { return (word >> (4 * group)) & 0xfu; }
DI_HOST_DEVICE inline int FoldWordTop(uint32_t word) { return static_cast<int>((word >> 16) & 0xffu); }
DI_HOST_DEVICE inline bool FoldWordAny(uint32_t word) { return ((word >> 24) & 1u) != 0u; }
DI_HOST_DEVICE inline bool FoldWordMore(uint32_t word) { return ((word >> 25) & 1u) != 0u; }

// A slice of one row (the chunks whose products are summed before the row's running total takes
// them: 4 chunks, or K's last fewer) in units of one scale. Pass 0 of chunk j codes its groups
// relative to 2^top_j; where every chunk of the slice is taken whole by its pass 0 (no later pass),
// every top is 1-254 (2^(top - 127) a normal float) and the tops lie within kFp4FoldMaxUpShift
// binades, chunk j's codes may be raised by u_j = top_j - min top (shifts top_j - e_g - u_j, down
// to -6: exact). Its products are then 2^u_j times pass 0's, and the slice's sum in units of
// 2^(min top - 127) is 2^-(min top - 127) times the sum in units of 1, step for step, wherever no
// partial sum is subnormal or overflows: the same bits with one scaling a slice instead of one a
// chunk. fold_words: the slice's `count` pass-0 words (FirstFoldPassWord); returns u_j, or
// kSliceNoUpShift where the slice does not qualify.
inline constexpr uint32_t kSliceNoUpShift = 0xfu;
DI_HOST_DEVICE inline uint32_t SliceUpShift(const uint32_t* fold_words, int count, int j) {
  int lo = 255, hi = 0;
  for (int i = 0; i < count; ++i) {
    const int top = FoldWordTop(fold_words[i]);
    if (!FoldWordAny(fold_words[i]) || FoldWordMore(fold_words[i]) || top < 1 || top > 254) return kSliceNoUpShift;
    lo = top < lo ? top : lo;
    hi = top > hi ? top : hi;
  }
  if (hi - lo > kFp4FoldMaxUpShift) return kSliceNoUpShift;
  return static_cast<uint32_t>(FoldWordTop(fold_words[j]) - lo);
}

// The sign-split layout of a 32-bit word of eight nibbles (nibble j at bits 4j..4j + 3 as stored, bit
// 4j + 3 its sign): the magnitudes stay in place, nibble j's sign moves to bit 8j + 7 for j < 4 and
// to bit 8(j - 4) + 3 for j >= 4. So the signs of the codes of nibbles 0-3 sit on their bytes' top
// bits as they are, and those of nibbles 4-7 four bits below theirs, and a kernel converts a word
// into its eight e4m3 codes with a mask, two table lookups (byte_perm, which reads only a
// selector's low 16 bits and whose selectors must have bit 3 clear), one shift of the magnitudes,
// one of the word and two merges of the signs: 7 instructions where the stored order takes 9
// (kernels/cuda/linear_mma.cuh, E2m1x8SignSplitToE4m3x8Table). A bijection on words.
DI_HOST_DEVICE constexpr uint32_t SignSplitWord(uint32_t word) {
  uint32_t out = word & 0x77777777u;
  for (int j = 0; j < 8; ++j) {
    const uint32_t sign = (word >> (4 * j + 3)) & 1u;
    out |= sign << (j < 4 ? 8 * j + 7 : 8 * (j - 4) + 3);
  }
  return out;
}
static_assert(SignSplitWord(0x00000008u) == 0x00000080u && SignSplitWord(0x00008000u) == 0x80000000u &&
                  SignSplitWord(0x00080000u) == 0x00000008u && SignSplitWord(0x80000000u) == 0x08000000u &&
                  SignSplitWord(0x77777777u) == 0x77777777u,
              "the signs of nibbles 0-3 on bits 7, 15, 23, 31, those of 4-7 on 3, 11, 19, 27");

}  // namespace deepinfer::cpu
