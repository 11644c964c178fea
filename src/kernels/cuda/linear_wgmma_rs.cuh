// The FP4 experts' tiles of 1-8 and 9-16 rows with the weight operand in registers (wgmma's RS form),
// included by linear.cu after linear_wgmma.cuh (Params, GemmArgs and the folded-code helpers).
//
// WgmmaBlock<kFp4, 8 or 16> converts each chunk's nibbles into a shared-memory tile of e4m3 codes behind
// two block barriers, then reads it back through the MMA; at decode that chain, not the bytes,
// bounds the experts (docs/performance.md, versions 9, 23 and 27). Here a block is one warpgroup of
// 64 weight rows, and each warp feeds its own 16 rows:
//   - the warp's cp.async ring (kStages chunks, kAhead in flight) holds its rows' nibbles as stored
//     (16-byte copies);
//   - thread q of a row reads the row's group q, 16 bytes: in the FP4 order (linear_wgmma.cuh's
//     Fp4OrderUnit) its A-fragment columns of k32 step s are that group's columns 8s..8s+7, so one
//     table entry serves the row's chunk; it turns them into its A fragment (four k32 steps × four
//     registers of e4m3 codes, the group scale folded in exactly as ConvertFp4FoldedFirst does) and
//     issues the chunk's MMAs with A from registers and x's codes (B, in the FP4 order) from shared
//     memory;
//   - chunk c's MMAs run while chunk c + 1 is converted (two accumulators, two fragments).
// x's codes and scales for the whole K, the pass-0 fold word of each of the block's (row, chunk)
// with its row scale (ChunkWordOf: written at load, or computed once per item, never per thread
// and chunk) and the folded byte_perm tables are set up once per item, behind the item's only
// barrier (two where the item computes the words).
//
// The order of every output is WgmmaBlock<kFp4>'s: per chunk and FoldPass one k32 chain from +0
// over the folded codes, part = fma(acc, 2^top·x_scale, part), part restarting at each 512-column
// slice, total = P_0, total += P_1, ...: the same bits (up to the sign of an all-zero part where a
// row of the other 64 in WgmmaBlock's 128-row block needed later passes and this one did not).
#pragma once

namespace wgmma {
namespace rs {

constexpr int kRows = 64;                          // weight rows per block: one warpgroup
constexpr int kThreads = 128;
constexpr int kWarpRows = 16;                      // A-fragment rows of one warp
constexpr int kAhead = 6;                          // chunks whose copies are in flight ahead
constexpr int kStages = kAhead + 2;                // + the chunk converted + the one finishing
constexpr int kRowBytes = kChunk / 2;              // 64 bytes of nibbles per row and chunk
constexpr int kWarpStageBytes = kWarpRows * kRowBytes;  // 1 KiB
constexpr int kStageBytes = kRows * kRowBytes;          // 4 KiB
constexpr int kFoldStride = kRows + 1;                  // words between chunks of fold words
constexpr int kMaxChunks = 64;                          // K <= 8192: the later-pass mask's bits
constexpr int kTableEntries = 16;                       // shifts 0-8, then "group left" entries
static_assert(kThreads == 4 * kWarpSize && kRows == 4 * kWarpRows, "one warpgroup, 16 rows per warp");

// Shared memory for `chunks` chunks of K and tiles of `tok` tokens (8 or 16), offsets from the
// 1024-byte aligned base: the stages, x's codes (chunk c's tok × 128-byte swizzled tile at
// X + XChunkBytes()·c, wgmma's B), x's scales [chunks][tok], the rows' pass-0 chunk words
// (ChunkWordOf) [chunks][kFoldStride], the tables (uint4 per shift: the byte_perm words of
// magnitudes 0-3 and 4-7 and the sign mask) and the later-pass mask (two words).
struct Smem {
  int chunks;
  int tok;
  __host__ __device__ constexpr int XChunkBytes() const { return tok * kChunk; }
  __host__ __device__ constexpr int X() const { return kStages * kStageBytes; }
  __host__ __device__ constexpr int Xs() const { return X() + chunks * XChunkBytes(); }
  __host__ __device__ constexpr int Folds() const { return Xs() + chunks * tok * 4; }
  __host__ __device__ constexpr int Tables() const { return (Folds() + chunks * kFoldStride * 4 + 15) / 16 * 16; }
  __host__ __device__ constexpr int Mask() const { return Tables() + kTableEntries * 16; }
  __host__ __device__ constexpr int Bytes() const { return Mask() + 8 + 1024; }  // + base alignment
};

// Word w (0 <= w < 4·kTableEntries) of the tables: entry w / 4 is {the byte_perm words of magnitudes
// 0-3 and 4-7, the sign mask, 0} for shifts 0-8 (kFoldedTables) and all zeros after them (a group
// the pass leaves: zero codes, no signs), so that an entry read with a word's 4-bit shift field
// converts without a select.
static_assert(cpu::kFoldGroupLeft > cpu::kFp4FoldMaxShift && cpu::kFoldGroupLeft < kTableEntries, "a zero entry");
__device__ __forceinline__ uint32_t TableWord(int w) {
  const int entry = w / 4, field = w % 4;
  if (entry > cpu::kFp4FoldMaxShift) return 0u;
  return field < 2 ? kFoldedTables[entry][field] : field == 2 ? 0x80808080u : 0u;
}

// d (+)= A·B for one k32 step, m64n8k32, e4m3 × e4m3 → f32, A from registers (this thread's
// fragment: rows g and g + 8 of its warp's 16, columns 4q.. and 16 + 4q..), B from shared memory;
// the accumulator's previous value added (zeroed first, as MmaM64N8K32).
// B's descriptor comes as its two words (desc_lo: the address field; desc_hi: the rest), so that
// the callers' per-step offsets are 32-bit adds.
__device__ __forceinline__ void MmaM64N8K32Rs(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t desc_lo, uint32_t desc_hi) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 desc;\n"
      "mov.b64 desc, {%8, %9};\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, desc, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(desc_lo), "r"(desc_hi), "r"(1));
}

// MmaM64N8K32Rs for 16 tokens (m64n16k32): the same A fragment, d as MmaM64N16K32's.
__device__ __forceinline__ void MmaM64N16K32Rs(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t desc_lo, uint32_t desc_hi) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 desc;\n"
      "mov.b64 desc, {%12, %13};\n"
      "setp.ne.b32 p, %14, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
      "desc, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(desc_lo), "r"(desc_hi), "r"(1));
}

// MmaM64N8K32Rs for 104 tokens (m64n104k32): the same A fragment, d as m64n104's 52 floats.
__device__ __forceinline__ void MmaM64N104K32Rs(float (&d)[52], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t desc_lo, uint32_t desc_hi) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 desc;\n"
      "mov.b64 desc, {%56, %57};\n"
      "setp.ne.b32 p, %58, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n104k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22,"
      " %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43,"
      " %44, %45, %46, %47, %48, %49, %50, %51}, {%52, %53, %54, %55}, desc, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(desc_lo), "r"(desc_hi), "r"(1));
}

// One pass over a row's chunk: per group its table entry (bits 4s..4s+3: the shift top - e_s,
// 0-8, or 15 where the pass leaves the group; cpu::FirstFoldPassWord's low 16 bits for pass 0),
// the row scale (2^top, 1 where the pass takes nothing) and whether groups are left for later.
struct RowFold {
  uint32_t shifts;
  float scale;
  bool more;
};

// FoldedRowScaleOf without branches: 2^top (DecodeE8m0's bits, its two special codes included)
// where the pass takes a group, else 1.
__device__ __forceinline__ float RowScaleOfFoldWord(uint32_t word) {
  const uint32_t top = static_cast<uint32_t>(cpu::FoldWordTop(word));
  uint32_t bits = top << 23;
  bits = top == 0u ? 0x00400000u : bits;
  bits = top == 0xffu ? 0x7fc00000u : bits;
  return __uint_as_float(cpu::FoldWordAny(word) ? bits : 0x3f800000u);
}

// The word the prologue keeps per (row, chunk): the fold word's 16 shift bits, and in bits 22-30
// its row scale's bits (RowScaleOfFoldWord's values, 2^top for top 1-254, 2^-127, NaN and 1, all
// have bits 0-21 and 31 clear), so that the chunk loop takes the scale with one AND.
constexpr uint32_t kChunkWordScaleBits = 0x7fc00000u;
__device__ __forceinline__ uint32_t ChunkWordOf(uint32_t fold_word) {
  return (fold_word & 0xffffu) | __float_as_uint(RowScaleOfFoldWord(fold_word));
}
// The row scale of a chunk word: 2^(top - up), the chunk scale where up = 0 (a row past n: its
// zero word, scale 0), else its slice scale for an up-shift `up` (top 1-254: a normal float's
// exponent bits alone, so subtracting from them divides by 2^up exactly).
__device__ __forceinline__ float ChunkWordScale(uint32_t chunk_word, uint32_t up = 0u) {
  return __uint_as_float((chunk_word & kChunkWordScaleBits) - (up << 23));
}

// The chunk words written at load (linear.cu's Fp4ChunkWordsKernel) also hold, in bits 16-19 (clear
// in ChunkWordOf's), the row's up-shift in its slice (cpu::SliceUpShift: 0-6, or
// cpu::kSliceNoUpShift). Only ExpertsFp4RegistersTmaKernel reads them; the other readers take
// bits 0-15 and ChunkWordScale's.
constexpr int kChunkWordUpShiftAt = 16;
__host__ __device__ constexpr uint32_t ChunkWordWithUpShift(uint32_t chunk_word, uint32_t up_shift) {
  return chunk_word | up_shift << kChunkWordUpShiftAt;
}
__device__ __forceinline__ uint32_t ChunkWordUpShift(uint32_t chunk_word) {
  return (chunk_word >> kChunkWordUpShiftAt) & 0xfu;
}

// The up-shifted tables: entry i (0-14) holds shift i - kFp4FoldMaxUpShift (codes m · 2^(6 - i)), entry
// 15 zeros (a group the pass leaves); word w as TableWord's. UpShiftedEntry: the entry of a word's
// shift field (0-8, or kFoldGroupLeft) raised by `up` (0-6): kFoldGroupLeft stays 15.
constexpr int kUpShiftedEntries = cpu::kFp4FoldMaxUpShift + cpu::kFp4FoldMaxShift + 2;
static_assert(kUpShiftedEntries == kTableEntries && cpu::kFoldGroupLeft == kTableEntries - 1, "entries 0-14, then 15");
__device__ __forceinline__ uint32_t UpShiftedTableWord(int w) {
  const int entry = w / 4, field = w % 4;
  if (entry >= kUpShiftedEntries - 1) return 0u;
  const int shift = entry - cpu::kFp4FoldMaxUpShift;
  return field < 2 ? cpu::FoldedTableWord(shift, 4 * field) : field == 2 ? 0x80808080u : 0u;
}
__device__ __forceinline__ uint32_t UpShiftedEntry(uint32_t shift_field, uint32_t up) {
  return min(shift_field + static_cast<uint32_t>(cpu::kFp4FoldMaxUpShift) - up, cpu::kFoldGroupLeft);
}

// One row's A-fragment registers of a chunk from the row's group q: `group` the shared address of
// its 16 bytes of nibbles in the stage (the row's 64 bytes as stored, + 16q), `shift` the group's
// table entry (bits 4q.. of RowFold's shifts; `tables` the shared address of entry 0). Word s of
// the 16 bytes holds the group's columns 8s..8s+7: in the FP4 order the fragment's columns
// 4q..4q+3 (frag[4s + lo]) and 16 + 4q.. (frag[4s + lo + 2]) of step s; lo = 0 for the thread's
// row g, 1 for g + 8. kSignSplit: the words in the sign-split layout (cpu::SignSplitWord; the same
// fragment).
template <bool kSignSplit = false>
__device__ __forceinline__ void RowFragment(uint32_t group, uint32_t shift, uint32_t tables, uint32_t (&frag)[16],
                                            int lo) {
  const uint4 v = LdShared128(group);
  // The shift's table entry: the byte_perm words, then the sign mask (zero for a group the pass
  // leaves, whose codes are then +0 as in the shared tile).
  const uint4 t = LdShared128(tables + 16 * shift);
  const uint32_t nibbles[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    if constexpr (kSignSplit) {
      mma::fp8::E2m1x8SignSplitToE4m3x8Table(nibbles[s], t.x, t.y, frag[4 * s + lo], frag[4 * s + lo + 2], t.z);
    } else {
      mma::fp8::E2m1x8ToE4m3x8Table(nibbles[s], t.x, t.y, frag[4 * s + lo], frag[4 * s + lo + 2], t.z);
    }
  }
}

// Group q's table entry of a RowFold's shifts.
__device__ __forceinline__ uint32_t GroupShift(uint32_t shifts, int q) { return (shifts >> (4 * q)) & 0xfu; }

// part += acc · (row scale · x_scale) on a tile of 2·kElems tokens: AddScaledRows<kElems> with x's
// scales of the chunk read from shared address xs (the thread's tokens 8i + 2q and + 1); token
// groups of 8 from `tokens` on (block-uniform) are skipped.
template <int kElems>
__device__ __forceinline__ void AddScaledShared(float (&part)[kElems], const float (&acc)[kElems], float sa, float sb,
                                                uint32_t xs, int q, int tokens) {
#pragma unroll
  for (int i = 0; i < kElems / 4; ++i) {
    if (i > 0 && 8 * i >= tokens) continue;
    const float2 x = LdSharedF32x2(xs + 4 * (8 * i + 2 * q));
    part[4 * i + 0] = __fmaf_rn(acc[4 * i + 0], __fmul_rn(sa, x.x), part[4 * i + 0]);
    part[4 * i + 1] = __fmaf_rn(acc[4 * i + 1], __fmul_rn(sa, x.y), part[4 * i + 1]);
    part[4 * i + 2] = __fmaf_rn(acc[4 * i + 2], __fmul_rn(sb, x.x), part[4 * i + 2]);
    part[4 * i + 3] = __fmaf_rn(acc[4 * i + 3], __fmul_rn(sb, x.y), part[4 * i + 3]);
  }
}

// Later pass `pass` (1, 2, ...) over row `row`'s chunk c (a row of p.n): its RowFold from the
// row's group exponents, read from global memory (the rare path).
__device__ __forceinline__ RowFold LaterFold(const Params& p, int64_t row, int c, int pass) {
  int e[4];
  GroupExponents(p, row, c, e);
  const cpu::FoldPass pf = cpu::FoldPassOf(e, pass);
  uint32_t shifts = 0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    shifts |= (cpu::FoldPassTakes(pf, e[j]) ? static_cast<uint32_t>(pf.top - e[j]) : cpu::kFoldGroupLeft) << (4 * j);
  }
  return RowFold{shifts, pf.any ? DecodeE8m0(static_cast<uint8_t>(pf.top)) : 1.f, pf.more};
}

// The four k32 MMAs of a chunk from +0 into acc; desc_lo / desc_hi are the words of
// SwizzledDescriptor of x's chunk tile (step s's low word is desc_lo + 2s: the address field counts
// 16 bytes and never carries into the next field, the shared window being under 256 KiB). acc and
// frag are not to be touched until a wait covers the group.
template <int kElems>
__device__ __forceinline__ void IssueChunk(float (&acc)[kElems], const uint32_t (&frag)[16], uint32_t desc_lo,
                                           uint32_t desc_hi) {
  static_assert(kElems == 4 || kElems == 8 || kElems == 52, "8-, 16- or 104-token tiles");
  ZeroForWgmma(acc);
  WgmmaFence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    if constexpr (kElems == 4) {
      MmaM64N8K32Rs(acc, frag[4 * s], frag[4 * s + 1], frag[4 * s + 2], frag[4 * s + 3], desc_lo + 2 * s, desc_hi);
    } else if constexpr (kElems == 8) {
      MmaM64N16K32Rs(acc, frag[4 * s], frag[4 * s + 1], frag[4 * s + 2], frag[4 * s + 3], desc_lo + 2 * s, desc_hi);
    } else {
      MmaM64N104K32Rs(acc, frag[4 * s], frag[4 * s + 1], frag[4 * s + 2], frag[4 * s + 3], desc_lo + 2 * s, desc_hi);
    }
  }
  WgmmaCommit();
}

// The copies of one warp's rows for chunk c into its part of a stage (shared address `warp_stage`:
// the stage + 1 KiB · warp; each row's 64 bytes as stored): lane l copies 16-byte unit l % 4 of
// rows l / 4 and l / 4 + 8, by 16-byte cp.async where the weight's rows are 16-byte aligned, 4-byte
// cp.async where 4-byte aligned, else byte loads; rows past p.n get zeros. From a row's chunk to its
// next: p.w_chunk_bytes (64 in the rows as stored, more where they are chunk-major), or in the
// expert's tiles (WriteFp4ExpertTiles: each warp's 16 rows of a chunk 1 KiB in a row, laid out as
// the warp's stage part, zeros past the rows) the tiles' layout's.
struct WarpCopies {
  const uint8_t* src;     // this lane's unit of its first row, chunk 0
  uint32_t half_stride;   // bytes of 8 rows (an expert's weight is under 4 GiB)
  uint32_t chunk_stride;  // bytes from a chunk's copies to the next's
  int dst;                // offset of this lane's first unit in the warp's stage part
  int rows;               // rows of this warp within p.n (0-16)
  int align;              // 16, 4 or 1: the weight rows' alignment the copies use

  __device__ __forceinline__ WarpCopies(const Params& p, int64_t n0, int warp, int lane) {
    const int64_t row0 = n0 + kWarpRows * warp;
    rows = static_cast<int>(max(int64_t{0}, min(static_cast<int64_t>(kWarpRows), p.n - row0)));
    const uintptr_t bits = reinterpret_cast<uintptr_t>(p.w) | static_cast<uintptr_t>(p.w_row_bytes) |
                           static_cast<uintptr_t>(p.w_chunk_bytes);
    align = (bits & 15u) == 0 ? 16 : (bits & 3u) == 0 ? 4 : 1;
    src = p.w + (row0 + lane / 4) * p.w_row_bytes + 16 * (lane % 4);
    half_stride = static_cast<uint32_t>(8 * p.w_row_bytes);
    chunk_stride = static_cast<uint32_t>(p.w_chunk_bytes);
    dst = (lane / 4) * kRowBytes + 16 * (lane % 4);
  }
  // From the warp's tiles (`warp_tiles`: its rows' chunk 0 tile; `tile_chunk_stride`: bytes from
  // one of its chunks' tiles to the next's): every row there (zeros past the expert's rows),
  // 16-byte aligned.
  __device__ __forceinline__ WarpCopies(const uint8_t* warp_tiles, uint32_t tile_chunk_stride, int lane) {
    rows = kWarpRows;
    align = 16;
    dst = (lane / 4) * kRowBytes + 16 * (lane % 4);
    src = warp_tiles + dst;
    half_stride = 8 * kRowBytes;
    chunk_stride = tile_chunk_stride;
  }

  __device__ __forceinline__ void Load(uint32_t warp_stage, int c, int lane, const uint8_t* any_valid) const {
    const uint8_t* from = src + static_cast<int64_t>(c) * chunk_stride;
    const uint32_t to = warp_stage + dst;
    constexpr int kHalfBytes = 8 * kRowBytes;  // 8 rows of the stage
    if (align == 16 && rows == kWarpRows) {  // the common case: no row past p.n, no predicates
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to + i * kHalfBytes),
                     "l"(__cvta_generic_to_global(from + i * half_stride))
                     : "memory");
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool valid = lane / 4 + 8 * i < rows;
      const uint8_t* row = valid ? from + i * half_stride : any_valid;
      const unsigned fill = valid ? 1u : 0u;  // 0: zeros, the source not read
      if (align == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to + i * kHalfBytes),
                     "l"(__cvta_generic_to_global(row)), "r"(16u * fill)
                     : "memory");
      } else if (align == 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to + i * kHalfBytes + 4 * j),
                       "l"(__cvta_generic_to_global(valid ? row + 4 * j : any_valid)), "r"(4u * fill)
                       : "memory");
        }
      } else {
        for (int j = 0; j < 4; ++j) {
          uint32_t word = 0u;
          if (valid) {
            for (int b = 0; b < 4; ++b) word |= static_cast<uint32_t>(__ldg(row + 4 * j + b)) << (8 * b);
          }
          StShared32(to + i * kHalfBytes + 4 * j, word);
        }
      }
    }
  }
};

constexpr int kTileBytes = kWarpRows * kRowBytes;  // a warp's rows of one chunk in the expert's tiles: 1 KiB

// Expert tiles (WriteFp4ExpertTiles): for an expert of n rows and `chunks` chunks, ceil(n / 64) · 4
// warp blocks (rows 16w..16w + 15, zeros past n), so that every item's warps have theirs; the tile of
// warp block w and chunk c (row r's 64 bytes at 64 · (r % 16) within it) at byte
//   (w · chunks + c) · kTileBytes   warp-major: a warp's chunks one after another;
//   (c · blocks + w) · kTileBytes   chunk-major: a chunk's blocks one after another, so that chunk c
//                                   of rows r.. is at c · blocks · kTileBytes + 64 · r (the rows' form
//                                   with a 64-byte row stride and a chunk stride of the padded rows).
__host__ __device__ constexpr int64_t WarpBlocksOfExpert(int64_t n) {
  return (n + kRows - 1) / kRows * (kRows / kWarpRows);
}
__host__ __device__ constexpr int64_t TileBytesOfExpert(int64_t n, int64_t chunks) {
  return WarpBlocksOfExpert(n) * chunks * kTileBytes;
}
// Where a tiles' layout puts warp block w's chunk 0 (`block_stride` bytes from one block's to the
// next's) and its next chunks (`chunk_stride` bytes apart).
struct TileLayout {
  uint32_t block_stride, chunk_stride;
};
__host__ __device__ constexpr TileLayout TileLayoutOf(bool chunk_major, int64_t n, int64_t chunks) {
  return chunk_major ? TileLayout{static_cast<uint32_t>(kTileBytes),
                                  static_cast<uint32_t>(WarpBlocksOfExpert(n) * kTileBytes)}
                     : TileLayout{static_cast<uint32_t>(chunks * kTileBytes), static_cast<uint32_t>(kTileBytes)};
}
// N = 200: 4 items of 64 rows, 16 warp blocks; 8 chunks.
static_assert(TileLayoutOf(true, 200, 8).block_stride == kTileBytes &&
                  TileLayoutOf(true, 200, 8).chunk_stride == 16 * kTileBytes &&
                  TileLayoutOf(false, 200, 8).block_stride == 8 * kTileBytes &&
                  TileLayoutOf(false, 200, 8).chunk_stride == kTileBytes &&
                  TileBytesOfExpert(200, 8) == 128 * kTileBytes,
              "the tiles' two orders");

// The expert's chunk words written once at load (linear.cu's Fp4ChunkWordsKernel): ChunkWordOf of
// row r's pass-0 fold word of chunk c at words[r·chunks + c], then per 64-row block b the chunks
// some row of it needs later passes for at words[n·chunks + 2b] (chunks 0-31) and + 1 (32-63).
__host__ __device__ constexpr int64_t ChunkWordsOfRows(int64_t n, int64_t chunks) { return n * chunks; }
// The later-pass mask words (chunks 0-31, then 32-63) of the 64-row block holding row r0 (a
// multiple of kRows) in an expert's chunk words (Word: uint32_t or const uint32_t).
template <typename Word>
__host__ __device__ constexpr Word* LaterPassMasks(Word* words, int64_t n, int64_t chunks, int64_t r0) {
  return words + ChunkWordsOfRows(n, chunks) + 2 * (r0 / kRows);
}
__host__ __device__ constexpr int64_t ChunkWordsOfExpert(int64_t n, int64_t chunks) {
  return (n * chunks + 2 * ((n + kRows - 1) / kRows) + 63) / 64 * 64;  // 256-byte aligned
}

// The row scales of a chunk's pass 0 for this thread's two rows.
struct RowScales {
  float sa, sb;
};

// Later passes `pass` = 1, 2, ... over chunk c of rows row_a and row_b of p (valid_a / valid_b:
// within p.n; else every group left) until no row of the block needs another (uniform over the
// block: __syncthreads_or): each pass's fragment from the chunk's nibbles at shared address `stage`
// (this thread's group in its warp's part; kSignSplit: RowFragment's), its MMAs into `done` from +0
// and its products scaled into part with x's scales at shared address xs_c. frag and done are free
// on entry and on return.
template <bool kSignSplit = false, int kElems>
__device__ __forceinline__ void LaterPasses(const Params& p, int64_t row_a, int64_t row_b, bool valid_a, bool valid_b,
                                            int c, int q, uint32_t stage, uint32_t tables, uint32_t desc_lo,
                                            uint32_t desc_hi, float (&done)[kElems], uint32_t (&frag)[16],
                                            float (&part)[kElems], uint32_t xs_c, int tokens) {
  for (int pass = 1;; ++pass) {
    const RowFold none{0xffffu, 1.f, false};  // a row past p.n: every group left
    const RowFold fa = valid_a ? LaterFold(p, row_a, c, pass) : none;
    const RowFold fb = valid_b ? LaterFold(p, row_b, c, pass) : none;
    RowFragment<kSignSplit>(stage, GroupShift(fa.shifts, q), tables, frag, 0);
    RowFragment<kSignSplit>(stage + 8 * kRowBytes, GroupShift(fb.shifts, q), tables, frag, 1);
    IssueChunk(done, frag, desc_lo, desc_hi);
    WgmmaWaitAll();
    PinAll(done);
    AddScaledShared(part, done, fa.scale, fb.scale, xs_c, q, tokens);
    if (!__syncthreads_or(fa.more || fb.more)) break;
  }
}

// The chunk loop of a block's item: issue(c, frag, acc) converts chunk c into frag and issues its
// MMAs into acc (returning its RowScales), finish(c, done, frag, scales, may_end) takes them when
// they are complete. Chunk c + 1 is issued before chunk c is finished (two accumulators, two
// fragments). Peeled so that no wgmma wait sits in a branch of the main loop: chunk 0, then pairs,
// then the last. In the loop c is odd, so chunk c - 1 (even, not the last) never ends a 4-chunk
// slice: may_end is a constant at every call (false where c ends neither a 512-column slice nor K,
// so that the check, which the compiler predicates rather than branches, is left out). chunks >= 1.
template <int kElems, class Issue, class Finish>
__device__ __forceinline__ void PipelinedChunks(int chunks, const Issue& issue, const Finish& finish,
                                                float (&acc0)[kElems], float (&acc1)[kElems], uint32_t (&frag0)[16],
                                                uint32_t (&frag1)[16]) {
  static_assert(mma::kSliceChunks % 2 == 0, "a slice ends on an odd chunk");
  RowScales last = issue(0, frag0, acc0);
  int c = 1;
  for (; c + 1 < chunks; c += 2) {
    RowScales now = issue(c, frag1, acc1);
    WgmmaWait<1>();  // chunk c - 1
    PinAll(acc0);
    finish(c - 1, acc0, frag0, last, false);
    last = issue(c + 1, frag0, acc0);
    WgmmaWait<1>();  // chunk c
    PinAll(acc1);
    finish(c, acc1, frag1, now, true);
  }
  if (c < chunks) {  // an even chunk count: the last chunk goes into acc1
    const RowScales now = issue(c, frag1, acc1);
    WgmmaWait<1>();
    PinAll(acc0);
    finish(c - 1, acc0, frag0, last, false);
    WgmmaWaitAll();
    PinAll(acc1);
    finish(c, acc1, frag1, now, true);
  } else {
    WgmmaWaitAll();
    PinAll(acc0);
    finish(c - 1, acc0, frag0, last, true);
  }
}

// One item: weight rows n0..n0+63 of p (an FP4 expert, e8m0 scales) × the tile's token rows
// t_codes.. of the codes (p.m of them, at most kTok = 8 or 16; y rows 0.. of p.y) over all `chunks`
// chunks of K. words: the expert's chunk words (ChunkWordsOfExpert), copied instead of computed
// from the group exponents; or null. All 128 threads call it; it leaves no copies in flight and
// shared memory free after a barrier.
// kTiles: the nibbles from the expert's tiles (`tiles`: its TileBytesOfExpert bytes, in `layout`)
// instead of its rows (or the expert's own nibbles rewritten chunk-major in place, which are its
// tiles' bytes); the same bytes in the same stage places, the same bits. kSignSplit (with kTiles):
// the words are in the sign-split layout (WriteFp4ExpertTiles under
// DEEPINFER_EXPERTS_TILES_SIGN_SPLIT, or RewriteFp4ExpertsChunkMajor), converted in 7 instructions a
// word instead of 9; the same fragments, the same bits.
template <int kTok, bool kTiles = false, bool kSignSplit = false>
__device__ __forceinline__ void Fp4RegistersBlock(const Params& p, const GemmArgs& a, int64_t n0, int64_t t_codes,
                                                  uint8_t* smem, int chunks, const uint32_t* words,
                                                  const uint8_t* tiles = nullptr, TileLayout layout = {}) {
  static_assert(kTok == 8 || kTok == 16, "8- or 16-token tiles");
  static_assert(kTiles || !kSignSplit, "only the tiles are written in the sign-split layout");
  constexpr int kElems = kTok / 2;
  constexpr int kXChunkBytes = Smem{0, kTok}.XChunkBytes();
  const Smem L{chunks, kTok};
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kTok), p.m));
  const int la = kWarpRows * warp + g, lb = la + 8;  // this thread's rows within the block
  const bool valid_a = n0 + la < p.n, valid_b = n0 + lb < p.n;
  const auto copies = [&] {
    if constexpr (kTiles) {
      return WarpCopies(tiles + (n0 / kWarpRows + warp) * layout.block_stride, layout.chunk_stride, lane);
    } else {
      return WarpCopies(p, n0, warp, lane);
    }
  }();
  const uint32_t base = SharedAddress(smem);
  auto stage_of = [&](int c) { return base + (c % kStages) * kStageBytes + warp * kWarpStageBytes; };
  const uint32_t group_offset = g * kRowBytes + 16 * q;  // row g's group q within the warp's stage part
  const uint32_t x_base = base + L.X(), xs = base + L.Xs(), folds = base + L.Folds(), tables = base + L.Tables();
  const uint32_t mask = base + L.Mask();
  const uint32_t x_desc_lo = DescriptorLow(x_base), x_desc_hi = DescriptorHigh();
  auto desc_lo_of = [&](int c) { return x_desc_lo + static_cast<uint32_t>(c * (kXChunkBytes / 16)); };
  // Pass 0 of row r's chunk c from its chunk word (`more` unused: the later-pass mask has it).
  auto fold_of = [&](int c, int r) {
    const uint32_t word = LdShared32(folds + (c * kFoldStride + r) * 4);
    return RowFold{word & 0xffffu, ChunkWordScale(word), false};
  };

  // ---- the item's copies. First, in a group of their own, the group-exponent word of every
  // (row, chunk) of the block into its fold-word slot (converted in place below by the thread that
  // copied it, while the other copies fly; rows past p.n and unaligned scales: none); or, with
  // `words`, the chunk words themselves (rows past p.n: the no-row word, stored).
  const bool exps_words = ((reinterpret_cast<uintptr_t>(p.scale) | static_cast<uintptr_t>(p.scale_row_stride)) & 3u) == 0;
  for (int u = tid; u < kRows * chunks; u += kThreads) {
    const int r = u / chunks, c = u % chunks;  // consecutive threads: one row's consecutive words
    uint8_t* slot = smem + L.Folds() + (c * kFoldStride + r) * 4;
    if (words != nullptr) {
      if (n0 + r < p.n) {
        CpAsyncOrZero<4>(slot, words + (n0 + r) * chunks + c, true);
      } else {
        StShared32(SharedAddress(slot), ChunkWordOf(cpu::kFoldNoRowWord));
      }
    } else if (exps_words && n0 + r < p.n) {
      CpAsyncOrZero<4>(slot, p.scale + (n0 + r) * p.scale_row_stride + 4 * c, true);
    }
  }
  CpAsyncCommit();
  // Then x's codes and scales with chunk 0 (group 0), the ring's first chunks; the tables and the
  // mask's zeros by plain stores.
  for (int u = tid; u < tokens * chunks * 8; u += kThreads) {
    const int r = u / (chunks * 8), c = (u / 8) % chunks, unit = u % 8;
    CpAsync16(smem + L.X() + c * kXChunkBytes + SwizzledOffset(r, unit),
              a.codes + (t_codes + r) * p.k + c * kChunk + unit * 16);
  }
  for (int u = tid; u < tokens * chunks; u += kThreads) {
    const int c = u / tokens, r = u % tokens;
    CpAsyncOrZero<4>(smem + L.Xs() + (c * kTok + r) * 4, a.xscales + c * a.m_pad + t_codes + r, true);
  }
  if (tid < kTableEntries * 4) StShared32(tables + 4 * tid, TableWord(tid));
  if (tid < 2) StShared32(mask + 4 * tid, 0u);
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < chunks) copies.Load(stage_of(s), s, lane, p.w);
    CpAsyncCommit();
  }
  // The pass-0 fold word of every (row, chunk) of the block (cpu::FirstFoldPassWord; rows past
  // p.n: cpu::kFoldNoRowWord), kept as its chunk word, once per item instead of once per thread and
  // chunk, and which chunks some row needs later passes for (uniform: the MMAs are the
  // warpgroup's); with `words`, both as written at load.
  uint32_t later_lo = 0u, later_hi = 0u;
  if (words != nullptr) {
    const uint32_t* mask = LaterPassMasks(words, p.n, chunks, n0);
    later_lo = __ldg(mask);
    later_hi = __ldg(mask + 1);
  } else {
    CpAsyncWait<kAhead>();  // the exponent words
  }
#pragma unroll 4
  for (int u = words != nullptr ? kRows * chunks : tid; u < kRows * chunks; u += kThreads) {
    const int r = u / chunks, c = u % chunks;
    const uint32_t slot = folds + (c * kFoldStride + r) * 4;
    uint32_t word = cpu::kFoldNoRowWord;
    if (n0 + r < p.n) {
      uint32_t packed = 0u;
      if (exps_words) {
        packed = LdShared32(slot);
      } else {
        const uint8_t* src = p.scale + (n0 + r) * p.scale_row_stride + 4 * c;
        for (int b = 0; b < 4; ++b) packed |= static_cast<uint32_t>(__ldg(src + b)) << (8 * b);
      }
      int e[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) e[j] = static_cast<int>((packed >> (8 * j)) & 0xffu);
      word = cpu::FirstFoldPassWord(e);
    }
    StShared32(slot, ChunkWordOf(word));
    if (cpu::FoldWordMore(word)) {
      if (c < 32) later_lo |= 1u << c; else later_hi |= 1u << (c - 32);
    }
  }
  CpAsyncWait<kAhead - 1>();  // the fold or chunk words; group 0: x, its scales and chunk 0
  FenceProxyAsyncShared();    // x's codes are read by the MMAs (the async proxy)
  __syncthreads();            // the copies, the fold words, the tables and the mask's zeros
  uint64_t later = static_cast<uint64_t>(later_lo) | static_cast<uint64_t>(later_hi) << 32;  // with `words`
  if (words == nullptr) {  // uniform
    later_lo = __reduce_or_sync(0xffffffffu, later_lo);
    later_hi = __reduce_or_sync(0xffffffffu, later_hi);
    if (lane == 0 && (later_lo | later_hi) != 0u) {
      uint32_t* mask_words = reinterpret_cast<uint32_t*>(smem + L.Mask());
      atomicOr(mask_words, later_lo);
      atomicOr(mask_words + 1, later_hi);
    }
    __syncthreads();
    later = static_cast<uint64_t>(LdShared32(mask)) | static_cast<uint64_t>(LdShared32(mask + 4)) << 32;
  }

  float acc0[kElems], acc1[kElems], part[kElems], total[kElems];
  uint32_t frag0[16], frag1[16];
#pragma unroll
  for (int i = 0; i < kElems; ++i) acc0[i] = acc1[i] = part[i] = total[i] = 0.f;

  // Chunk c: wait for this thread's copies of it (the warp's, after __syncwarp), queue chunk
  // c + kAhead into the stage chunk c - 2 used (finished), convert and issue c's MMAs.
  auto issue = [&](int c, uint32_t (&frag)[16], float (&acc)[kElems]) {
    CpAsyncWait<kAhead - 1>();
    __syncwarp();
    if (c + kAhead < chunks) copies.Load(stage_of(c + kAhead), c + kAhead, lane, p.w);
    CpAsyncCommit();  // possibly empty: keeps the group count per chunk fixed
    const uint32_t stage = stage_of(c) + group_offset;
    const RowFold fa = fold_of(c, la), fb = fold_of(c, lb);
    RowFragment<kSignSplit>(stage, GroupShift(fa.shifts, q), tables, frag, 0);
    RowFragment<kSignSplit>(stage + 8 * kRowBytes, GroupShift(fb.shifts, q), tables, frag, 1);
    IssueChunk(acc, frag, desc_lo_of(c), x_desc_hi);
    return RowScales{fa.scale, fb.scale};
  };
  // Chunk c's MMAs complete in `done` (its fragment `frag` free): scaled into part, its later
  // passes (uniform over the block), the slice's end where `may_end` (a constant at every call:
  // false where c ends neither a 512-column slice nor K, so that the check, which the compiler
  // predicates rather than branches, is left out).
  auto finish = [&](int c, float (&done)[kElems], uint32_t (&frag)[16], const RowScales& s, bool may_end) {
    AddScaledShared(part, done, s.sa, s.sb, xs + c * kTok * 4, q, tokens);
    if (((later >> c) & 1u) != 0u) {
      LaterPasses<kSignSplit>(p, n0 + la, n0 + lb, valid_a, valid_b, c, q, stage_of(c) + group_offset, tables,
                              desc_lo_of(c), x_desc_hi, done, frag, part, xs + c * kTok * 4, tokens);
    }
    if (may_end) EndChunk(total, part, c, 0, chunks, tokens);
  };

  PipelinedChunks(chunks, issue, finish, acc0, acc1, frag0, frag1);
  CpAsyncWaitAll();
  StoreBlockResult<kTok>(p, n0 + la, 0, q, [&](int j) { return total[j]; });
  __syncthreads();  // shared memory free for the caller's next item
}

// Where this kernel takes an ExpertsLinear call's tiles of 1-8 rows: FP4 weights with e8m0 scales
// (ExpertsUsable), K a multiple of 128 of at most kMaxChunks chunks.
inline bool Usable(int64_t k) { return k > 0 && k % kChunk == 0 && k / kChunk <= kMaxChunks; }

}  // namespace rs
}  // namespace wgmma
