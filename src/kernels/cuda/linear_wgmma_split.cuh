// GroupedLinear's split-BF16 products (LinearMath::kSplitBf16) on Hopper's warpgroup MMAs, for FP8
// weights with e8m0 block scales (the output projection's wo_a); and, at the end of this file,
// Linear's split-BF16 products of BF16 weights (DenseSplitKernel). Included by linear.cu after
// bf16_split.cuh (SplitPair), linear_mma.cuh (PackBf16) and linear_wgmma.cuh (descriptors,
// fences, copies, StoreBlockResult). Taken wherever Usable holds (docs/performance.md, version 9: 2.4× the
// mma.sync kernels on an 8k prefill); the rule depends on the weight and the group count, never on
// M, so every batch size of a run takes the same path. DEEPINFER_WGMMA=0 turns it off with the
// other warpgroup-MMA paths.
//
// Numerics: linear_mma.cuh's. The weight times its power-of-two block scale is exact in BF16, x is
// the exact sum of three BF16 parts (SplitPair: hi + mid + lo), so every product is exact and
// only the f32 sums differ from the CPU's. Order of every output: per 512-column slice s, an
// accumulator from +0 takes the slice's 64-column chunks in order, per chunk the k16 steps
// kk = 0..3, per step the MMAs of hi, mid and lo (wgmma m64n64k16, bf16 × bf16 → f32); then
// total = P_0, total += P_1, ... in slice order (EndGroupedChunk; since 2026-12-02, version 29:
// before, one accumulator over all of K, which no K slices could reproduce). Fixed by K alone:
// batch invariant. It is not Linear's order, so under the switch a grouped product and the same
// product through Linear differ in their last bits. With Params::x_bf16 (the attention output
// rounded to BF16 as the reference's
// BF16 einsum takes it) the kernels multiply x rounded to BF16, round to nearest even, as their
// only part (kParts = 1): the product of a finite x already exact in BF16 is then the three-part
// kernel's bit for bit (its mid and lo are +0 and their MMAs add exact zeros), and that of any
// finite x (below BF16's overflow) is the three-part kernel's on Bf16RoundRows(x).
//
// Work: one block per (128 weight rows of a group, 64 tokens, group), two consumer warpgroups of
// 64 rows as in linear_wgmma.cuh, two cp.async stages of raw bytes (the FP8 chunk, 128 × 64
// bytes, and x's f32 chunk, 64 × 256 bytes), converted per chunk into one swizzled BF16 weight
// tile and three swizzled BF16 x tiles (a 128-byte row holds 64 BF16 values and a k16 step is 32
// bytes, so linear_wgmma.cuh's descriptors apply byte for byte). 89 KiB of shared memory: 2
// blocks per SM. Decode grids take the TMA-fed kernel below, and products of at most 32 rows its K
// slices over a cluster (SplitBf16GroupedTmaSlicesKernel; 9-32 under DEEPINFER_GROUPED_SLICES_UP_TO_32).
#pragma once

namespace wgmma_split {

using wgmma::kBlockRows;
using wgmma::kRowsPerGroup;
using wgmma::kThreads;
using wgmma::kTokens;

constexpr int kChunkCols = 64;                                // K columns per chunk
constexpr int kRowBytes = 128;                                // a BF16 tile row: 64 values
constexpr int kWRawBytes = kBlockRows * kChunkCols;           // FP8 codes: 8 KiB
constexpr int kXRawRowBytes = kChunkCols * 4;                 // f32: 256 bytes
constexpr int kXRawBytes = kTokens * kXRawRowBytes;           // 16 KiB
constexpr int kStageBytes = kWRawBytes + kXRawBytes;          // 24 KiB
constexpr int kStages = 2;
constexpr int kWTile = kStages * kStageBytes;                 // BF16 weights: 16 KiB
constexpr int kXTiles = kWTile + kBlockRows * kRowBytes;      // hi, mid, lo: 8 KiB each
constexpr int kXTileBytes = kTokens * kRowBytes;
constexpr int kSmemBytes = kXTiles + 3 * kXTileBytes + 1024;  // + base alignment
static_assert(kStageBytes % 1024 == 0 && kWTile % 1024 == 0 && kXTiles % 1024 == 0, "1024-byte aligned tiles");

// d += A·B for one k16 step, m64n64k16, bf16 × bf16 → f32, both operands K-major in shared memory
// (no transposition), their descriptors from the low words a_lo, b_lo and wgmma::DescriptorHigh():
// accumulate == 0 ignores d (wgmma's scale-d), else d is accumulated into, as mma.sync adds its C.
__device__ __forceinline__ void MmaBf16M64N64K16(float (&d)[32], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%32, %34};\n"
      "mov.b64 db, {%33, %34};\n"
      "setp.ne.b32 p, %35, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a_lo), "r"(b_lo), "r"(wgmma::DescriptorHigh()), "r"(accumulate));
}

// d += A·B for one k16 step, m64n8k16, bf16 × bf16 → f32 (MmaBf16M64N64K16 at 8 token columns).
__device__ __forceinline__ void MmaBf16M64N8K16(float (&d)[4], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%4, %6};\n"
      "mov.b64 db, {%5, %6};\n"
      "setp.ne.b32 p, %7, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a_lo), "r"(b_lo), "r"(wgmma::DescriptorHigh()), "r"(accumulate));
}

// d += A·B for one k16 step, m64n16k16 and m64n32k16 (MmaBf16M64N64K16 at 16 and 32 token columns;
// each output column the same dot product at any width).
__device__ __forceinline__ void MmaBf16M64N16K16(float (&d)[8], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%8, %10};\n"
      "mov.b64 db, {%9, %10};\n"
      "setp.ne.b32 p, %11, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a_lo), "r"(b_lo), "r"(wgmma::DescriptorHigh()), "r"(accumulate));
}
__device__ __forceinline__ void MmaBf16M64N32K16(float (&d)[16], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%16, %18};\n"
      "mov.b64 db, {%17, %18};\n"
      "setp.ne.b32 p, %19, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a_lo), "r"(b_lo), "r"(wgmma::DescriptorHigh()), "r"(accumulate));
}

// d += A·B for one k16 step, m64n128k16, bf16 × bf16 → f32 (MmaBf16M64N64K16 at 128 token columns);
// accumulate = 0: d = A·B (scale-d = 0).
__device__ __forceinline__ void MmaBf16M64N128K16(float (&d)[64], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%64, %66};\n"
      "mov.b64 db, {%65, %66};\n"
      "setp.ne.b32 p, %67, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a_lo), "r"(b_lo), "r"(wgmma::DescriptorHigh()), "r"(accumulate));
}

// The m64nNk16 BF16 MMA of N = kN token columns (8, 16, 32, 64 or 128), as the chunk issuers pick
// it by their tile's width.
template <int kN>
__device__ __forceinline__ void MmaBf16M64NK16(float (&d)[kN / 2], uint32_t a_lo, uint32_t b_lo, int accumulate = 1) {
  static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64 || kN == 128, "8- to 128-token tiles");
  if constexpr (kN == 8) MmaBf16M64N8K16(d, a_lo, b_lo, accumulate);
  if constexpr (kN == 16) MmaBf16M64N16K16(d, a_lo, b_lo, accumulate);
  if constexpr (kN == 32) MmaBf16M64N32K16(d, a_lo, b_lo, accumulate);
  if constexpr (kN == 64) MmaBf16M64N64K16(d, a_lo, b_lo, accumulate);
  if constexpr (kN == 128) MmaBf16M64N128K16(d, a_lo, b_lo, accumulate);
}

// Issues one chunk's MMAs into acc (one group): per k16 step kk = 0..3 the MMAs of x's first
// kParts parts (hi, mid, lo) against the weight tile at w_addr (the parts' tiles from x_addr,
// kXTileBytes apart).
template <int kParts>
__device__ __forceinline__ void IssueSplitChunk(float (&acc)[32], uint32_t w_addr, uint32_t x_addr) {
  static_assert(kParts == 1 || kParts == 3, "x rounded to BF16 alone, or hi, mid and lo");
  const uint32_t w_lo = wgmma::DescriptorLow(w_addr), x_lo = wgmma::DescriptorLow(x_addr);
  wgmma::WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      MmaBf16M64N64K16(acc, w_lo + 2 * kk, x_lo + (part * kXTileBytes + 32 * kk) / 16);
    }
  }
  wgmma::WgmmaCommit();
}

// Queues chunk c of group g's weight rows n0.. (all 128 exist: n % 128 == 0) and of x's token rows
// t0.. into `stage` (cp.async; the caller commits). Token rows at or past p.m get zeros.
__device__ __forceinline__ void LoadSplitStage(const Params& p, int64_t g, int64_t n0, int64_t t0, int c,
                                               uint8_t* stage) {
  const int tid = threadIdx.x;
  const uint8_t* w = p.w + (g * p.n + n0) * p.w_row_bytes + static_cast<int64_t>(c) * kChunkCols;
#pragma unroll
  for (int i = 0; i < kWRawBytes / 16 / kThreads; ++i) {  // 2: rows id / 4, 16-byte unit id % 4
    const int id = tid + i * kThreads, row = id / 4, unit = id % 4;
    CpAsync16(stage + row * kChunkCols + unit * 16, w + row * p.w_row_bytes + unit * 16);
  }
  const float* x = p.x + g * p.x_group_stride + static_cast<int64_t>(c) * kChunkCols;
#pragma unroll
  for (int i = 0; i < kXRawBytes / 16 / kThreads; ++i) {  // 4: rows id / 16, unit id % 16
    const int id = tid + i * kThreads, row = id / 16, unit = id % 16;
    uint8_t* dst = stage + kWRawBytes + row * kXRawRowBytes + unit * 16;
    if (t0 + row < p.m) {
      CpAsync16(dst, reinterpret_cast<const uint8_t*>(x + (t0 + row) * p.ldx) + unit * 16);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);  // covered like cp.async by the fence
    }
  }
}

// The BF16 tiles of one chunk, from `tiles`: the weights (128 rows), then x's hi, mid and lo parts
// (64 rows each), every tile swizzled.
constexpr int kTileW = 0;
constexpr int kTileX = kBlockRows * kRowBytes;           // 16 KiB
constexpr int kTilesBytes = kTileX + 3 * kTokens * kRowBytes;  // 40 KiB
static_assert(kXTiles - kWTile == kTileX && kXTileBytes == kTokens * kRowBytes, "the tiles' layout");

// x's raw chunk (64 token rows of 64 floats, 256 bytes apart) into its BF16 part tiles at `x_tiles`
// (hi, mid, lo, kPartBytes apart, swizzled), or (kParts = 1) x rounded to nearest even alone.
// Thread tid converts 16 floats of token row tid / 4 (columns 16·(tid % 4) ..) into units 2q and
// 2q + 1 of each part, and with kConvThreads = 128 (one warpgroup) also of row 32 + tid / 4; where
// `valid` is false it writes zeros (a token row past the product's rows).
// kXRows: the tile's token rows (64, or 8: threads past row 7 convert nothing).
template <int kParts, int kPartBytes = kXTileBytes, int kConvThreads = kThreads, int kXRows = kTokens>
__device__ __forceinline__ void ConvertXParts(const uint8_t* x_raw, uint8_t* x_tiles, bool valid) {
  static_assert(kConvThreads == kThreads || kConvThreads == kThreads / 2, "one or two rows per thread");
  static_assert(kXRows == kTokens || kXRows == 8 || kXRows == 16 || kXRows == 32, "8-, 16-, 32- or 64-token tiles");
#pragma unroll
  for (int row0 = 0; row0 < kXRows; row0 += kConvThreads / 4) {
    const int tid = threadIdx.x;
    const int row = row0 + tid / 4, quarter = tid % 4;
    if (kXRows < kConvThreads / 4 && row >= kXRows) continue;
    const uint32_t src = wgmma::SharedAddress(x_raw + row * kXRawRowBytes + quarter * 64);
    uint32_t hi[8], mid[8], lo[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 raw = valid ? wgmma::LdShared128(src + 16 * j) : make_uint4(0u, 0u, 0u, 0u);
      const float4 v = make_float4(__uint_as_float(raw.x), __uint_as_float(raw.y), __uint_as_float(raw.z),
                                   __uint_as_float(raw.w));
      if constexpr (kParts == 1) {
        hi[2 * j] = mma::PackBf16(v.x, v.y);
        hi[2 * j + 1] = mma::PackBf16(v.z, v.w);
      } else {
        SplitPair(v.x, v.y, hi[2 * j], mid[2 * j], lo[2 * j]);
        SplitPair(v.z, v.w, hi[2 * j + 1], mid[2 * j + 1], lo[2 * j + 1]);
      }
    }
    const uint32_t* parts[3] = {hi, mid, lo};
    const uint32_t tiles = wgmma::SharedAddress(x_tiles);
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      const uint32_t tile = tiles + part * kPartBytes;
      const uint32_t* v = parts[part];
      wgmma::StShared128(tile + wgmma::SwizzledOffset(row, 2 * quarter), make_uint4(v[0], v[1], v[2], v[3]));
      wgmma::StShared128(tile + wgmma::SwizzledOffset(row, 2 * quarter + 1), make_uint4(v[4], v[5], v[6], v[7]));
    }
  }
}

// 16 e4m3 codes (little-endian, column order) times `scale` (a power of two: exact) as 8 BF16
// pairs, column order: the weight values of every split-BF16 grouped kernel (ConvertSplitStage's
// tiles, ConvertGroupedWeightKernel's BF16 weight).
__device__ __forceinline__ void ScaledE4m3ToBf16Pairs(uint4 codes, float scale, uint32_t (&pairs)[8]) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 v = E4m3PairValues(words[j / 2] >> (16 * (j % 2)));
    pairs[j] = mma::PackBf16(__fmul_rn(v.x, scale), __fmul_rn(v.y, scale));
  }
}

// The stage's raw chunk (the FP8 codes, 64 bytes per weight row, then x's f32 rows of 256 bytes)
// into the BF16 tiles at `tiles`: weights times `scale` (the chunk's block scale, a power of two:
// exact), x's three parts, or (kParts = 1) x rounded to nearest even alone (IssueSplitChunk reads
// no other tile).
// kRows: the block's weight rows (128, two warpgroups; or 64, one: 2 · kRows threads); the raw
// codes are kRows × 64 bytes and the x floats (kTok token rows) follow them, the x tiles (kTok rows
// each, kTok · 128 bytes apart) the kRows-row BF16 tile.
template <int kParts, int kRows = kBlockRows, int kTok = kTokens>
__device__ __forceinline__ void ConvertSplitStage(const uint8_t* stage, float scale, uint8_t* tiles) {
  static_assert(kRows == kBlockRows || kRows == kRowsPerGroup, "one or two warpgroups");
  constexpr int kConvThreads = 2 * kRows;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kRows * kChunkCols / 16 / kConvThreads; ++i) {  // 2: 16 codes of row id / 4 → BF16 units 2u, 2u + 1
    const int id = tid + i * kConvThreads, row = id / 4, unit = id % 4;
    const uint4 codes = wgmma::LdShared128(wgmma::SharedAddress(stage + row * kChunkCols + unit * 16));
    uint32_t pairs[8];
    ScaledE4m3ToBf16Pairs(codes, scale, pairs);
    const uint32_t tile = wgmma::SharedAddress(tiles + kTileW);
    wgmma::StShared128(tile + wgmma::SwizzledOffset(row, 2 * unit),
                           make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]));
    wgmma::StShared128(tile + wgmma::SwizzledOffset(row, 2 * unit + 1),
                           make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]));
  }
  ConvertXParts<kParts, kTok * kRowBytes, kConvThreads, kTok>(stage + kRows * kChunkCols, tiles + kRows * kRowBytes,
                                                              true);
}

// A block's place in the grid (n / 128, ceil(m / 64), groups): weight rows n0.. of group g,
// tokens t0..; this thread's warpgroup, its D fragment rows ra and ra + 8 and column pair q; the
// chunks of K and the weight rows' 128 × 128 scale blocks (row block (g·n + n0) / 128, column
// block c / 2 for chunk c).
struct BlockPlace {
  int64_t n0, t0, g, ra;
  int group, q, chunks;
  const uint8_t* scales;

  // rows: the block's weight rows (kBlockRows, or kRowsPerGroup for one warpgroup); row_block: its
  // index (blockIdx.x, or that over a cluster's size); tokens: the token tile.
  __device__ __forceinline__ explicit BlockPlace(const Params& p, int rows = kBlockRows,
                                                 int row_block = static_cast<int>(blockIdx.x), int tokens = kTokens)
      : n0(static_cast<int64_t>(row_block) * rows),
        t0(static_cast<int64_t>(blockIdx.y) * tokens),
        g(blockIdx.z),
        ra(0),
        group(static_cast<int>(threadIdx.x) / 128),
        q(static_cast<int>(threadIdx.x) % 4),
        chunks(static_cast<int>(p.k / kChunkCols)),
        scales(p.scale + ((g * p.n + n0) / kFp8Block) * p.scale_row_stride) {
    const int tid = static_cast<int>(threadIdx.x);
    const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
    ra = n0 + group * kRowsPerGroup + 16 * warp + lane / 4;
  }
};

// The grouped kernels' order: after chunk c's MMAs complete in acc, at the end of a 512-column
// slice (kSliceChunks chunks, or of K) total = P_0 for the first slice, else total += P_s,
// and acc restarts from +0.
constexpr int kSliceChunks = 512 / kChunkCols;  // 8 chunks per 512-column slice
template <int kElems>
__device__ __forceinline__ void EndGroupedChunk(float (&total)[kElems], float (&acc)[kElems], int c, int chunks) {
  if ((c + 1) % kSliceChunks != 0 && c + 1 != chunks) return;
#pragma unroll
  for (int i = 0; i < kElems; ++i) total[i] = c < kSliceChunks ? acc[i] : __fadd_rn(total[i], acc[i]);
  wgmma::ZeroForWgmma(acc);
}

// Grid (n / 128, ceil(m / 64), groups); kThreads threads; kSmemBytes of dynamic shared memory.
// kParts: 3 (hi, mid, lo), or 1 where p.x_bf16 (x rounded to BF16 as it is converted).
template <int kParts>
__global__ void __launch_bounds__(kThreads, 2) SplitBf16GroupedKernel(const Params p) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const BlockPlace at(p);
  const int64_t n0 = at.n0, t0 = at.t0, g = at.g;
  const int group = at.group, chunks = at.chunks;
  const uint8_t* scales = at.scales;
  const uint32_t w_addr =
      static_cast<uint32_t>(__cvta_generic_to_shared(smem + kWTile + group * kRowsPerGroup * kRowBytes));
  const uint32_t x_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem + kXTiles));

  float acc[32], total[32];
  wgmma::ZeroForWgmma(acc);
  LoadSplitStage(p, g, n0, t0, 0, smem);
  CpAsyncCommit();
  for (int c = 0; c < chunks; ++c) {
    uint8_t* stage = smem + (c % kStages) * kStageBytes;
    const uint8_t scale = __ldg(scales + c / 2);  // in flight during the wait
    CpAsyncWaitAll();  // chunk c (this thread's copies)
    __syncthreads();   // everyone's copies of chunk c; every MMA of chunk c - 1 done (the tiles are free)
    if (c + 1 < chunks) {  // into the stage chunk c - 1 was converted from, before the barrier
      LoadSplitStage(p, g, n0, t0, c + 1, smem + ((c + 1) % kStages) * kStageBytes);
    }
    CpAsyncCommit();
    ConvertSplitStage<kParts>(stage, DecodeE8m0(scale), smem + kWTile);
    wgmma::FenceProxyAsyncShared();
    __syncthreads();  // the tiles are complete
    IssueSplitChunk<kParts>(acc, w_addr, x_addr);
    wgmma::WgmmaWaitAll();
    wgmma::PinAll(acc);
    EndGroupedChunk(total, acc, c, chunks);
  }
  CpAsyncWaitAll();
  Params pg = p;
  pg.y = p.y + g * p.y_group_stride;
  wgmma::StoreBlockResult(pg, at.ra, t0, at.q, [&](int j) { return total[j]; });
#endif
}

// ---- the same products with the raw chunks written by TMA (version 15) -------------------------
//
// SplitBf16GroupedKernel keeps one chunk in flight ahead (two cp.async stages, 2 blocks per SM), so
// each chunk waits for its bytes. SplitBf16GroupedTmaKernel: the same blocks, conversions, MMAs and
// order (the same bits), one block per SM with
//   - a ring of kTmaStages raw stages written by TMA (the FP8 codes as a 64 × 128 box of the
//     weight's rows; x's f32 chunk as a 64 × 1 × 64 box of [m][groups][K], zeros past m), refilled
//     by thread 0 kTmaStages chunks ahead;
//   - two sets of BF16 tiles: chunk c + 1 is converted while chunk c's MMAs run; one block barrier
//     per chunk.
constexpr int kTmaStages = 4;

// Shared memory of SplitBf16GroupedTmaKernel with kRows weight rows per block (128: two
// warpgroups; 64: one): kStagesN raw stages (the codes, kRows × 64 bytes, then x's floats),
// kTileSetsN sets of BF16 tiles (the weights, kRows rows, then room for kXParts of x's parts), the
// barriers. The defaults: 4 stages, two tile sets (chunk c + 1 converted while chunk c's MMAs
// run), three parts. The lean form of the K-slices kernel (SlicesLayout): 2 stages, one tile
// set, kParts parts (64 rows: 22.5 KiB with x rounded, 24 KiB with three parts, 9 blocks an SM;
// 128 rows: 38-40 KiB, 5).
template <int kRows, int kTok = kTokens, int kStagesN = kTmaStages, int kTileSetsN = 2, int kXParts = 3>
struct GroupedTmaLayout {
  static constexpr int kStages = kStagesN;
  static constexpr int kTileSets = kTileSetsN;
  static constexpr int kWRaw = kRows * kChunkCols;
  static constexpr int kStageBytes = kWRaw + kTok * kXRawRowBytes;
  static constexpr int kTileX = kRows * kRowBytes;
  static constexpr int kPartBytes = kTok * kRowBytes;
  static constexpr int kTilesBytes = kTileX + kXParts * kPartBytes;
  static constexpr int kTiles = kStages * kStageBytes;
  static constexpr int kBarriers = kTiles + kTileSets * kTilesBytes;  // full[kStages]
  static constexpr int kBytes = kBarriers + kStages * 8 + 1024;  // + base alignment
  static_assert(kTileSets == 1 || kTileSets == 2, "one or two tile sets");
  static_assert(kStageBytes % 1024 == 0 && kTiles % 1024 == 0 && kTilesBytes % 1024 == 0, "1024-byte aligned tiles");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};
constexpr int kTmaStageBytes = GroupedTmaLayout<kBlockRows>::kStageBytes;  // 24 KiB: codes, then x's floats
constexpr int kTmaSmemBytes = GroupedTmaLayout<kBlockRows>::kBytes;
static_assert(kTmaStageBytes == kStageBytes && GroupedTmaLayout<kBlockRows>::kTilesBytes == kTilesBytes, "the layouts");

// Issues one chunk's MMAs on a tile of kTok = 8, 16, 32 or 64 tokens (IssueSplitChunk's order; the
// x parts' tiles kTok · 128 bytes apart). Each output column is the same dot product at any width.
template <int kParts, int kTok>
__device__ __forceinline__ void IssueGroupedChunk(float (&acc)[kTok / 2], uint32_t w_addr, uint32_t x_addr) {
  static_assert(kTok == 8 || kTok == 16 || kTok == 32 || kTok == kTokens, "8-, 16-, 32- or 64-token tiles");
  if constexpr (kTok == kTokens) {
    IssueSplitChunk<kParts>(acc, w_addr, x_addr);
  } else {
    const uint32_t w_lo = wgmma::DescriptorLow(w_addr), x_lo = wgmma::DescriptorLow(x_addr);
    wgmma::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int part = 0; part < kParts; ++part) {
        MmaBf16M64NK16<kTok>(acc, w_lo + 2 * kk, x_lo + (part * kTok * kRowBytes + 32 * kk) / 16);
      }
    }
    wgmma::WgmmaCommit();
  }
}

// Chunks [c_begin, c_end) (c_begin a multiple of kSliceChunks) of the block's kRows weight
// rows × kTok tokens at `at`, TMA-fed: at the end of each 512-column slice (or of the range) calls
// on_slice(acc) with that slice's sum. All 2 · kRows threads call it.
// w_map: the weight, UINT8 [groups · n rows][K bytes], boxes of kRows rows × 64 bytes, no swizzle;
// x_map: x, FLOAT32 [m][groups][K], boxes of kTok tokens × 1 × 64 (linear.cu's LaunchSplitGrouped).
// L: the shared memory's layout. With two tile sets chunk c + 1 is converted while chunk c's MMAs
// run; with one, after they complete (a second block barrier a chunk). The same conversions and
// MMAs in the same order either way: the same bits.
template <int kParts, int kRows, int kTok, class L = GroupedTmaLayout<kRows, kTok>, class OnSlice>
__device__ __forceinline__ void GroupedTmaChunks(const CUtensorMap& w_map, const CUtensorMap& x_map, const Params& p,
                                                 const BlockPlace& at, int c_begin, int c_end, uint8_t* smem,
                                                 OnSlice&& on_slice) {
  constexpr int kStagesN = L::kStages;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  const int64_t n0 = at.n0, t0 = at.t0, g = at.g;
  const int tid = threadIdx.x, group = at.group;
  const uint8_t* scales = at.scales;
  if (tid == 0) {
    tma::PrefetchTensorMap(&w_map);
    tma::PrefetchTensorMap(&x_map);
    for (int s = 0; s < kStagesN; ++s) tma::BarrierInit(&full[s], 1);
    tma::FenceBarrierInit();
  }
  __syncthreads();
  auto stage_of = [&](int c) { return smem + ((c - c_begin) % kStagesN) * L::kStageBytes; };
  auto tiles_of = [&](int c) { return smem + L::kTiles + ((c - c_begin) % L::kTileSets) * L::kTilesBytes; };
  auto load = [&](int c) {  // thread 0: chunk c into its stage, which is free
    uint64_t* bar = &full[(c - c_begin) % kStagesN];
    tma::BarrierArriveExpectTx(bar, L::kStageBytes);
    tma::TmaLoad2d(stage_of(c), &w_map, bar, c * kChunkCols, static_cast<int>(g * p.n + n0));
    tma::TmaLoad3d(stage_of(c) + L::kWRaw, &x_map, bar, c * kChunkCols, static_cast<int>(g), static_cast<int>(t0));
  };
  auto convert = [&](int c) {  // every thread: chunk c's stage into its tiles
    const uint8_t scale = __ldg(scales + c / 2);  // in flight during the wait
    tma::BarrierWait(&full[(c - c_begin) % kStagesN], static_cast<uint32_t>((c - c_begin) / kStagesN) & 1u);
    ConvertSplitStage<kParts, kRows, kTok>(stage_of(c), DecodeE8m0(scale), tiles_of(c));
    wgmma::FenceProxyAsyncShared();
  };
  if (tid == 0) {
    for (int c = c_begin; c < min(c_end, c_begin + kStagesN); ++c) load(c);
  }

  float acc[kTok / 2];
  wgmma::ZeroForWgmma(acc);
  if (c_begin < c_end) convert(c_begin);
  __syncthreads();  // chunk c_begin's tiles are complete
  for (int c = c_begin; c < c_end; ++c) {
    const uint8_t* tiles = tiles_of(c);
    const uint32_t w_addr =
        static_cast<uint32_t>(__cvta_generic_to_shared(tiles + kTileW + group * kRowsPerGroup * kRowBytes));
    const uint32_t x_addr = static_cast<uint32_t>(__cvta_generic_to_shared(tiles + L::kTileX));
    IssueGroupedChunk<kParts, kTok>(acc, w_addr, x_addr);
    // While they run: chunk c + kStagesN into the stage chunk c was converted from (every thread
    // read it before the last barrier), and with two tile sets chunk c + 1 into the other tiles
    // (chunk c - 1's MMAs, their last readers, completed before that barrier).
    if (tid == 0 && c + kStagesN < c_end) load(c + kStagesN);
    if constexpr (L::kTileSets == 2) {
      __syncwarp();
      if (c + 1 < c_end) convert(c + 1);
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
    } else {
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
      __syncthreads();  // chunk c's MMAs done in every warp before its tiles are overwritten
      if (c + 1 < c_end) convert(c + 1);
    }
    if ((c + 1 - c_begin) % kSliceChunks == 0 || c + 1 == c_end) {
      on_slice(acc);
      wgmma::ZeroForWgmma(acc);
    }
    __syncthreads();  // chunk c + 1's tiles complete; chunk c's MMAs done in both warpgroups
  }
}

// Grid (n / kRows, ceil(m / kTok), groups); 2 · kRows threads; GroupedTmaLayout<kRows, kTok>::kBytes
// of dynamic shared memory. kRows = 128: two warpgroups of 64 weight rows; 64: one (twice the
// blocks, for decode grids that leave SMs idle). kTok = 64, or 8 for products of at most 8 rows
// (wgmma m64n8k16: each output column the same dot product). Every output's MMAs and order are the
// cp.async kernel's whatever kRows and kTok: the same bits. kParts as in SplitBf16GroupedKernel.
template <int kParts, int kRows = kBlockRows, int kTok = kTokens>
__global__ void __launch_bounds__(2 * kRows, 1)
    SplitBf16GroupedTmaKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                              const Params p) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma are sm_90a only; the host never picks this path elsewhere
#else
  extern __shared__ uint8_t smem_raw[];
  const BlockPlace at(p, kRows, static_cast<int>(blockIdx.x), kTok);
  const int chunks = at.chunks;
  float total[kTok / 2];
  int slice = 0;
  GroupedTmaChunks<kParts, kRows, kTok>(w_map, x_map, p, at, 0, chunks, wgmma::AlignedSmem(smem_raw),
                                        [&](const float (&acc)[kTok / 2]) {
#pragma unroll
                                          for (int i = 0; i < kTok / 2; ++i) {
                                            total[i] = slice == 0 ? acc[i] : __fadd_rn(total[i], acc[i]);
                                          }
                                          ++slice;
                                        });
  Params pg = p;
  pg.y = p.y + at.g * p.y_group_stride;
  wgmma::StoreBlockResult<kTok>(pg, at.ra, at.t0, at.q, [&](int j) { return total[j]; });
#endif
}

// What thread threadIdx.x of a K-slices block (the grouped kernels' and DenseSplitSlicesKernel's:
// blockIdx.x = row block · slices + slice, blockIdx.z the group, 0 where there are none) asks L2
// for before its PDL wait: weight row blockIdx.z · n + row block · kRows + threadIdx.x
// (threadIdx.x < kRows, within the group's n rows) over the columns of its K slice, kColumnBytes
// bytes a column (FP8 1, BF16 2); nothing without p.prefetch_w.
template <int kRows, int kColumnBytes>
__device__ __forceinline__ L2Range SliceRowsPrefetch(const Params& p, int slices) {
  const int64_t row = static_cast<int64_t>(blockIdx.x / slices) * kRows + threadIdx.x;
  if (!p.prefetch_w || threadIdx.x >= kRows || row >= p.n) return {};
  const int64_t chunks = p.k / kChunkCols;
  const int64_t c_begin = min(chunks, static_cast<int64_t>(blockIdx.x % slices) * kSliceChunks);
  const int64_t c_end = min(chunks, c_begin + kSliceChunks);
  return {p.w + (static_cast<int64_t>(blockIdx.z) * p.n + row) * p.w_row_bytes + c_begin * kChunkCols * kColumnBytes,
          (c_end - c_begin) * kChunkCols * kColumnBytes};
}

// SplitBf16GroupedTmaKernel's products with slice r of K on rank r of a cluster of kCluster blocks
// (K has at most kCluster slices; ranks past the last slice idle): each rank's slice sum goes to
// its shared memory, and rank 0 adds P_0, P_1, ... in order: the same adds, the same bits. Grid
// (n / kRows · kCluster, ceil(m / kTok), groups); row block blockIdx.x / kCluster; kTok any of
// IssueGroupedChunk's tiles (8 for products of at most 8 rows, 16 or 32 up to 32 rows);
// SlicesLayout<kParts, kRows, kTok, kLean>::kBytes of dynamic shared memory. kLean: the lean
// layout (2 stages, one tile set: 9 blocks an SM where the default's 47 KiB allow 4); the same
// bits. At batch 1 `wo_a` is 128 clusters of 8; an H100 holds 124 at once whether 9 or 10 blocks
// fit an SM (ncu's Max Active Clusters, 2026-12-07), so 4 clusters still run after the rest.
template <int kParts, int kRows, int kTok, bool kLean>
using SlicesLayout =
    std::conditional_t<kLean, GroupedTmaLayout<kRows, kTok, 2, 1, kParts>, GroupedTmaLayout<kRows, kTok>>;

template <int kParts, int kRows, int kTok, int kCluster, bool kLean = false>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(2 * kRows)
    SplitBf16GroupedTmaSlicesKernel(const __grid_constant__ CUtensorMap w_map,
                                    const __grid_constant__ CUtensorMap x_map, const Params p) {
  PdlPrologue(SliceRowsPrefetch<kRows, 1>(p, kCluster));
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma are sm_90a only; the host never picks this path elsewhere
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const BlockPlace at(p, kRows, static_cast<int>(blockIdx.x) / kCluster, kTok);
  const int chunks = at.chunks;
  const int slices = (chunks + kSliceChunks - 1) / kSliceChunks;
  const int c_begin = min(chunks, rank * kSliceChunks), c_end = min(chunks, c_begin + kSliceChunks);
  constexpr int kElems = kTok / 2;
  float held[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) held[i] = 0.f;
  GroupedTmaChunks<kParts, kRows, kTok, SlicesLayout<kParts, kRows, kTok, kLean>>(w_map, x_map, p, at, c_begin,
                                                                                  c_end, smem,
                                                                                  [&](const float (&acc)[kElems]) {
#pragma unroll
                                          for (int i = 0; i < kElems; ++i) held[i] = acc[i];
                                        });
  // The slice sum at [element][thread] of this rank's (free) shared memory.
  float* sums = reinterpret_cast<float*>(smem);
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kElems; ++i) sums[i * 2 * kRows + tid] = held[i];
  cluster.sync();
  if (rank == 0) {
    float total[kElems];
    for (int s = 0; s < slices; ++s) {
      const float* peer = cluster.map_shared_rank(sums, s);
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        const float v = peer[i * 2 * kRows + tid];
        total[i] = s == 0 ? v : __fadd_rn(total[i], v);
      }
    }
    Params pg = p;
    pg.y = p.y + at.g * p.y_group_stride;
    wgmma::StoreBlockResult<kTok>(pg, at.ra, at.t0, at.q, [&](int j) { return total[j]; });
  }
  ClusterSyncBeforeExit();  // no rank leaves (freeing its shared memory) while rank 0 reads it
#endif
}

// The same K slices with each slice's sum through global memory instead of a cluster: block
// (row block blockIdx.x / slices, slice blockIdx.x % slices, group blockIdx.z) stores P_slice of its
// 64 weight rows at partials + slice · plane (plane = m · groups · n floats, laid out as y:
// [m][groups][n]), on the lean layout, and SumSlicesKernel then adds P_0, P_1, ... left to right as
// rank 0 of the cluster kernel does: the same adds, the same bits. No cluster, so the grid is not
// bound by how many clusters a device holds at once. Grid (n / kRows · slices, 1, groups);
// SlicesLayout<kParts, kRows, kTok, true>::kBytes of dynamic shared memory.
template <int kParts, int kRows, int kTok>
__global__ void __launch_bounds__(2 * kRows)
    SplitBf16GroupedTmaPartialsKernel(const __grid_constant__ CUtensorMap w_map,
                                      const __grid_constant__ CUtensorMap x_map, const Params p, int slices,
                                      float* __restrict__ partials) {
  PdlPrologue(SliceRowsPrefetch<kRows, 1>(p, slices));
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma are sm_90a only; the host never picks this path elsewhere
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const int slice = static_cast<int>(blockIdx.x) % slices;
  const BlockPlace at(p, kRows, static_cast<int>(blockIdx.x) / slices, kTok);
  const int c_begin = min(at.chunks, slice * kSliceChunks), c_end = min(at.chunks, c_begin + kSliceChunks);
  Params ps = p;
  ps.y = partials + static_cast<int64_t>(slice) * p.m * p.ldy + at.g * p.y_group_stride;
  GroupedTmaChunks<kParts, kRows, kTok, SlicesLayout<kParts, kRows, kTok, true>>(
      w_map, x_map, p, at, c_begin, c_end, smem, [&](const float (&acc)[kTok / 2]) {
        wgmma::StoreBlockResult<kTok>(ps, at.ra, at.t0, at.q, [&](int j) { return acc[j]; });
      });
#endif
}

// Which grouped kernel runs (the same bits either way): DEEPINFER_TMA_GROUPED=1 (read once)
// SplitBf16GroupedTmaKernel always, 0 never; unset, the TMA kernel where the grid is at most one
// block per SM (decode sizes: its four-chunk ring keeps bytes in flight that the cp.async kernel's
// one chunk ahead cannot), the cp.async kernel elsewhere (2 blocks per SM: at the 8k prefill of 3
// Flash layers it took 15.14 ms against the TMA kernel's 15.75; docs/performance.md version 15).
// Tests override it (SetTmaKernelsForTesting).
enum class TmaMode { kAuto, kOff, kOn };
inline TmaMode GroupedTmaMode() {
  static const int env = [] {
    const char* v = std::getenv("DEEPINFER_TMA_GROUPED");
    if (v == nullptr || *v == '\0') return -1;
    return EnvSwitch("DEEPINFER_TMA_GROUPED", false, "cuda::Linear") ? 1 : 0;
  }();
  const int test = tma::TestOverride().load();
  const int mode = test >= 0 ? test : env;
  return mode < 0 ? TmaMode::kAuto : mode == 1 ? TmaMode::kOn : TmaMode::kOff;
}

// Whether the TMA kernel takes a product Usable allows, on a grid of `blocks` blocks on a device of
// `sms` SMs: x rows and group starts 16-byte aligned (TMA's strides), 32-bit coordinates, and
// GroupedTmaMode's choice.
inline bool TmaUsable(const Params& p, int64_t groups, int64_t blocks, int sms) {
  const TmaMode mode = GroupedTmaMode();
  if (mode == TmaMode::kOff || (mode == TmaMode::kAuto && blocks > sms)) return false;
  return p.w_row_bytes % 16 == 0 && (p.ldx * 4) % 16 == 0 && (p.x_group_stride * 4) % 16 == 0 &&
         groups * p.n < (int64_t{1} << 31) && p.m < (int64_t{1} << 31) && p.k < (int64_t{1} << 31);
}

// Whether GroupedLinear with `groups` groups of p.n rows takes this path: an sm_90a device (not
// turned off by DEEPINFER_WGMMA=0), FP8 weights with e8m0 scales in 16-byte aligned rows,
// n % 128 == 0, K % 64 == 0, 16-byte aligned x rows, more than one group. Independent of M.
inline bool Usable(const Params& p, Kind kind, int64_t groups) {
  return kind == Kind::kFp8 && groups > 1 && !p.scale_f32 && p.w_vec16 && p.x_vec && p.n > 0 &&
         p.n % kBlockRows == 0 && p.k > 0 && p.k % kChunkCols == 0 && wgmma::DeviceHasWgmma();
}

// ---- prefill: the weight converted to BF16 once per call, x's parts split once (version 34) ------
//
// At prefill sizes the kernels above convert each 64-column chunk of the FP8 weight to BF16 again
// in every token tile (64 tiles at the 8k prefill), and x's f32 chunk in every row block (8 for
// wo_a): ncu put `wo_a` at 3.86 ms a layer, 143 TF/s, L1 76% busy with the raw bytes' round trip.
// Where the caller gives scratch (GroupedBf16Bytes), ConvertGroupedWeightKernel writes the weight
// once as BF16 (FP8 value × block scale: exact, ScaledE4m3ToBf16Pairs as in ConvertSplitStage),
// SplitXPartsKernel x's parts once (ConvertXParts' values), and GroupedBf16WsKernel multiplies the
// two with no conversion: persistent blocks of two MMA warpgroups and a producer warpgroup (TmaLinearWsKernel's
// scheme), tiles of 128 weight rows × 128 tokens written by TMA in the 128-byte swizzle, wgmma
// m64n128k16 (each output the dot product m64n64k16 forms). Order of every output: the grouped
// kernels' (per 512-column slice an accumulator from +0, per chunk the k16 steps, per step the
// parts hi, mid, lo; total = P_0, total += P_1, ...): the same bits.

// Thread per 16 weight columns: row r of the FP8 weight [rows][k] (rows 16-byte aligned,
// w_row_bytes apart) times its e8m0 block scale (scale[(r / 128) · scale_row_stride + col / 128])
// into BF16 [rows][k], contiguous. Exact: an e4m3 value times a power of two within BF16's range.
__global__ void __launch_bounds__(256) ConvertGroupedWeightKernel(const uint8_t* __restrict__ w, int64_t w_row_bytes,
                                                                  const uint8_t* __restrict__ scale,
                                                                  int64_t scale_row_stride, int64_t rows, int64_t k,
                                                                  uint16_t* __restrict__ out) {
  PdlPrologue();
  const int64_t units = rows * (k / 16);
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = u / (k / 16), col = 16 * (u % (k / 16));
    const uint4 codes = __ldg(reinterpret_cast<const uint4*>(w + row * w_row_bytes + col));
    const float s = DecodeE8m0(__ldg(scale + (row / kFp8Block) * scale_row_stride + col / kFp8Block));
    uint32_t pairs[8];
    ScaledE4m3ToBf16Pairs(codes, s, pairs);
    uint4* dst = reinterpret_cast<uint4*>(out + row * k + col);
    dst[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    dst[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
  }
}

// Shared memory of GroupedBf16WsKernel<kParts>: kStages stages of the weight tile (128 rows × 64
// BF16) and x's kParts part tiles (128 token rows × 64 BF16 each), every tile 128-byte swizzled by
// the TMA; then full[kStages] and empty[kStages]; with kTmaStore (one part only) 4 stages and then
// the output tile's staging: per consumer warpgroup two boxes of 32 weight rows (f32) × 128
// tokens, 128-byte swizzled. kTokens = 8 (the dense products of 1-8 rows, DEEPINFER_DENSE_WS8):
// token tiles of 8 rows (a part tile is one 1,024-byte swizzle period), 8 stages of 19 KiB.
// kTokens = 64 (the dense products of 9 rows up to DenseWsMinRows(), DEEPINFER_DENSE_WS64): 5
// stages of 40 KiB (the weight tile and three 8 KiB part tiles), 201 KiB.
template <int kParts, bool kTmaStore = false, int kTokens = 128>
struct GroupedBf16Layout {
  static constexpr int kTok = kTokens;
  static constexpr int kElems = kTok / 2;  // D fragment elements per thread
  static constexpr int kWBytes = kBlockRows * kRowBytes;  // 16 KiB
  static constexpr int kPartBytes = kTok * kRowBytes;     // 16 KiB
  static constexpr int kStageBytes = kWBytes + kParts * kPartBytes;
  static constexpr int kStages = kTok == 8 ? 8 : kTok == 64 ? 5 : kTmaStore ? 4 : kParts == 1 ? 6 : 3;
  static constexpr int kBarriers = kStages * kStageBytes;
  static constexpr int kStoreBoxRows = 32;                          // weight rows (f32) a box
  static constexpr int kStoreBoxBytes = kTok * kStoreBoxRows * 4;  // 16 KiB
  static constexpr int kStaging = (kBarriers + 2 * kStages * 8 + 1023) / 1024 * 1024;
  static constexpr int kBytes =
      (kTmaStore ? kStaging + 2 * (kRowsPerGroup / kStoreBoxRows) * kStoreBoxBytes : kBarriers + 2 * kStages * 8) +
      1024;  // + base alignment
  static_assert(kParts == 1 || kParts == 3, "x rounded to BF16 alone, or hi, mid and lo");
  static_assert(!kTmaStore || kParts == 1, "the staging fits beside one part's stages only");
  static_assert(kTok == 128 || ((kTok == 8 || kTok == 64) && !kTmaStore), "128, 8 or 64 (no TMA stores)");
  static_assert(kStageBytes % 1024 == 0, "the swizzle's 1024-byte period");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// Issues one chunk's MMAs into acc (IssueSplitChunk's order at 128 tokens, IssueDenseChunk<kTok>'s
// at 8 and 64): w_addr the warpgroup's 64 weight rows, x_addr the first part tile (the others
// kPartBytes apart); `fresh`: the first MMA ignores acc (IssueDenseChunk's slice start).
template <int kParts, int kTok = 128>
__device__ __forceinline__ void IssueGroupedBf16Chunk(float (&acc)[kTok / 2], uint32_t w_addr, uint32_t x_addr,
                                                      bool fresh = false) {
  constexpr int kPartBytes = GroupedBf16Layout<kParts, false, kTok>::kPartBytes;
  const uint32_t w_lo = wgmma::DescriptorLow(w_addr), x_lo = wgmma::DescriptorLow(x_addr);
  wgmma::WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      MmaBf16M64NK16<kTok>(acc, w_lo + 2 * kk, x_lo + (part * kPartBytes + 32 * kk) / 16, !fresh || kk + part > 0);
    }
  }
  wgmma::WgmmaCommit();
}

// Unit `unit` of GroupedBf16WsKernel's walk: its weight row block (kPairs: the pair's first two
// row blocks' index times two, plus the block's rank), token tile and group. Weight row blocks
// fastest, then token tiles, then groups; tokens_fastest (one block per unit, never with pairs):
// token tiles fastest, so a row block's token tiles run side by side and its weight leaves DRAM
// once.
struct GroupedBf16WsUnit {
  int row_block, tok_block, group;
};
template <bool kPairs>
__device__ __forceinline__ GroupedBf16WsUnit GroupedBf16WsUnitOf(int unit, int units_per_row, int tok_blocks,
                                                                 int rank, bool tokens_fastest) {
  if (!kPairs && tokens_fastest) {
    const int rest = unit / tok_blocks;
    return GroupedBf16WsUnit{rest % units_per_row, unit % tok_blocks, rest / units_per_row};
  }
  const int rest = unit / units_per_row;
  return GroupedBf16WsUnit{kPairs ? 2 * (unit % units_per_row) + rank : unit % units_per_row, rest % tok_blocks,
                           rest / tok_blocks};
}

// setmaxnreg of GroupedBf16WsKernel: the producer's thread walks the tiles (its counters in
// registers), the MMA warpgroups hold 2 × 64 accumulator floats; within the block's own registers.
constexpr int kGroupedBf16ProducerRegisters = 40, kGroupedBf16ConsumerRegisters = 232;
static_assert(kGroupedBf16ProducerRegisters * 128 + kGroupedBf16ConsumerRegisters * tma::kThreads <=
                  tma::kWsLaunchRegisters * tma::kWsThreads,
              "setmaxnreg within the block's own registers");

// Grid: at most one block per SM; tma::kWsThreads threads; GroupedBf16Layout<kParts>::kBytes of
// dynamic shared memory. Block b takes tiles b, b + gridDim.x, ... of groups × tok_blocks × n_blocks
// (weight row blocks fastest, then token blocks: a wave shares x's tiles and one group's weight
// in L2; at kTok = 64, and where p.ws_tokens_fastest, token tiles fastest: GroupedBf16WsUnitOf);
// load j of the ring is the j-th (tile, chunk) of that walk.
// w_map: the BF16 weight [groups · n rows][K], boxes of 128 rows × 64 values; x_map: the parts,
// BF16 [kParts][m][groups · K], boxes of 1 × 128 rows × 64 values (zeros past m); both 128-byte
// swizzle. p: y, ldy, y_group_stride, m, n (rows per group), k.
// kFreshSlices: each slice begins with an MMA that ignores d instead of zeroed registers (the
// dense kernels' overlapped order, OverlappedSlices: the same bits as theirs, -0 included).
// kTmaStore (kParts == 1, p.n % 128 == 0): the output tiles leave by TMA stores of y_map (FLOAT32
// [m][ldy], boxes of 32 × 128, 128-byte swizzle) from the staging, as TmaLinearWsKernel<true>'s;
// else by each thread's stores (y_map unused).
// kPairs (launched in clusters of two blocks, Bf16WsPairs): the walk is over units, a unit being
// weight row blocks 2u' and 2u' + 1 of one token tile and group (`tiles` counts units; the
// cluster takes units c, c + clusters, ...), rank r computing block 2u' + r (none past n_blocks:
// its loads still run, its stores do not). Each rank loads its own weight tile and token rows
// [64r, 64r + 64) of x's part tiles multicast into both ranks (x_map's boxes are then 1 × 64 rows
// × 64 values), so a block reads 24 KiB of a 3-part stage's 48 KiB of x from L2 instead of all
// of it. A stage is free once both ranks' consumer warps have released it (each warp arrives on
// both ranks' empty barrier). The same tiles in the same shared-memory places: the same bits.
// kWTiles (one group): w_map is the weight's tiles (DenseTileOffset's layout) as a tensor of
// [row blocks · chunks · 128 rows][64 values], tile (nb, c) at rows (nb · chunks + c) · 128: the same
// bytes in the same places.
// kTok = 8 or 64 (neither kTmaStore nor kPairs): token tiles of kTok rows (x_map's boxes of kTok
// rows), m64n8k16 or m64n64k16 MMAs in IssueDenseChunk<kTok>'s order: DenseSplitKernel<kTok>'s
// (and DensePartsKernel's) products and bits without their block barriers, on blocks that stay
// (DEEPINFER_DENSE_WS8, DEEPINFER_DENSE_WS64).
template <int kParts, bool kFreshSlices = false, bool kTmaStore = false, bool kPairs = false, bool kWTiles = false,
          int kTok = 128>
__global__ void __launch_bounds__(tma::kWsThreads, 1)
    GroupedBf16WsKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                        const __grid_constant__ CUtensorMap y_map, const Params p, int n_blocks, int tok_blocks,
                        int tiles) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma are sm_90a only; the host never picks this path elsewhere
#else
  using L = GroupedBf16Layout<kParts, kTmaStore, kTok>;
  static_assert(kTok == 128 || !kPairs, "pairs of 128-token tiles only");
  constexpr int S = L::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* empty = full + S;
  const int tid = threadIdx.x;
  const int chunks = static_cast<int>(p.k / kChunkCols);
  // kPairs: this block's rank; units per (group, token tile); the walk's first unit and stride.
  const int rank = kPairs ? static_cast<int>(tma::ClusterRank()) : 0;
  const int units_per_row = kPairs ? (n_blocks + 1) / 2 : n_blocks;
  const int first_unit = kPairs ? static_cast<int>(blockIdx.x) / 2 : static_cast<int>(blockIdx.x);
  const int unit_step = kPairs ? static_cast<int>(gridDim.x) / 2 : static_cast<int>(gridDim.x);
  // The walk's order (GroupedBf16WsUnitOf): token tiles fastest at 64-token tiles, and at 128 where
  // the host asks (Params::ws_tokens_fastest, never with pairs).
  const bool tokens_fastest = !kPairs && (kTok == 64 || p.ws_tokens_fastest);
  if (tid == 0) {
    tma::PrefetchTensorMap(&w_map);
    tma::PrefetchTensorMap(&x_map);
    for (int s = 0; s < S; ++s) {
      tma::BarrierInit(&full[s], 1);
      tma::BarrierInit(&empty[s], (kPairs ? 2 : 1) * tma::kWsConsumerWarps);
    }
    tma::FenceBarrierInit();
  }
  // kPairs: both ranks' barriers are initialized before either rank's copies or arrivals reach them.
  if constexpr (kPairs) {
    wgmma::ClusterSync();
  } else {
    __syncthreads();
  }
  if (tid >= tma::kThreads) {  // the producer warpgroup
    tma::SetMaxRegistersDec<kGroupedBf16ProducerRegisters>();
    if (tid == tma::kThreads) {
      int64_t j = 0;
      for (int unit = first_unit; unit < tiles; unit += unit_step) {
        const GroupedBf16WsUnit u = GroupedBf16WsUnitOf<kPairs>(unit, units_per_row, tok_blocks, rank, tokens_fastest);
        const int nb = u.row_block, t0 = u.tok_block * L::kTok, g = u.group;
        // Past n_blocks (kPairs, odd n_blocks): the next group's rows, or zeros past the weight.
        const int x_col = g * static_cast<int>(p.k);
        for (int c = 0; c < chunks; ++c, ++j) {
          if (j >= S) tma::BarrierWait(&empty[(j - S) % S], static_cast<uint32_t>((j - S) / S) & 1u);
          uint64_t* bar = &full[j % S];
          uint8_t* stage = smem + (j % S) * L::kStageBytes;
          tma::BarrierArriveExpectTx(bar, L::kStageBytes);
          if constexpr (kWTiles) {  // past n_blocks (kPairs): rows past the tensor, TMA's zeros
            tma::TmaLoad2d(stage, &w_map, bar, 0, (nb * chunks + c) * kBlockRows);
          } else {
            tma::TmaLoad2d(stage, &w_map, bar, c * kChunkCols, g * static_cast<int>(p.n) + nb * kBlockRows);
          }
#pragma unroll
          for (int part = 0; part < kParts; ++part) {
            uint8_t* x_tile = stage + L::kWBytes + part * L::kPartBytes;
            if constexpr (kPairs) {
              constexpr int kHalfRows = L::kTok / 2;
              tma::TmaLoad3dMulticast(x_tile + rank * kHalfRows * kRowBytes, &x_map, bar, x_col + c * kChunkCols,
                                      t0 + rank * kHalfRows, part, uint16_t{0x3});
            } else {
              tma::TmaLoad3d(x_tile, &x_map, bar, x_col + c * kChunkCols, t0, part);
            }
          }
        }
      }
    }
    if constexpr (kPairs) wgmma::ClusterSync();  // the consumers' matching sync: see the kernel's end
    return;
  }
  tma::SetMaxRegistersInc<kGroupedBf16ConsumerRegisters>();
  const int group = tid / 128;  // consumer warpgroup: weight rows 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  // acc: the current slice, from +0 (zeroed again at each slice's end); total: over slices.
  float acc[L::kElems], total[L::kElems];
#pragma unroll
  for (int i = 0; i < L::kElems; ++i) total[i] = 0.f;
  wgmma::ZeroForWgmma(acc);
  int64_t j = 0;  // loads consumed
  // The stage of `load` landed; its MMAs issued into acc (`fresh`: the first ignores acc).
  auto wait_and_issue = [&](int64_t load, bool fresh) {
    tma::BarrierWait(&full[load % S], static_cast<uint32_t>(load / S) & 1u);
    __syncwarp();
    const uint32_t stage = wgmma::SharedAddress(smem + (load % S) * L::kStageBytes);
    IssueGroupedBf16Chunk<kParts, kTok>(acc, stage + group * kRowsPerGroup * kRowBytes, stage + L::kWBytes, fresh);
  };
  auto release = [&](int64_t load) {  // the warp's MMAs of `load` complete: its stage is free
    __syncwarp();
    if (lane == 0) {
      if constexpr (kPairs) {  // in both ranks: the other rank's copies write this stage too
        tma::BarrierArriveInBlock(&empty[load % S], 0u);
        tma::BarrierArriveInBlock(&empty[load % S], 1u);
      } else {
        tma::BarrierArrive(&empty[load % S]);
      }
    }
  };
  for (int unit = first_unit; unit < tiles; unit += unit_step) {
    const GroupedBf16WsUnit u = GroupedBf16WsUnitOf<kPairs>(unit, units_per_row, tok_blocks, rank, tokens_fastest);
    const int nb = u.row_block;
    const int64_t t0 = static_cast<int64_t>(u.tok_block) * L::kTok, g = u.group;
    for (int s0 = 0; s0 < chunks; s0 += kSliceChunks) {
      // The slice's chunks: chunk c's MMAs issued while chunk c - 1's may run; no register of acc
      // is written between them (ptxas would wait for every MMA at the back edge: C7517).
      const int s1 = min(chunks, s0 + kSliceChunks);
      wait_and_issue(j++, kFreshSlices);
      for (int c = s0 + 1; c < s1; ++c) {
        wait_and_issue(j++, false);
        wgmma::WgmmaWait<1>();
        release(j - 2);
      }
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
      release(j - 1);
#pragma unroll
      for (int i = 0; i < L::kElems; ++i) total[i] = s0 == 0 ? acc[i] : __fadd_rn(total[i], acc[i]);
      if constexpr (!kFreshSlices) wgmma::ZeroForWgmma(acc);
    }
    if constexpr (kTmaStore) {
      if (kPairs && nb >= n_blocks) {  // a rank past the last row block: nothing to store
        if (tid % 128 == 0 && unit + unit_step >= tiles) tma::BulkWaitAll<false>();
        continue;
      }
      // The warpgroup's rows 0-31 in box 0 (warps 0, 1), 32-63 in box 1 (warps 2, 3): row r of a
      // box, token t at 128·t + ((r / 4) ^ (t % 8))·16 + (r % 4)·4 (the 128-byte swizzle).
      // Element 4i + e: token 8i + 2q (+ 1 for odd e), row 16·(warp % 2) + g (+ 8 for e >= 2).
      // With t = 8i + 2q + e1, 128·t = 1024·i + ..., so 4 addresses serve the 64 stores.
      const uint32_t box = wgmma::SharedAddress(smem + L::kStaging) + (2 * group + warp / 2) * L::kStoreBoxBytes;
      const bool issuer = tid % 128 == 0;
      if (issuer) tma::BulkWaitAll<true>();  // the previous tile's copies have read the staging
      tma::NamedBarrierSync(1 + group, 128);
      const int g8 = lane / 4, q = lane % 4;
      uint32_t at[2][2];  // [token + e1][row + 8h]
#pragma unroll
      for (int e1 = 0; e1 < 2; ++e1) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * (warp % 2) + g8 + 8 * h;
          at[e1][h] = box + 256 * q + 128 * e1 + (((r / 4) ^ (2 * q + e1)) << 4) + 4 * (r % 4);
        }
      }
#pragma unroll
      for (int i = 0; i < L::kElems / 4; ++i) {
        wgmma::StShared32(at[0][0] + 1024 * i, __float_as_uint(total[4 * i + 0]));
        wgmma::StShared32(at[1][0] + 1024 * i, __float_as_uint(total[4 * i + 1]));
        wgmma::StShared32(at[0][1] + 1024 * i, __float_as_uint(total[4 * i + 2]));
        wgmma::StShared32(at[1][1] + 1024 * i, __float_as_uint(total[4 * i + 3]));
      }
      wgmma::FenceProxyAsyncShared();  // the writes, visible to the TMA copies
      tma::NamedBarrierSync(1 + group, 128);
      if (issuer) {
        const uint32_t first = wgmma::SharedAddress(smem + L::kStaging) + 2 * group * L::kStoreBoxBytes;
        const int column = static_cast<int>(g * p.n) + nb * kBlockRows + group * kRowsPerGroup;
#pragma unroll
        for (int b = 0; b < kRowsPerGroup / L::kStoreBoxRows; ++b) {
          tma::TmaStore2d(&y_map, first + b * L::kStoreBoxBytes, column + b * L::kStoreBoxRows, static_cast<int>(t0));
        }
        tma::BulkCommitGroup();
        // The block's last tile: its copies complete before the block's memory goes (inside the
        // loop: TmaLinearWsKernel's spills came from the wait after it).
        if (unit + unit_step >= tiles) tma::BulkWaitAll<false>();
      }
      continue;
    }
    Params pg = p;
    pg.y = p.y + g * p.y_group_stride;
    const int64_t ra = static_cast<int64_t>(nb) * kBlockRows + group * kRowsPerGroup + 16 * warp + lane / 4;
    wgmma::StoreBlockResult<L::kTok>(pg, ra, t0, lane % 4, [&](int e) { return total[e]; });
  }
  // kPairs: neither rank leaves (its shared memory and barriers gone) while the other's copies or
  // arrivals may still reach them.
  if constexpr (kPairs) wgmma::ClusterSync();
#endif
}


// ---- Linear's split-BF16 products of BF16 weights (the head, compressors, indexer) -------------
//
// Linear with BF16 weights under LinearMath::kSplitBf16 (the output head, the compressors' and the
// indexer's weights: docs/performance.md, version 22), on sm_90a at every M (DenseUsable depends on
// the weight alone), so a row's bits never depend on its batch. The BF16 weight tile is already
// what wgmma reads: the cp.async copies write it swizzled into the stage, and only x is converted
// (ConvertXParts: hi, mid, lo). Order of every output: per 512-column slice s, an accumulator from
// +0 takes the slice's 64-column chunks in order, per chunk the k16 steps kk = 0..3, per step the
// MMAs of hi, mid and lo (IssueSplitChunk<3>); then total = P_0, total += P_1, ... in slice order.
// It is the grouped kernels' order (on BF16 weights), not the mma.sync kernels', so the last bits
// differ from theirs (within the linear tests' summation-order tolerance).
//
// Work: blocks of 128 weight rows × kTok tokens (64, or 8 for products of at most 8 rows: the
// same sums, an eighth of the MMA work at decode), two consumer warpgroups of 64 rows (wgmma
// m64n64k16 or m64n8k16: each output column is the same dot product at either width), a ring
// of kDenseStages cp.async stages (the weight tile, 16 KiB, and x's raw floats) and two sets of
// x's part tiles (chunk c + 1 is converted while chunk c's MMAs run), one block per SM at 64
// tokens, two at 8 (DenseSmem). Where that grid leaves SMs idle (decode batches of the narrow weights) the slices
// are spread over a cluster (DenseSplitSlicesKernel): rank r computes slice r's P_r, and rank 0
// adds P_0, P_1, ... in order from the ranks' shared memory: the same adds, the same bits.
constexpr int kDenseStages = 4;
constexpr int kDenseWBytes = kBlockRows * kRowBytes;  // 16 KiB: 64 BF16 columns per row
constexpr int kMaxDenseCluster = 8;                   // slices a cluster spreads (K <= 4096)
// Stages of DenseSplitSlicesKernel's deep form (DEEPINFER_DENSE_SLICES_DEEP): a rank's whole slice
// of 8 chunks is copied in the prologue, and one stage more keeps the ring's arithmetic.
constexpr int kDeepDenseStages = kSliceChunks + 1;

// Shared memory of the dense kernels on kTok-token tiles: kStages stages (the weight tile, then x's
// raw floats, kTok rows of 256 bytes), then two sets of x's part tiles (hi, mid, lo of kTok rows of
// 128 bytes). 64 tokens: 177 KiB, one block per SM; 32 tokens: 121 KiB, one; 16 tokens: 93 KiB,
// two; 8 tokens: 79 KiB, two; 8 tokens at kDeepDenseStages (a whole slice in flight): 169 KiB, one.
template <int kTok, int kStages = kDenseStages>
struct DenseSmem {
  static constexpr int kStageBytes = kDenseWBytes + kTok * kXRawRowBytes;
  static constexpr int kPartBytes = kTok * kRowBytes;
  static constexpr int kXSetBytes = 3 * kPartBytes;
  static constexpr int kXTiles = kStages * kStageBytes;
  static constexpr int kBytes = kXTiles + 2 * kXSetBytes + 1024;  // + base alignment
  static constexpr int kBlocksPerSm = kTok <= 16 && kStages == kDenseStages ? 2 : 1;
  static_assert(kBlocksPerSm * kBytes <= 227 * 1024, "Hopper's shared memory per SM");
  static_assert(kStageBytes % 1024 == 0 && kPartBytes % 1024 == 0, "1024-byte aligned tiles");
  static_assert(kThreads * (kTok / 2) * 4 <= kXTiles, "a rank's slice sum fits its stages");
};

// IssueSplitChunk<3> on a tile of kTok = 64, 32, 16 or 8 tokens (acc of kTok / 2; each output
// column the same dot product at any width); `fresh`: the chunk's first MMA ignores d (wgmma's
// scale-d = 0) instead of adding to it, the others accumulate.
template <int kTok>
__device__ __forceinline__ void IssueDenseChunk(float (&acc)[kTok / 2], uint32_t w_addr, uint32_t x_addr,
                                                bool fresh = false) {
  static_assert(kTok == 8 || kTok == 16 || kTok == 32 || kTok == 64, "8-, 16-, 32- or 64-token tiles");
  if constexpr (kTok == 64) {
    if (!fresh) return IssueSplitChunk<3>(acc, w_addr, x_addr);
    const uint32_t w_lo = wgmma::DescriptorLow(w_addr), x_lo = wgmma::DescriptorLow(x_addr);
    wgmma::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int part = 0; part < 3; ++part) {
        MmaBf16M64N64K16(acc, w_lo + 2 * kk, x_lo + (part * kXTileBytes + 32 * kk) / 16, kk + part > 0);  // fresh
      }
    }
    wgmma::WgmmaCommit();
  } else {
    const uint32_t w_lo = wgmma::DescriptorLow(w_addr), x_lo = wgmma::DescriptorLow(x_addr);
    wgmma::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int part = 0; part < 3; ++part) {
        MmaBf16M64NK16<kTok>(acc, w_lo + 2 * kk, x_lo + (part * DenseSmem<kTok>::kPartBytes + 32 * kk) / 16,
                             !fresh || kk + part > 0);
      }
    }
    wgmma::WgmmaCommit();
  }
}

// A BF16 weight's tiles (cuda::Linear's `tiles`): tile (b, c) holds rows [128·b, 128·b + 128) ×
// columns [64·c, 64·c + 64), 16 KiB in a row, row r's 128 bytes at 128·r, zeros past the weight's
// rows; tiles in row-block-major order. Its byte offset for a weight of k columns (k % 64 == 0).
__host__ __device__ inline int64_t DenseTileOffset(int64_t row_block, int64_t chunk, int64_t k) {
  return (row_block * (k / kChunkCols) + chunk) * int64_t{kDenseWBytes};
}

// Queues chunk c (64 columns) of weight rows n0.. (zeros past p.n) into the stage's weight tile
// (swizzled; cp.async, the caller commits). kTiles: from the weight's tiles (p.w_tiles, the layout
// of DenseTileOffset: the tile is 16 KiB in a row, zeros past p.n), the same bytes in the same
// places.
template <bool kTiles = false>
__device__ __forceinline__ void LoadDenseWeightTile(const Params& p, int64_t n0, int c, uint8_t* stage) {
  const int tid = threadIdx.x;
  if constexpr (kTiles) {
    const uint8_t* tile = p.w_tiles + DenseTileOffset(n0 / kBlockRows, c, p.k);
#pragma unroll
    for (int i = 0; i < kDenseWBytes / 16 / kThreads; ++i) {
      const int id = tid + i * kThreads;  // row id / 8, 16-byte unit id % 8, at byte 16·id of the tile
      CpAsync16(stage + wgmma::SwizzledOffset(id / 8, id % 8), tile + id * 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kDenseWBytes / 16 / kThreads; ++i) {  // 4: row id / 8, 16-byte unit id % 8
      const int id = tid + i * kThreads, row = id / 8, unit = id % 8;
      const bool valid = n0 + row < p.n;
      const uint8_t* src =
          p.w + (valid ? n0 + row : 0) * p.w_row_bytes + static_cast<int64_t>(c) * kRowBytes + unit * 16;
      wgmma::Copy16(stage + wgmma::SwizzledOffset(row, unit), src, valid, true);
    }
  }
}

// Queues chunk c (64 columns) of weight rows n0.. (zeros past p.n) and x's first `tokens` token
// rows t0.. into `stage` (cp.async; the caller commits). Token rows from `tokens` on are not
// copied: ConvertXParts writes zeros for them. kTiles: the weight from its tiles.
template <int kTok, bool kTiles = false>
__device__ __forceinline__ void LoadDenseStage(const Params& p, int64_t n0, int64_t t0, int tokens, int c,
                                               uint8_t* stage) {
  LoadDenseWeightTile<kTiles>(p, n0, c, stage);
  const int tid = threadIdx.x;
  const float* x = p.x + static_cast<int64_t>(c) * kChunkCols;
  constexpr int kXUnits = kTok * kXRawRowBytes / 16;
#pragma unroll
  for (int i = 0; i < (kXUnits + kThreads - 1) / kThreads; ++i) {  // row id / 16, unit id % 16
    const int id = tid + i * kThreads, row = id / 16, unit = id % 16;
    if (row < tokens) {  // tokens <= kTok
      CpAsync16(stage + kDenseWBytes + row * kXRawRowBytes + unit * 16,
                reinterpret_cast<const uint8_t*>(x + (t0 + row) * p.ldx) + unit * 16);
    }
  }
}

// In the overlapped dense loops, after chunk c's MMAs are issued: this warpgroup's MMAs of chunk
// c - 1 awaited (chunk c's may still run); where chunk c + 1 exists (`next`), this thread's copies
// of it (the group S - 3 back) landed and fenced for the MMAs; then a barrier: chunk c - 1's MMAs
// done in both warpgroups, everyone's copies of chunk c + 1 in.
template <int S>
__device__ __forceinline__ void AwaitOverlappedChunk(bool next) {
  wgmma::WgmmaWait<1>();
  if (next) {
    CpAsyncWait<S - 3>();
    wgmma::FenceProxyAsyncShared();
  }
  __syncthreads();
}

// The overlapped chunk loop of the dense kernels over chunks [c_begin, c_end) (c_begin a multiple
// of kSliceChunks), slice by slice: each chunk's MMAs issued (IssueDenseChunk on
// w_addr_of(c), x_addr_of(c); a slice's first ignores d), then step(c) while they run; at the
// slice's end all awaited and on_slice(slice, acc) called with its sum.
template <int kTok, class WAddr, class XAddr, class Step, class OnSlice>
__device__ __forceinline__ void OverlappedSlices(float (&acc)[kTok / 2], int c_begin, int c_end, const WAddr& w_addr_of,
                                                 const XAddr& x_addr_of, const Step& step, OnSlice&& on_slice) {
  for (int s0 = c_begin; s0 < c_end; s0 += kSliceChunks) {
    const int s1 = min(c_end, s0 + kSliceChunks);
    IssueDenseChunk<kTok>(acc, w_addr_of(s0), x_addr_of(s0), true);  // the slice's first MMA ignores d
    step(s0);
    for (int c = s0 + 1; c < s1; ++c) {
      IssueDenseChunk<kTok>(acc, w_addr_of(c), x_addr_of(c));
      step(c);
    }
    wgmma::WgmmaWaitAll();
    wgmma::PinAll(acc);
    on_slice(s0 / kSliceChunks, acc);
  }
}

// Chunks [c_begin, c_end) of the block's 128 weight rows n0.. and kTok tokens t0.. (c_begin a
// multiple of kSliceChunks): at the end of each 512-column slice (or of the range) calls
// on_slice(slice, acc) with that slice's sum. All threads call it; it returns with no copies in
// flight and shared memory free after a barrier.
// kOverlap (DEEPINFER_DENSE_OVERLAP=1; version 26, off by default until it has run): chunk c's
// MMAs are issued while chunk c - 1's may still run (wgmma.wait_group 1 instead of 0; the same
// MMAs into the same accumulator in the same order), so the tensor cores work through the next
// chunk's conversion and barriers; the slice's end waits for all. Chunk c + S - 1 then goes into
// chunk c - 1's stage only after a barrier past every warpgroup's wait for it. Each slice starts
// with an MMA that ignores d (scale-d = 0) instead of zeroed registers: a register write in the
// loop would make ptxas wait for every MMA at the back edge (C7517). A sum equals the zeroed
// form's wherever it is not an exact zero (+0 + s = s); an all-zero sum may come out -0.
// kTiles: the weight from its tiles (LoadDenseWeightTile).
// kStages: the ring's stages (kDenseStages; kDeepDenseStages for the slices kernel's deep form).
template <int kTok, bool kOverlap, bool kTiles = false, int kStages = kDenseStages, class OnSlice>
__device__ __forceinline__ void DenseSplitChunks(const Params& p, int64_t n0, int64_t t0, int c_begin, int c_end,
                                                 uint8_t* smem, OnSlice&& on_slice) {
  constexpr int S = kStages;
  using L = DenseSmem<kTok, kStages>;
  const int tid = threadIdx.x;
  const int group = tid / 128;
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kTok), p.m - t0));
  auto stage_of = [&](int c) { return smem + ((c - c_begin) % S) * L::kStageBytes; };
  auto xset_of = [&](int c) { return smem + L::kXTiles + ((c - c_begin) % 2) * L::kXSetBytes; };
  const bool x_row_valid = tid / 4 < tokens;  // ConvertXParts' token row
  const bool x_row_used = tid / 4 < kTok;     // rows past the tile are never read
  auto convert = [&](int c) {
    if (x_row_used) ConvertXParts<3, L::kPartBytes>(stage_of(c) + kDenseWBytes, xset_of(c), x_row_valid);
  };

  float acc[kTok / 2];
  if constexpr (!kOverlap) wgmma::ZeroForWgmma(acc);  // kOverlap: each slice's first MMA ignores d
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (c_begin + s < c_end) LoadDenseStage<kTok, kTiles>(p, n0, t0, tokens, c_begin + s, stage_of(c_begin + s));
    CpAsyncCommit();
  }
  if (c_begin < c_end) {
    CpAsyncWait<S - 2>();  // chunk c_begin's group (this thread's copies)
    wgmma::FenceProxyAsyncShared();
    __syncthreads();
    convert(c_begin);
    wgmma::FenceProxyAsyncShared();
    __syncthreads();  // chunk c_begin's tiles are complete
  }
  if constexpr (kOverlap) {
    auto w_addr_of = [&](int c) {
      return static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + group * kRowsPerGroup * kRowBytes));
    };
    auto x_addr_of = [&](int c) { return static_cast<uint32_t>(__cvta_generic_to_shared(xset_of(c))); };
    // After chunk c's MMAs are issued: chunk c - 1's done, then its stage and x set refilled.
    auto step = [&](int c) {
      AwaitOverlappedChunk<S>(c + 1 < c_end);
      if (c + S - 1 < c_end) LoadDenseStage<kTok, kTiles>(p, n0, t0, tokens, c + S - 1, stage_of(c + S - 1));
      CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
      if (c + 1 < c_end) {
        convert(c + 1);  // into chunk c - 1's set
        wgmma::FenceProxyAsyncShared();
      }
      __syncthreads();  // chunk c + 1's tiles complete
    };
    OverlappedSlices<kTok>(acc, c_begin, c_end, w_addr_of, x_addr_of, step, on_slice);
  } else {
    for (int c = c_begin; c < c_end; ++c) {
      const uint32_t w_addr =
          static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + group * kRowsPerGroup * kRowBytes));
      const uint32_t x_addr = static_cast<uint32_t>(__cvta_generic_to_shared(xset_of(c)));
      IssueDenseChunk<kTok>(acc, w_addr, x_addr);
      // While they run: chunk c + S - 1 into the stage of chunk c - 1 (its MMAs completed before the
      // last barrier; its x was converted an iteration earlier), then chunk c + 1's x into the other
      // set (chunk c - 1's MMAs, its last readers, are done).
      if (c + S - 1 < c_end) LoadDenseStage<kTok, kTiles>(p, n0, t0, tokens, c + S - 1, stage_of(c + S - 1));
      CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
      if (c + 1 < c_end) {
        CpAsyncWait<S - 2>();  // chunk c + 1's group (this thread's copies)
        wgmma::FenceProxyAsyncShared();
        __syncthreads();  // everyone's copies of chunk c + 1
        convert(c + 1);
        wgmma::FenceProxyAsyncShared();
      }
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
      if ((c + 1) % kSliceChunks == 0 || c + 1 == c_end) {
        on_slice(c / kSliceChunks, acc);
        wgmma::ZeroForWgmma(acc);
      }
      __syncthreads();  // chunk c + 1's tiles complete; chunk c's MMAs done in both warpgroups
    }
  }
  CpAsyncWaitAll();
  __syncthreads();
}

// This thread's D fragment rows: ra (and ra + 8) of block n0, column pair q.
__device__ __forceinline__ int64_t DenseFragmentRow(int64_t n0) {
  const int tid = static_cast<int>(threadIdx.x);
  return n0 + (tid / 128) * kRowsPerGroup + 16 * ((tid % 128) / kWarpSize) + (tid % kWarpSize) / 4;
}

// Grid (ceil(n / 128), ceil(m / kTok)); kThreads threads; DenseSmem<kTok>::kBytes of dynamic shared
// memory. kTiles: the weight from p.w_tiles (DenseTileOffset's layout; the same bits).
template <int kTok, bool kOverlap = false, bool kTiles = false>
__global__ void __launch_bounds__(kThreads, DenseSmem<kTok>::kBlocksPerSm) DenseSplitKernel(const Params p) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  constexpr int kElems = kTok / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows, t0 = static_cast<int64_t>(blockIdx.y) * kTok;
  float total[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) total[i] = 0.f;
  const int chunks = static_cast<int>(p.k / kChunkCols);
  DenseSplitChunks<kTok, kOverlap, kTiles>(p, n0, t0, 0, chunks, smem, [&](int slice, const float (&acc)[kElems]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) total[i] = slice == 0 ? acc[i] : __fadd_rn(total[i], acc[i]);
  });
  wgmma::StoreBlockResult<kTok>(p, DenseFragmentRow(n0), t0, static_cast<int>(threadIdx.x) % 4,
                          [&](int j) { return total[j]; });
#endif
}

// DenseSplitKernel's products with slice r of K on rank r of a cluster of kCluster blocks (K has
// at most kCluster slices; ranks past the last slice idle). Grid (ceil(n / 128) · kCluster,
// ceil(m / kTok)); row block blockIdx.x / kCluster. kStages: DenseSplitChunks' ring (the same MMAs
// in the same order at any depth, so the same bits).
template <int kTok, int kCluster, bool kOverlap = false, int kStages = kDenseStages>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads, DenseSmem<kTok, kStages>::kBlocksPerSm)
    DenseSplitSlicesKernel(const Params p) {
  PdlPrologue(SliceRowsPrefetch<kBlockRows, 2>(p, kCluster));
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t n0 = static_cast<int64_t>(blockIdx.x / kCluster) * kBlockRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTok;
  constexpr int kElems = kTok / 2;
  const int chunks = static_cast<int>(p.k / kChunkCols);
  const int slices = (chunks + kSliceChunks - 1) / kSliceChunks;
  const int c_begin = min(chunks, rank * kSliceChunks), c_end = min(chunks, (rank + 1) * kSliceChunks);
  float held[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) held[i] = 0.f;
  auto hold = [&](int, const float (&acc)[kElems]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) held[i] = acc[i];
  };
  DenseSplitChunks<kTok, kOverlap, false, kStages>(p, n0, t0, c_begin, c_end, smem, hold);
  // The slice sum at [element][thread] of this rank's (free) shared memory.
  float* sums = reinterpret_cast<float*>(smem);
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < kElems; ++i) sums[i * kThreads + tid] = held[i];
  cluster.sync();
  if (rank == 0) {
    float total[kElems];
    for (int s = 0; s < slices; ++s) {
      const float* peer = cluster.map_shared_rank(sums, s);
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        const float v = peer[i * kThreads + tid];
        total[i] = s == 0 ? v : __fadd_rn(total[i], v);
      }
    }
    wgmma::StoreBlockResult<kTok>(p, DenseFragmentRow(n0), t0, tid % 4, [&](int j) { return total[j]; });
  }
  ClusterSyncBeforeExit();  // no rank leaves (freeing its shared memory) while rank 0 reads it
#endif
}

// ---- x's parts split once per call (DensePartsKernel) ---------------------------------------------
//
// DenseSplitKernel<64> converts each chunk of x into its three BF16 parts in every one of its row
// blocks (1010 of them for the head) and waits on a barrier for it. Where the caller gives scratch,
// SplitXPartsKernel writes the parts once, [3][m_pad][K] BF16 (hi, mid, lo; SplitPair's, rows
// past m zero), and DensePartsKernel copies each chunk's part tiles into its stage beside the
// weight tile: no conversion, one barrier per chunk, the same MMAs on the same values in the same
// order (IssueDenseChunk<64>, each slice begun by an MMA that ignores d), so the overlapped
// DenseSplitKernel<64>'s bits.

// Parts bytes for m rows of K columns: three planes of PaddedRows(m) rows.
inline int64_t DensePartsBytes(int64_t m, int64_t k) { return 3 * wgmma::PaddedRows(m) * k * 2; }

// Thread per 8 consecutive columns of one row of the padded plane: its three parts' 16 bytes; or
// (kParts = 1) x rounded to nearest even alone (ConvertXParts' values), one plane.
template <int kParts = 3>
__global__ void __launch_bounds__(256) SplitXPartsKernel(const float* __restrict__ x, int64_t ldx, int64_t m,
                                                         int64_t m_pad, int64_t k, uint16_t* __restrict__ parts) {
  PdlPrologue();
  static_assert(kParts == 1 || kParts == 3, "x rounded to BF16 alone, or hi, mid and lo");
  const int64_t units = m_pad * (k / 8);
  [[maybe_unused]] const int64_t plane = m_pad * k;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = u / (k / 8), col = 8 * (u % (k / 8));
    float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
    if (row < m) {
      const float4* src = reinterpret_cast<const float4*>(x + row * ldx + col);
      v0 = __ldg(src);
      v1 = __ldg(src + 1);
    }
    uint16_t* dst = parts + row * k + col;
    if constexpr (kParts == 1) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(mma::PackBf16(v0.x, v0.y), mma::PackBf16(v0.z, v0.w),
                                                  mma::PackBf16(v1.x, v1.y), mma::PackBf16(v1.z, v1.w));
    } else {
      uint32_t hi[4], mid[4], lo[4];
      SplitPair(v0.x, v0.y, hi[0], mid[0], lo[0]);
      SplitPair(v0.z, v0.w, hi[1], mid[1], lo[1]);
      SplitPair(v1.x, v1.y, hi[2], mid[2], lo[2]);
      SplitPair(v1.z, v1.w, hi[3], mid[3], lo[3]);
      *reinterpret_cast<uint4*>(dst) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(dst + plane) = make_uint4(mid[0], mid[1], mid[2], mid[3]);
      *reinterpret_cast<uint4*>(dst + 2 * plane) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
}

// A stage of DensePartsKernel: the weight tile (128 rows × 64 BF16, swizzled), then x's hi, mid
// and lo tiles (64 token rows × 64 BF16 each, swizzled, kXTileBytes apart: IssueDenseChunk's
// layout). 40 KiB; kDenseStages of them: 161 KiB with the alignment, one block per SM.
constexpr int kPartsStageBytes = kDenseWBytes + 3 * kXTileBytes;
constexpr int kPartsSmemBytes = kDenseStages * kPartsStageBytes + 1024;
static_assert(kPartsSmemBytes <= 227 * 1024, "Hopper's shared memory per block");

// Queues chunk c of weight rows n0.. (zeros past p.n) and of the parts' token rows t0.. (the
// padded planes hold every row of the tile) into `stage` (cp.async; the caller commits). kTiles:
// the weight from its tiles (LoadDenseWeightTile).
template <bool kTiles = false>
__device__ __forceinline__ void LoadPartsStage(const Params& p, const uint16_t* parts, int64_t m_pad, int64_t n0,
                                               int64_t t0, int c, uint8_t* stage) {
  LoadDenseWeightTile<kTiles>(p, n0, c, stage);
  const int tid = threadIdx.x;
  const int64_t plane = m_pad * p.k;
#pragma unroll
  for (int i = 0; i < 3 * kTokens * 8 / kThreads; ++i) {  // 6: part id / 512, token row (id / 8) % 64, unit id % 8
    const int id = tid + i * kThreads, part = id / (kTokens * 8), row = (id / 8) % kTokens, unit = id % 8;
    const uint16_t* src = parts + part * plane + (t0 + row) * p.k + static_cast<int64_t>(c) * kChunkCols + unit * 8;
    CpAsync16(stage + kDenseWBytes + part * kXTileBytes + wgmma::SwizzledOffset(row, unit), src);
  }
}

// DenseSplitKernel<64, true>'s products with x's parts from `parts` (SplitXPartsKernel's planes of
// m_pad rows). Grid (ceil(n / 128), m_pad / 64); kThreads threads; kPartsSmemBytes of dynamic
// shared memory. Per chunk: chunk c's MMAs issued, then chunk c - 1's awaited, one barrier (its
// stage free in both warpgroups; everyone's copies of chunk c + 1 landed), chunk c + S - 1 queued
// into chunk c - 1's stage.
template <bool kTiles = false>
__global__ void __launch_bounds__(kThreads, 1)
    DensePartsKernel(const Params p, const uint16_t* __restrict__ parts, const int64_t m_pad) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  constexpr int S = kDenseStages;
  constexpr int kElems = kTokens / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows, t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int tid = threadIdx.x, group = tid / 128;
  const int chunks = static_cast<int>(p.k / kChunkCols);
  auto stage_of = [&](int c) { return smem + (c % S) * kPartsStageBytes; };
  auto w_addr_of = [&](int c) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + group * kRowsPerGroup * kRowBytes));
  };
  auto x_addr_of = [&](int c) { return static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + kDenseWBytes)); };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < chunks) LoadPartsStage<kTiles>(p, parts, m_pad, n0, t0, s, stage_of(s));
    CpAsyncCommit();
  }
  CpAsyncWait<S - 2>();  // chunk 0's group (this thread's copies)
  wgmma::FenceProxyAsyncShared();
  __syncthreads();  // everyone's copies of chunk 0
  float acc[kElems], total[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) total[i] = 0.f;
  // After chunk c's MMAs are issued: chunk c - 1's done, chunk c + 1's copies landed, chunk
  // c + S - 1 queued into chunk c - 1's stage.
  auto step = [&](int c) {
    AwaitOverlappedChunk<S>(c + 1 < chunks);
    if (c + S - 1 < chunks) LoadPartsStage<kTiles>(p, parts, m_pad, n0, t0, c + S - 1, stage_of(c + S - 1));
    CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
  };
  OverlappedSlices<kTokens>(acc, 0, chunks, w_addr_of, x_addr_of, step, [&](int slice, const float (&sum)[kElems]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) total[i] = slice == 0 ? sum[i] : __fadd_rn(total[i], sum[i]);
  });
  CpAsyncWaitAll();
  wgmma::StoreBlockResult<kTokens>(p, DenseFragmentRow(n0), t0, tid % 4, [&](int j) { return total[j]; });
#endif
}

// Whether Linear's product of p takes DenseSplitKernel (or its clustered form): BF16 weights in
// 16-byte aligned rows under LinearMath::kSplitBf16 (the caller checks both), one group, K % 64 ==
// 0, 16-byte aligned x rows, an sm_90a device with warpgroup MMAs. Independent of M. With p.x_bf16
// only the warp-specialized dense kernels round x (the host fails before any other would run).
inline bool DenseUsable(const Params& p, int64_t groups) {
  return groups == 1 && p.w_vec16 && p.x_vec && p.n > 0 && p.k > 0 && p.k % kChunkCols == 0 &&
         (p.ldx * 4) % 16 == 0 && wgmma::DeviceHasWgmma();
}

}  // namespace wgmma_split
