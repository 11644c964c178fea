// The packed state-row format of dsv4-model.md §6.2, described by three numbers: a row of `dim`
// values whose channels [0, fp8_end) are e4m3 codes with one ue8m0 scale per `block` channels (the
// rounding of Numerics::kv_fp8, cpu::Fp8RoundTrip) and whose channels [fp8_end, dim) are BF16.
//
//   bytes [0, fp8_end)                          e4m3 codes, in channel order
//   bytes [fp8_end, scale_offset())             BF16 values, little-endian, in channel order
//   bytes [scale_offset(), + scales())          ue8m0 scales (the scale is 2^(byte - 127)), in block order
//   zero bytes up to row_bytes()                a multiple of 8
//
// V4's main rows (dim 512, fp8_end 448, block 64): 448 + 128 + 7 + 1 = 584 bytes, §6.2's row.
// V4.1's window rows (e4m3 over all 512 channels in blocks of 32, dsv41-delta.md): 512 + 16 = 528.
// Not yet the state's storage (the state keeps f32 rows; docs/performance.md, "Next (after
// version 49)", item 2 lists what moving it takes).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct PackedRowFormat {
  int64_t dim = 0;      // values a row
  int64_t fp8_end = 0;  // channels [0, fp8_end) as e4m3 codes; a multiple of block
  int64_t block = 0;    // channels a scale

  int64_t scales() const { return fp8_end / block; }
  int64_t bf16_offset() const { return fp8_end; }                        // bytes
  int64_t scale_offset() const { return fp8_end + 2 * (dim - fp8_end); }  // bytes
  int64_t row_bytes() const { return (scale_offset() + scales() + 7) / 8 * 8; }
  // Throws unless dim > 0, block > 0, 0 <= fp8_end <= dim and fp8_end % block == 0.
  void Validate() const;
};

// V4's main rows (§6.2): dim 512, 448 e4m3 channels in blocks of 64, 64 BF16 rope channels.
constexpr PackedRowFormat kV4MainRow{512, 448, 64};

// One row x[dim] into out[row_bytes()], for a format that passes Validate() (not checked here: the
// callers check once per format, not per row). Per block: Fp8RoundTrip's scale and codes
// (E4m3BlockScale, E4m3CodeAtScale in elementwise.h); the other channels F32ToBf16.
// DecodePackedRow of the result equals Fp8RoundTrip(x[0, fp8_end), block) followed by
// Bf16Round(x[fp8_end, dim)) bit for bit, except that a NaN among the BF16 channels decodes as a
// quiet NaN with other payload bits. A row already so rounded decodes to itself: the scale
// recomputed from rounded values is at most the one that rounded them, and every value over it
// is still an e4m3 code.
void EncodePackedRow(const PackedRowFormat& f, const float* x, uint8_t* out);
// One row in[row_bytes()] into x[dim]: code value times 2^(scale byte - 127), BF16 widened.
void DecodePackedRow(const PackedRowFormat& f, const uint8_t* in, float* x);

}  // namespace deepinfer::cpu
