// The packed state-row format of dsv4-model.md §6.2, described by three numbers: a row of `dim`
// values whose channels [0, fp8_end) are e4m3 codes with one ue8m0 scale per `block` channels (the
// last block may be partial, as in cpu::Fp8RoundTrip: the rounding of Numerics::kv_fp8) and whose
// channels [fp8_end, dim) are BF16.
//
//   bytes [0, fp8_end)                          e4m3 codes, in channel order
//   bytes [fp8_end, scale_offset())             BF16 values, little-endian, in channel order
//   bytes [scale_offset(), + scales())          ue8m0 scales (the scale is 2^(byte - 127)), in block order
//   zero bytes up to row_bytes()                a multiple of 8
//
// V4's main rows (dim 512, fp8_end 448, block 64): 448 + 128 + 7 + 1 = 584 bytes, §6.2's row.
// V4.1's window rows (e4m3 over all 512 channels in blocks of 32, dsv41-delta.md): 512 + 16 = 528.
// The state stores rows at row_pitch() bytes, the row padded with zeros to a multiple of 16 (592 for
// V4's main rows), so that every row starts 16-byte aligned for the kernels' vector loads.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct PackedRowFormat {
  int64_t dim = 0;      // values a row
  int64_t fp8_end = 0;  // channels [0, fp8_end) as e4m3 codes; a multiple of block
  int64_t block = 0;    // channels a scale

  int64_t scales() const { return (fp8_end + block - 1) / block; }
  int64_t bf16_offset() const { return fp8_end; }                        // bytes
  int64_t scale_offset() const { return fp8_end + 2 * (dim - fp8_end); }  // bytes
  int64_t row_bytes() const { return (scale_offset() + scales() + 7) / 8 * 8; }
  int64_t row_pitch() const { return (row_bytes() + 15) / 16 * 16; }  // bytes a stored row takes
  int64_t row_floats() const { return row_pitch() / 4; }  // the same in floats (row offsets' unit)
  // Throws unless dim > 0, block > 0 and 0 <= fp8_end <= dim.
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

// §6.2's MXFP4 index rows: `dim` e2m1 codes, two a byte (channel 2i in the low nibble, 2i + 1 in
// the high one, as the checkpoint packs FP4 weights), then one ue8m0 scale byte per `block`
// channels (the last block may be partial): 64 + 4 = 68 bytes for V4's index rows (dim 128, block
// 32). The rounding of Numerics::indexer_fp4 (cpu::Fp4RoundTrip). Not yet the state's storage:
// the index rows are f32 (docs/performance.md, "Next (after version 51)").
struct Fp4RowFormat {
  int64_t dim = 0;    // values a row; even
  int64_t block = 0;  // channels a scale

  int64_t scales() const { return (dim + block - 1) / block; }
  int64_t scale_offset() const { return dim / 2; }  // bytes
  int64_t row_bytes() const { return scale_offset() + scales(); }
  int64_t row_pitch() const { return (row_bytes() + 15) / 16 * 16; }  // bytes a stored row would take
  // Throws unless dim > 0 is even and block > 0.
  void Validate() const;
};

constexpr Fp4RowFormat kV4IndexRow{128, 32};

// One row x[dim] into out[row_bytes()], for a format that passes Validate(). DecodeFp4Row of the
// result equals Fp4RoundTrip(x, dim, block) bit for bit (e2m1 has no NaN: a NaN becomes the code
// of 6, in both), and a row already so rounded decodes to itself.
void EncodeFp4Row(const Fp4RowFormat& f, const float* x, uint8_t* out);
// One row in[row_bytes()] into x[dim]: code value times 2^(scale byte - 127).
void DecodeFp4Row(const Fp4RowFormat& f, const uint8_t* in, float* x);

// Rows in the state buffer, which offsets address in floats (rows_plan.h): row i of n (src[i·ld_src
// … + dim)) encoded at base + (dst_offsets ? dst_offsets[i] : first_offset + i·row_floats()), its
// row_pitch() bytes written (zeros past row_bytes()). Destinations must not overlap, except rows
// that nothing reads (the static shapes' scratch row, v4_step.h), whose bytes are then any row's.
void PackRows(const PackedRowFormat& f, const float* src, int64_t ld_src, int64_t n, float* base,
              const int64_t* dst_offsets, int64_t first_offset);

// Benchmarks: `regions` runs of `rows` packed rows each, row j of run i at float offset
// o = first + i·region_stride + j·row_floats(), encoding x[c] = HashUniform(seed, o + c, -1, 1).
struct PackedRowRegions {
  int64_t first = 0;
  int64_t region_stride = 0;
  int64_t regions = 0;
  int64_t rows = 0;
};
void FillHashPackedRows(const PackedRowFormat& f, const PackedRowRegions& r, uint64_t seed, float* base);

}  // namespace deepinfer::cpu
