#include "kernels/cuda/linear.h"

#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/switches.h"
#include "kernels/cpu/fp4_fold.h"
#include "kernels/cpu/ue8m0.h"
#include "kernels/cuda/bf16_split.cuh"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace deepinfer::cuda {

namespace {

// The summation order of linear.h: per slab of kSlab columns, lane l owns the kChunk columns
// starting at kChunk·l.
constexpr int kChunk = 8;
constexpr int kSlab = kWarpSize * kChunk;
constexpr int64_t kFp8Block = 128;  // FP8 scale block (rows and columns)
constexpr int64_t kFp4Block = 32;   // FP4 scale block (columns)

// GEMV: kGemvWarps warps per block, each owning RPW consecutive weight rows.
constexpr int kGemvWarps = 4;
// Tiled GEMM: a block of 8 warps computes kTileM x-rows × kTileN outputs; warp (wm, wn) owns the
// 8 × 8 outputs starting at (8·wm, 8·wn), every lane holding a partial of all 64.
constexpr int kTileM = 32;
constexpr int kTileN = 16;
constexpr int kWarpTile = 8;
constexpr int kTiledWarpsN = kTileN / kWarpTile;                          // 2
constexpr int kTiledThreads = (kTileM / kWarpTile) * kTiledWarpsN * kWarpSize;  // 256

enum class Kind : uint8_t { kF32, kBF16, kF16, kFp8, kFp4 };

// Bytes of one kChunk-column piece of a weight row.
template <Kind K>
constexpr int ChunkBytes() {
  if constexpr (K == Kind::kF32) return 32;
  if constexpr (K == Kind::kBF16 || K == Kind::kF16) return 16;
  if constexpr (K == Kind::kFp8) return 8;
  return 4;
}

// Bytes of one stored element (kFp4 is never read element by element: its rows hold whole chunks).
template <Kind K>
constexpr int ElementBytes() {
  return ChunkBytes<K>() / kChunk > 0 ? ChunkBytes<K>() / kChunk : 1;
}

// Bytes per stored element of a weight row (FP4 rows are counted in bytes) and the row alignment
// that allows whole-chunk vector loads; host and device agree on both.
__host__ __device__ constexpr int64_t RowElementBytes(Kind k) {
  return k == Kind::kF32 ? 4 : (k == Kind::kBF16 || k == Kind::kF16) ? 2 : 1;
}
__host__ __device__ constexpr int64_t VecAlign(Kind k) {
  return (k == Kind::kF32 || k == Kind::kBF16 || k == Kind::kF16) ? 16 : k == Kind::kFp8 ? 8 : 4;
}

struct Params {
  const float* x;
  int64_t ldx;             // floats between rows of x
  int64_t x_group_stride;  // floats between groups of one row (grouped: K; plain: 0)
  float* y;
  int64_t ldy;
  int64_t y_group_stride;  // grouped: R; plain: 0
  int64_t m;               // rows of x
  int64_t n;               // outputs per group
  int64_t k;               // in_features
  int64_t num_slabs;       // ceil(k / kSlab)
  const uint8_t* w;
  int64_t w_row_bytes;
  const uint8_t* scale;
  int64_t scale_row_stride;  // scale elements between scale rows
  bool scale_f32;            // scale dtype: F32 (else E8M0)
  bool w_vec;                // weight rows allow whole-chunk vector loads
  bool w_vec16;              // weight rows are 16-byte aligned (the tensor-core path's loads)
  bool x_vec;                // x rows allow float4 loads
  bool x_bf16;               // the kernels round x to BF16 (GroupedLinear's round_x_to_bf16)
  // LinearGemvKernel only (set by LaunchGemv): x staged in shared memory (rows of x_smem_ld
  // floats, zeros past K) and the weights through the per-warp cp.async rings.
  bool gemv_staged;
  int64_t x_smem_ld;
  // Host side only: Linear's scratch (linear_wgmma.cuh), null elsewhere.
  void* scratch;
  size_t scratch_bytes;
  // BF16 weights only, may be null: Linear's `tiles` (last, so that the fields above keep their
  // parameter offsets in every kernel).
  const uint8_t* w_tiles = nullptr;
  // FP4 weights: bytes from a row's 128-column chunk (64 bytes of nibbles) to its next: 64 in the
  // rows as stored, DeviceWeight::data_chunk_stride where they are chunk-major.
  int64_t w_chunk_bytes = 64;
  // FP4 weights: each 32-bit word of nibbles in the sign-split layout (cpu::SignSplitWord), as the
  // chunk-major rewrite stores them (DeviceWeight::data_chunk_stride != 0); else as stored.
  bool w_sign_split = false;
  // The kernels that take PdlPrologue(L2Range) ask L2 for their block's weight bytes before their
  // PDL wait (set by Launch, through which every such kernel goes: PrefetchWeights()).
  bool prefetch_w = false;
  // GroupedBf16WsKernel without pairs: its walk takes token tiles fastest at 128-token tiles too
  // (it always does at 64), so a weight row block's token tiles run side by side
  // (DEEPINFER_DENSE_WS_TOKENS_FASTEST).
  bool ws_tokens_fastest = false;
};

// The raw bits of one weight chunk (little-endian, column order) and its block scale.
template <Kind K>
struct WChunk {
  uint32_t word[ChunkBytes<K>() / 4];
  float scale;
};

template <Kind K>
__device__ __forceinline__ void ZeroChunk(WChunk<K>& c) {
#pragma unroll
  for (int i = 0; i < ChunkBytes<K>() / 4; ++i) c.word[i] = 0u;
  c.scale = 1.f;
}

// Chunk `c` (columns [8c, 8c+8)) of global weight row `o`. Columns at or past K read as zero bits
// (which decode to 0 in every format) with scale 1; a chunk wholly past K touches no memory.
template <Kind K>
__device__ __forceinline__ void LoadWChunk(const Params& p, int64_t o, int64_t c, WChunk<K>& out) {
  ZeroChunk(out);
  const int64_t k0 = c * kChunk;
  if (k0 >= p.k) return;
  const uint8_t* row = p.w + o * p.w_row_bytes;
  if constexpr (K == Kind::kFp4) {
    // in_features % 32 == 0, so the chunk is whole: 4 bytes.
    const uint8_t* src = row + k0 / 2;
    if (p.w_vec) {
      out.word[0] = __ldg(reinterpret_cast<const unsigned int*>(src));
    } else {
#pragma unroll
      for (int b = 0; b < 4; ++b) out.word[0] |= static_cast<uint32_t>(__ldg(src + b)) << (8 * b);
    }
  } else {
    constexpr int kEb = ElementBytes<K>();
    const uint8_t* src = row + k0 * kEb;
    if (p.w_vec && k0 + kChunk <= p.k) {
      if constexpr (K == Kind::kF32) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(src));
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(src + 16));
        out.word[0] = a.x, out.word[1] = a.y, out.word[2] = a.z, out.word[3] = a.w;
        out.word[4] = b.x, out.word[5] = b.y, out.word[6] = b.z, out.word[7] = b.w;
      } else if constexpr (K == Kind::kFp8) {
        const uint2 a = __ldg(reinterpret_cast<const uint2*>(src));
        out.word[0] = a.x, out.word[1] = a.y;
      } else {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(src));
        out.word[0] = a.x, out.word[1] = a.y, out.word[2] = a.z, out.word[3] = a.w;
      }
    } else {
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        if (k0 + e >= p.k) break;
        uint32_t v;
        if constexpr (kEb == 4) {
          v = __ldg(reinterpret_cast<const unsigned int*>(src) + e);
        } else if constexpr (kEb == 2) {
          v = __ldg(reinterpret_cast<const unsigned short*>(src) + e);
        } else {
          v = __ldg(src + e);
        }
        out.word[e * kEb / 4] |= v << (8 * ((e * kEb) % 4));
      }
    }
  }
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    const int64_t srow = K == Kind::kFp8 ? o / kFp8Block : o;
    const int64_t scol = K == Kind::kFp8 ? k0 / kFp8Block : k0 / kFp4Block;
    const int64_t si = srow * p.scale_row_stride + scol;
    out.scale = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
  }
}

// e2m1 nibble (bit 3 = sign) with its 3 magnitude bits placed under an f32 exponent of bias 127:
// exactly value · 2^-126 (0.5 becomes the subnormal 2^-127).
__device__ __forceinline__ float E2m1Scaled(uint32_t n) {
  return __uint_as_float(((n & 0x8u) << 28) | ((n & 0x7u) << 22));
}

// Two e4m3 codes (bits 0-7: the first, 8-15: the second) as f32, exact: one conversion to f16x2
// (every e4m3 value, subnormals and NaN included, is an f16 value) and two exact widenings: three
// instructions for two values, where placing the bits under an f32 exponent and rebiasing them
// took about seven per value.
__device__ __forceinline__ float2 E4m3PairValues(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

// The factor that turns E2m1Scaled(n) into the dequantized weight with one multiply: 2^126 · scale,
// exact while |scale| < 4. Then E2m1Scaled(n) · factor is the real value · scale rounded once,
// bit for bit what the exact value E2m1Scaled(n) · 2^126 times the scale gives. Returns false
// (use those two multiplies) otherwise, NaN scales included.
__device__ __forceinline__ bool Fp4Factor(float scale, float& factor) {
  factor = __fmul_rn(scale, 0x1p126f);
  return fabsf(scale) < 4.f;
}

// prmt.b32 in its default mode: byte i of the result is byte (sel >> 4i) & 7 of {b, a} (a: bytes
// 0-3, b: 4-7), or, when bit 4i + 3 of sel is set, that byte's top bit copied into all 8 bits.
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// The f16 high bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (code 0-7) as a prmt table
// (bytes 0-3, 4-7); their low bytes are 0, and every high byte is below 0x80.
constexpr uint32_t kE2m1F16HighBytes0 = 0x3e3c3800u;
constexpr uint32_t kE2m1F16HighBytes1 = 0x46444240u;

// The 8 FP4 values of a chunk word (value e: nibble e, bit 3 the sign) as four f16 pairs
// (value e, value e + 4), e = 0..3, exact: two table lookups give the high bytes of all eight
// magnitudes, one prmt per pair places two of them with zero low bytes (a selector 8 | i copies
// the top bit of a table byte, 0), and one shift and one logic op bring the two signs to bits 15
// and 31. About 2.5 instructions per value where placing each nibble's bits under an f32 exponent
// took about 5.
__device__ __forceinline__ void E2m1Pairs(uint32_t word, __half2 (&pairs)[4]) {
  const uint32_t codes = word & 0x77777777u;
  const uint32_t high_lo = Prmt(kE2m1F16HighBytes0, kE2m1F16HighBytes1, codes);        // values 0-3
  const uint32_t high_hi = Prmt(kE2m1F16HighBytes0, kE2m1F16HighBytes1, codes >> 16);  // values 4-7
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t sel = (0x8u | e) | (static_cast<uint32_t>(e) << 4) | ((0x8u | e) << 8) | ((4u + e) << 12);
    const uint32_t magnitudes = Prmt(high_lo, high_hi, sel);
    const uint32_t bits = magnitudes | ((word << (12 - 4 * e)) & 0x80008000u);
    pairs[e] = __halves2half2(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)),
                              __ushort_as_half(static_cast<unsigned short>(bits >> 16)));
  }
}

// The 8 weights of a chunk as f32: exact for kDense; code value · scale (one f32 rounding, the
// CPU's DequantizeRow) for kFp8 / kFp4.
template <Kind K>
__device__ __forceinline__ void Dequantize(const WChunk<K>& c, float (&w)[kChunk]) {
  if constexpr (K == Kind::kFp8) {
#pragma unroll
    for (int h = 0; h < kChunk / 2; ++h) {
      const float2 v = E4m3PairValues(c.word[h / 2] >> (16 * (h % 2)));
      w[2 * h] = __fmul_rn(v.x, c.scale);
      w[2 * h + 1] = __fmul_rn(v.y, c.scale);
    }
  } else if constexpr (K == Kind::kFp4) {
    __half2 pairs[4];
    E2m1Pairs(c.word[0], pairs);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 v = __half22float2(pairs[e]);
      w[e] = __fmul_rn(v.x, c.scale);
      w[e + 4] = __fmul_rn(v.y, c.scale);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      if constexpr (K == Kind::kF32) {
        w[e] = __uint_as_float(c.word[e]);
      } else if constexpr (K == Kind::kBF16) {
        w[e] = __uint_as_float(((c.word[e / 2] >> (16 * (e % 2))) & 0xffffu) << 16);
      } else {
        w[e] = __half2float(__ushort_as_half(static_cast<unsigned short>(c.word[e / 2] >> (16 * (e % 2)))));
      }
    }
  }
}

// Chunk `c` of the x row at `row`; columns at or past K read as 0.
__device__ __forceinline__ void LoadXChunk(const Params& p, const float* row, int64_t c, float (&v)[kChunk]) {
  const int64_t k0 = c * kChunk;
  if (p.x_vec && k0 + kChunk <= p.k) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(row + k0));
    const float4 b = __ldg(reinterpret_cast<const float4*>(row + k0 + 4));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) v[e] = k0 + e < p.k ? __ldg(row + k0 + e) : 0.f;
  }
}

// Finished sums per lane after WarpReduceScatter<N>, and the low lane bits that only duplicate
// them (a lane writes iff those bits are zero).
template <int N>
constexpr int ReducedPerLane() {
  return N >= kWarpSize ? N / kWarpSize : 1;
}
template <int N>
constexpr int DuplicateLaneMask() {
  return N >= kWarpSize ? 0 : kWarpSize / N - 1;
}

#include "kernels/cuda/linear_mma.cuh"
#include "kernels/cuda/linear_wgmma.cuh"
#include "kernels/cuda/linear_wgmma_rs.cuh"
#include "kernels/cuda/linear_wgmma_fp4bf16.cuh"
#include "kernels/cuda/linear_tma.cuh"
#include "kernels/cuda/linear_wgmma_split.cuh"

// ---- GEMV: M <= MT rows ------------------------------------------------------------------------
// A warp owns RPW consecutive outputs of one group (an output block of a block is kGemvWarps·RPW
// outputs, warp w the w-th RPW of them); per slab each lane takes its 8-column chunk of the RPW
// weight rows, dequantizes it, and folds it into the partials of all m x rows. No block-level
// synchronization inside a block's output block. Two ways to get the weight chunks, with the same
// chunks, scales and arithmetic (so the same bits):
//   - ring (GemvBlockPipelined, always with x staged): each lane copies its chunks kStages − 1
//     slabs ahead into a per-warp ring in shared memory with cp.async, so a warp has
//     ~kGemvWarpBytes of weights in flight without holding them in registers; the warp's block
//     scales are decoded into shared memory once per output block, their loads overlapping the
//     first copies;
//   - direct (GemvBlockDirect): register loads one slab ahead, x through L1; version 2's way.
// The ring way reads x from shared memory, staged once per block by LinearGemvKernel. Version 3a
// measured the ring with x through L1 (docs/performance.md): no faster, because every slab then
// waited for its x chunk from L2 (~0.5 µs each), which is what bounded the small GEMVs.
constexpr int kGemvWarpBytes = 8192;        // weight bytes per warp in flight (ring)
constexpr int kGemvScaleFloats = 512;       // decoded block scales per warp (ring)
constexpr int64_t kGemvXSmemBytes = 49152;  // largest x staged in shared memory

template <Kind K, int RPW>
constexpr int GemvStages() {
  constexpr int kStageBytes = RPW * kWarpSize * ChunkBytes<K>();
  constexpr int kStages = kGemvWarpBytes / kStageBytes;
  return kStages < 2 ? 2 : kStages > 16 ? 16 : kStages;
}

template <Kind K>
constexpr bool HasScale() {
  return K == Kind::kFp8 || K == Kind::kFp4;
}

// Block-scale columns of a weight row: FP8 one per 128 columns, FP4 one per 32.
template <Kind K>
__host__ __device__ inline int64_t ScaleColumns(int64_t k) {
  return K == Kind::kFp8 ? CeilDiv(k, kFp8Block) : k / kFp4Block;
}

// Whether GemvBlockPipelined can serve these weights.
template <Kind K, int RPW>
__host__ __device__ inline bool GemvRingUsable(const Params& p) {
  if (!p.w_vec || (K != Kind::kFp4 && p.k % kChunk != 0)) return false;
  if constexpr (HasScale<K>()) return RPW * ScaleColumns<K>(p.k) <= kGemvScaleFloats;
  return true;
}

// Per-warp ring of weight chunks: [stage][row][lane's chunk bytes], and the warp's decoded scales
// [row][scale column].
template <Kind K, int RPW>
struct GemvWarpSmem {
  alignas(16) uint8_t w[GemvStages<K, RPW>()][RPW][kWarpSize * ChunkBytes<K>()];
  float scale[HasScale<K>() ? kGemvScaleFloats : 4];
};

// Folds the lane's chunk c (dequantized weights wv of the RPW rows) into the partials of all m
// x rows: acc[mi·RPW + r] += x[mi, 8c + e] · wv[r][e], e in column order. x: global rows (xs
// null) or the staged rows xs (p.x_smem_ld floats apart).
template <int MT, int RPW>
__device__ __forceinline__ void FoldGemvSlab(const Params& p, const float* x, const float* xs, int64_t c,
                                             const float (&wv)[RPW][kChunk], float (&acc)[MT * RPW]) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    if (mi < p.m) {
      float xv[kChunk];
      if (xs != nullptr) {
        const float4* xr = reinterpret_cast<const float4*>(xs + mi * p.x_smem_ld + c * kChunk);
        const float4 a = xr[0], b = xr[1];
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
        xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
      } else {
        LoadXChunk(p, x + mi * p.ldx, c, xv);
      }
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
#pragma unroll
        for (int e = 0; e < kChunk; ++e) acc[mi * RPW + r] = fmaf(xv[e], wv[r][e], acc[mi * RPW + r]);
      }
    }
  }
}

// Sums the warp's partials (linear.h's butterfly) and writes outputs [o0, o0 + RPW) of all m rows.
template <int MT, int RPW>
__device__ __forceinline__ void StoreGemvOutputs(const Params& p, float (&acc)[MT * RPW], int64_t o0, int64_t g,
                                                 int lane) {
  constexpr int kAcc = MT * RPW;
  WarpReduceScatter<kAcc>(acc, lane);
  if ((lane & DuplicateLaneMask<kAcc>()) == 0) {
#pragma unroll
    for (int i = 0; i < ReducedPerLane<kAcc>(); ++i) {
      const int idx = ReducedIndex<kAcc>(lane, i);
      const int mi = idx / RPW;
      const int64_t o = o0 + idx % RPW;
      if (mi < p.m && o < p.n) p.y[g * p.y_group_stride + mi * p.ldy + o] = acc[i];
    }
  }
}

// Copies (cp.async) the lane's chunk of slab `slab` of the warp's RPW rows into ring stage
// `stage`; chunks past K or rows past n become zeros.
template <Kind K, int RPW>
__device__ __forceinline__ void IssueGemvSlab(const Params& p, int64_t row0, int64_t rows_left, int64_t slab,
                                              GemvWarpSmem<K, RPW>& sm, int stage, int lane) {
  constexpr int kCb = ChunkBytes<K>();
  const int64_t k0 = (slab * kWarpSize + lane) * kChunk;
  const int64_t col_bytes = K == Kind::kFp4 ? k0 / 2 : k0 * ElementBytes<K>();
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const bool fill = r < rows_left && k0 < p.k;
    const uint8_t* src = fill ? p.w + (row0 + r) * p.w_row_bytes + col_bytes : p.w;
    uint8_t* dst = &sm.w[stage][r][lane * kCb];
    if constexpr (kCb == 32) {
      CpAsyncOrZero<16>(dst, src, fill);
      CpAsyncOrZero<16>(dst + 16, fill ? src + 16 : src, fill);
    } else {
      CpAsyncOrZero<kCb>(dst, src, fill);
    }
  }
}

// A warp's place in a GEMV block: its lane, its first output o0 (within group g: the warp owns
// outputs o0 .. o0 + RPW - 1), that output's global weight row, and the outputs from o0 to n.
struct GemvWarpPlace {
  int lane;
  int64_t o0, row0, rows_left;
};
template <int RPW>
__device__ __forceinline__ GemvWarpPlace WarpPlace(const Params& p, int64_t block, int64_t g) {
  const int warp = threadIdx.x / kWarpSize;
  const int64_t o0 = (block * kGemvWarps + warp) * RPW;
  return GemvWarpPlace{static_cast<int>(threadIdx.x % kWarpSize), o0, g * p.n + o0, p.n - o0};
}

// The ring way. This thread's x copies into xs (StageGemvX) are the oldest cp.async group still
// open; they are waited for with the first slab and shown to the block by a barrier, so every
// thread of the block must call it.
template <Kind K, int MT, int RPW>
__device__ __forceinline__ void GemvBlockPipelined(const Params& p, int64_t block, int64_t g,
                                                   GemvWarpSmem<K, RPW>& sm, const float* xs) {
  constexpr int kAcc = MT * RPW;
  constexpr int kStages = GemvStages<K, RPW>();
  constexpr int kCb = ChunkBytes<K>();
  const auto [lane, o0, row0, rows_left] = WarpPlace<RPW>(p, block, g);
  const float* x = p.x + g * p.x_group_stride;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < p.num_slabs) IssueGemvSlab<K, RPW>(p, row0, rows_left, st, sm, st, lane);
    CpAsyncCommit();
  }
  // The scales, decoded once (their loads overlap the copies above): [r][j], rows past n as 1.
  int64_t scale_cols = 0;
  if constexpr (HasScale<K>()) {
    scale_cols = ScaleColumns<K>(p.k);
    const int total = static_cast<int>(RPW * scale_cols);
    for (int e0 = 0; e0 < total; e0 += 8 * kWarpSize) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int e = e0 + u * kWarpSize + lane;
        v[u] = 1.f;
        if (e < total) {
          const int r = e / static_cast<int>(scale_cols);
          const int64_t j = e - r * scale_cols;
          if (r < rows_left) {
            const int64_t srow = K == Kind::kFp8 ? (row0 + r) / kFp8Block : row0 + r;
            const int64_t si = srow * p.scale_row_stride + j;
            v[u] = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int e = e0 + u * kWarpSize + lane;
        if (e < total) sm.scale[e] = v[u];
      }
    }
    __syncwarp();
  }
  CpAsyncWait<kStages - 1>();  // only the ring's groups may still be open: x has landed
  __syncthreads();

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;

  for (int64_t s = 0; s < p.num_slabs; ++s) {
    const int64_t c = s * kWarpSize + lane;
    const int64_t k0 = c * kChunk;
    // Stage (s − 1) % kStages was read in the previous iteration (its values are already in use),
    // so it takes slab s + kStages − 1.
    const int64_t ahead = s + kStages - 1;
    if (ahead < p.num_slabs) IssueGemvSlab<K, RPW>(p, row0, rows_left, ahead, sm, static_cast<int>(ahead % kStages), lane);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();  // slab s has landed
    const int stage = static_cast<int>(s % kStages);
    float wv[RPW][kChunk];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      WChunk<K> chunk;
      const uint8_t* src = &sm.w[stage][r][lane * kCb];
      if constexpr (kCb == 32) {
        const uint4 a = *reinterpret_cast<const uint4*>(src);
        const uint4 b = *reinterpret_cast<const uint4*>(src + 16);
        chunk.word[0] = a.x, chunk.word[1] = a.y, chunk.word[2] = a.z, chunk.word[3] = a.w;
        chunk.word[4] = b.x, chunk.word[5] = b.y, chunk.word[6] = b.z, chunk.word[7] = b.w;
      } else if constexpr (kCb == 16) {
        const uint4 a = *reinterpret_cast<const uint4*>(src);
        chunk.word[0] = a.x, chunk.word[1] = a.y, chunk.word[2] = a.z, chunk.word[3] = a.w;
      } else if constexpr (kCb == 8) {
        const uint2 a = *reinterpret_cast<const uint2*>(src);
        chunk.word[0] = a.x, chunk.word[1] = a.y;
      } else {
        chunk.word[0] = *reinterpret_cast<const uint32_t*>(src);
      }
      chunk.scale = 1.f;
      if constexpr (HasScale<K>()) {
        // As LoadWChunk: a chunk past K (zeros) and a row past n keep scale 1.
        if (k0 < p.k && r < rows_left) {
          const int64_t j = K == Kind::kFp8 ? k0 / kFp8Block : k0 / kFp4Block;
          chunk.scale = sm.scale[r * scale_cols + j];
        }
      }
      Dequantize<K>(chunk, wv[r]);
    }
    FoldGemvSlab<MT, RPW>(p, x, xs, c, wv, acc);
  }
  CpAsyncWaitAll();
  StoreGemvOutputs<MT, RPW>(p, acc, o0, g, lane);
}

// The direct way: weights through registers one slab ahead, x through L1.
template <Kind K, int MT, int RPW>
__device__ __forceinline__ void GemvBlockDirect(const Params& p, int64_t block, int64_t g) {
  constexpr int kAcc = MT * RPW;
  const auto [lane, o0, row0, rows_left] = WarpPlace<RPW>(p, block, g);
  const float* x = p.x + g * p.x_group_stride;

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;

  WChunk<K> next[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    if (o0 + r < p.n) {
      LoadWChunk<K>(p, g * p.n + o0 + r, lane, next[r]);
    } else {
      ZeroChunk(next[r]);
    }
  }
  for (int64_t s = 0; s < p.num_slabs; ++s) {
    const int64_t c = s * kWarpSize + lane;
    float wv[RPW][kChunk];
#pragma unroll
    for (int r = 0; r < RPW; ++r) Dequantize<K>(next[r], wv[r]);
    // Past the last slab the loads return zeros without touching memory.
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      if (o0 + r < p.n) LoadWChunk<K>(p, g * p.n + o0 + r, c + kWarpSize, next[r]);
    }
    FoldGemvSlab<MT, RPW>(p, x, nullptr, c, wv, acc);
  }
  StoreGemvOutputs<MT, RPW>(p, acc, o0, g, lane);
}

// ---- FP4 GEMV with 16-byte copies: the experts' decode path ------------------------------------
// The same chunks, scales, decode and FMA order as GemvBlockDirect (so the same bits), with the
// weights moved in 16-byte requests: version 2 loaded each lane's 4-byte FP4 chunk on its own
// (128 bytes per row per warp request), and neither the ring of 3a/3d with the same 4-byte copies
// nor more resident warps got past ~0.6 TB/s. Here K is walked in super-slabs of 4 slabs (1024
// columns: 512 bytes and 32 block scales per row). Lane P copies bytes [16P, 16P + 16) of each of
// the warp's RPW rows (columns 32P..32P+31: exactly one scale block) and a 4-byte word of the rows'
// scales into a per-warp ring in shared memory, WideStages − 1 super-slabs ahead; then for slab t
// of the super-slab, lane l reads its own chunk, bytes [128t + 4l, +4) of the row (conflict-free),
// and takes its scale (entry 8t + l/4: one per 32 columns) with one shuffle from lane 8t + l/4,
// which decoded it once per super-slab. Column arithmetic is 32-bit, and x is read without
// per-column checks in super-slabs that lie wholly inside K.
constexpr int kWideSlabs = 4;                                 // slabs per super-slab
constexpr int kWideRowBytes = kWideSlabs * kSlab / 2;         // 512 weight bytes per row
constexpr int kWideScales = kWideSlabs * kSlab / kFp4Block;   // 32 scales per row
constexpr int kWideRingBytes = 4096;                          // weight bytes per warp ring

template <int RPW>
constexpr int WideStages() {
  constexpr int kStages = kWideRingBytes / (RPW * kWideRowBytes);
  return kStages < 2 ? 2 : kStages;
}

template <int RPW>
struct WideFp4WarpSmem {
  alignas(16) uint8_t w[WideStages<RPW>()][RPW][kWideRowBytes];
  alignas(16) uint8_t scale[WideStages<RPW>()][RPW][kWideScales * 4];  // raw e8m0 bytes or f32
};

// Whether GemvBlockWideFp4 can serve the weight of `p`: 16-byte aligned weight rows, and scale rows
// that are 4-byte aligned and a whole number of 4-byte words long (e8m0: K % 128 == 0).
__host__ __device__ inline bool WideFp4Usable(const Params& p) {
  const int64_t scale_bytes = p.scale_f32 ? 4 : 1;
  const int64_t row_scale_bytes = p.k / kFp4Block * scale_bytes;
  return p.w_vec16 && row_scale_bytes % 4 == 0 && Aligned(p.scale, p.scale_row_stride * scale_bytes, 4);
}

// Copies super-slab q of the warp's RPW rows (global rows row0..) and their scales into `stage`;
// weights past K and rows past n become zeros.
template <int RPW>
__device__ __forceinline__ void IssueWideFp4(const Params& p, int64_t row0, int64_t rows_left, int64_t q,
                                             WideFp4WarpSmem<RPW>& sm, int stage, int lane) {
  const int64_t scale_bytes = p.scale_f32 ? 4 : 1;
  const int64_t col = q * (kWideSlabs * kSlab) + lane * kFp4Block;             // lane's first column
  const int64_t scale_byte = q * kWideScales * scale_bytes + 4 * lane;        // within the scale row
  const bool scale_lane = lane < kWideScales * scale_bytes / 4;
  const int64_t row_scale_bytes = p.k / kFp4Block * scale_bytes;
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const bool row_ok = r < rows_left;
    const bool fill = row_ok && col < p.k;
    const uint8_t* src = fill ? p.w + (row0 + r) * p.w_row_bytes + col / 2 : p.w;
    CpAsyncOrZero<16>(&sm.w[stage][r][16 * lane], src, fill);
    if (scale_lane) {
      const bool sfill = row_ok && scale_byte < row_scale_bytes;
      const uint8_t* ssrc = sfill ? p.scale + (row0 + r) * p.scale_row_stride * scale_bytes + scale_byte : p.scale;
      CpAsyncOrZero<4>(&sm.scale[stage][r][4 * lane], ssrc, sfill);
    }
  }
}

// Chunk c (columns [8c, 8c + 8)) of the x row at `row`, as LoadXChunk reads it; `whole`: the
// chunk lies inside K and x rows allow float4 loads, so no column is checked.
__device__ __forceinline__ void LoadWideXChunk(const Params& p, const float* row, int32_t c, bool whole,
                                               float (&v)[kChunk]) {
  if (whole) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(row) + 2 * c);
    const float4 b = __ldg(reinterpret_cast<const float4*>(row) + 2 * c + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    LoadXChunk(p, row, c, v);
  }
}

template <int MT, int RPW>
__device__ __forceinline__ void GemvBlockWideFp4(const Params& p, int64_t block, int64_t g,
                                                 WideFp4WarpSmem<RPW>& sm) {
  constexpr int kAcc = MT * RPW;
  constexpr int kStages = WideStages<RPW>();
  const auto [lane, o0, row0, rows_left] = WarpPlace<RPW>(p, block, g);
  // K < 2^31 columns (SetWeight), so the column arithmetic below is 32-bit.
  const int32_t k = static_cast<int32_t>(p.k);
  const int32_t num_slabs = static_cast<int32_t>(p.num_slabs);
  const int32_t supers = (num_slabs + kWideSlabs - 1) / kWideSlabs;
  const int32_t scale_blocks = k / static_cast<int32_t>(kFp4Block);
  const float* x = p.x + g * p.x_group_stride;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < supers) IssueWideFp4<RPW>(p, row0, rows_left, st, sm, st, lane);
    CpAsyncCommit();
  }
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;

  for (int32_t q = 0; q < supers; ++q) {
    // Stage (q − 1) % kStages was released by every lane at the end of the previous iteration.
    const int32_t ahead = q + kStages - 1;
    if (ahead < supers) IssueWideFp4<RPW>(p, row0, rows_left, ahead, sm, ahead % kStages, lane);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();  // this lane's copies of super-slab q have landed
    __syncwarp();                // and every other lane's
    const int stage = q % kStages;
    // Lane P decodes the scale of its own 32-column block 32q + P once; the lane that needs it
    // for a chunk takes it with one shuffle. As LoadWChunk: a block past K and a row past n
    // give scale 1.
    float own_scale[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      own_scale[r] = 1.f;
      if (q * kWideScales + lane < scale_blocks && r < rows_left) {
        own_scale[r] = p.scale_f32 ? reinterpret_cast<const float*>(sm.scale[stage][r])[lane]
                                   : DecodeE8m0(sm.scale[stage][r][lane]);
      }
    }
    const bool whole_super = (q + 1) * kWideSlabs * kSlab <= k && p.x_vec;
    // Unrolled for the decode kinds only: the larger tiles' registers already bound their blocks
    // per SM (unrolled, MT = 8 took 201 registers where one slab at a time takes fewer).
    constexpr int kUnrollSlabs = MT <= 2 ? kWideSlabs : 1;
#pragma unroll kUnrollSlabs
    for (int t = 0; t < kWideSlabs; ++t) {
      const int32_t s = q * kWideSlabs + t;
      if (s < num_slabs) {  // the same for every lane
        const int32_t c = s * kWarpSize + lane;
        float wv[RPW][kChunk];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          WChunk<Kind::kFp4> chunk;
          chunk.word[0] = *reinterpret_cast<const uint32_t*>(&sm.w[stage][r][128 * t + 4 * lane]);
          chunk.scale = __shfl_sync(0xffffffffu, own_scale[r], 8 * t + lane / 4);
          Dequantize<Kind::kFp4>(chunk, wv[r]);
        }
        // FoldGemvSlab's arithmetic, x through L1.
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          if (mi < p.m) {
            float xv[kChunk];
            LoadWideXChunk(p, x + mi * p.ldx, c, whole_super, xv);
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
#pragma unroll
              for (int e = 0; e < kChunk; ++e) acc[mi * RPW + r] = fmaf(xv[e], wv[r][e], acc[mi * RPW + r]);
            }
          }
        }
      }
    }
    __syncwarp();  // every lane is done with the stage before it is refilled
  }
  CpAsyncWaitAll();
  StoreGemvOutputs<MT, RPW>(p, acc, o0, g, lane);
}

// Copies (cp.async, one open group per thread) the m x rows of group g into xs: rows of
// p.x_smem_ld floats, zeros from K on. Needs p.x_vec (16-byte aligned rows).
__device__ __forceinline__ void StageGemvX(const Params& p, int64_t g, float* xs) {
  const float* x = p.x + g * p.x_group_stride;
  const int64_t quads = p.x_smem_ld / 4;
  for (int64_t e = threadIdx.x; e < p.m * quads; e += blockDim.x) {
    const int64_t mi = e / quads, q = e - mi * quads;
    const int64_t k0 = 4 * q;
    float* dst = xs + mi * p.x_smem_ld + k0;
    const float* src = x + mi * p.ldx + k0;
    if (k0 + 4 <= p.k) {
      CpAsync16(dst, src);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = k0 + i < p.k ? __ldg(src + i) : 0.f;
    }
  }
  CpAsyncCommit();
}

// Grid (output blocks, groups). With p.gemv_staged, block (b, g) stages group g's x and streams
// the weights through the per-warp rings (dynamic shared memory: the kGemvWarps rings, then x);
// otherwise the register path with x through L1.
template <Kind K, int MT, int RPW>
__global__ void __launch_bounds__(kGemvWarps* kWarpSize) LinearGemvKernel(const Params p) {
  PdlPrologue();
  extern __shared__ __align__(16) uint8_t gemv_smem[];
  using Ring = GemvWarpSmem<K, RPW>;
  const int64_t g = blockIdx.y;
  if (!p.gemv_staged) {
    GemvBlockDirect<K, MT, RPW>(p, blockIdx.x, g);
    return;
  }
  float* xs = reinterpret_cast<float*>(gemv_smem + kGemvWarps * sizeof(Ring));
  StageGemvX(p, g, xs);
  GemvBlockPipelined<K, MT, RPW>(p, blockIdx.x, g, reinterpret_cast<Ring*>(gemv_smem)[threadIdx.x / kWarpSize], xs);
}

// ---- Tiled GEMM: any M ----------------------------------------------------------------------
// One block of kTiledThreads computing x rows [m_block·kTileM, +kTileM) × outputs
// [n_block·kTileN, +kTileN) of group `g`. Per slab the block stages the x tile and the dequantized
// weight tile in shared memory, laid out so that columns 2h, 2h+1 of lane l's chunk are float2
// [h·32 + l] of the row (h = 0..3): conflict-free 8-byte reads and writes. Every thread of the
// block must call it (it synchronizes); the shared memory is free again when it returns.
template <Kind K>
__device__ __forceinline__ void TiledBlock(const Params& p, int64_t n_block, int64_t m_block, int64_t g) {
  constexpr int kPairs = kChunk / 2;
  __shared__ float2 xs[kTileM][kPairs * kWarpSize];  // 32 KiB
  __shared__ float2 ws[kTileN][kPairs * kWarpSize];  // 16 KiB
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int wm = warp / kTiledWarpsN;
  const int wn = warp % kTiledWarpsN;
  const int64_t m0 = m_block * kTileM;
  const int64_t n0 = n_block * kTileN;
  const float* x = p.x + g * p.x_group_stride;
  constexpr int kWarps = kTiledThreads / kWarpSize;

  float acc[kWarpTile * kWarpTile];  // [i·8 + j]: x row m0 + 8·wm + i, output n0 + 8·wn + j
#pragma unroll
  for (int i = 0; i < kWarpTile * kWarpTile; ++i) acc[i] = 0.f;

  for (int64_t s = 0; s < p.num_slabs; ++s) {
    // Warp w stages rows w, w + 8, ...; lane j loads chunk j of the slab (coalesced rows).
    const int64_t c = s * kWarpSize + lane;
#pragma unroll
    for (int r = warp; r < kTileM; r += kWarps) {
      float v[kChunk];
      if (m0 + r < p.m) {
        LoadXChunk(p, x + (m0 + r) * p.ldx, c, v);
      } else {
#pragma unroll
        for (int e = 0; e < kChunk; ++e) v[e] = 0.f;
      }
#pragma unroll
      for (int h = 0; h < kPairs; ++h) xs[r][h * kWarpSize + lane] = make_float2(v[2 * h], v[2 * h + 1]);
    }
#pragma unroll
    for (int r = warp; r < kTileN; r += kWarps) {
      WChunk<K> chunk;
      if (n0 + r < p.n) {
        LoadWChunk<K>(p, g * p.n + n0 + r, c, chunk);
      } else {
        ZeroChunk(chunk);
      }
      float v[kChunk];
      Dequantize<K>(chunk, v);
#pragma unroll
      for (int h = 0; h < kPairs; ++h) ws[r][h * kWarpSize + lane] = make_float2(v[2 * h], v[2 * h + 1]);
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kPairs; ++h) {
      float2 xh[kWarpTile];
#pragma unroll
      for (int i = 0; i < kWarpTile; ++i) xh[i] = xs[wm * kWarpTile + i][h * kWarpSize + lane];
#pragma unroll
      for (int j = 0; j < kWarpTile; ++j) {
        const float2 wh = ws[wn * kWarpTile + j][h * kWarpSize + lane];
#pragma unroll
        for (int i = 0; i < kWarpTile; ++i) {
          float& a = acc[i * kWarpTile + j];
          a = fmaf(xh[i].x, wh.x, a);  // column 8·lane + 2h
          a = fmaf(xh[i].y, wh.y, a);  // column 8·lane + 2h + 1
        }
      }
    }
    __syncthreads();
  }

  constexpr int kAcc = kWarpTile * kWarpTile;
  WarpReduceScatter<kAcc>(acc, lane);
#pragma unroll
  for (int i = 0; i < ReducedPerLane<kAcc>(); ++i) {
    const int idx = ReducedIndex<kAcc>(lane, i);
    const int64_t m = m0 + wm * kWarpTile + idx / kWarpTile;
    const int64_t o = n0 + wn * kWarpTile + idx % kWarpTile;
    if (m < p.m && o < p.n) p.y[g * p.y_group_stride + m * p.ldy + o] = acc[i];
  }
}

// Grid (ceil(n / kTileN), ceil(m / kTileM), groups).
template <Kind K>
__global__ void __launch_bounds__(kTiledThreads, 2) LinearTiledKernel(const Params p) {
  PdlPrologue();
  TiledBlock<K>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// ---- expert-grouped projection ------------------------------------------------------------------
// A first kernel cuts every expert's rows into tiles and lists them per kind; then one kernel per
// kind walks its list with a fixed grid (grid-stride over the (tile, output block) items), running
// for each item exactly the block code Linear runs for the same rows.

// Tile kinds: GEMV with MT = 2, 4, 8, 16 (for 1–2, 3–4, 5–8, 9–16 rows), then the tiled GEMM
// (17–32 rows).
constexpr int kTileKinds = 5;
constexpr int kTiledKind = 4;
constexpr int kPlanThreads = 256;
constexpr int kPlanWarps = kPlanThreads / kWarpSize;

// Rows [row0, row0 + rows) of x and y, all of expert `expert`.
struct alignas(16) ExpertTile {
  int32_t expert;
  int32_t row0;
  int32_t rows;
  int32_t unused;
};

// The lists in the scratch buffer: counts[kind] tiles listed at tiles[kind] (room for capacity[kind]).
struct TileLists {
  int32_t* counts;
  ExpertTile* tiles[kTileKinds];
  int32_t capacity[kTileKinds];
};

__device__ __forceinline__ int GemvKind(int32_t rows) { return rows <= 2 ? 0 : rows <= 4 ? 1 : rows <= 8 ? 2 : 3; }

// One block. Expert e's rows [offsets[e], offsets[e+1]) (cut to [0, rows_bound)) become
// floor(c / T) full tiled tiles, then the rest r = c mod T as one tiled tile (r > 16) or one GEMV
// tile of its kind (1 <= r <= 16); T = tile_rows (32: the SIMT tiles and the split-BF16 path; 64:
// the FP8-input path's shared-memory tiles). Experts are taken kPlanThreads at a time, one per thread; a tile's
// place in its list is the number of tiles of that kind of the lower experts (warp scans, then the
// warps' totals), so the lists are ordered by expert and then by row.
__global__ void __launch_bounds__(kPlanThreads) ExpertTilesKernel(const int32_t* offsets, int32_t num_experts,
                                                                  int32_t rows_bound, int32_t tile_rows,
                                                                  TileLists lists) {
  PdlPrologue();
  __shared__ int32_t warp_tiles[kTileKinds][kPlanWarps];
  __shared__ int32_t listed[kTileKinds];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x < kTileKinds) listed[threadIdx.x] = 0;
  __syncthreads();
  for (int32_t base = 0; base < num_experts; base += kPlanThreads) {
    const int32_t e = base + static_cast<int32_t>(threadIdx.x);
    int32_t row0 = 0, count = 0;
    if (e < num_experts) {
      row0 = min(max(offsets[e], 0), rows_bound);
      count = min(max(offsets[e + 1], row0), rows_bound) - row0;
    }
    const int32_t full = count / tile_rows, rest = count % tile_rows;
    const int gemv_kind = rest >= 1 && rest <= kGemvMaxRows ? GemvKind(rest) : -1;
    const int32_t tiled = full + (rest > kGemvMaxRows ? 1 : 0);

    int32_t first[kTileKinds];  // within the warp, then in the list: this expert's first tile of each kind
#pragma unroll
    for (int kind = 0; kind < kTileKinds; ++kind) {
      const int32_t v = kind == kTiledKind ? tiled : (kind == gemv_kind ? 1 : 0);
      int32_t inclusive = v;
#pragma unroll
      for (int d = 1; d < kWarpSize; d *= 2) {
        const int32_t t = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += t;
      }
      if (lane == kWarpSize - 1) warp_tiles[kind][warp] = inclusive;
      first[kind] = inclusive - v;
    }
    __syncthreads();
#pragma unroll
    for (int kind = 0; kind < kTileKinds; ++kind) {
      int32_t pos = listed[kind] + first[kind];
      for (int w = 0; w < warp; ++w) pos += warp_tiles[kind][w];
      if (kind == gemv_kind && pos >= 0 && pos < lists.capacity[kind]) {
        lists.tiles[kind][pos] = ExpertTile{e, row0 + full * tile_rows, rest, 0};
      }
      first[kind] = pos;
    }
    for (int32_t j = 0; j < tiled; ++j) {
      const int32_t pos = first[kTiledKind] + j;
      if (pos >= 0 && pos < lists.capacity[kTiledKind]) {
        lists.tiles[kTiledKind][pos] = ExpertTile{e, row0 + j * tile_rows, min(tile_rows, count - j * tile_rows), 0};
      }
    }
    __syncthreads();
    if (threadIdx.x < kTileKinds) {
      int32_t sum = 0;
      for (int w = 0; w < kPlanWarps; ++w) sum += warp_tiles[threadIdx.x][w];
      listed[threadIdx.x] += sum;
    }
    __syncthreads();
  }
  if (threadIdx.x < kTileKinds) {
    lists.counts[threadIdx.x] = max(0, min(listed[threadIdx.x], lists.capacity[threadIdx.x]));
  }
  if (threadIdx.x == 0) lists.counts[kTileKinds] = tile_rows;  // checked by the consumers (CheckPlan)
}

// What the tiles of one kind share; per tile, x, y, m and the weight change.
struct ExpertsParams {
  Params base;                  // x, ldx, y, ldy, n, k, num_slabs, x_vec (group strides 0)
  const DeviceWeight* weights;  // [num_experts], device memory
  const int32_t* count;         // tiles listed of this kind
  const ExpertTile* tiles;
  int32_t blocks_per_tile;      // output blocks of one tile
  const int32_t* plan_tile_rows;  // where the plan recorded its full-tile height (scratch header)
  int32_t tile_rows;              // the height these kernels were launched for
  const uint32_t* chunk_words;    // FP4 experts' chunk words (WriteFp4ChunkWords), or null
  int64_t chunk_words_stride;     // words from one expert's to the next's
  const uint8_t* fp4_tiles = nullptr;  // FP4 experts' tiles (WriteFp4ExpertTiles), or null
  int64_t fp4_tiles_stride = 0;        // bytes from one expert's tiles to the next's
  wgmma::rs::TileLayout fp4_tiles_layout{};  // where an expert's tiles are within its bytes

  // Expert e's chunk words, or null where there are none.
  __device__ __forceinline__ const uint32_t* ExpertChunkWords(int32_t e) const {
    return chunk_words != nullptr ? chunk_words + e * chunk_words_stride : nullptr;
  }
};

// A plan reused from the scratch (plan_in_scratch) must have been cut for this launch's kernels;
// a mismatch is a caller's error that would silently drop rows, so it stops the kernel loudly.
__device__ __forceinline__ void CheckPlan(const ExpertsParams& ep) {
  if (threadIdx.x == 0 && *ep.plan_tile_rows != ep.tile_rows) __trap();
}

// Linear's parameters for tile `t`: the weight fields as SetWeight fills them, from the expert's
// DeviceWeight (checked by the caller when it built the array).
template <Kind K>
__device__ __forceinline__ Params TileParams(const ExpertsParams& ep, const ExpertTile& t) {
  Params p = ep.base;
  const DeviceWeight& w = ep.weights[t.expert];
  p.x = ep.base.x + static_cast<int64_t>(t.row0) * ep.base.ldx;
  p.y = ep.base.y + static_cast<int64_t>(t.row0) * ep.base.ldy;
  p.m = t.rows;
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_row_bytes = w.data_row_stride * RowElementBytes(K);
  p.w_vec = Aligned(w.data, p.w_row_bytes, VecAlign(K));
  p.w_vec16 = Aligned(w.data, p.w_row_bytes, 16);
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    p.scale = static_cast<const uint8_t*>(w.scale);
    p.scale_row_stride = w.scale_row_stride;
    p.scale_f32 = w.scale_dtype == DType::kF32;
  }
  return p;
}

// The items (tile i, output block b), numbered i·blocks_per_tile + b, of one list: block j takes
// items j, j + gridDim.x, ... (walked without divisions: (i, b) advances by (gridDim.x / bpt,
// gridDim.x % bpt) with a carry).
struct ItemCursor {
  int32_t tile, block, step_tiles, step_blocks, blocks_per_tile;

  __device__ __forceinline__ explicit ItemCursor(int32_t bpt)
      : tile(static_cast<int32_t>(blockIdx.x) / bpt),
        block(static_cast<int32_t>(blockIdx.x) % bpt),
        step_tiles(static_cast<int32_t>(gridDim.x) / bpt),
        step_blocks(static_cast<int32_t>(gridDim.x) % bpt),
        blocks_per_tile(bpt) {}
  __device__ __forceinline__ void Next() {
    tile += step_tiles;
    block += step_blocks;
    if (block >= blocks_per_tile) block -= blocks_per_tile, ++tile;
  }
};

// GemvBlockDirect as a call, for the FP4 experts' rare fallback: its registers do not add to the
// wide path's (the kernel is held to 96).
template <Kind K, int MT, int RPW>
__device__ __noinline__ void GemvBlockDirectCall(const Params p, int64_t block) {
  GemvBlockDirect<K, MT, RPW>(p, block, 0);
}

// The experts GEMV: items j, j + gridDim.x, ... with x through L1; FP4 weights through
// GemvBlockWideFp4's 16-byte copies where WideFp4Usable (the routed experts of the checkpoints),
// everything else on version 2's register path. FP4 register bounds (ptxas, CUDA 13.0): the
// decode kind (1–2 rows) 96 registers, 5 blocks per SM (20 warps with ~3 KB of copies in flight
// each; at 80 or 64 registers ptxas spilled); 3–4 and 5–8 rows at most 170, 3 blocks per SM; the
// others keep ptxas's choice.
template <Kind K, int MT, int RPW>
__global__ void __launch_bounds__(kGemvWarps* kWarpSize, K != Kind::kFp4 ? 1 : MT <= 2 ? 5 : MT <= 8 ? 3 : 1)
    ExpertsGemvKernel(const ExpertsParams ep) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t tiles = *ep.count;
  if constexpr (K == Kind::kFp4) {
    __shared__ WideFp4WarpSmem<RPW> wide[kGemvWarps];
    for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
      const Params p = TileParams<K>(ep, ep.tiles[c.tile]);
      if (WideFp4Usable(p)) {
        GemvBlockWideFp4<MT, RPW>(p, c.block, 0, wide[threadIdx.x / kWarpSize]);
      } else {
        GemvBlockDirectCall<K, MT, RPW>(p, c.block);
      }
    }
  } else {
    for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
      GemvBlockDirect<K, MT, RPW>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0);
    }
  }
}

// The same for the tiled tiles (one tile = one kTileM-row block of Linear's tiled grid). The loop
// runs alike in every thread of the block, as TiledBlock's barriers need.
template <Kind K>
__global__ void __launch_bounds__(kTiledThreads, 2) ExpertsTiledKernel(const ExpertsParams ep) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t tiles = *ep.count;
  for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
    TiledBlock<K>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0, 0);
  }
}

// The tensor-core paths per tile: tiles of up to 8, 16 and 32 rows run the block with TM = 1, 2, 4.
template <Kind K, int TM, bool kFp8>
__global__ void __launch_bounds__(mma::kThreads) ExpertsMmaKernel(const ExpertsParams ep) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t tiles = *ep.count;
  for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
    if constexpr (kFp8) {
      mma::fp8::Block<K, TM>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0, 0);
    } else {
      mma::Block<K, TM>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0, 0);
    }
  }
}

// The tiles of up to 8 rows (GEMV kinds 0-2, listed separately for the SIMT kernels) all run the
// tensor-core block with TM = 1: one launch walks the three lists as one, list 0 first.
template <Kind K, bool kFp8>
__global__ void __launch_bounds__(mma::kThreads) ExpertsMmaSmallKernel(const ExpertsParams ep, const TileLists lists) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t c0 = lists.counts[0], c1 = lists.counts[1];
  const int32_t tiles = c0 + c1 + lists.counts[2];
  for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
    const ExpertTile& t = c.tile < c0        ? lists.tiles[0][c.tile]
                          : c.tile < c0 + c1 ? lists.tiles[1][c.tile - c0]
                                             : lists.tiles[2][c.tile - c0 - c1];
    if constexpr (kFp8) {
      mma::fp8::Block<K, 1>(TileParams<K>(ep, t), c.block, 0, 0);
    } else {
      mma::Block<K, 1>(TileParams<K>(ep, t), c.block, 0, 0);
    }
  }
}

// Split-BF16: the tiled tiles (17-32 rows) run the shared-memory block (64 x 32).
template <Kind K>
__global__ void __launch_bounds__(mma::kThreads) ExpertsStagedSplitKernel(const ExpertsParams ep) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t tiles = *ep.count;
  for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
    mma::StagedBlock<K>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0, 0);
  }
}

// FP8 inputs: the tiled tiles (17-64 rows) run the shared-memory block (64 x 64).
template <Kind K>
__global__ void __launch_bounds__(mma::kThreads) ExpertsStagedKernel(const ExpertsParams ep) {
  PdlPrologue();
  CheckPlan(ep);
  const int32_t tiles = *ep.count;
  for (ItemCursor c(ep.blocks_per_tile); c.tile < tiles; c.Next()) {
    mma::fp8::StagedBlock<K>(TileParams<K>(ep, ep.tiles[c.tile]), c.block, 0, 0);
  }
}

// Tile `index` of the walk over the five tile lists as one: the tiled list (from 17 rows to the
// plan's tile height) first, then GEMV kinds 3, 2, 1, 0; index below the lists' total. The counts
// are read per call (cached) rather than held: the FP4 kernel has no registers to spare. Static
// indices only, so no stack frame.
__device__ __forceinline__ const ExpertTile* WalkTile(const TileLists& lists, int32_t index) {
  const ExpertTile* tile = nullptr;
#pragma unroll
  for (int j = 0; j < kTileKinds; ++j) {
    const int kind = kTiledKind - j;
    const int32_t count = lists.counts[kind];
    if (tile == nullptr && index < count) tile = lists.tiles[kind] + index;
    if (tile == nullptr) index -= count;
  }
  return tile;
}

// The token tile a warpgroup-MMA experts kernel runs the plan's tiles of `kind` on: 8 for the
// GEMV kinds 0-2 (1-8 rows), 16 for kind 3 (9-16 rows), 64 for the tiled kind (17-64 rows). A
// launch per tile size takes every tile once; the sizes fall along WalkTile's order of kinds.
__host__ __device__ constexpr int TileTokensOfKind(int kind) {
  return kind == kTiledKind ? 64 : kind == kTiledKind - 1 ? 16 : 8;
}
static_assert(TileTokensOfKind(2) == 8 && kTiledKind == 4, "kinds 0-2 hold the tiles of at most 8 rows, 3 of 9-16");

// The tiles that take kTok-token tiles: WalkTile's indices [first, first + tiles) (WalkTile's order:
// the larger kinds first, so the kinds of larger token tiles come before the range).
struct TileRange {
  int32_t first, tiles;
};
template <int kTok>
__device__ __forceinline__ TileRange TileRangeOf(const TileLists& lists) {
  TileRange r{0, 0};
#pragma unroll
  for (int kind = 0; kind < kTileKinds; ++kind) {
    if (TileTokensOfKind(kind) == kTok) r.tiles += lists.counts[kind];
  }
#pragma unroll
  for (int kind = kTileKinds - 1; kind >= 0; --kind) {  // the kinds WalkTile walks before the range
    if (TileTokensOfKind(kind) > kTok) r.first += lists.counts[kind];
  }
  return r;
}

// Checks the plan, walks the tiles that take kTok-token tiles (WalkTile's order: the larger kinds
// first, so the kinds of larger token tiles come before the range) and calls
// block(tile, n0, smem, chunks) for this block's items: n0 the item's first weight row (items of
// kItemRows rows), smem the kernel's dynamic shared memory (1024-byte aligned), chunks K / 128.
template <int kTok, int kItemRows = wgmma::kBlockRows, class Block>
__device__ __forceinline__ void ForEachExpertsWgmmaItem(const ExpertsParams& ep, const TileLists& lists,
                                                        const Block& block) {
  static_assert(kTok == 8 || kTok == 16 || kTok == 64, "8-, 16- or 64-token tiles");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  CheckPlan(ep);
  const TileRange range = TileRangeOf<kTok>(lists);
  for (ItemCursor c(ep.blocks_per_tile); c.tile < range.tiles; c.Next()) {
    block(*WalkTile(lists, range.first + c.tile), static_cast<int64_t>(c.block) * kItemRows, smem, chunks);
  }
}

// FP8 inputs with codes scratch: every tile (1-64 rows) on warpgroup MMAs, x's codes quantized
// once for all rows (linear_wgmma.cuh); the same bits as Linear's wgmma path on the expert's rows.
// kTok = 8: the tiles of 1-8 rows (m64n8k32), 16: those of 9-16 (m64n16k32), 64: the others
// (m64n64k32): the same sums.
// kMinBlocks: blocks per SM the registers are held to (SmallTileBlocksPerSm).
template <Kind K, int kTok, int kMinBlocks>
__global__ void __launch_bounds__(wgmma::kThreads, kMinBlocks)
    ExpertsWgmmaKernel(const ExpertsParams ep, const TileLists lists, const wgmma::GemmArgs a) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  ForEachExpertsWgmmaItem<kTok>(ep, lists, [&](const ExpertTile& t, int64_t n0, uint8_t* smem, int chunks) {
    wgmma::WgmmaBlock<K, kTok>(TileParams<K>(ep, t), a, n0, t.row0, 0, 0, chunks, smem);
  });
#endif
}

// FP4 experts' tiles of 1-8 (kTok = 8) or 9-16 rows (kTok = 16) with the weight operand in
// registers (linear_wgmma_rs.cuh): items of 64 weight rows (ep.blocks_per_tile = ceil(N / 64)),
// one warpgroup per block, the same bits as ExpertsWgmmaKernel<kFp4, kTok>. kMinBlocks: blocks per
// SM the registers are held to (8 tokens: 3, 162 registers, no spills, or 4, 128 registers and 40
// bytes of spills; 16 tokens: 2, 172 registers, none, or 3, 168 registers, none; ptxas, CUDA 13.0,
// since version 31).
// kTiles: the nibbles from the experts' tiles (ep.fp4_tiles; the same bits), or where ep.fp4_tiles is
// null from the experts' own nibbles rewritten chunk-major in place (RewriteFp4ExpertsChunkMajor: the
// tiles' chunk-major bytes, N a multiple of 64); kSignSplit: the words in the sign-split layout
// (rs::Fp4RegistersBlock's; the same bits).
template <int kTok, int kMinBlocks, bool kTiles = false, bool kSignSplit = false>
__global__ void __launch_bounds__(wgmma::rs::kThreads, kMinBlocks)
    ExpertsFp4RegistersKernel(const ExpertsParams ep, const TileLists lists, const wgmma::GemmArgs a) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  ForEachExpertsWgmmaItem<kTok, wgmma::rs::kRows>(ep, lists, [&](const ExpertTile& t, int64_t n0, uint8_t* smem,
                                                                 int chunks) {
    const uint32_t* words = ep.ExpertChunkWords(t.expert);
    if constexpr (kTiles) {
      const Params p = TileParams<Kind::kFp4>(ep, t);
      const uint8_t* tiles = ep.fp4_tiles != nullptr ? ep.fp4_tiles + t.expert * ep.fp4_tiles_stride : p.w;
      wgmma::rs::Fp4RegistersBlock<kTok, true, kSignSplit>(p, a, n0, t.row0, smem, chunks, words, tiles,
                                                           ep.fp4_tiles_layout);
    } else {
      wgmma::rs::Fp4RegistersBlock<kTok>(TileParams<Kind::kFp4>(ep, t), a, n0, t.row0, smem, chunks, words);
    }
  });
#endif
}

// ---- FP4 experts pre-folded (linear_wgmma.cuh's PreFolded) -------------------------------------

// One expert's part of the pre-fold scratch: its codes [N, K] e4m3, words [chunks][n_pad] and
// later-pass flags [n_pad / 128][chunks], each 256-byte aligned; a group's experts follow each
// other.
struct PreFoldLayout {
  int64_t n_pad = 0, chunks = 0;
  int64_t codes_bytes = 0, words_bytes = 0, more_bytes = 0;
  __host__ __device__ int64_t ExpertBytes() const { return codes_bytes + words_bytes + more_bytes; }
};

PreFoldLayout MakePreFoldLayout(int64_t n, int64_t k) {
  PreFoldLayout l;
  l.n_pad = CeilDiv(n, wgmma::kBlockRows) * wgmma::kBlockRows;
  l.chunks = k / wgmma::kChunk;
  l.codes_bytes = CeilDiv(n * k, 256) * 256;
  l.words_bytes = CeilDiv(l.chunks * l.n_pad * 4, 256) * 256;
  l.more_bytes = CeilDiv(l.n_pad / wgmma::kBlockRows * l.chunks, 256) * 256;
  return l;
}

// Block (128-row block rb, chunk c) = blockIdx.x = rb·chunks + c, expert e0 + blockIdx.y of the
// group: the rows' FirstFoldPassWord, the block's later-pass flag and the pass-0 folded codes of
// rows < N (what ConvertFp4FoldedFirst puts in shared memory, byte for byte). Experts without rows
// (offsets cut to rows_bound as ExpertTilesKernel cuts them) are skipped: no tile reads them.
__global__ void __launch_bounds__(wgmma::kThreads) PreFoldKernel(const ExpertsParams ep, const int32_t* offsets,
                                                                 int32_t rows_bound, int32_t e0,
                                                                 const PreFoldLayout lay, uint8_t* out) {
  PdlPrologue();
  __shared__ uint32_t tables[18];
  __shared__ uint32_t words[wgmma::kBlockRows];
  const int32_t e = e0 + static_cast<int32_t>(blockIdx.y);
  const int32_t row0 = min(max(offsets[e], 0), rows_bound);
  if (min(max(offsets[e + 1], row0), rows_bound) == row0) return;  // uniform: before any barrier
  const Params p = TileParams<Kind::kFp4>(ep, ExpertTile{e, 0, 0, 0});
  const int64_t rb = blockIdx.x / lay.chunks;
  const int c = static_cast<int>(blockIdx.x % lay.chunks);
  const int64_t n0 = rb * wgmma::kBlockRows;
  uint8_t* codes = out + static_cast<int64_t>(blockIdx.y) * lay.ExpertBytes();
  uint32_t* word_out = reinterpret_cast<uint32_t*>(codes + lay.codes_bytes);
  uint8_t* more_out = codes + lay.codes_bytes + lay.words_bytes;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < 18) tables[tid] = wgmma::kFoldedTables[tid / 2][tid % 2];
  bool more = false;
  if (tid < wgmma::kBlockRows) {
    const uint32_t w = wgmma::FoldRowInfo(p, n0 + tid, c);
    words[tid] = w;
    word_out[c * lay.n_pad + n0 + tid] = w;
    more = cpu::FoldWordMore(w);
  }
  const bool any_more = __syncthreads_or(more);
  if (tid == 0) more_out[rb * lay.chunks + c] = any_more ? 1 : 0;
  constexpr int kUnits = wgmma::kChunk / 16;  // 16 codes from 8 bytes of nibbles each
  for (int id = tid; id < wgmma::kBlockRows * kUnits; id += wgmma::kThreads) {
    const int row = id / kUnits, unit = id % kUnits;
    if (n0 + row >= p.n) break;  // rows only grow with id
    const uint32_t shift = cpu::FoldWordShift(words[row], unit / 2);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (shift != cpu::kFoldGroupLeft) {
      uint32_t word[2];
      wgmma::LoadWords(p.w + (n0 + row) * p.w_row_bytes + c * p.w_chunk_bytes + unit * 8, p.w_vec16, word);
      v = wgmma::FoldedUnitCodes(make_uint2(word[0], word[1]), tables[2 * shift], tables[2 * shift + 1],
                                 p.w_sign_split);
    }
    uint8_t* chunk_codes = codes + (n0 + row) * ep.base.k + c * wgmma::kChunk;  // FP4 order (StoreFoldedUnit's)
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      *reinterpret_cast<uint32_t*>(chunk_codes + 16 * wgmma::Fp4OrderUnit16(unit, t) + wgmma::Fp4OrderByteIn16(unit)) =
          words[t];
    }
  }
}

// ExpertsWgmmaKernel<kFp4>'s items of experts [e0, e_end) on their pre-folded codes (`pre`, the
// group's scratch): the same bits. One block per SM (ptxas, CUDA 13.0: 255 registers with
// WgmmaBlockPreFolded's two accumulators, 20 bytes of spills outside the chunk loop; version 12's
// single-accumulator block at 2 blocks per SM, 128 registers, spilled 572 bytes and ran the 8k
// prefill's experts in 61.6 ms against 46.0 at one: docs/performance.md, versions 12 and 12b).
template <int kTok, int kMinBlocks>
__global__ void __launch_bounds__(wgmma::kThreads, kMinBlocks)
    ExpertsPreFoldedKernel(const ExpertsParams ep, const TileLists lists, const wgmma::GemmArgs a, int32_t e0,
                           int32_t e_end, const PreFoldLayout lay, const uint8_t* pre) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  ForEachExpertsWgmmaItem<kTok>(ep, lists, [&](const ExpertTile& t, int64_t n0, uint8_t* smem, int chunks) {
    if (t.expert < e0 || t.expert >= e_end) return;  // uniform over the block
    const uint8_t* base = pre + static_cast<int64_t>(t.expert - e0) * lay.ExpertBytes();
    Params codes = TileParams<Kind::kFp4>(ep, t);  // the tile's x, y and m; the weight: the codes
    codes.w = base;
    codes.w_row_bytes = ep.base.k;
    codes.w_vec = codes.w_vec16 = true;  // 256-byte aligned, K % 128 == 0
    const wgmma::PreFolded pf{reinterpret_cast<const uint32_t*>(base + lay.codes_bytes),
                              base + lay.codes_bytes + lay.words_bytes, lay.n_pad};
    wgmma::WgmmaBlockPreFolded<kTok>(codes, a, n0, t.row0, 0, 0, chunks, smem, pf,
                               [&] { return TileParams<Kind::kFp4>(ep, t); });
  });
#endif
}

// ---- FP4 experts pre-folded, fed by TMA (linear_tma.cuh's Ring) ---------------------------------

// This block's items over every tile of the plan in WalkTile's order, those of experts [e0, e_end)
// only, one at a time: two walks of one block (its consumers' and thread 0's loads) agree.
struct GroupItemWalk {
  ItemCursor cursor;
  int32_t tiles;  // over the five lists
  int32_t e0, e_end;

  __device__ __forceinline__ GroupItemWalk(const ExpertsParams& ep, const TileLists& lists, int32_t first,
                                           int32_t end)
      : cursor(ep.blocks_per_tile), tiles(0), e0(first), e_end(end) {
#pragma unroll
    for (int kind = 0; kind < kTileKinds; ++kind) tiles += lists.counts[kind];
  }
  // The next item (tile and first weight row); false when none is left.
  __device__ __forceinline__ bool Next(const TileLists& lists, ExpertTile& tile, int64_t& n0) {
    for (; cursor.tile < tiles; cursor.Next()) {
      const ExpertTile* t = WalkTile(lists, cursor.tile);
      if (t->expert >= e0 && t->expert < e_end) {
        tile = *t;
        n0 = static_cast<int64_t>(cursor.block) * wgmma::kBlockRows;
        cursor.Next();
        return true;
      }
    }
    return false;
  }
};

// GroupItemWalk's order over experts [0, e_end) for several walks of one block, each its own
// Cursor (tile, block) over one set of the block's constants: a walk costs two registers. Items of
// kItemRows weight rows (ep.blocks_per_tile = ceil(n / kItemRows)).
template <int kItemRows>
struct SharedItemWalkOf {
  struct Cursor {
    int32_t tile, block;
  };
  int32_t step_tiles, step_blocks, blocks_per_tile, tiles, e_end;

  __device__ __forceinline__ SharedItemWalkOf(const ExpertsParams& ep, const TileLists& lists, int32_t end)
      : step_tiles(static_cast<int32_t>(gridDim.x) / ep.blocks_per_tile),
        step_blocks(static_cast<int32_t>(gridDim.x) % ep.blocks_per_tile),
        blocks_per_tile(ep.blocks_per_tile),
        tiles(0),
        e_end(end) {
#pragma unroll
    for (int kind = 0; kind < kTileKinds; ++kind) tiles += lists.counts[kind];
  }
  __device__ __forceinline__ Cursor First(const ExpertsParams& ep) const {
    return Cursor{static_cast<int32_t>(blockIdx.x) / ep.blocks_per_tile,
                  static_cast<int32_t>(blockIdx.x) % ep.blocks_per_tile};
  }
  // GroupItemWalk::Next for cursor c.
  __device__ __forceinline__ bool Next(const TileLists& lists, Cursor& c, ExpertTile& tile, int64_t& n0) const {
    while (c.tile < tiles) {
      const ExpertTile* t = WalkTile(lists, c.tile);
      const int32_t block = c.block;
      c.tile += step_tiles;
      c.block += step_blocks;
      if (c.block >= blocks_per_tile) c.block -= blocks_per_tile, ++c.tile;
      if (t->expert < e_end) {
        tile = *t;
        n0 = static_cast<int64_t>(block) * kItemRows;
        return true;
      }
    }
    return false;
  }
};
using SharedItemWalk = SharedItemWalkOf<wgmma::kBlockRows>;

// Shared memory of ExpertsPreFoldedTmaKernel<kTok>: the ring, then the byte_perm tables (18 words)
// and one chunk's nibbles of the block's rows (64 bytes per row) for later passes.
template <int kTok>
struct ExpertsTmaSmem {
  static constexpr int kTables = tma::Ring<kTok>::kEnd;
  static constexpr int kRaw = kTables + 128;
  static constexpr int kBytes = kRaw + wgmma::kBlockRows * wgmma::kChunk / 2 + 1024;  // + base alignment
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// ExpertsPreFoldedKernel's products and order on tiles of up to kTok tokens (64: its items; 128:
// the items of a plan cut in 128-row tiles), the stages written by TMA: the same bits. Load j of
// the ring is the j-th (item, chunk) of the block's walk. w_map: the group's pre-folded codes,
// UINT8 [experts of the group][n][k], boxes of 1 × 128 × 128 bytes, 128-byte swizzle; x_map,
// xs_map: XTensorMaps at kTok tokens. Thread 0 walks the items a second time to issue the loads
// kStages ahead of the consumers, across item boundaries: in the MMA loop of its warpgroup, or
// (kWarpSpecialized) as the only working thread of a third, producer warpgroup
// (tma::TmaLinearWsKernel's scheme: stages released per warp, setmaxnreg, named barriers).
template <int kTok, bool kWarpSpecialized>
__global__ void __launch_bounds__(kWarpSpecialized ? tma::kWsThreads : tma::kThreads, 1)
    ExpertsPreFoldedTmaKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                              const __grid_constant__ CUtensorMap xs_map, const ExpertsParams ep,
                              const TileLists lists, int32_t e0, int32_t e_end, const PreFoldLayout lay,
                              const uint8_t* pre) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using R = tma::Ring<kTok>;
  using Smem = ExpertsTmaSmem<kTok>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  const R ring(smem);
  uint32_t* tables = reinterpret_cast<uint32_t*>(smem + Smem::kTables);
  uint8_t* raw = smem + Smem::kRaw;
  CheckPlan(ep);
  const int tid = threadIdx.x;
  const int group = tid / 128;
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  constexpr wgmma::Barrier kSync = kWarpSpecialized ? wgmma::Barrier::kMmaThreads : wgmma::Barrier::kWhole;
  if (tid == 0) ring.Setup(&w_map, &x_map, &xs_map, kWarpSpecialized ? tma::kWsConsumerWarps : tma::kThreads);
  if (tid < 18) tables[tid] = wgmma::kFoldedTables[tid / 2][tid % 2];  // read by later passes only
  __syncthreads();

  // The producer's walk: the next load is chunk pc of item (pt, pn0), none when p_done.
  GroupItemWalk producer(ep, lists, e0, e_end);
  ExpertTile pt{};
  int64_t pn0 = 0;
  int pc = 0;
  bool p_done = true;
  int64_t issued = 0;  // loads issued (thread 0)
  auto issue = [&] {   // thread 0: the next load into its stage, which is free
    ring.Load(issued, &w_map, pc * wgmma::kChunk, static_cast<int>(pn0), pt.expert - e0, &x_map, &xs_map, pt.row0);
    ++issued;
    if (++pc == chunks) {
      pc = 0;
      p_done = !producer.Next(lists, pt, pn0);
    }
  };
  if constexpr (kWarpSpecialized) {
    if (tid >= tma::kThreads) {  // the producer warpgroup
      tma::SetMaxRegistersDec<tma::kWsProducerRegisters>();
      if (tid == tma::kThreads) {
        p_done = chunks == 0 || !producer.Next(lists, pt, pn0);
        while (!p_done) {
          if (issued >= R::kStages) ring.WaitReleased(issued - R::kStages);
          issue();
        }
      }
      return;
    }
    tma::SetMaxRegistersInc<tma::kWsConsumerRegisters>();
  } else if (tid == 0) {
    p_done = chunks == 0 || !producer.Next(lists, pt, pn0);
    while (!p_done && issued < R::kStages) issue();
  }

  GroupItemWalk items(ep, lists, e0, e_end);
  ExpertTile t{};
  int64_t n0 = 0;
  int64_t j = 0;  // loads consumed
  if constexpr (kWarpSpecialized && kTok == 64) {
    // Over two accumulators: chunk c's MMAs are issued before chunk c - 1 is scaled into part
    // (wgmma.wait_group 1), as WgmmaBlockPreFolded does, so a warpgroup's tensor work overlaps its
    // own scaling; a chunk with later passes waits for both (FoldedLaterPasses' chains). The same
    // products and adds in the same order as the loop below: the same bits.
    while (items.Next(lists, t, n0)) {
      const uint8_t* base = pre + static_cast<int64_t>(t.expert - e0) * lay.ExpertBytes();
      const uint32_t* words = reinterpret_cast<const uint32_t*>(base + lay.codes_bytes);
      const uint8_t* more = base + lay.codes_bytes + lay.words_bytes + (n0 / wgmma::kBlockRows) * chunks;
      const int64_t ra = n0 + group * wgmma::kRowsPerGroup + 16 * warp + g;
      float acc0[R::kElems], acc1[R::kElems], part[R::kElems], total[R::kElems];
#pragma unroll
      for (int i = 0; i < R::kElems; ++i) acc0[i] = acc1[i] = part[i] = total[i] = 0.f;
      // A chunk in flight: its load, its rows' fold words and later-pass flag (read at its issue,
      // used a chunk later).
      static_assert(R::kStages >= 2, "a warp holds two unreleased stages while it awaits the next load");
      struct Pending {
        int64_t j;
        int c;
        uint32_t word_a, word_b;
        uint8_t more;
      };
      auto w_addr_of = [&](int64_t load) {
        return tma::SmemAddress(ring.Stage(load) + group * wgmma::kRowsPerGroup * wgmma::kChunk);
      };
      auto x_addr_of = [&](int64_t load) { return tma::SmemAddress(ring.Stage(load) + R::kX); };
      auto issue_chunk = [&](int c, float (&cur)[R::kElems]) {
        const Pending pending{j, c, __ldg(words + c * lay.n_pad + ra), __ldg(words + c * lay.n_pad + ra + 8),
                              __ldg(more + c)};
        ring.WaitLoaded(j);
        wgmma::ChunkChainIssueLow(cur, w_addr_of(j), x_addr_of(j));
        ++j;
        return pending;
      };
      // `chunk`'s MMAs complete in done; in_flight: the wgmma groups left in flight (0 or 1, the next
      // chunk's).
      constexpr std::integral_constant<int, 0> kNone{};
      constexpr std::integral_constant<int, 1> kNext{};
      auto finish = [&](const Pending& chunk, float (&done)[R::kElems], auto in_flight) {
        uint8_t* stage = ring.Stage(chunk.j);
        const float* xs = R::XScales(stage, t.row0);
        float sc[R::kElems];
        wgmma::ScaleProducts(sc, wgmma::FoldedRowScaleOf(chunk.word_a),
                             wgmma::FoldedRowScaleOf(chunk.word_b), tma::SmemAddress(xs), q);
        wgmma::WgmmaWait<decltype(in_flight)::value>();
        wgmma::PinAll(done);
        wgmma::AddScaledProducts(part, done, sc);
        if (chunk.more != 0) {  // uniform over the block
          const Params fp4 = TileParams<Kind::kFp4>(ep, t);
          wgmma::LoadRawNibbles(fp4, raw, n0, chunk.c);  // FoldedLaterPasses' first barrier publishes it
          wgmma::FoldedLaterPasses<R::kElems, kSync>(fp4, raw, stage, tables, n0, chunk.c,
                                                     w_addr_of(chunk.j), x_addr_of(chunk.j), xs, q, ra, true,
                                                     done, part);
        }
        __syncwarp();
        ring.ReleaseByWarp(chunk.j, lane);
        wgmma::EndChunk(total, part, chunk.c, 0, chunks);
      };
      if (chunks > 0) {
        Pending last = issue_chunk(0, acc0);
        int c = 1;
        for (; c + 1 < chunks; c += 2) {
          const Pending a = issue_chunk(c, acc1);
          finish(last, acc0, kNext);
          last = issue_chunk(c + 1, acc0);
          finish(a, acc1, kNext);
        }
        if (c < chunks) {  // an even chunk count: the last chunk goes into acc1
          const Pending a = issue_chunk(c, acc1);
          finish(last, acc0, kNext);
          finish(a, acc1, kNone);
        } else {
          finish(last, acc0, kNone);
        }
      }
      const Params tp = TileParams<Kind::kFp4>(ep, t);  // the tile's y and m
      wgmma::StoreBlockResult<kTok>(tp, ra, 0, q, [&](int i) { return total[i]; });
    }
  } else {
    while (items.Next(lists, t, n0)) {
      const uint8_t* base = pre + static_cast<int64_t>(t.expert - e0) * lay.ExpertBytes();
      const uint32_t* words = reinterpret_cast<const uint32_t*>(base + lay.codes_bytes);
      const uint8_t* more = base + lay.codes_bytes + lay.words_bytes + (n0 / wgmma::kBlockRows) * chunks;
      const int64_t ra = n0 + group * wgmma::kRowsPerGroup + 16 * warp + g;
      float acc[R::kElems], part[R::kElems], total[R::kElems];
#pragma unroll
      for (int i = 0; i < R::kElems; ++i) acc[i] = part[i] = total[i] = 0.f;
      // Warp-specialized: the fold words of rows ra, ra + 8 and the later-pass flag of chunk c + 1,
      // loaded during chunk c (their latency out of the path from the MMAs' end to the scaling).
      uint32_t next_a = 0u, next_b = 0u;
      uint8_t next_more = 0;
      if (kWarpSpecialized && chunks > 0) {
        next_a = __ldg(words + ra);
        next_b = __ldg(words + ra + 8);
        next_more = __ldg(more);
      }
      for (int c = 0; c < chunks; ++c, ++j) {
        uint32_t word_a = next_a, word_b = next_b;
        uint8_t chunk_more = next_more;
        if constexpr (kWarpSpecialized) {
          if (c + 1 < chunks) {
            next_a = __ldg(words + (c + 1) * lay.n_pad + ra);
            next_b = __ldg(words + (c + 1) * lay.n_pad + ra + 8);
            next_more = __ldg(more + c + 1);
          }
        }
        ring.WaitLoaded(j);
        uint8_t* stage = ring.Stage(j);
        const uint32_t w_addr = tma::SmemAddress(stage + group * wgmma::kRowsPerGroup * wgmma::kChunk);
        const uint32_t x_addr = tma::SmemAddress(stage + R::kX);
        if constexpr (kWarpSpecialized) {
          wgmma::ChunkChainIssueLow(acc, w_addr, x_addr);
        } else {
          wgmma::ChunkChainIssue(acc, w_addr, x_addr);
        }
        // While the MMAs run: the next load into the stage load j - 1 used, once it is released.
        if (!kWarpSpecialized && tid == 0 && j >= 1 && !p_done && issued == j - 1 + R::kStages) {
          ring.WaitReleased(j - 1);
          issue();
        }
        __syncwarp();
        if constexpr (!kWarpSpecialized) {
          word_a = __ldg(words + c * lay.n_pad + ra);
          word_b = __ldg(words + c * lay.n_pad + ra + 8);
          chunk_more = __ldg(more + c);
        }
        const float sa = wgmma::FoldedRowScaleOf(word_a);
        const float sb = wgmma::FoldedRowScaleOf(word_b);
        const bool again = chunk_more != 0;  // uniform over the block
        const float* xs = R::XScales(stage, t.row0);
        if constexpr (kWarpSpecialized) {
          // The scale products before the wait (the stage's x scales landed with its codes).
          float s[R::kElems];
          wgmma::ScaleProducts(s, sa, sb, tma::SmemAddress(xs), q);
          wgmma::WgmmaWaitAll();
          wgmma::PinAll(acc);
          wgmma::AddScaledProducts(part, acc, s);
        } else {
          wgmma::WgmmaWaitAll();
          wgmma::PinAll(acc);
          wgmma::AddScaledRows(part, acc, sa, sb, xs, q);
        }
        if (again) {
          const Params fp4 = TileParams<Kind::kFp4>(ep, t);
          wgmma::LoadRawNibbles(fp4, raw, n0, c);  // FoldedLaterPasses' first barrier publishes it
          wgmma::FoldedLaterPasses<R::kElems, kSync>(fp4, raw, stage, tables, n0, c, w_addr, x_addr, xs, q, ra, true,
                                                     acc, part);
        }
        if constexpr (kWarpSpecialized) {
          ring.ReleaseByWarp(j, lane);
        } else {
          ring.Release(j);  // this thread's last read of the stage
        }
        wgmma::EndChunk(total, part, c, 0, chunks);
      }
      const Params tp = TileParams<Kind::kFp4>(ep, t);  // the tile's y and m
      wgmma::StoreBlockResult<kTok>(tp, ra, 0, q, [&](int i) { return total[i]; });
    }
  }
#endif
}

// ---- FP4 experts converted in the block (no pre-fold) -------------------------------------------
//
// ExpertsFp4InBlockKernel<kP>: every item (96-token tile, 128 weight rows) of every expert in one
// launch, on persistent blocks: two MMA warpgroups as ExpertsPreFoldedTmaKernel<128, true>'s, and a
// converting warpgroup. Unit u = the u-th (item, chunk) of the block's walk; thread i of the
// converting warpgroup takes weight row n0 + i of each: it copies the row's 64 bytes of nibbles and
// 4 group exponents (cp.async) a few units ahead into a raw ring, then per FoldPass writes the
// pass's folded codes (FP4 order, swizzled: StoreFoldedUnit's bytes) and the row's scale for the
// pass into the next stage of TMA ring u % kP, whose x codes and scales its thread 0 has the TMA
// load. kP = 2 converts units u and u + 1 side by side (their independent chains hide each other's
// latency: at kP = 1 the warpgroup's one warp a scheduler set the pace, docs/performance.md
// version 38). Each pass is a load of its ring (a chunk with later passes takes several: the
// warpgroup's OR vote after each pass decides, and the stage says whether it is the chunk's last),
// so the MMA warpgroups run one loop over the units, taking unit u's loads from ring u % kP:
// chain, scale into part, and at a chunk's last pass EndChunk. The same codes, passes, products and
// adds as ExpertsPreFoldedTmaKernel (and so as Linear): the same bits. Each FP4 weight chunk is
// converted once per 96-token tile instead of once per call into memory and read back per 64-token
// tile.
constexpr int kInBlockTokens = 96;  // three 48-float fragments a consumer thread (acc, part, total)

// One unit's area of the raw ring, the same at every kP: nibbles as [16-byte piece v][row]
// (conflict-free for one thread a row), then the rows' exponent words, their chunk words (where
// the experts have them: WriteFp4ChunkWords), then each converting thread's own 16 bytes: its
// note of what the unit is (InBlockUnit) and the later-pass mask words of the block's two 64-row
// halves (chunk words only).
struct InBlockRaw {
  static constexpr int kNibbles = 0;
  static constexpr int kExponents = wgmma::kBlockRows * wgmma::kChunk / 2;  // after 8 KiB of nibbles
  static constexpr int kWords = kExponents + wgmma::kBlockRows * 4;
  static constexpr int kMeta = kWords + wgmma::kBlockRows * 4;
  static constexpr int kMasks = 8;  // within a row's 16 bytes of kMeta
  static constexpr int kBytes = kMeta + wgmma::kBlockRows * 16;
  static_assert(kBytes % 16 == 0, "16-byte copies");
};

template <int kP>
struct InBlock {
  static_assert(kP == 1 || kP == 2, "one or two units in flight");
  // setmaxnreg's split (kP = 2: no spills at 128/184; kP = 1: 32 bytes, in the walk). ptxas gives
  // this kernel no more than tma::kWsLaunchRegisters (168) a thread whatever the consumers' count
  // (its waits trap on a timeout: tma::SetMaxRegistersInc); a 512-thread form with two converting
  // warpgroups had 128 registers and needed 64-token tiles (docs/performance.md, version 39).
  static constexpr int kProducerRegisters = kP == 1 ? 96 : 128;
  static constexpr int kConsumerRegisters = kP == 1 ? 200 : 184;
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * tma::kThreads <=
                    tma::kWsLaunchRegisters * tma::kWsThreads,
                "setmaxnreg within the block's own registers");
  static constexpr int kRingStages = 4 / kP;  // per TMA ring
  static constexpr int kRawSlots = 8;         // units of the raw ring: copies 8 - kP units ahead
  using R = tma::Ring<kInBlockTokens, kRingStages>;
  // Shared memory: the kP TMA rings; per ring and stage the rows' scales for the stage's pass (f32
  // [128]) and whether the pass is its chunk's last (a word; 16 bytes); the raw ring (kRawSlots
  // units of InBlockRaw); the tables (wgmma::rs::TableWord's 16 entries).
  static constexpr int kRingBytes = (R::kEnd + 1023) / 1024 * 1024;  // the swizzle's alignment
  static constexpr int kPassBytes = wgmma::kBlockRows * 4 + 16;
  static constexpr int kPass = kP * kRingBytes;
  static constexpr int kLast = wgmma::kBlockRows * 4;  // within a pass area
  static constexpr int kRaw = kPass + kP * kRingStages * kPassBytes;
  static constexpr int kTables = kRaw + kRawSlots * InBlockRaw::kBytes;
  static constexpr int kBytes = kTables + wgmma::rs::kTableEntries * 16 + 1024;  // + base alignment
  static_assert(kRaw % 16 == 0 && kTables % 16 == 0, "16-byte copies and table entries");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// bar.red.or over one warpgroup's 128 threads on named barrier `id`.
__device__ __forceinline__ bool WarpgroupOr(uint32_t id, bool pred) {
  uint32_t any = 0;
  asm volatile(
      "{\n"
      ".reg .pred pin, pout;\n"
      "setp.ne.u32 pin, %2, 0;\n"
      "bar.red.or.pred pout, %1, 128, pin;\n"
      "selp.u32 %0, 1, 0, pout;\n"
      "}\n"
      : "=r"(any)
      : "r"(id), "r"(static_cast<uint32_t>(pred))
      : "memory");
  return any != 0;
}

// WarpgroupOr over the converting warpgroup on named barrier 2 (the MMA warpgroups use 1), the id
// an immediate (WarpgroupOr's register id has ptxas reserve all 16 barriers).
__device__ __forceinline__ bool ConvertersOr(bool pred) {
  uint32_t any = 0;
  asm volatile(
      "{\n"
      ".reg .pred pin, pout;\n"
      "setp.ne.u32 pin, %1, 0;\n"
      "bar.red.or.pred pout, 2, 128, pin;\n"
      "selp.u32 %0, 1, 0, pout;\n"
      "}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred))
      : "memory");
  return any != 0;
}

// The converting thread's row of one item: where its chunk 0's nibbles, exponents and chunk word
// are. A row past n keeps row 0's addresses (valid, never read: its copies zero-fill, so that it
// converts to zero codes with scale 0 and no select).
struct InBlockRow {
  const uint8_t* nibbles = nullptr;
  const uint8_t* exponents = nullptr;
  const uint32_t* words = nullptr;  // the row's chunk words (null: none)
  const uint32_t* masks = nullptr;  // the block's first 64-row half's later-pass mask words (null: no words)
  uint32_t fill = 0;                // 16 where the row exists, 0 past n: the 16-byte copies' source bytes
  bool second_half = false;         // the block has rows in its second 64-row half
  bool vec = false;  // 16-byte aligned nibbles and 4-byte aligned exponents (cp.async); else bytes
  uint32_t chunk_bytes = 0;  // from a chunk's nibbles to the next's (Params::w_chunk_bytes; an expert is < 4 GiB)

  InBlockRow() = default;  // no item: Copy is not called
  // Row n0 + i of tile t's expert, i < 128 (n0 a multiple of 128).
  __device__ __forceinline__ InBlockRow(const ExpertsParams& ep, const ExpertTile& t, int64_t n0, int i) {
    const DeviceWeight& w = ep.weights[t.expert];
    const int64_t n = ep.base.n, chunks = ep.base.k / wgmma::kChunk;
    const bool exists = n0 + i < n;
    const int64_t row = exists ? n0 + i : 0;
    fill = exists ? 16u : 0u;
    if (const uint32_t* expert_words = ep.ExpertChunkWords(t.expert); expert_words != nullptr) {
      masks = wgmma::rs::LaterPassMasks(expert_words, n, chunks, n0);
      second_half = n0 + wgmma::rs::kRows < n;
      words = expert_words + row * chunks;
    }
    const int64_t row_bytes = w.data_row_stride * RowElementBytes(Kind::kFp4);  // packed nibbles
    nibbles = static_cast<const uint8_t*>(w.data) + row * row_bytes;
    exponents = static_cast<const uint8_t*>(w.scale) + row * w.scale_row_stride;
    chunk_bytes = static_cast<uint32_t>(ep.base.w_chunk_bytes);
    vec = Aligned(w.data, row_bytes, 16) && chunk_bytes % 16 == 0 && Aligned(w.scale, w.scale_row_stride, 4);
  }
  __device__ __forceinline__ bool exists() const { return fill != 0u; }
  // Chunk c's 64 bytes of nibbles, 4 exponents and chunk word into the InBlockRaw area at shared
  // address `raw`, row `slot` (zeros past n), and the block's later-pass mask words for c (zeros
  // for a missing second half): cp.async where aligned, else loaded and stored by this thread
  // (which alone reads them).
  __device__ __forceinline__ void Copy(uint32_t raw, int slot, int c) const {
    const uint32_t fill4 = fill / 4;
    if (masks != nullptr) {
      const uint32_t mask = raw + InBlockRaw::kMeta + 16 * slot + InBlockRaw::kMasks;
      CpAsyncSharedOrZero<4>(mask, masks + c / 32, 4u);
      CpAsyncSharedOrZero<4>(mask + 4, masks + 2 + c / 32, second_half ? 4u : 0u);
    }
    if (words != nullptr) CpAsyncSharedOrZero<4>(raw + InBlockRaw::kWords + 4 * slot, words + c, fill4);
    const uint8_t* src = nibbles + static_cast<int64_t>(c) * chunk_bytes;
    const uint32_t exps = raw + InBlockRaw::kExponents + 4 * slot;
    if (vec) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        CpAsyncSharedOrZero<16>(raw + InBlockRaw::kNibbles + (v * wgmma::kBlockRows + slot) * 16, src + 16 * v, fill);
      }
      CpAsyncSharedOrZero<4>(exps, exponents + 4 * c, fill4);
    } else {
      auto word_at = [&](const uint8_t* bytes) {
        uint32_t v = 0u;
        for (int b = 0; b < 4 && fill != 0u; ++b) v |= static_cast<uint32_t>(__ldg(bytes + b)) << (8 * b);
        return v;
      };
      for (int w = 0; w < 16; ++w) {
        wgmma::StShared32(raw + InBlockRaw::kNibbles + ((w / 4) * wgmma::kBlockRows + slot) * 16 + 4 * (w % 4),
                          word_at(src + 4 * w));
      }
      wgmma::StShared32(exps, word_at(exponents + 4 * c));
    }
  }
};

// What a converting thread notes of unit u beside its copies: the chunk and whether its row
// exists (word x), the tile's first x row (word y); kEnd past the walk's end.
struct InBlockUnit {
  static constexpr uint32_t kEnd = 0xffffffffu;
  __device__ __forceinline__ static uint32_t Word(int c, bool valid) {
    return static_cast<uint32_t>(c) | (valid ? 0x80000000u : 0u);
  }
  __device__ __forceinline__ static int Chunk(uint32_t word) { return static_cast<int>(word & 0x7fffffffu); }
  __device__ __forceinline__ static bool Valid(uint32_t word) { return (word & 0x80000000u) != 0u; }
};

// The four e8m0 group exponents of one row's chunk from their word (byte g: group g, as stored).
__device__ __forceinline__ void UnpackGroupExponents(uint32_t word, int (&e)[4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) e[b] = static_cast<int>((word >> (8 * b)) & 0xffu);
}

// One pass of one row's chunk for each of kUnits units (FoldPassWord word[p]) from the raw ring's
// copy (raw_addr[p]: the unit's raw area) into its stage's tile (tile_addr[p]; unit 1 only where
// `second`): 16-byte unit 4a + t of the row (swizzled) holds, at byte 4b, word t of 16-column
// unit 2b + a (Fp4OrderUnit16 / Fp4OrderByteIn16), whose 32-column group is b; words 2h and
// 2h + 1 of a unit come from its nibble word h. Groups the pass leaves get zero codes (their
// shift field kFoldGroupLeft reads a zero entry of the tables, wgmma::rs::TableWord).
// StoreFoldedUnit's bytes, stored 16 at a time; two units' independent chains side by side hide
// each other's latency. kSignSplit: the nibbles' words in the sign-split layout.
template <int kUnits, bool kSignSplit>
__device__ __forceinline__ void ConvertRowPasses(const uint32_t (&raw_addr)[kUnits], int row,
                                                 const uint32_t (&word)[kUnits], uint32_t tables_addr,
                                                 const uint32_t (&tile_addr)[kUnits], bool second) {
  uint32_t lo[kUnits][4], hi[kUnits][4], signs[kUnits][4];
#pragma unroll
  for (int p = 0; p < kUnits; ++p) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint4 table = wgmma::LdShared128(tables_addr + 16 * cpu::FoldWordShift(word[p], b));
      lo[p][b] = table.x;
      hi[p][b] = table.y;
      signs[p][b] = table.z;
    }
  }
  const int x = row & 7;
  uint4 pieces[kUnits][4];  // the row's 16-byte pieces (group b: piece b), one load each
#pragma unroll
  for (int p = 0; p < kUnits; ++p) {
#pragma unroll
    for (int b = 0; b < 4; ++b) pieces[p][b] = wgmma::LdShared128(raw_addr[p] + 16 * row + b * wgmma::kBlockRows * 16);
  }
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t even[kUnits][4], odd[kUnits][4];  // words 2h and 2h + 1 of unit 2b + a
#pragma unroll
      for (int p = 0; p < kUnits; ++p) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const uint4& piece = pieces[p][b];
          const uint32_t nib = 2 * a + h == 0 ? piece.x : 2 * a + h == 1 ? piece.y : 2 * a + h == 2 ? piece.z : piece.w;
          mma::fp8::E2m1x8WordToE4m3x8Table(kSignSplit, nib, lo[p][b], hi[p][b], even[p][b], odd[p][b], signs[p][b]);
        }
      }
#pragma unroll
      for (int p = 0; p < kUnits; ++p) {
        if (p == 1 && !second) continue;  // uniform
        const uint32_t row_addr = tile_addr[p] + row * wgmma::kChunk;
        wgmma::StShared128(row_addr + (((4 * a + 2 * h) ^ x) << 4),
                           make_uint4(even[p][0], even[p][1], even[p][2], even[p][3]));
        wgmma::StShared128(row_addr + (((4 * a + 2 * h + 1) ^ x) << 4),
                           make_uint4(odd[p][0], odd[p][1], odd[p][2], odd[p][3]));
      }
    }
  }
}

// part += acc · (row scale · x scale) as wgmma::AddScaledRows (the same roundings), the x scales
// read at shared address xs_addr (4-byte aligned; wgmma::rs::AddScaledShared where 8-byte aligned).
// !kRowScales: part += acc · x scale (sa, sb unused: the row scales applied once a slice instead,
// ExpertsFp4RegistersTmaKernel's up-shifted warps), the x scales read in 8-byte pairs where kPairs
// (xs_addr 8-byte aligned).
template <int kElems, bool kRowScales = true, bool kPairs = false>
__device__ __forceinline__ void AddScaledRowsShared(float (&part)[kElems], const float (&acc)[kElems], float sa,
                                                    float sb, uint32_t xs_addr, int q) {
#pragma unroll
  for (int i = 0; i < kElems / 4; ++i) {
    float x0, x1;
    if constexpr (kPairs) {
      const float2 x = wgmma::LdSharedF32x2(xs_addr + 4 * (8 * i + 2 * q));
      x0 = x.x, x1 = x.y;
    } else {
      x0 = __uint_as_float(wgmma::LdShared32(xs_addr + 4 * (8 * i + 2 * q)));
      x1 = __uint_as_float(wgmma::LdShared32(xs_addr + 4 * (8 * i + 2 * q + 1)));
    }
    part[4 * i + 0] = __fmaf_rn(acc[4 * i + 0], kRowScales ? __fmul_rn(sa, x0) : x0, part[4 * i + 0]);
    part[4 * i + 1] = __fmaf_rn(acc[4 * i + 1], kRowScales ? __fmul_rn(sa, x1) : x1, part[4 * i + 1]);
    part[4 * i + 2] = __fmaf_rn(acc[4 * i + 2], kRowScales ? __fmul_rn(sb, x0) : x0, part[4 * i + 2]);
    part[4 * i + 3] = __fmaf_rn(acc[4 * i + 3], kRowScales ? __fmul_rn(sb, x1) : x1, part[4 * i + 3]);
  }
}

// grid: at most one block per SM; tma::kWsThreads threads, InBlock<kP>::kBytes of dynamic shared
// memory. x_map, xs_map: XTensorMaps at kInBlockTokens; ep: FP4 experts with e8m0 scales,
// K % 128 == 0 (chunk words, where given, as WriteFp4ChunkWords wrote them, chunk_words_stride
// apart); the plan cut in kInBlockTokens-row tiles; experts [0, e_end). kSignSplit: the nibbles'
// words in the sign-split layout (Params::w_sign_split, which the host matches).
template <int kP, bool kSignSplit>
__global__ void __launch_bounds__(tma::kWsThreads, 1)
    ExpertsFp4InBlockKernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap xs_map,
                            const ExpertsParams ep, const TileLists lists, int32_t e_end) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using L = InBlock<kP>;
  using R = typename L::R;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  CheckPlan(ep);
  const int tid = threadIdx.x;
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  if (tid == 0) {
    tma::PrefetchTensorMap(&x_map);
    tma::PrefetchTensorMap(&xs_map);
#pragma unroll
    for (int p = 0; p < kP; ++p) R(smem + p * L::kRingBytes).Init(tma::kWsConsumerWarps, 1 + 128);
  }
  if (tid < wgmma::rs::kTableEntries * 4) {
    wgmma::StShared32(tma::SmemAddress(smem + L::kTables) + 4 * tid, wgmma::rs::TableWord(tid));
  }
  __syncthreads();

  if (tid >= tma::kThreads) {  // the converting warpgroup: row `row` of every unit
    tma::SetMaxRegistersDec<L::kProducerRegisters>();
    // Shared memory by 32-bit address throughout (no generic pointers to convert per unit).
    const int row = tid - tma::kThreads;
    const uint32_t smem_addr = tma::SmemAddress(smem);
    const uint32_t tables_addr = smem_addr + L::kTables;
    const uint32_t raw_base = smem_addr + L::kRaw;
    const uint32_t meta = InBlockRaw::kMeta + 16 * row;  // this thread's note and masks in a raw area
    // The units' copies run kRawSlots - kP units ahead of their conversion, as this thread's
    // cp.async groups (one per unit, empty past the walk's end), with its note of the unit beside
    // them (InBlockUnit), so that the conversion needs no walk of its own.
    GroupItemWalk walk(ep, lists, 0, e_end);
    ExpertTile ft{};
    int64_t fn0 = 0;
    int fc = 0;
    bool fetching = chunks > 0 && walk.Next(lists, ft, fn0);
    InBlockRow from = fetching ? InBlockRow(ep, ft, fn0, row) : InBlockRow();
    // With chunk words (uniform), pass 0's shifts and row scale come from the row's chunk word and
    // whether the block needs later passes from the masks: no fold word to work out and no vote.
    const bool chunk_words = ep.chunk_words != nullptr;
    uint32_t fetched = 0;
    auto fetch = [&] {  // the walk's current unit, then past it
      const uint32_t raw = raw_base + (fetched % L::kRawSlots) * InBlockRaw::kBytes;
      wgmma::StShared64(raw + meta, fetching ? InBlockUnit::Word(fc, from.exists()) : InBlockUnit::kEnd,
                        static_cast<uint32_t>(ft.row0));
      if (fetching) {
        from.Copy(raw, row, fc);
        if (++fc == chunks) {
          fc = 0;
          fetching = walk.Next(lists, ft, fn0);
          if (fetching) from = InBlockRow(ep, ft, fn0, row);
        }
      }
      CpAsyncCommit();
      ++fetched;
    };
    for (int u = 0; u < L::kRawSlots - kP; ++u) fetch();

    // A pass of unit p of the pair fills load j[p] of ring p: begin_pass (its stage free, x on its
    // way), the codes and the rows' scales, then the last-pass flag, one fence for the pair's
    // codes, and the arrivals.
    uint32_t j[kP] = {};  // loads of ring p filled
    auto ring_addr = [&](int p) { return smem_addr + p * L::kRingBytes; };
    auto begin_pass = [&](int p, int c, uint32_t x_row) {  // the ring's next stage free, x loading
      const uint32_t stage = j[p] % R::kStages;
      if (j[p] >= R::kStages) {
        tma::BarrierWaitAt(R::EmptyAt(ring_addr(p), j[p]), (j[p] / R::kStages - 1) & 1u);
      }
      if (row == 0) {
        R(smem + p * L::kRingBytes).LoadX(j[p], c * wgmma::kChunk, &x_map, &xs_map, static_cast<int>(x_row));
      }
      return ring_addr(p) + stage * R::kStageBytes;
    };
    auto pass_area = [&](int p) {
      return smem_addr + L::kPass + (p * L::kRingStages + j[p] % R::kStages) * L::kPassBytes;
    };
    auto end_passes = [&](const bool (&live)[kP], const float (&scale)[kP], const bool (&more)[kP]) {
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        if (!live[p]) continue;
        wgmma::StShared32(pass_area(p) + 4 * row, __float_as_uint(scale[p]));
        if (row == 0) wgmma::StShared32(pass_area(p) + L::kLast, more[p] ? 0u : 1u);
      }
      wgmma::FenceProxyAsyncShared();  // the codes, for the MMAs' reads
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        if (!live[p]) continue;
        tma::BarrierArriveAt(R::FullAt(ring_addr(p), j[p]));
        ++j[p];
      }
    };
    for (;;) {  // units u .. u + kP - 1 (u = 0, kP, 2 kP, ...): u + p on ring p
#pragma unroll
      for (int p = 0; p < kP; ++p) fetch();  // up to u + kRawSlots - 1: fetched = u + kRawSlots
      CpAsyncWait<L::kRawSlots - kP>();       // the pair's copies (this thread's own) have landed
      uint32_t raw_addr[kP], word[kP], tile[kP];
      float scale[kP];
      bool more[kP], live[kP];
      uint2 note[kP];
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        raw_addr[p] = raw_base + ((fetched + p) % L::kRawSlots) * InBlockRaw::kBytes;  // unit u + p's
        note[p] = wgmma::LdShared64(raw_addr[p] + meta);
      }
      if (note[0].x == InBlockUnit::kEnd) break;  // uniform: every thread walks the same units
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        live[p] = p == 0 || note[p].x != InBlockUnit::kEnd;  // uniform
        if (chunk_words) {  // rows past n: a zero word (shifts 0 over zero nibbles: zero codes), scale 0
          word[p] = wgmma::LdShared32(raw_addr[p] + InBlockRaw::kWords + 4 * row);
          const uint2 masks = wgmma::LdShared64(raw_addr[p] + meta + InBlockRaw::kMasks);
          scale[p] = wgmma::rs::ChunkWordScale(word[p]);
          more[p] = live[p] && (((masks.x | masks.y) >> (InBlockUnit::Chunk(note[p].x) % 32)) & 1u) != 0u;
        } else {
          int e[4];
          UnpackGroupExponents(wgmma::LdShared32(raw_addr[p] + InBlockRaw::kExponents + 4 * row), e);
          word[p] = live[p] && InBlockUnit::Valid(note[p].x) ? cpu::FirstFoldPassWord(e) : cpu::kFoldNoRowWord;
          scale[p] = wgmma::FoldedRowScaleOf(word[p]);
        }
        tile[p] = live[p] ? begin_pass(p, InBlockUnit::Chunk(note[p].x), note[p].y) : 0u;
      }
      ConvertRowPasses<kP, kSignSplit>(raw_addr, row, word, tables_addr, tile, live[kP - 1]);
      if (!chunk_words) {
#pragma unroll
        for (int p = 0; p < kP; ++p) more[p] = live[p] && ConvertersOr(cpu::FoldWordMore(word[p]));
      }
      end_passes(live, scale, more);
      // Later passes (rare), unit by unit: each its own load of the unit's ring.
#pragma unroll
      for (int p = 0; p < kP; ++p) {
        for (int pass = 1; more[p]; ++pass) {
          int e[4];
          UnpackGroupExponents(wgmma::LdShared32(raw_addr[p] + InBlockRaw::kExponents + 4 * row), e);
          const uint32_t w[1] = {InBlockUnit::Valid(note[p].x) ? cpu::FoldPassWord(e, pass) : cpu::kFoldNoRowWord};
          const uint32_t t[1] = {begin_pass(p, InBlockUnit::Chunk(note[p].x), note[p].y)};
          const uint32_t r[1] = {raw_addr[p]};
          ConvertRowPasses<1, kSignSplit>(r, row, w, tables_addr, t, false);
          bool live_p[kP] = {}, more_p[kP] = {};  // unit p alone
          float scale_p[kP] = {};
          live_p[p] = true;
          scale_p[p] = wgmma::FoldedRowScaleOf(w[0]);
          more_p[p] = more[p] = ConvertersOr(cpu::FoldWordMore(w[0]));
          end_passes(live_p, scale_p, more_p);
        }
      }
      if (kP == 2 && !live[kP - 1]) break;  // the walk ended within the pair
    }
    CpAsyncWaitAll();
    return;
  }
  tma::SetMaxRegistersInc<L::kConsumerRegisters>();
  const int group = tid / 128;
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int local_a = group * wgmma::kRowsPerGroup + 16 * warp + g;  // this thread's rows: local_a, + 8
  float acc[R::kElems], part[R::kElems], total[R::kElems];
#pragma unroll
  for (int i = 0; i < R::kElems; ++i) acc[i] = part[i] = 0.f;
  GroupItemWalk items(ep, lists, 0, e_end);
  ExpertTile t{};
  int64_t n0 = 0;
  // Unit u's loads come from ring u % kP: `ring_index` the current one, j its loads consumed,
  // j_next the other's (kP = 2: the two swap after each unit).
  int ring_index = 0;
  uint32_t j = 0, j_next = 0;
  while (chunks > 0 && items.Next(lists, t, n0)) {
    // wgmma::EndChunk's sums with no branch on the slice: total starts from -0, which adds to the
    // first slice's part exactly (-0 + x = x for every x, ±0 included), and the units' loop runs
    // per slice, so that part keeps its registers over it (a branch at each chunk end had the
    // compiler move all of part, ~100 instructions a unit).
#pragma unroll
    for (int i = 0; i < R::kElems; ++i) total[i] = -0.f;
    for (int c = 0; c < chunks;) {
      const int slice_end = std::min(c + mma::kSliceChunks, chunks);
      while (c < slice_end) {
        const R ring(smem + ring_index * L::kRingBytes);
        const uint32_t pass_ring = tma::SmemAddress(smem + L::kPass + ring_index * L::kRingStages * L::kPassBytes);
        ring.WaitLoaded(j);
        const uint32_t stage_addr = tma::SmemAddress(ring.Stage(j));
        wgmma::ChunkChainIssueLow(acc, stage_addr + group * wgmma::kRowsPerGroup * wgmma::kChunk, stage_addr + R::kX);
        const uint32_t pass_addr = pass_ring + (j % R::kStages) * L::kPassBytes;
        const float sa = __uint_as_float(wgmma::LdShared32(pass_addr + 4 * local_a));
        const float sb = __uint_as_float(wgmma::LdShared32(pass_addr + 4 * (local_a + 8)));
        const bool last = wgmma::LdShared32(pass_addr + L::kLast) != 0u;  // uniform over the block
        const uint32_t xs_addr = tma::SmemAddress(R::XScales(ring.Stage(j), t.row0));
        wgmma::WgmmaWaitAll();
        wgmma::PinAll(acc);
        AddScaledRowsShared(part, acc, sa, sb, xs_addr, q);
        ring.ReleaseByWarp(j, lane);
        ++j;
        if (last) {
          ++c;
          if constexpr (kP == 2) {
            const uint32_t swap = j;
            j = j_next;
            j_next = swap;
            ring_index ^= 1;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < R::kElems; ++i) {
        total[i] = __fadd_rn(total[i], part[i]);
        part[i] = 0.f;
      }
    }
    const Params tp = TileParams<Kind::kFp4>(ep, t);  // the tile's y and m
    wgmma::StoreBlockResult<kInBlockTokens>(tp, n0 + local_a, 0, q, [&](int i) { return total[i]; });
  }
#endif
}

// ---- FP4 experts converted in registers at prefill sizes ---------------------------------------
//
// ExpertsFp4RegistersTmaKernel: items as ExpertsFp4InBlockKernel's (but kRsTokens-token tiles × 128
// weight rows of every expert, one launch, persistent blocks) on two warpgroups that feed their
// MMAs from registers (wgmma's RS form) as rs::Fp4RegistersBlock does at decode, instead of a
// converting warpgroup writing a shared tile: warpgroup w takes rows n0 + 64w .. n0 + 64w + 63, each
// thread the group q of its two rows (one table entry a row and chunk). Unit u = the u-th (item,
// chunk) of the block's walk:
//   - each warp copies its 16 rows' nibbles and chunk words of unit u + kRsAhead into a ring of its
//     own (cp.async; rows past n zero-filled: zero codes, scale 0), and lane 0 of warp
//     (u + kRsAhead) % 8 has the TMA load that unit's x codes and scales into the block's x ring
//     (kRsXStages stages, each freed by one arrival per warp);
//   - while unit u's MMAs (m64n104k32) run the warp issues those copies; then u's products are
//     scaled into part, its later passes run (its 64-row block's mask from the chunk words,
//     rs::LaterFold, the warpgroup's vote on a named barrier of its own), its x stage is released,
//     at a 512-column slice's end total += part (total from -0, as in ExpertsFp4InBlockKernel), and
//     unit u + 1 is converted into the fragment u's MMAs have freed.
// The experts' chunk words are required (WriteFp4ChunkWords). The same codes, passes, products and
// adds as ExpertsFp4InBlockKernel, so Linear's bits.
// kSliceScale (DEEPINFER_FP4_SLICE_SCALE): where every row of a warp has an up-shift in the unit's
// slice (the chunk words' bits 16-19, cpu::SliceUpShift), the warp converts with the up-shifted
// tables (rs::UpShiftedEntry), so that its products come in units of its rows' slice scales
// 2^(min top - 127): part += acc · x scale (one FFMA a product instead of an FMUL and an FFMA), and
// at the slice's end total = fma(part, slice scale, total), which is total + the part in units of
// 1 exactly (cpu::SliceUpShift: the same bits). Other warps (uniform over the warp, and the same
// for every chunk of a slice) take the chunk scales as before, through the same tables (up = 0).
// 104-token tiles: at the 8k prefill an expert's ~192 ± 14 rows are two tiles where 96-token tiles
// made half the experts three (its accumulators: 3 × 52 floats a thread).
constexpr int kRsTokens = 104;
constexpr int kPairTokens = 2 * kRsTokens;  // ExpertsFp4TilePairKernel's and ExpertsFp4Bf16Kernel's wide tiles
constexpr int kRsAhead = 5;    // units whose copies are in flight ahead (7, on 10-stage rings: no faster)
constexpr int kRsSlots = 8;    // a warp's copy ring
constexpr int kRsXStages = 8;  // the x ring
// Unit v's copies are issued while unit v - kRsAhead is in its MMAs: its copy slot was last read
// by unit v - kRsSlots (finished before), and its x load waits for unit v - kRsXStages's release by
// every warp, which a warp one unit behind the issuing one has given (v - kRsAhead - 2 or earlier).
static_assert(kRsSlots >= kRsAhead + 2 && kRsXStages >= kRsAhead + 2, "rings deep enough for the copies ahead");

struct RsPrefill {
  static constexpr int kXCodes = kRsTokens * wgmma::kChunk;  // a stage's codes, then its scales
  static constexpr int kXTx = kXCodes + (kRsTokens + tma::kXsAlign) * 4;  // bytes a load writes
  static constexpr int kXStageBytes = (kXTx + 1023) / 1024 * 1024;           // the swizzle's alignment
  static constexpr int kBarriers = kRsXStages * kXStageBytes;                // full[], then empty[]
  static constexpr int kCopies = kBarriers + 2 * kRsXStages * 8;
  static constexpr int kWordsAt = wgmma::rs::kWarpStageBytes;  // a slot: 16 rows' nibbles, then their words
  static constexpr int kSlotBytes = kWordsAt + wgmma::rs::kWarpRows * 4;
  static constexpr int kWarpRingBytes = kRsSlots * kSlotBytes;
  static constexpr int kWarps = 2 * wgmma::rs::kThreads / kWarpSize;
  static constexpr int kTables = kCopies + kWarps * kWarpRingBytes;
  static constexpr int kBytes = kTables + wgmma::rs::kTableEntries * 16 + 1024;  // + base alignment
  static_assert(kCopies % 16 == 0 && kSlotBytes % 16 == 0 && kTables % 16 == 0, "16-byte copies and entries");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// grid: at most one block per SM; 256 threads, RsPrefill::kBytes of dynamic shared memory.
// x_map, xs_map: XTensorMaps at kRsTokens; ep: FP4 experts with e8m0 scales and chunk words,
// K % 128 == 0 within rs::kMaxChunks chunks (Fp4RegistersPrefillFor); the plan cut in
// kRsTokens-row tiles; experts [0, e_end). kSignSplit: the nibbles' words in the sign-split layout
// (Params::w_sign_split, which the host matches).
template <bool kSliceScale, bool kSignSplit>
__global__ void __launch_bounds__(2 * wgmma::rs::kThreads, 1)
    ExpertsFp4RegistersTmaKernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap xs_map,
                                 const ExpertsParams ep, const TileLists lists, int32_t e_end) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using L = RsPrefill;
  namespace rs = wgmma::rs;
  constexpr int kElems = kRsTokens / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  CheckPlan(ep);
  const int tid = threadIdx.x;
  const int wg = tid / rs::kThreads, warp = (tid % rs::kThreads) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  const int64_t n = ep.base.n;
  const uint32_t base = tma::SmemAddress(smem);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  auto full_at = [&](uint32_t u) { return base + L::kBarriers + 8 * (u % kRsXStages); };
  auto empty_at = [&](uint32_t u) { return base + L::kBarriers + 8 * (kRsXStages + u % kRsXStages); };
  auto x_stage = [&](uint32_t u) { return base + (u % kRsXStages) * L::kXStageBytes; };
  const uint32_t ring = base + L::kCopies + (tid / kWarpSize) * L::kWarpRingBytes;
  auto slot = [&](uint32_t u) { return ring + (u % kRsSlots) * L::kSlotBytes; };
  const uint32_t tables = base + L::kTables;
  const uint32_t x_desc_hi = wgmma::DescriptorHigh();
  if (tid == 0) {
    tma::PrefetchTensorMap(&x_map);
    tma::PrefetchTensorMap(&xs_map);
    for (int s = 0; s < kRsXStages; ++s) {
      tma::BarrierInit(&bars[s], 1);
      tma::BarrierInit(&bars[kRsXStages + s], L::kWarps);
    }
    tma::FenceBarrierInit();
  }
  if (tid < rs::kTableEntries * 4) {
    wgmma::StShared32(tables + 4 * tid, kSliceScale ? rs::UpShiftedTableWord(tid) : rs::TableWord(tid));
  }
  __syncthreads();
  // The table entry of a shift field: raised by `up` on the up-shifted tables.
  auto entry = [](uint32_t shift_field, uint32_t up) {
    return kSliceScale ? rs::UpShiftedEntry(shift_field, up) : shift_field;
  };

  // ---- the copies: this warp's rows of the fetch walk's unit, and thread 0's x loads
  const SharedItemWalk walks(ep, lists, e_end);
  SharedItemWalk::Cursor fetch_at = walks.First(ep);
  ExpertTile ft{};
  int64_t fn0 = 0;
  int fc = 0;
  bool fetching = chunks > 0 && walks.Next(lists, fetch_at, ft, fn0);
  auto copies_of = [&] { return rs::WarpCopies(TileParams<Kind::kFp4>(ep, ft), fn0 + 64 * wg, warp, lane); };
  rs::WarpCopies copies = copies_of();
  // The source of the zero-filling copies (none of it read): any valid global address, here one
  // held in the parameters rather than in registers.
  const uint8_t* const any_valid = reinterpret_cast<const uint8_t*>(ep.chunk_words);
  const uint32_t* words_src = ep.chunk_words;  // lanes 0-15: their row's chunk 0 word (row 0's past n)
  uint32_t word_fill = 0;
  auto begin_fetch_item = [&] {
    copies = copies_of();
    const int64_t row = fn0 + 64 * wg + 16 * warp + lane % 16;
    word_fill = row < n ? 4u : 0u;
    words_src = ep.chunk_words + (ft.expert * ep.chunk_words_stride + (row < n ? row : 0) * chunks);
  };
  if (fetching) begin_fetch_item();
  uint32_t fetched = 0, units = 0;  // fetch calls; units the walk had (uniform)
  auto fetch = [&] {
    if (fetching) {
      const uint32_t to = slot(fetched);
      copies.Load(to, fc, lane, any_valid);
      CpAsyncSharedOrZeroIf<4>(lane < 16, to + L::kWordsAt + 4 * lane, words_src + fc, word_fill);  // no branch
      if (lane == 0 && tid / kWarpSize == static_cast<int>(fetched % L::kWarps)) {  // the warps take turns
        if (fetched >= kRsXStages) tma::BarrierWaitAt(empty_at(fetched), (fetched / kRsXStages - 1) & 1u);
        uint64_t* full = &bars[fetched % kRsXStages];
        uint8_t* stage = smem + (fetched % kRsXStages) * L::kXStageBytes;
        tma::BarrierArriveExpectTx(full, L::kXTx);
        tma::LoadXBoxes(stage, stage + L::kXCodes, full, fc * wgmma::kChunk, &x_map, &xs_map, ft.row0);
      }
      ++units;
      if (++fc == chunks) {
        fc = 0;
        fetching = walks.Next(lists, fetch_at, ft, fn0);
        if (fetching) begin_fetch_item();
      }
    }
    CpAsyncCommit();
    ++fetched;
  };
  for (int i = 0; i < kRsAhead; ++i) fetch();
  if (units == 0) {  // uniform
    CpAsyncWaitAll();
    return;
  }

  // ---- the MMAs: unit u of the compute walk's item (t, n0), chunk c
  SharedItemWalk::Cursor walk_at = walks.First(ep);
  ExpertTile t{};
  int64_t n0 = 0;
  walks.Next(lists, walk_at, t, n0);
  int c = 0;
  // The warpgroup's 64-row block's later-pass mask words of the item (none past n).
  auto item_masks = [&] {
    const int64_t r0 = n0 + 64 * wg;
    if (r0 >= n) return make_uint2(0u, 0u);
    const uint32_t* m = rs::LaterPassMasks(ep.ExpertChunkWords(t.expert), n, chunks, r0);
    return make_uint2(__ldg(m), __ldg(m + 1));
  };
  uint2 masks = item_masks();
  float acc[kElems], part[kElems], total[kElems];
  uint32_t frag[16];
#pragma unroll
  for (int i = 0; i < kElems; ++i) {
    acc[i] = part[i] = 0.f;
    total[i] = -0.f;  // -0 + x = x for every x, ±0 included: the first slice's part exactly
  }
  const uint32_t row_a = (g * rs::kRowBytes) + 16 * q;  // this thread's group of its row g in a slot
  // Unit v's A fragment (its copies landed: kRsAhead - 1 later groups may fly) and row scales:
  // where `up` (uniform over the warp) the rows' slice scales, else their chunk scales.
  auto convert = [&](uint32_t v, uint32_t (&f)[16], float& sa, float& sb, bool& up) {
    CpAsyncWait<kRsAhead - 1>();
    __syncwarp();
    const uint32_t from = slot(v);
    const uint32_t wa = wgmma::LdShared32(from + L::kWordsAt + 4 * g);
    const uint32_t wb = wgmma::LdShared32(from + L::kWordsAt + 4 * (g + 8));
    uint32_t ua = 0, ub = 0;
    up = false;
    if constexpr (kSliceScale) {
      ua = rs::ChunkWordUpShift(wa);
      ub = rs::ChunkWordUpShift(wb);
      up = __all_sync(0xffffffffu, ua != cpu::kSliceNoUpShift && ub != cpu::kSliceNoUpShift);
      if (!up) ua = ub = 0;
    }
    rs::RowFragment<kSignSplit>(from + row_a, entry(rs::GroupShift(wa, q), ua), tables, f, 0);
    rs::RowFragment<kSignSplit>(from + row_a + 8 * rs::kRowBytes, entry(rs::GroupShift(wb, q), ub), tables, f, 1);
    sa = rs::ChunkWordScale(wa, ua);
    sb = rs::ChunkWordScale(wb, ub);
  };
  auto issue = [&](uint32_t v, const uint32_t (&f)[16]) {
    tma::BarrierWaitAt(full_at(v), (v / kRsXStages) & 1u);
    __syncwarp();  // converged for the aligned MMAs
    rs::IssueChunk(acc, f, wgmma::DescriptorLow(x_stage(v)), x_desc_hi);
  };
  // Unit u's MMAs complete in acc (its fragment f free): scaled into part, later passes, x stage
  // released, the slice's and the item's ends.
  auto finish = [&](uint32_t u, uint32_t (&f)[16], float sa, float sb, bool up) {
    const uint32_t xs = x_stage(u) + L::kXCodes + 4 * (t.row0 % tma::kXsAlign);
    if (up) {  // uniform over the warp: the products in units of the slice scales
      if (t.row0 % 2 == 0) {
        AddScaledRowsShared<kElems, false, true>(part, acc, sa, sb, xs, q);
      } else {
        AddScaledRowsShared<kElems, false>(part, acc, sa, sb, xs, q);
      }
    } else if (t.row0 % 2 == 0) {  // uniform; the stage's scales 8-byte aligned from the tile's row 0
      rs::AddScaledShared(part, acc, sa, sb, xs, q, kRsTokens);  // every token group
    } else {
      AddScaledRowsShared(part, acc, sa, sb, xs, q);
    }
    if ((((c < 32 ? masks.x : masks.y) >> (c % 32)) & 1u) != 0u) {  // uniform over the warpgroup
      const Params p = TileParams<Kind::kFp4>(ep, t);
      const int64_t ra = n0 + 64 * wg + 16 * warp + g, rb = ra + 8;
      const uint32_t from = slot(u);
      for (int pass = 1;; ++pass) {
        const rs::RowFold none{0xffffu, 1.f, false};  // a row past n: every group left
        const rs::RowFold fa = ra < n ? rs::LaterFold(p, ra, c, pass) : none;
        const rs::RowFold fb = rb < n ? rs::LaterFold(p, rb, c, pass) : none;
        // A warp whose rows are up-shifted has no group left for a later pass (cpu::SliceUpShift):
        // its rows add +0 here, in either unit.
        rs::RowFragment<kSignSplit>(from + row_a, entry(rs::GroupShift(fa.shifts, q), 0), tables, f, 0);
        rs::RowFragment<kSignSplit>(from + row_a + 8 * rs::kRowBytes, entry(rs::GroupShift(fb.shifts, q), 0), tables,
                                    f, 1);
        rs::IssueChunk(acc, f, wgmma::DescriptorLow(x_stage(u)), x_desc_hi);
        wgmma::WgmmaWaitAll();
        wgmma::PinAll(acc);
        AddScaledRowsShared(part, acc, fa.scale, fb.scale, xs, q);
        if (!WarpgroupOr(1 + wg, fa.more || fb.more)) break;
      }
    }
    __syncwarp();  // the warp's reads of the stage done
    if (lane == 0) tma::BarrierArriveAt(empty_at(u));
    if (c % mma::kSliceChunks == mma::kSliceChunks - 1 || c == chunks - 1) {
      if (up) {  // part · slice scale is the part in units of 1, exactly: one rounding, as the add's
#pragma unroll
        for (int i = 0; i < kElems; ++i) {
          total[i] = __fmaf_rn(part[i], i % 4 < 2 ? sa : sb, total[i]);
          part[i] = 0.f;
        }
      } else {
#pragma unroll
        for (int i = 0; i < kElems; ++i) {
          total[i] = __fadd_rn(total[i], part[i]);
          part[i] = 0.f;
        }
      }
    }
    if (++c == chunks) {
      const Params tp = TileParams<Kind::kFp4>(ep, t);  // the tile's y and m
      wgmma::StoreBlockResult<kRsTokens>(tp, n0 + 64 * wg + 16 * warp + g, 0, q, [&](int i) { return total[i]; });
#pragma unroll
      for (int i = 0; i < kElems; ++i) total[i] = -0.f;
      c = 0;
      if (walks.Next(lists, walk_at, t, n0)) masks = item_masks();
    }
  };
  // Unit u in its MMAs: fetch ahead, finish u, then convert u + 1 into the fragment u's MMAs have
  // freed and start it. (Converting u + 1 into a second fragment while u's MMAs run measured slower:
  // its 16 registers more spill at 104 tokens; the other warpgroup issues while this one waits.)
  uint32_t u = 0;
  float sa = 0.f, sb = 0.f;
  bool up = false;
  convert(0, frag, sa, sb, up);
  issue(0, frag);
  for (;;) {
    fetch();
    const bool next = u + 1 < units;  // uniform; known, the fetch walk being kRsAhead units ahead
    wgmma::WgmmaWaitAll();
    wgmma::PinAll(acc);
    finish(u, frag, sa, sb, up);
    if (!next) break;
    ++u;
    convert(u, frag, sa, sb, up);
    issue(u, frag);
  }
  CpAsyncWaitAll();
#endif
}

// ---- FP4 experts on BF16 MMAs, every scale folded into the operands ----------------------------
//
// ExpertsFp4Bf16Kernel<kTok> (DEEPINFER_FP4_BF16, off by default): ExpertsFp4RegistersTmaKernel's
// items, walk, warps and copies (kTok-token tiles × 128 weight rows, warpgroup w rows n0 + 64w ..,
// each thread the group q of its rows g and g + 8), but each output is one chain of m64n{kTok}k16
// BF16 MMAs over all of K (linear_wgmma_fp4bf16.cuh): the A fragment is the nibbles times their
// group scale, exact in BF16, and x comes as act_quant's values in BF16 (QuantizeRowsBf16Kernel, the
// BF16 order), so no part, total or scale-add is left after the MMAs: other bits than Linear's (the
// decode kernels keep the FP8 path, so the switch gives up batch invariance). Unit u = the u-th
// (item, chunk):
//   - each warp copies its 16 rows' nibbles and group bytes of unit u + kAhead into a ring of its
//     own (cp.async; rows past n zero-filled), and lane 0 of warp (u + kAhead) % 8 has the TMA
//     load that unit's x halves (columns 0-63 and 64-127 of the chunk in the BF16 order, kTok rows
//     × 128 bytes each, 128-byte swizzle) into the block's x ring;
//   - the chunk's two halves (four k16 steps each) have fragments of their own, so that half h of
//     unit u + 1 is converted while half 1 - h of unit u is in the MMAs.
// Group bytes above fp4bf16::kMaxGroupByte (scales above 2) are not converted exactly: the kernel
// then traps (the host takes this path only where the switch asks for it).
// kTok: the tile's tokens, 104 (kRsTokens: an expert's ~192 rows at the 8k prefill are two tiles) or
// 208 (kPairTokens: one tile, so each weight chunk is converted once for twice the MMAs, on a
// shallower x ring).
template <int kTok>
struct Bf16Prefill {
  static constexpr int kAhead = kTok == kRsTokens ? 4 : 2;    // units whose copies are in flight ahead
  static constexpr int kSlots = kTok == kRsTokens ? 6 : 4;    // a warp's copy ring
  static constexpr int kXStages = kTok == kRsTokens ? 6 : 3;  // the x ring
  static_assert(kSlots >= kAhead + 1 && kXStages >= kAhead + 1, "rings deep enough for the copies ahead");
  static constexpr int kXHalfBytes = kTok * 128;  // 64 BF16 columns of the tile's tokens
  static constexpr int kXStageBytes = 2 * kXHalfBytes;
  static constexpr int kBarriers = kXStages * kXStageBytes;  // full[], then empty[]
  static constexpr int kCopies = kBarriers + 2 * kXStages * 8;
  static constexpr int kScalesAt = wgmma::rs::kWarpStageBytes;  // a slot: 16 rows' nibbles, then their group bytes
  static constexpr int kSlotBytes = kScalesAt + wgmma::rs::kWarpRows * 4;
  static constexpr int kWarpRingBytes = kSlots * kSlotBytes;
  static constexpr int kWarps = 2 * wgmma::rs::kThreads / kWarpSize;
  static constexpr int kBytes = kCopies + kWarps * kWarpRingBytes + 1024;  // + base alignment
  static_assert(kXHalfBytes % 1024 == 0, "each half at the swizzle's alignment");
  static_assert(kCopies % 16 == 0 && kSlotBytes % 16 == 0, "16-byte copies");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// grid: at most one block per SM; 256 threads, Bf16Prefill<kTok>::kBytes of dynamic shared memory.
// x_map: BF16 [m_pad][k] (QuantizeRowsBf16Kernel's), boxes of 64 columns × kTok rows, 128-byte
// swizzle; ep: FP4 experts with e8m0 scales, K % 128 == 0, the scale row stride a multiple of 4; the
// plan cut in kTok-row tiles; experts [0, e_end). narrow_rows (0 or kRsTokens; kTok = 208 only):
// tiles of at most that many rows (an expert's last, e.g. the 22 rows past 208) run m64n104k16 on
// their first 104 tokens instead of n208 over mostly absent ones: the same bits, about half the MMAs.
// kSignSplit: the nibbles' words in the sign-split layout (Params::w_sign_split, which the host
// matches).
template <int kTok, bool kSignSplit>
__global__ void __launch_bounds__(2 * wgmma::rs::kThreads, 1)
    ExpertsFp4Bf16Kernel(const __grid_constant__ CUtensorMap x_map, const ExpertsParams ep, const TileLists lists,
                         int32_t e_end, int32_t narrow_rows) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using L = Bf16Prefill<kTok>;
  namespace rs = wgmma::rs;
  namespace f4b = wgmma::fp4bf16;
  constexpr int kElems = kTok / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  CheckPlan(ep);
  const int tid = threadIdx.x;
  const int wg = tid / rs::kThreads, warp = (tid % rs::kThreads) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  const int64_t n = ep.base.n;
  const uint32_t base = tma::SmemAddress(smem);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  auto full_at = [&](uint32_t u) { return base + L::kBarriers + 8 * (u % L::kXStages); };
  auto empty_at = [&](uint32_t u) { return base + L::kBarriers + 8 * (L::kXStages + u % L::kXStages); };
  auto x_stage = [&](uint32_t u) { return base + (u % L::kXStages) * L::kXStageBytes; };
  const uint32_t ring = base + L::kCopies + (tid / kWarpSize) * L::kWarpRingBytes;
  auto slot = [&](uint32_t u) { return ring + (u % L::kSlots) * L::kSlotBytes; };
  const uint32_t x_desc_hi = wgmma::DescriptorHigh();
  if (tid == 0) {
    tma::PrefetchTensorMap(&x_map);
    for (int s = 0; s < L::kXStages; ++s) {
      tma::BarrierInit(&bars[s], 1);
      tma::BarrierInit(&bars[L::kXStages + s], L::kWarps);
    }
    tma::FenceBarrierInit();
  }
  __syncthreads();
  // Waits that leave only through their barrier: a timeout's exit among MMAs in flight makes ptxas
  // serialize them (docs/performance.md, version 56).
  auto spin = [](uint32_t bar, uint32_t parity) {
    while (!tma::BarrierTryWaitAt(bar, parity)) {
    }
  };

  // ---- the copies: this warp's rows of the fetch walk's unit, and one lane's x loads
  const SharedItemWalk walks(ep, lists, e_end);
  SharedItemWalk::Cursor fetch_at = walks.First(ep);
  ExpertTile ft{};
  int64_t fn0 = 0;
  int fc = 0;
  bool fetching = chunks > 0 && walks.Next(lists, fetch_at, ft, fn0);
  auto copies_of = [&] { return rs::WarpCopies(TileParams<Kind::kFp4>(ep, ft), fn0 + 64 * wg, warp, lane); };
  rs::WarpCopies copies = copies_of();
  // The source of the zero-filling copies (none of it read): a valid global address.
  const uint8_t* const any_valid = reinterpret_cast<const uint8_t*>(ep.weights);
  const uint8_t* scales_src = any_valid;  // lanes 0-15: their row's chunk 0 group bytes
  uint32_t scale_fill = 0;
  bool scales_aligned = true;  // the expert's scale rows 4-byte aligned (the row stride is: host)
  auto begin_fetch_item = [&] {
    copies = copies_of();
    const Params p = TileParams<Kind::kFp4>(ep, ft);
    const int64_t row = fn0 + 64 * wg + 16 * warp + lane % 16;
    scale_fill = row < n ? 4u : 0u;
    scales_src = row < n ? p.scale + row * p.scale_row_stride : any_valid;
    scales_aligned = (reinterpret_cast<uintptr_t>(p.scale) & 3u) == 0;
  };
  if (fetching) begin_fetch_item();
  uint32_t fetched = 0, units = 0;
  auto fetch = [&] {
    if (fetching) {
      const uint32_t to = slot(fetched);
      copies.Load(to, fc, lane, any_valid);
      if (scales_aligned) {
        CpAsyncSharedOrZeroIf<4>(lane < 16, to + L::kScalesAt + 4 * lane,
                                 scales_src + 4 * (scale_fill != 0u ? fc : 0), scale_fill);
      } else if (lane < 16) {  // read by this warp after its wait and __syncwarp, as the copies
        uint32_t bytes = 0u;
        for (int b = 0; b < 4 && scale_fill != 0u; ++b) bytes |= uint32_t{__ldg(scales_src + 4 * fc + b)} << (8 * b);
        wgmma::StShared32(to + L::kScalesAt + 4 * lane, bytes);
      }
      if (lane == 0 && tid / kWarpSize == static_cast<int>(fetched % L::kWarps)) {  // the warps take turns
        if (fetched >= L::kXStages) spin(empty_at(fetched), (fetched / L::kXStages - 1) & 1u);
        uint64_t* full = &bars[fetched % L::kXStages];
        uint8_t* stage = smem + (fetched % L::kXStages) * L::kXStageBytes;
        tma::BarrierArriveExpectTx(full, L::kXStageBytes);
        tma::TmaLoad2d(stage, &x_map, full, fc * wgmma::kChunk, ft.row0);
        tma::TmaLoad2d(stage + L::kXHalfBytes, &x_map, full, fc * wgmma::kChunk + 64, ft.row0);
      }
      ++units;
      if (++fc == chunks) {
        fc = 0;
        fetching = walks.Next(lists, fetch_at, ft, fn0);
        if (fetching) begin_fetch_item();
      }
    }
    CpAsyncCommit();
    ++fetched;
  };
  for (int i = 0; i < L::kAhead; ++i) fetch();
  if (units == 0) {  // uniform
    CpAsyncWaitAll();
    return;
  }

  // ---- the MMAs
  SharedItemWalk::Cursor walk_at = walks.First(ep);
  ExpertTile t{};
  int64_t n0 = 0;
  bool have = walks.Next(lists, walk_at, t, n0);
  float acc[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) acc[i] = 0.f;
  uint32_t fa[16], fb[16];
  uint4 nib_a, nib_b;         // unit v's group q of rows g and g + 8 (both halves)
  uint32_t mult_a, mult_b;    // their BF16 multipliers
  uint32_t bytes_seen = 0;    // the largest group byte converted
  const uint32_t row_a = g * rs::kRowBytes + 16 * q;
  // Unit v's words and multipliers (its copies landed: L::kAhead - 1 later groups may fly), then
  // its half 0 into fa.
  auto convert_first = [&](uint32_t v) {
    CpAsyncWait<L::kAhead - 1>();
    __syncwarp();
    const uint32_t from = slot(v);
    nib_a = wgmma::LdShared128(from + row_a);
    nib_b = wgmma::LdShared128(from + row_a + 8 * rs::kRowBytes);
    const uint32_t ea = (wgmma::LdShared32(from + L::kScalesAt + 4 * g) >> (8 * q)) & 0xffu;
    const uint32_t eb = (wgmma::LdShared32(from + L::kScalesAt + 4 * (g + 8)) >> (8 * q)) & 0xffu;
    bytes_seen = max(bytes_seen, max(ea, eb));
    mult_a = f4b::GroupMultiplier(ea);
    mult_b = f4b::GroupMultiplier(eb);
    f4b::WordToSteps<kSignSplit>(nib_a.x, mult_a, fa, 0);
    f4b::WordToSteps<kSignSplit>(nib_b.x, mult_b, fa, 1);
    f4b::WordToSteps<kSignSplit>(nib_a.y, mult_a, fa + 8, 0);
    f4b::WordToSteps<kSignSplit>(nib_b.y, mult_b, fa + 8, 1);
  };
  auto convert_second = [&] {
    f4b::WordToSteps<kSignSplit>(nib_a.z, mult_a, fb, 0);
    f4b::WordToSteps<kSignSplit>(nib_b.z, mult_b, fb, 1);
    f4b::WordToSteps<kSignSplit>(nib_a.w, mult_a, fb + 8, 0);
    f4b::WordToSteps<kSignSplit>(nib_b.w, mult_b, fb + 8, 1);
  };
  // Half h's four k16 steps of unit v from fragment f; fresh: the item's first (from zero). Narrow
  // (a std::bool_constant): on the tile's first 104 tokens only (MmaBf16RsNarrow).
  auto issue = [&](auto narrow, uint32_t v, int h, const uint32_t (&f)[16], uint32_t fresh) {
    __syncwarp();  // converged for the aligned MMAs
    wgmma::WgmmaFence();
    const uint32_t lo = wgmma::DescriptorLow(x_stage(v) + h * L::kXHalfBytes);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t scale_d = s == 0 ? 1u - fresh : 1u;
      if constexpr (decltype(narrow)::value) {
        f4b::MmaBf16RsNarrow(acc, f[4 * s], f[4 * s + 1], f[4 * s + 2], f[4 * s + 3], lo + 2 * s, x_desc_hi, scale_d);
      } else {
        f4b::MmaBf16Rs<kTok>(acc, f[4 * s], f[4 * s + 1], f[4 * s + 2], f[4 * s + 3], lo + 2 * s, x_desc_hi, scale_d);
      }
    }
    wgmma::WgmmaCommit();
  };
  auto release = [&](uint32_t v) {
    __syncwarp();  // the warp's MMAs on the stage done
    if (lane == 0) tma::BarrierArriveAt(empty_at(v));
  };
  uint32_t u = 0;
  // The item's chunks, from unit u on; all MMAs done at the end.
  auto item_mmas = [&](auto narrow) {
    convert_first(u);
    spin(full_at(u), (u / L::kXStages) & 1u);
    issue(narrow, u, 0, fa, 1u);
    convert_second();
    issue(narrow, u, 1, fb, 0u);
    fetch();
    for (int c = 1; c < chunks; ++c) {
      ++u;
      wgmma::WgmmaWait<1>();  // unit u - 1's half 0 done: fa free
      convert_first(u);
      spin(full_at(u), (u / L::kXStages) & 1u);
      issue(narrow, u, 0, fa, 0u);
      wgmma::WgmmaWait<1>();  // unit u - 1's half 1 done: fb free, its x stage read
      release(u - 1);
      convert_second();
      issue(narrow, u, 1, fb, 0u);
      fetch();
    }
    wgmma::WgmmaWaitAll();
  };
  while (have) {
    if constexpr (kTok == kPairTokens) {
      if (t.rows <= narrow_rows) {  // uniform: the block's tile
        item_mmas(std::true_type{});
      } else {
        item_mmas(std::false_type{});
      }
    } else {
      item_mmas(std::false_type{});
    }
    wgmma::PinAll(acc);
    release(u);
    const Params tp = TileParams<Kind::kFp4>(ep, t);  // the tile's y and m
    wgmma::StoreBlockResult<kTok>(tp, n0 + 64 * wg + 16 * warp + g, 0, q, [&](int i) { return acc[i]; });
    ++u;
    have = walks.Next(lists, walk_at, t, n0);
  }
  CpAsyncWaitAll();
  if (bytes_seen > static_cast<uint32_t>(f4b::kMaxGroupByte)) __trap();
#endif
}

// ---- FP4 experts: one converted tile for two token tiles ---------------------------------------
//
// ExpertsFp4TilePairKernel: every item (kPairTokens-token tile × 64 weight rows) of every expert in
// one launch, on persistent blocks of a converting warpgroup and two MMA warpgroups. The converted
// weight tile of each (item, chunk) serves both token tiles: MMA warpgroup w takes the tile's tokens
// 104w .. 104w + 103 (none where the tile is shorter) with wgmma's SS form at m64n104k32, the weight
// as A from the shared tile. At the 8k prefill an expert's ~192 rows are one pair, so each chunk of
// the weight is converted once for ~200 tokens where the register-fed kernel converts it per
// 104-token tile and per warpgroup fragment.
//   - Converting thread i takes half h = i % 2 of weight row n0 + i / 2 (words 2h and 2h + 1 of
//     each group's 16 bytes of nibbles, StoreFoldedUnit's 16-byte units 4h .. 4h + 3 of the row).
//     Each converting warp copies its 16 rows' nibbles and chunk words and the 64-row block's
//     later-pass mask word kRawSlots - 1 units ahead (cp.async, coalesced: PairCopies; rows past n
//     zero-filled: zero codes, scale 0), with a note of the unit beside them, so that the
//     conversion needs no walk of its own.
//   - Per pass of a unit (pass 0 from the chunk word; later passes, where the mask says some row of
//     the block needs them, from rs::LaterFold and the warpgroup's vote) it writes the codes and the
//     rows' scales into the next stage of the ring, whose x codes and scales (one box per token
//     tile) its thread 0 has the TMA load; the stage says whether the pass is its chunk's last.
//   - The MMA warpgroups take every load: chain, part += acc · (row scale · x scale), and at a
//     512-column slice's end total = part (the first slice) or total + part, the totals in shared
//     memory (acc, part and total at 104 tokens do not fit the 168 registers ptxas gives this
//     kernel: tma::SetMaxRegistersInc).
// The experts' chunk words are required. The same codes, passes, products and adds as
// ExpertsFp4InBlockKernel, so Linear's bits.
constexpr int kPairRows = wgmma::rs::kRows;  // weight rows an item (ep.blocks_per_tile = ceil(n / 64))

struct TilePair {
  static constexpr int kStages = 4;
  static constexpr int kRawSlots = 7;  // units of the raw ring: copies kRawSlots - 1 units ahead
  static constexpr int kConverterRegisters = 96;  // setmaxnreg's split (ptxas keeps both within 168)
  static constexpr int kMmaRegisters = 200;
  static_assert(kConverterRegisters * 128 + kMmaRegisters * tma::kThreads <=
                    tma::kWsLaunchRegisters * tma::kWsThreads,
                "setmaxnreg within the block's own registers");
  // A stage: the converted weight tile (64 rows × 128 e4m3 codes, 128-byte swizzle), token tile h's
  // x codes at kX + h · kXCodes (swizzled) and its x scales' box at kXs + h · kXsStride (a TMA
  // destination is 128-byte aligned).
  static constexpr int kW = 0;
  static constexpr int kX = kPairRows * wgmma::kChunk;
  static constexpr int kXCodes = kRsTokens * wgmma::kChunk;
  static constexpr int kXs = kX + 2 * kXCodes;
  static constexpr int kXsBytes = (kRsTokens + tma::kXsAlign) * 4;  // a scales box
  static constexpr int kXsStride = (kXsBytes + 127) / 128 * 128;
  static constexpr int kXTx = kXCodes + kXsBytes;  // bytes one token tile's x load writes
  static constexpr int kStageBytes = (kXs + 2 * kXsStride + 1023) / 1024 * 1024;  // the swizzle's alignment
  static constexpr int kBarriers = kStages * kStageBytes;  // full[kStages], then empty[kStages]
  // Per stage the pass's row scales (f32 [64]), whether it is its chunk's last pass (a word), then
  // per 16-row warp block whether its rows are up-shifted (kSliceScale; a word each).
  static constexpr int kPass = kBarriers + 2 * kStages * 8;
  static constexpr int kLast = kPairRows * 4;
  static constexpr int kUp = kLast + 4;
  static constexpr int kPassBytes = kUp + 4 * 4 + 12;
  // MMA warpgroup w's totals: its thread t's elements 4i .. 4i + 3 at kTotals + w · kTotalsBytes +
  // (128 i + t) · 16 (conflict-free 16-byte accesses).
  static constexpr int kTotals = kPass + kStages * kPassBytes;
  static constexpr int kTotalsBytes = kRsTokens / 2 * 128 * 4;
  // A raw slot: the nibbles (PairCopies' layout), the rows' chunk words, then per converting warp
  // the mask word and its note of the unit (16 bytes: PairNote).
  static constexpr int kRaw = kTotals + 2 * kTotalsBytes;
  static constexpr int kNibbles = 0;
  static constexpr int kWords = kNibbles + kPairRows * wgmma::kChunk / 2;
  static constexpr int kMasks = kWords + kPairRows * 4;
  static constexpr int kNotes = kMasks + 16;
  static constexpr int kRawBytes = kNotes + 4 * 16;
  static constexpr int kTables = kRaw + kRawSlots * kRawBytes;
  static constexpr int kBytes = kTables + wgmma::rs::kTableEntries * 16 + 1024;  // + base alignment
  static_assert(kX % 1024 == 0 && kXCodes % 1024 == 0 && kXs % 128 == 0, "TMA destinations");
  static_assert(kPass % 16 == 0 && kTotals % 16 == 0 && kRaw % 16 == 0 && kTables % 16 == 0, "16-byte accesses");
  static_assert(kBytes <= 227 * 1024, "Hopper's shared memory per block");
};

// What a converting warp's lane 0 notes of a unit beside its copies: x = the chunk (kEnd past the
// walk's end); y = the tile's first x row; z = the tile's rows | the item's 64-row block << 8;
// w = the expert.
struct PairNote {
  static constexpr uint32_t kEnd = 0xffffffffu;
};

// A converting warp's copies of its 16 rows' nibbles of one chunk (rows 16w .. 16w + 15 of the
// item, zeros past n): lane l the 16 bytes of group l % 4 of rows 8i + l / 4 (i = 0, 1), so that
// four lanes read a row's 64 bytes, into [group][row] 16-byte pieces, so that the thread pair
// converting a row reads 8 bytes each of a group with the warp's 32 reads contiguous.
struct PairCopies {
  static constexpr int kGroupStride = kWarpSize / 2 * 16;  // bytes of one group of the warp's 16 rows
  static constexpr int kWarpBytes = 4 * kGroupStride;
  const uint8_t* src[2] = {nullptr, nullptr};  // lane's piece of chunk 0 (row 0's past n)
  uint32_t fill[2] = {0u, 0u};                 // 16 where the row exists, else 0 (zeros)
  bool vec = false;                            // 16-byte aligned rows: cp.async; else loaded by the lane
  uint32_t chunk_bytes = 0;                    // from a chunk's pieces to the next's (Params::w_chunk_bytes)

  PairCopies() = default;
  __device__ __forceinline__ PairCopies(const ExpertsParams& ep, const ExpertTile& t, int64_t n0, int warp, int lane) {
    const DeviceWeight& w = ep.weights[t.expert];
    const int64_t row_bytes = w.data_row_stride * RowElementBytes(Kind::kFp4);  // packed nibbles
    chunk_bytes = static_cast<uint32_t>(ep.base.w_chunk_bytes);
    vec = Aligned(w.data, row_bytes, 16) && chunk_bytes % 16 == 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t r = n0 + 16 * warp + 8 * i + lane / 4;
      fill[i] = r < ep.base.n ? 16u : 0u;
      src[i] = static_cast<const uint8_t*>(w.data) + (r < ep.base.n ? r : 0) * row_bytes + 16 * (lane % 4);
    }
  }
  // Chunk c's pieces into the warp's area at shared address `to`.
  __device__ __forceinline__ void Load(uint32_t to, int c, int lane) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t dst = to + (lane % 4) * kGroupStride + (8 * i + lane / 4) * 16;
      const uint8_t* from = src[i] + static_cast<int64_t>(c) * chunk_bytes;
      if (vec) {
        CpAsyncSharedOrZero<16>(dst, from, fill[i]);
      } else {
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        for (int b = 0; b < 16 && fill[i] != 0u; ++b) {
          v[b / 4] |= static_cast<uint32_t>(__ldg(from + b)) << (8 * (b % 4));
        }
        wgmma::StShared128(dst, make_uint4(v[0], v[1], v[2], v[3]));
      }
    }
  }
  // Where half `half` of item row `row`'s group 0 sits (group b: + b · kGroupStride).
  __device__ __forceinline__ static uint32_t RowHalf(int row, int half) {
    return (row / 16) * kWarpBytes + (row % 16) * 16 + 8 * half;
  }
};

// Half `half` of one row's chunk for one pass: words 2·half and 2·half + 1 of each group b's 16
// bytes of nibbles (8 bytes at shared address nibbles + b · PairCopies::kGroupStride) converted with
// group b's table entry (bits 4b.. of `shifts`: TableWord's or UpShiftedTableWord's entry) into
// the row's 16-byte units 4·half + t, t = 0..3 (swizzled by x = row % 8), of the tile row at
// row_addr: ConvertRowPasses' bytes for a = half (kSignSplit: the words in the sign-split layout).
template <bool kSignSplit>
__device__ __forceinline__ void ConvertHalfRow(uint32_t nibbles, uint32_t shifts, uint32_t tables, uint32_t row_addr,
                                               int x, int half) {
  uint32_t lo[4], hi[4], signs[4];
  uint2 nib[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint4 table = wgmma::LdShared128(tables + 16 * cpu::FoldWordShift(shifts, b));
    lo[b] = table.x;
    hi[b] = table.y;
    signs[b] = table.z;
    nib[b] = wgmma::LdShared64(nibbles + b * PairCopies::kGroupStride);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t even[4], odd[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      mma::fp8::E2m1x8WordToE4m3x8Table(kSignSplit, h == 0 ? nib[b].x : nib[b].y, lo[b], hi[b], even[b], odd[b],
                                        signs[b]);
    }
    wgmma::StShared128(row_addr + (((4 * half + 2 * h) ^ x) << 4), make_uint4(even[0], even[1], even[2], even[3]));
    wgmma::StShared128(row_addr + (((4 * half + 2 * h + 1) ^ x) << 4), make_uint4(odd[0], odd[1], odd[2], odd[3]));
  }
}

// The table entries of a pass's four groups (4 bits each) from its shift fields (FoldWordShift's):
// kSliceScale, on the up-shifted tables raised by `up` (rs::UpShiftedEntry); else the fields.
template <bool kSliceScale>
__device__ __forceinline__ uint32_t PassEntries(uint32_t shifts, uint32_t up) {
  if constexpr (!kSliceScale) {
    return shifts & 0xffffu;
  } else {
    uint32_t entries = 0u;
#pragma unroll
    for (int b = 0; b < 4; ++b) entries |= wgmma::rs::UpShiftedEntry(cpu::FoldWordShift(shifts, b), up) << (4 * b);
    return entries;
  }
}

// grid: at most one block per SM; tma::kWsThreads threads, TilePair::kBytes of dynamic shared
// memory. x_map, xs_map: XTensorMaps at kRsTokens; ep: FP4 experts with e8m0 scales and chunk
// words, K % 128 == 0 within rs::kMaxChunks chunks (Fp4RegistersPrefillFor); the plan cut in
// kPairTokens-row tiles; experts [0, e_end).
// kSliceScale (DEEPINFER_FP4_SLICE_SCALE): ExpertsFp4RegistersTmaKernel's up-shifted warps. The
// converting warp of rows 16w .. 16w + 15 decides (every row of it has an up-shift in the unit's
// slice), converts them on the up-shifted tables, writes their slice scales as the rows' scales
// (in later passes too, whose codes are then zero) and flags the block in the pass area; MMA warp
// w of either warpgroup then takes part += acc · x scale and at the slice's end
// total = fma(part, slice scale, total).
// kSignSplit: the nibbles' words in the sign-split layout (Params::w_sign_split, which the host
// matches).
template <bool kSliceScale, bool kSignSplit>
__global__ void __launch_bounds__(tma::kWsThreads, 1)
    ExpertsFp4TilePairKernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap xs_map,
                             const ExpertsParams ep, const TileLists lists, int32_t e_end) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using L = TilePair;
  namespace rs = wgmma::rs;
  constexpr int kElems = kRsTokens / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = wgmma::AlignedSmem(smem_raw);
  CheckPlan(ep);
  const int tid = threadIdx.x;
  const int chunks = static_cast<int>(ep.base.k / wgmma::kChunk);
  const int64_t n = ep.base.n;
  const uint32_t base = tma::SmemAddress(smem);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  auto full_at = [&](uint32_t j) { return base + L::kBarriers + 8 * (j % L::kStages); };
  auto empty_at = [&](uint32_t j) { return base + L::kBarriers + 8 * (L::kStages + j % L::kStages); };
  auto stage_at = [&](uint32_t j) { return base + (j % L::kStages) * L::kStageBytes; };
  auto pass_at = [&](uint32_t j) { return base + L::kPass + (j % L::kStages) * L::kPassBytes; };
  if (tid == 0) {
    tma::PrefetchTensorMap(&x_map);
    tma::PrefetchTensorMap(&xs_map);
    for (int s = 0; s < L::kStages; ++s) {
      tma::BarrierInit(&bars[s], 1 + 128);                          // the x loads' arrival, the converters'
      tma::BarrierInit(&bars[L::kStages + s], tma::kWsConsumerWarps);  // one release per MMA warp
    }
    tma::FenceBarrierInit();
  }
  if (tid < rs::kTableEntries * 4) {
    wgmma::StShared32(base + L::kTables + 4 * tid, kSliceScale ? rs::UpShiftedTableWord(tid) : rs::TableWord(tid));
  }
  __syncthreads();
  const SharedItemWalkOf<kPairRows> walks(ep, lists, e_end);

  if (tid >= tma::kThreads) {  // the converting warpgroup
    tma::SetMaxRegistersDec<L::kConverterRegisters>();
    const int ct = tid - tma::kThreads;
    const int cwarp = ct / kWarpSize, clane = ct % kWarpSize;
    const int row = ct / 2, half = ct % 2;  // this thread's row of the item (warp w: rows 16w ..) and half
    const uint32_t tables = base + L::kTables;
    auto raw_at = [&](uint32_t f) { return base + L::kRaw + (f % L::kRawSlots) * L::kRawBytes; };

    // ---- the copies of unit `fetched` (kRawSlots - 1 ahead), one cp.async group per unit
    typename SharedItemWalkOf<kPairRows>::Cursor fetch_at = walks.First(ep);
    ExpertTile ft{};
    int64_t fn0 = 0;
    int fc = 0;
    bool fetching = chunks > 0 && walks.Next(lists, fetch_at, ft, fn0);
    PairCopies copies;
    const uint32_t* words_src = nullptr;  // lanes 0-15: row 16 cwarp + lane's chunk words (row 0's past n)
    uint32_t word_fill = 0;
    const uint32_t* masks = nullptr;  // the item's 64-row block's later-pass mask words
    auto begin_fetch_item = [&] {
      copies = PairCopies(ep, ft, fn0, cwarp, clane);
      const int64_t r = fn0 + 16 * cwarp + clane % 16;
      word_fill = r < n ? 4u : 0u;
      const uint32_t* expert_words = ep.ExpertChunkWords(ft.expert);
      words_src = expert_words + (r < n ? r : 0) * chunks;
      masks = rs::LaterPassMasks(expert_words, n, chunks, fn0);
    };
    if (fetching) begin_fetch_item();
    uint32_t fetched = 0;
    auto fetch = [&] {
      const uint32_t raw = raw_at(fetched);
      if (fetching) {
        copies.Load(raw + L::kNibbles + cwarp * PairCopies::kWarpBytes, fc, clane);
        CpAsyncSharedOrZeroIf<4>(clane < 16, raw + L::kWords + 4 * (16 * cwarp + clane), words_src + fc, word_fill);
        CpAsyncSharedOrZeroIf<4>(clane == 0, raw + L::kMasks + 4 * cwarp, masks + fc / 32, 4u);
        if (clane == 0) {
          wgmma::StShared128(raw + L::kNotes + 16 * cwarp,
                             make_uint4(static_cast<uint32_t>(fc), static_cast<uint32_t>(ft.row0),
                                        static_cast<uint32_t>(ft.rows) | static_cast<uint32_t>(fn0 / kPairRows) << 8,
                                        static_cast<uint32_t>(ft.expert)));
        }
        if (++fc == chunks) {
          fc = 0;
          fetching = walks.Next(lists, fetch_at, ft, fn0);
          if (fetching) begin_fetch_item();
        }
      } else if (clane == 0) {
        wgmma::StShared128(raw + L::kNotes + 16 * cwarp, make_uint4(PairNote::kEnd, 0u, 0u, 0u));
      }
      CpAsyncCommit();
      ++fetched;
    };
    for (int i = 0; i < L::kRawSlots - 1; ++i) fetch();

    // ---- the passes: load j of the ring per pass
    uint32_t j = 0;
    // Load j's stage, free, with its x loads on their way (one token tile, or two where rows > 104).
    auto begin_pass = [&](int c, uint32_t x_row, uint32_t rows) {
      if (j >= L::kStages) tma::BarrierWaitAt(empty_at(j), (j / L::kStages - 1) & 1u);
      if (ct == 0) {
        uint64_t* full = &bars[j % L::kStages];
        uint8_t* stage = smem + (j % L::kStages) * L::kStageBytes;
        const bool two = rows > static_cast<uint32_t>(kRsTokens);
        tma::BarrierArriveExpectTx(full, (two ? 2 : 1) * L::kXTx);
        tma::LoadXBoxes(stage + L::kX, stage + L::kXs, full, c * wgmma::kChunk, &x_map, &xs_map,
                        static_cast<int>(x_row));
        if (two) {
          tma::LoadXBoxes(stage + L::kX + L::kXCodes, stage + L::kXs + L::kXsStride, full, c * wgmma::kChunk, &x_map,
                          &xs_map, static_cast<int>(x_row) + kRsTokens);
        }
      }
      return stage_at(j);
    };
    // The row's scale for the pass, whether it is the chunk's last and whether the warp's rows are
    // up-shifted, then load j complete.
    auto end_pass = [&](float scale, bool more, bool up) {
      const uint32_t pass = pass_at(j);
      if (half == 0) wgmma::StShared32(pass + 4 * row, __float_as_uint(scale));
      if (ct == 0) wgmma::StShared32(pass + L::kLast, more ? 0u : 1u);
      if (kSliceScale && clane == 0) wgmma::StShared32(pass + L::kUp + 4 * cwarp, up ? 1u : 0u);
      wgmma::FenceProxyAsyncShared();  // the codes, for the MMAs' reads
      tma::BarrierArriveAt(full_at(j));
      ++j;
    };
    for (uint32_t u = 0;; ++u) {
      fetch();                          // unit u + kRawSlots - 1
      CpAsyncWait<L::kRawSlots - 1>();  // unit u's copies (this thread's own) have landed
      __syncwarp();                     // and the warp's, which are its rows'
      const uint32_t raw = raw_at(u);
      const uint4 note = wgmma::LdShared128(raw + L::kNotes + 16 * cwarp);
      if (note.x == PairNote::kEnd) break;  // uniform: every warp walks the same units
      const int c = static_cast<int>(note.x);
      const uint32_t rows = note.z & 0xffu;
      const uint32_t word = wgmma::LdShared32(raw + L::kWords + 4 * row);
      bool more = ((wgmma::LdShared32(raw + L::kMasks + 4 * cwarp) >> (c % 32)) & 1u) != 0u;  // uniform
      // The warp's rows up-shifted (uniform over the warp) where each of them has an up-shift.
      uint32_t up = 0u;
      bool warp_up = false;
      if constexpr (kSliceScale) {
        up = rs::ChunkWordUpShift(word);
        warp_up = __all_sync(0xffffffffu, up != cpu::kSliceNoUpShift);
        if (!warp_up) up = 0u;
      }
      const float scale = rs::ChunkWordScale(word, up);  // the chunk scale, or the slice scale where up
      const uint32_t nibbles = raw + L::kNibbles + PairCopies::RowHalf(row, half);
      const uint32_t row_addr = begin_pass(c, note.y, rows) + L::kW + row * wgmma::kChunk;
      ConvertHalfRow<kSignSplit>(nibbles, PassEntries<kSliceScale>(word, up), tables, row_addr, row & 7, half);
      end_pass(scale, more, warp_up);
      for (int pass = 1; more; ++pass) {  // rare: the fold of each later pass from global memory
        const Params p = TileParams<Kind::kFp4>(
            ep, ExpertTile{static_cast<int32_t>(note.w), static_cast<int32_t>(note.y), static_cast<int32_t>(rows), 0});
        const int64_t weight_row = static_cast<int64_t>(note.z >> 8) * kPairRows + row;
        const rs::RowFold none{0xffffu, 1.f, false};  // a row past n: every group left
        const rs::RowFold fold = weight_row < n ? rs::LaterFold(p, weight_row, c, pass) : none;
        const uint32_t later_row = begin_pass(c, note.y, rows) + L::kW + row * wgmma::kChunk;
        // An up-shifted warp's rows have no group left for a later pass (cpu::SliceUpShift): zero
        // codes, their slice scale kept for the slice's end.
        ConvertHalfRow<kSignSplit>(nibbles, PassEntries<kSliceScale>(fold.shifts, 0u), tables, later_row, row & 7,
                                   half);
        more = ConvertersOr(fold.more);
        end_pass(warp_up ? scale : fold.scale, more, warp_up);
      }
    }
    CpAsyncWaitAll();
    return;
  }

  // ---- the MMA warpgroups: warpgroup wg takes token tile wg of each item
  tma::SetMaxRegistersInc<L::kMmaRegisters>();
  const int wg = tid / 128, warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int local_a = 16 * warp + g;  // this thread's rows of the item: local_a, + 8
  const uint32_t totals = base + L::kTotals + wg * L::kTotalsBytes + 16 * (tid % 128);
  float acc[kElems], part[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) acc[i] = part[i] = 0.f;
  typename SharedItemWalkOf<kPairRows>::Cursor at = walks.First(ep);
  ExpertTile t{};
  int64_t n0 = 0;
  uint32_t j = 0;
  while (chunks > 0 && walks.Next(lists, at, t, n0)) {
    const int rows = t.rows - kRsTokens * wg;  // this warpgroup's tokens (uniform)
    if (rows <= 0) {  // none: the loads taken and released alone
      for (int c = 0; c < chunks;) {
        tma::BarrierWaitAt(full_at(j), (j / L::kStages) & 1u);
        const bool last = wgmma::LdShared32(pass_at(j) + L::kLast) != 0u;
        __syncwarp();
        if (lane == 0) tma::BarrierArriveAt(empty_at(j));
        ++j;
        if (last) ++c;
      }
      continue;
    }
    const int x_row = t.row0 + kRsTokens * wg;
    const uint32_t x_at = L::kX + wg * L::kXCodes;
    const uint32_t xs_at = L::kXs + wg * L::kXsStride + 4 * (x_row % tma::kXsAlign);
    // One loop per 512-column slice (ExpertsFp4InBlockKernel's reason), the totals after it.
    for (int c = 0; c < chunks;) {
      const bool first_slice = c == 0;
      const int slice_end = std::min(c + mma::kSliceChunks, chunks);
      float sa = 0.f, sb = 0.f;  // the last pass's row scales: where `up`, the slice scales
      bool up = false;           // the warp's rows up-shifted (uniform over the warp; so the whole slice)
      while (c < slice_end) {
        tma::BarrierWaitAt(full_at(j), (j / L::kStages) & 1u);
        __syncwarp();  // converged for the aligned MMAs
        const uint32_t stage = stage_at(j);
        wgmma::ChunkChainIssueLow(acc, stage + L::kW, stage + x_at);
        const uint32_t pass = pass_at(j);
        sa = __uint_as_float(wgmma::LdShared32(pass + 4 * local_a));
        sb = __uint_as_float(wgmma::LdShared32(pass + 4 * (local_a + 8)));
        const bool last = wgmma::LdShared32(pass + L::kLast) != 0u;  // uniform over the block
        up = kSliceScale && wgmma::LdShared32(pass + L::kUp + 4 * warp) != 0u;
        wgmma::WgmmaWaitAll();
        wgmma::PinAll(acc);
        if (up) {  // the products in units of the slice scales
          if (x_row % 2 == 0) {
            AddScaledRowsShared<kElems, false, true>(part, acc, sa, sb, stage + xs_at, q);
          } else {
            AddScaledRowsShared<kElems, false>(part, acc, sa, sb, stage + xs_at, q);
          }
        } else if (x_row % 2 == 0) {  // uniform; the scales 8-byte aligned
          rs::AddScaledShared(part, acc, sa, sb, stage + xs_at, q, kRsTokens);
        } else {
          AddScaledRowsShared(part, acc, sa, sb, stage + xs_at, q);
        }
        __syncwarp();  // the warp's reads of the stage done
        if (lane == 0) tma::BarrierArriveAt(empty_at(j));
        ++j;
        if (last) ++c;
      }
      // total = part (the first slice: -0 + part) or total + part; where `up`, part · slice scale
      // (the part in units of 1, exactly) added in one rounding, as the add's.
#pragma unroll
      for (int i = 0; i < kElems / 4; ++i) {
        const uint32_t at_i = totals + i * 128 * 16;
        const uint4 old = first_slice ? make_uint4(0x80000000u, 0x80000000u, 0x80000000u, 0x80000000u)
                                      : wgmma::LdShared128(at_i);
        float sum[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float total = __uint_as_float(e == 0 ? old.x : e == 1 ? old.y : e == 2 ? old.z : old.w);
          sum[e] = up ? __fmaf_rn(part[4 * i + e], e < 2 ? sa : sb, total) : __fadd_rn(total, part[4 * i + e]);
          part[4 * i + e] = 0.f;
        }
        wgmma::StShared128(at_i, make_uint4(__float_as_uint(sum[0]), __float_as_uint(sum[1]), __float_as_uint(sum[2]),
                                            __float_as_uint(sum[3])));
      }
    }
#pragma unroll
    for (int i = 0; i < kElems / 4; ++i) {  // the totals into acc (free after the last MMAs), stored
      const uint4 v = wgmma::LdShared128(totals + i * 128 * 16);
      acc[4 * i] = __uint_as_float(v.x);
      acc[4 * i + 1] = __uint_as_float(v.y);
      acc[4 * i + 2] = __uint_as_float(v.z);
      acc[4 * i + 3] = __uint_as_float(v.w);
    }
    const Params tp = TileParams<Kind::kFp4>(ep, ExpertTile{t.expert, x_row, min(rows, kRsTokens), 0});
    wgmma::StoreBlockResult<kRsTokens>(tp, n0 + local_a, 0, q, [&](int i) { return acc[i]; });
  }
#endif
}

// ---- host side ---------------------------------------------------------------------------------

enum class Path : uint8_t { kSimt, kSplitBf16, kFp8 };

// The kernels a weight of this kind, scale dtype and K takes under `math`. Both tensor-core paths
// need K <= 8192 (the partial sums of at most 16 slices fit the block's shared memory). The
// split-BF16 path takes BF16 weights and FP8 / FP4 weights with e8m0 scales (an f32 scale need
// not keep the weight exact in BF16); the FP8 path takes FP8 / FP4 weights with either scale
// dtype (its scales are applied in f32 after the MMAs), and sends BF16 weights to split-BF16.
Path PathFor(LinearMath math, Kind kind, bool scale_f32, int64_t k) {
  if (math == LinearMath::kSimtF32 || mma::MakeLayout(k).slices > mma::kMaxSlices) return Path::kSimt;
  const bool quantized = kind == Kind::kFp8 || kind == Kind::kFp4;
  if (math == LinearMath::kFp8Act && quantized) return Path::kFp8;
  if (kind == Kind::kBF16 || (quantized && !scale_f32)) return Path::kSplitBf16;
  return Path::kSimt;
}

// Whether GroupedLinear's products of p take LaunchSplitGrouped (the warpgroup-MMA split-BF16
// kernels): the split-BF16 path and wgmma_split::Usable (FP8 weights only). LaunchKind's choice,
// and what round_x_to_bf16 requires.
bool SplitGroupedRuns(const Params& p, Kind kind, int64_t groups, LinearMath math) {
  return PathFor(math, kind, p.scale_f32, p.k) == Path::kSplitBf16 && wgmma_split::Usable(p, kind, groups);
}

int64_t MmaRowBlocks(int64_t n, int64_t k) {
  return CeilDiv(CeilDiv(n, mma::kRows), mma::MakeLayout(k).tiles_per_block);
}

[[noreturn]] void Fail(const char* what) { ThrowCudaError(__FILE__, __LINE__, "cuda::Linear", what); }

// Whether the calls of this thread may take the batch-variant kernels (BatchVariantKernelsScope).
thread_local bool t_batch_variant_allowed = false;

// A kernel choice: the environment's DEEPINFER_* switch (0 or 1, `unset` where it is unset or
// empty; -1 lets the caller decide; any other value throws), read once at its first use, and a
// test's override for the whole process (SetForTesting: -1 the environment again, 0 off, 1 on).
class KernelSwitch {
 public:
  // follows_scope: unset in the environment, the switch is on inside an allowing
  // BatchVariantKernelsScope (and `unset` elsewhere).
  constexpr KernelSwitch(const char* name, int unset, bool follows_scope = false)
      : name_(name), unset_(unset), follows_scope_(follows_scope) {}
  // The tests' choice where they made one, else the environment's, else the scope's: -1, 0 or 1.
  int Mode() const {
    const int test = test_.load();
    if (test >= 0) return test;
    const int env = FromEnvironment();
    if (env != kUnset) return env;
    return follows_scope_ && t_batch_variant_allowed ? 1 : unset_;
  }
  bool On() const { return Mode() == 1; }
  // `who`: the test hook's name, for its error.
  void SetForTesting(int mode, const char* who) {
    if (mode < -1 || mode > 1) Fail((std::string(who) + " takes -1, 0 or 1").c_str());
    test_.store(mode);
  }

 private:
  static constexpr int kUnread = -2;
  static constexpr int kUnset = -3;  // the variable is unset or empty
  int FromEnvironment() const {
    int v = env_.load();
    if (v == kUnread) {  // concurrent first reads compute the same value
      const char* text = std::getenv(name_);
      v = text == nullptr || *text == '\0' ? kUnset : EnvSwitch(name_, false, "cuda::Linear") ? 1 : 0;
      env_.store(v);
    }
    return v;
  }
  const char* name_;
  int unset_;
  bool follows_scope_;
  mutable std::atomic<int> env_{kUnread};
  std::atomic<int> test_{-1};
};

Kind KindOf(const DeviceWeight& w) {
  switch (w.format) {
    case DeviceWeight::Format::kDense:
      switch (w.dtype) {
        case DType::kF32: return Kind::kF32;
        case DType::kBF16: return Kind::kBF16;
        case DType::kF16: return Kind::kF16;
        default: Fail("dense weight dtype must be F32, BF16 or F16");
      }
    case DeviceWeight::Format::kFp8: return Kind::kFp8;
    case DeviceWeight::Format::kFp4: return Kind::kFp4;
  }
  Fail("unknown weight format");
}

// p's FP4 nibble layout from w's: the rows as stored, or chunk-major with sign-split words
// (DeviceWeight::data_chunk_stride != 0).
void SetNibbleLayout(const DeviceWeight& w, Params& p) {
  p.w_chunk_bytes = w.data_chunk_stride != 0 ? w.data_chunk_stride : wgmma::kChunk / 2;
  p.w_sign_split = w.data_chunk_stride != 0;
}

// Validates `w` and fills the weight part of `p`.
Kind SetWeight(const DeviceWeight& w, Params& p) {
  const Kind kind = KindOf(w);
  const int64_t in = w.in_features, out = w.out_features;
  if (in < 0 || out < 0) Fail("negative weight shape");
  if (w.data == nullptr && in > 0 && out > 0) Fail("weight data is null");
  const int64_t row_bytes = w.data_row_stride * RowElementBytes(kind);
  if (kind == Kind::kFp4) {
    if (in % kFp4Block != 0) Fail("FP4 weight in_features must be a multiple of 32");
    if (w.data_chunk_stride != 0) {
      if (in % wgmma::kChunk != 0 || out % wgmma::rs::kRows != 0 || w.data_row_stride != wgmma::kChunk / 2 ||
          w.data_chunk_stride < out * (wgmma::kChunk / 2) || w.data_chunk_stride % 16 != 0 ||
          w.data_chunk_stride > 0xffffffffLL) {
        Fail("chunk-major FP4 weight: in_features a multiple of 128, out_features of 64, a row stride of 64 bytes "
             "and a chunk stride of at least 64 bytes a row, a multiple of 16, under 4 GiB");
      }
    } else if (w.data_row_stride < in / 2) {
      Fail("FP4 weight row stride below in_features / 2 bytes");
    }
  } else if (w.data_row_stride < in) {
    Fail("weight row stride below in_features");
  } else if (w.data_chunk_stride != 0) {
    Fail("a chunk stride is an FP4 weight's");
  }
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_row_bytes = row_bytes;
  p.w_vec = Aligned(w.data, row_bytes, VecAlign(kind));
  p.w_vec16 = Aligned(w.data, row_bytes, 16);
  SetNibbleLayout(w, p);
  p.scale = nullptr;
  p.scale_row_stride = 0;
  p.scale_f32 = false;
  if (kind == Kind::kFp8 || kind == Kind::kFp4) {
    if (w.scale_dtype != DType::kF8E8M0 && w.scale_dtype != DType::kF32) Fail("scale dtype must be F8_E8M0 or F32");
    if (w.scale == nullptr && in > 0 && out > 0) Fail("weight scale is null");
    const int64_t scale_cols = kind == Kind::kFp8 ? CeilDiv(in, kFp8Block) : in / kFp4Block;
    if (w.scale_row_stride < scale_cols) Fail("scale row stride below the scale columns");
    p.scale = static_cast<const uint8_t*>(w.scale);
    p.scale_row_stride = w.scale_row_stride;
    p.scale_f32 = w.scale_dtype == DType::kF32;
  }
  p.k = in;
  p.num_slabs = CeilDiv(in, kSlab);
  return kind;
}

// DEEPINFER_GEMV selects the f32-SIMT GEMVs' way of streaming, read once per process:
//   auto (default)  Linear: the ring with staged x where the output blocks fit in one wave of
//                   resident blocks, else the register path (docs/performance.md, version 3c);
//   register        version 2: the register path everywhere, x through L1.
// The experts' GEMV takes the register path either way: version 3d's staged experts kernel
// measured slower at every batch (docs/performance.md) and was removed.
// Both give the same bits; the switch exists to measure them side by side in one run
// (scripts/gpu-bench.sh --steps). Anything else is an error at the first GEMV.
bool GemvStaging() {
  static const int choice = [] {
    const char* v = std::getenv("DEEPINFER_GEMV");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return 1;
    if (std::strcmp(v, "register") == 0) return 0;
    return -1;
  }();
  if (choice < 0) Fail("DEEPINFER_GEMV must be auto or register");
  return choice == 1;
}

// The current device's id and its multiprocessor count.
std::pair<int, int> CurrentDeviceSms() {
  int device = 0, sms = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return {device, sms};
}

// Raises kKernel's dynamic shared-memory limit to `bytes` (past the default 48 KiB) on `device`,
// once per device id below 64 (every call above).
template <auto kKernel>
void AllowDynamicSmem(int device, int64_t bytes) {
  static std::atomic<uint64_t> done{0};
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (done.load() & bit) == 0) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                  "cudaFuncSetAttribute");
    done.fetch_or(bit);
  }
}

// kKernel's resident blocks per SM at `threads` threads and `smem` bytes of dynamic shared memory,
// from the occupancy API once per (kernel, smem) (the devices of one process are alike).
template <auto kKernel>
int BlocksPerSm(int threads, size_t smem) {
  static std::mutex mu;
  static std::vector<std::pair<size_t, int>> known;  // (smem, blocks); threads is fixed per kernel
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [bytes, blocks] : known) {
    if (bytes == smem) return blocks;
  }
  int blocks = 0;
  DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, threads, smem),
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  known.emplace_back(smem, blocks);
  return blocks;
}

template <Kind K, int MT>
void LaunchGemv(Params p, int64_t groups, cudaStream_t stream) {
  constexpr int kRpw = MT <= 2 ? 2 : 4;
  constexpr int kThreads = kGemvWarps * kWarpSize;
  constexpr int64_t kRingBytes = kGemvWarps * static_cast<int64_t>(sizeof(GemvWarpSmem<K, kRpw>));
  // What measured fastest (docs/performance.md, versions 2-3b): the ring with x staged where
  // every output block fits in one wave of resident blocks (the small GEMVs, bound by latency);
  // elsewhere the register path, one output block per block, x through L1 (many blocks in flight
  // already hide the latency, and the ring's shared memory costs resident blocks).
  const int64_t num_blocks = CeilDiv(p.n, kGemvWarps * kRpw);
  p.x_smem_ld = p.num_slabs * kSlab;
  p.gemv_staged = false;
  size_t smem = 0;
  if (GemvStaging() && GemvRingUsable<K, kRpw>(p) && p.x_vec && p.m * p.x_smem_ld * 4 <= kGemvXSmemBytes) {
    const auto [device, sms] = CurrentDeviceSms();
    AllowDynamicSmem<LinearGemvKernel<K, MT, kRpw>>(device, kRingBytes + kGemvXSmemBytes);
    const size_t staged = static_cast<size_t>(kRingBytes + p.m * p.x_smem_ld * 4);
    const int per_sm = BlocksPerSm<LinearGemvKernel<K, MT, kRpw>>(kThreads, staged);
    if (num_blocks * groups <= static_cast<int64_t>(per_sm) * sms) {
      p.gemv_staged = true;
      smem = staged;
    }
  }
  const dim3 grid(static_cast<unsigned>(num_blocks), static_cast<unsigned>(groups));
  LinearGemvKernel<K, MT, kRpw><<<grid, kThreads, smem, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear gemv");
}

template <Kind K, int TM>
void LaunchMma(const Params& p, int64_t groups, cudaStream_t stream, Path path) {
  const int64_t tok_blocks = CeilDiv(p.m, mma::kTok * TM);
  if (tok_blocks > 65535) Fail("too many rows for one launch");
  const dim3 grid(static_cast<unsigned>(MmaRowBlocks(p.n, p.k)), static_cast<unsigned>(tok_blocks),
                  static_cast<unsigned>(groups));
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    if (path == Path::kFp8) {
      mma::fp8::LinearKernel<K, TM><<<grid, mma::kThreads, 0, stream>>>(p);
      DI_CUDA_LAUNCH_CHECK("cuda::Linear mma fp8");
      return;
    }
  }
  mma::LinearKernel<K, TM><<<grid, mma::kThreads, 0, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear mma");
}

// act_quant of x's m rows (row stride ldx, K = k) into the codes scratch laid out for m_pad rows,
// each chunk's codes in the FP4 order (wgmma::Fp4OrderUnit) for products of FP4 weights; zeroes
// zero_ints[0, zero_count) too (the next GEMM's arrival counts, SumSlicesInLastBlock).
wgmma::GemmArgs QuantizeIntoScratch(const float* x, int64_t ldx, int64_t m, int64_t m_pad, int64_t k, bool x_vec,
                                    bool fp4_order, void* scratch, cudaStream_t stream, int* zero_ints = nullptr,
                                    int64_t zero_count = 0) {
  const wgmma::GemmArgs a = wgmma::ScratchLayout(scratch, m_pad, k);
  const int64_t quant_blocks = std::max<int64_t>(CeilDiv(m_pad * (k / wgmma::kChunk), 256 / kWarpSize), 1);
  if (quant_blocks > 0x7fffffff || zero_count > 0x7fffffff) Fail("too many rows for one launch");
  wgmma::QuantizeRowsKernel<<<static_cast<unsigned>(quant_blocks), 256, 0, stream>>>(
      x, ldx, m, m_pad, k, x_vec, fp4_order, const_cast<uint8_t*>(a.codes), const_cast<float*>(a.xscales), zero_ints,
      static_cast<int>(zero_count));
  DI_CUDA_LAUNCH_CHECK("cuda::Linear act_quant");
  return a;
}

// Linear's wgmma scratch for m rows of an [n, k] weight: the codes and scales, then, where the
// blocks of whole rows would not fill the device (decode-sized m), the partial sums of one block
// per 512-column slice. The same on every call for the same (m, n, k) and device.
struct WgmmaLinearLayout {
  int device = 0, sms = 0;  // the current device, which the layout was cut for
  int slices = 1;           // 1: every block takes all of K
  size_t codes_bytes = 0;   // wgmma::ScratchBytes(m, k), a multiple of 256
  size_t arrivals_offset = 0;  // split: the tiles' arrival counts (int32), after the partial sums
  int64_t arrivals = 0;        // split: how many (a tile of 128 rows by 8 tokens each, the most)
  size_t bytes = 0;         // in all
};

// DEEPINFER_LINEAR_SLICE_MAX_ROWS=R (read once; unset: 64): Linear's wgmma products of more than
// R rows are never split into K slices (those of at most R rows are, where their blocks of whole
// rows number fewer than the device's SMs). Each split block writes its 512-column slice's partial
// sums (m·n f32 a slice) for SumSlicesKernel to add, so the partials' traffic, written and read,
// is m/32 times the weight's bytes: at batch 256 wo_b's 16 slices wrote and read 64 MiB beside its
// 32 MiB (ncu, H100, 2026-12-07: 59.5 us for the slices, 28.1 for their sum). Split or not, the
// same adds (linear_wgmma.cuh). Measured side by side (H100, 2026-12-07, docs/performance.md
// version 65): decode steps at batch 64 / 128 / 256 4.507 / 5.979 / 8.074 ms unbounded, 4.636 /
// 5.861 / 7.767 with R = 32, 4.514 / 5.985 / 7.756 with R = 128; in a second call 4.557 / 5.868 /
// 7.778 with R = 64 against 4.506 / 6.008 / 8.091 unbounded. Tests override it
// (SetLinearSliceMaxRowsForTesting).
std::atomic<int64_t> g_linear_slice_max_rows_for_testing{-1};

int64_t LinearSliceMaxRows() {
  static const int64_t rows = ParseCountSwitch("DEEPINFER_LINEAR_SLICE_MAX_ROWS",
                                               std::getenv("DEEPINFER_LINEAR_SLICE_MAX_ROWS"), 64, "a count of rows");
  const int64_t chosen = g_linear_slice_max_rows_for_testing.load();
  return chosen >= 0 ? chosen : rows;
}

// DEEPINFER_LINEAR_SLICE_MIN_BLOCKS=B (read once; unset or 0: none): products of more than
// LinearSliceMaxRows() rows are still split where their blocks of whole rows number fewer than B.
// At batch 256 unsplit, wq_a (16 blocks) and wkv ran slower than split (ncu, H100, 2026-12-07:
// 19.5 against 7.8 + 5.2 us, 19.7 against 10.2 + 6.2), their few blocks bound by the MMAs; the
// products of 64 blocks or more ran 2-2.6 times faster unsplit. Off until measured in a step.
int64_t LinearSliceMinBlocks() {
  static const int64_t blocks = ParseCountSwitch(
      "DEEPINFER_LINEAR_SLICE_MIN_BLOCKS", std::getenv("DEEPINFER_LINEAR_SLICE_MIN_BLOCKS"), 0, "a count of blocks");
  return blocks;
}

WgmmaLinearLayout MakeWgmmaLinearLayout(int64_t m, int64_t n, int64_t k) {
  WgmmaLinearLayout l;
  std::tie(l.device, l.sms) = CurrentDeviceSms();
  l.codes_bytes = CeilDiv(wgmma::ScratchBytes(m, k), 256) * 256;
  l.bytes = l.codes_bytes;
  const int64_t slices = CeilDiv(k, mma::kSlice);
  // Unsplit, more than 64 rows take the TMA kernel's 128-token tiles at one block per SM where it
  // is on (linear_tma.cuh), else 64-token tiles; the count of either decides the split (and so
  // the scratch), whatever the weight (a weight the TMA kernel does not take runs the 64-token
  // tiles unsplit: the same bits as split).
  const int64_t tile_tokens = m > wgmma::kTokens && !tma::TurnedOff() ? tma::kLinearTokens : wgmma::kTokens;
  const int64_t blocks = CeilDiv(n, wgmma::kBlockRows) * CeilDiv(wgmma::PaddedRows(m), tile_tokens);
  if (slices > 1 && blocks < l.sms && (m <= LinearSliceMaxRows() || blocks < LinearSliceMinBlocks())) {
    l.slices = static_cast<int>(slices);
    l.bytes += static_cast<size_t>(CeilDiv(slices * m * n * 4, 256) * 256);
    l.arrivals_offset = l.bytes;
    l.arrivals = CeilDiv(n, wgmma::kBlockRows) * CeilDiv(wgmma::PaddedRows(m), 8);
    l.bytes += static_cast<size_t>(CeilDiv(l.arrivals * 4, 256) * 256);
  }
  return l;
}

// TMA-fed kernels launched by this process (TmaLaunchesForTesting).
std::atomic<uint64_t> g_tma_launches{0};

// DEEPINFER_LINEAR_SMALL_TILES (read once; unset or 1: on, 0: off) runs Linear's FP8-input
// warpgroup-MMA products of at most 8 rows on 8-token tiles (m64n8k32: the same bits, a sixteenth
// of the MMA work at batch 1; measured 2026-12-02: batch-1 `linear` 0.380 -> 0.332 ms over 3 Flash
// layers, docs/performance.md version 24). Tests override it (SetLinearSmallTilesForTesting).
std::atomic<uint64_t> g_linear_small_tile_launches{0};  // launches of it (tests)
KernelSwitch g_linear_small_tiles{"DEEPINFER_LINEAR_SMALL_TILES", 1};

// The driver's cuTensorMapEncodeTiled, through the runtime (the CUDA driver library is not linked):
// null where the driver lacks it.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn EncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiledFn{nullptr};
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A tensor map of `rank` (2 or 3) dimensions, dims[0] innermost (elements), strides[i] the bytes
// between steps of dimension i + 1, read in boxes of box[] elements; zeros outside the tensor.
CUtensorMap TensorMap(const void* base, CUtensorMapDataType dtype, int rank, const uint64_t* dims,
                      const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  const EncodeTiledFn encode = EncodeTiled();
  if (encode == nullptr) Fail("the driver has no cuTensorMapEncodeTiled");
  CUtensorMap map;
  cuuint64_t d[3], st[2];
  cuuint32_t b[3], element_strides[3];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    element_strides[i] = 1;
    if (i + 1 < rank) st[i] = strides[i];
  }
  const CUresult r = encode(&map, dtype, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, b,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    ThrowCudaError(__FILE__, __LINE__, "cuda::Linear",
                   ("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ")").c_str());
  }
  return map;
}

// The maps of the x side of the TMA kernels: codes [m_pad][k] e4m3 in swizzled boxes of `tokens`
// rows × 128 bytes, scales [k / 128][m_pad] f32 in boxes of 1 × (`tokens` + tma::kXsAlign) (the
// kernels load them from an aligned row: tma::Ring::Load).
std::pair<CUtensorMap, CUtensorMap> XTensorMaps(const wgmma::GemmArgs& a, int64_t k, uint32_t tokens) {
  const uint64_t m_pad = static_cast<uint64_t>(a.m_pad), kk = static_cast<uint64_t>(k);
  const uint64_t code_dims[2] = {kk, m_pad}, code_strides[1] = {kk};
  const uint32_t code_box[2] = {tma::kChunk, tokens};
  const uint64_t scale_dims[2] = {m_pad, kk / tma::kChunk}, scale_strides[1] = {m_pad * 4};
  const uint32_t scale_box[2] = {tokens + tma::kXsAlign, 1};
  return {TensorMap(a.codes, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, code_dims, code_strides, code_box,
                    CU_TENSOR_MAP_SWIZZLE_128B),
          TensorMap(a.xscales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, scale_dims, scale_strides, scale_box,
                    CU_TENSOR_MAP_SWIZZLE_NONE)};
}

// DEEPINFER_TMA_WS (read once; unset or 1: on, 0: off) runs Linear's TMA-fed products on
// TmaLinearWsKernel (persistent blocks, a producer warpgroup; the same bits) instead of
// TmaLinearKernel, and the pre-folded experts' TMA-fed kernel in its warp-specialized form
// (ExpertsPreFoldedTmaKernel<kTok, true>). Tests override it (SetTmaWarpSpecializedForTesting).
KernelSwitch g_tma_warp_specialized{"DEEPINFER_TMA_WS", 1};
std::atomic<uint64_t> g_tma_ws_launches{0};  // launches of it (tests)

// DEEPINFER_TMA_STORE (read once; unset or 1: on, 0: off) lets TmaLinearWsKernel's output tiles
// (TmaLinearWsKernel<true>) and GroupedLinear's one-part BF16 kernel's (GroupedBf16WsKernel<1,
// false, true>; whole 128-row blocks per group) leave by TMA stores where y and its pitch are
// 16-byte aligned, instead of each thread's stores: the same values. Tests override it
// (SetTmaStoreForTesting).
KernelSwitch g_tma_store{"DEEPINFER_TMA_STORE", 1};
std::atomic<uint64_t> g_tma_store_launches{0};  // launches of TmaLinearWsKernel<true> (tests)
// Launches of GroupedBf16WsKernel<1, false, true> (tests); the same switch.
std::atomic<uint64_t> g_grouped_tma_store_launches{0};

// tma::TmaLinearWsKernel (or TmaLinearKernel) for p (FP8 weights, tma::Usable) over the codes and
// scales in a.
void LaunchTma(const Params& p, const wgmma::GemmArgs& a, int device, cudaStream_t stream) {
  const int64_t tok_blocks = CeilDiv(a.m_pad, tma::kLinearTokens);
  if (tok_blocks > 65535) Fail("too many rows for one launch");
  const uint64_t w_dims[2] = {static_cast<uint64_t>(p.k), static_cast<uint64_t>(p.n)};
  const uint64_t w_strides[1] = {static_cast<uint64_t>(p.w_row_bytes)};
  const uint32_t w_box[2] = {tma::kChunk, tma::kBlockRows};
  const CUtensorMap w_map =
      TensorMap(p.w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w_dims, w_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B);
  const auto [x_map, xs_map] = XTensorMaps(a, p.k, tma::kLinearTokens);
  const int64_t n_blocks = CeilDiv(p.n, tma::kBlockRows);
  if (g_tma_warp_specialized.On() && n_blocks * tok_blocks <= 0x7fffffff) {
    const int sms = CurrentDeviceSms().second;
    const int64_t tiles = n_blocks * tok_blocks;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, sms));
    if (g_tma_store.On() && reinterpret_cast<uintptr_t>(p.y) % 16 == 0 && p.ldy % 4 == 0) {
      // y as FLOAT32 [m][n] with pitch ldy, boxes of 32 rows (f32) × 64 tokens, as the kernel stages them.
      const uint64_t y_dims[2] = {static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m)};
      const uint64_t y_strides[1] = {static_cast<uint64_t>(p.ldy) * 4};
      const uint32_t y_box[2] = {tma::kStoreBoxRows, wgmma::kRowsPerGroup};
      const CUtensorMap y_map =
          TensorMap(p.y, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, y_dims, y_strides, y_box, CU_TENSOR_MAP_SWIZZLE_128B);
      AllowDynamicSmem<tma::TmaLinearWsKernel<true>>(device, tma::kLinearStoreSmemBytes);
      tma::TmaLinearWsKernel<true><<<grid, tma::kWsThreads, tma::kLinearStoreSmemBytes, stream>>>(
          w_map, x_map, xs_map, y_map, p, static_cast<int>(n_blocks), static_cast<int>(tiles));
      g_tma_store_launches.fetch_add(1);
    } else {
      AllowDynamicSmem<tma::TmaLinearWsKernel<false>>(device, tma::kLinearSmemBytes);
      tma::TmaLinearWsKernel<false><<<grid, tma::kWsThreads, tma::kLinearSmemBytes, stream>>>(
          w_map, x_map, xs_map, xs_map, p, static_cast<int>(n_blocks), static_cast<int>(tiles));
    }
    DI_CUDA_LAUNCH_CHECK("cuda::Linear TMA, warp-specialized");
    g_tma_ws_launches.fetch_add(1);
  } else {
    AllowDynamicSmem<tma::TmaLinearKernel>(device, tma::kLinearSmemBytes);
    const dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(tok_blocks));
    tma::TmaLinearKernel<<<grid, tma::kThreads, tma::kLinearSmemBytes, stream>>>(w_map, x_map, xs_map, p);
    DI_CUDA_LAUNCH_CHECK("cuda::Linear TMA");
  }
  g_tma_launches.fetch_add(1);
}

// DEEPINFER_LINEAR_FUSED (read once; unset or 0: off, 1: on) runs Linear's sliced wgmma products,
// and its products of 1-8 rows, as one launch (wgmma::WgmmaLinearFusedKernel: x quantized in the
// blocks at 1-8 rows, the slices summed within thread-block clusters; the same bits). Off: it was
// slower at every decode batch on the H200 (docs/performance.md, version 43: 1.457 -> 1.471,
// 5.476 -> 5.598, 9.529 -> 9.913 ms at batch 1 / 64 / 256). Tests override it
// (SetLinearFusedForTesting).
std::atomic<uint64_t> g_linear_fused_launches{0};  // launches of it (tests)
KernelSwitch g_linear_fused{"DEEPINFER_LINEAR_FUSED", 0};

// DEEPINFER_LINEAR_SLICE_SUM_IN_BLOCK (read once; unset or 0: off, 1: on): Linear's K-split wgmma
// products of 1-8 rows (8-token tiles) add their slices in each tile's last block to arrive
// (SumSlicesInLastBlock, the partials read back from L2) instead of SumSlicesKernel's launch: the
// same bits, one launch fewer a split product (6 on batch 1's critical path of 3 Flash layers,
// 3-4.7 us each under ncu, 2026-12-07). Off until measured in a step. Tests override it
// (SetLinearSliceSumInBlockForTesting).
std::atomic<uint64_t> g_linear_slice_sum_in_block_launches{0};  // launches of it (tests)
KernelSwitch g_linear_slice_sum_in_block{"DEEPINFER_LINEAR_SLICE_SUM_IN_BLOCK", 0};

// DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK (read once; unset or 0: off, 1: on): Linear's wgmma products
// of 1-8 rows whose blocks take at most XPanel::kMaxChunks chunks run as one launch without
// clusters: WgmmaLinearFusedKernel<K, 8> quantizes x in each block (no act_quant launch) and,
// where K is split, the tiles' last blocks add the slices from the partials (arrival counts from
// TakeArrivals). The same bits; two launches fewer a split product (QuantizeRowsKernel,
// SumSlicesKernel), one an unsplit one: 7 act_quant and 6 sums on batch 1's longest path of 3
// Flash layers (2026-12-07). Where DEEPINFER_LINEAR_FUSED is on, its cluster launch is taken
// instead. Off until measured in a step. Tests override it (SetLinearQuantizeInBlockForTesting).
std::atomic<uint64_t> g_linear_quantize_in_block_launches{0};  // launches of it (tests)
KernelSwitch g_linear_quantize_in_block{"DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK", 0};

// Arrival counts that no launch before the GEMM zeroes: one pool of kArrivalPool ints a device,
// zeroed once, handed out in turn (a launch's range is captured into a CUDA graph with it). Each
// tile's last block sets its count back to 0 (SumSlicesInLastBlock with reset), so a range is zero
// again once its launch has completed; it is handed out again only after kArrivalPool more counts,
// thousands of launches later (a decode step makes ~200). Returns null, handing out nothing, where
// the pool does not exist yet and `stream` is capturing (its cudaMalloc would break the capture):
// the caller then takes the act_quant path.
constexpr int64_t kArrivalPool = int64_t{1} << 20;

int* TakeArrivals(int device, int64_t count, cudaStream_t stream) {
  if (count > kArrivalPool) Fail("more arrival counts than the pool holds");
  static std::mutex mu;
  static std::map<int, std::pair<int*, int64_t>> pools;  // device -> (counts, next free)
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(device);
  if (it == pools.end()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) return nullptr;
    void* counts = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&counts, static_cast<size_t>(kArrivalPool) * 4), "cudaMalloc arrival counts");
    DI_CUDA_CHECK(cudaMemset(counts, 0, static_cast<size_t>(kArrivalPool) * 4), "cudaMemset arrival counts");
    DI_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // zero before any stream uses them
    it = pools.emplace(device, std::make_pair(static_cast<int*>(counts), int64_t{0})).first;
  }
  auto& [counts, next] = it->second;
  if (next + count > kArrivalPool) next = 0;
  int* range = counts + next;
  next += count;
  return range;
}

// A launch of `threads`-thread blocks on `grid` in clusters of `cluster` blocks (no cluster attribute
// where that is one block), `smem` bytes of dynamic shared memory each, for cudaLaunchKernelEx and
// cudaOccupancyMaxActiveClusters.
struct ClusterLaunch {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1] = {};
  ClusterLaunch(dim3 grid, unsigned threads, dim3 cluster, int smem, cudaStream_t stream) {
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster.x;
    attribute[0].val.clusterDim.y = cluster.y;
    attribute[0].val.clusterDim.z = cluster.z;
    config.attrs = attribute;
    config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 1 : 0;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // config points at attribute
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// wgmma::kThreads-thread blocks on `grid` in clusters of (1, 1, grid.z): a product's K slices.
struct SliceClusterLaunch : ClusterLaunch {
  SliceClusterLaunch(dim3 grid, int smem, cudaStream_t stream)
      : ClusterLaunch(grid, wgmma::kThreads, dim3(1, 1, grid.z), smem, stream) {}
};

// Whether clusters of (1, 1, slices) blocks of kKernel at `smem` bytes of dynamic shared memory can
// be resident on `device` (more than 8 blocks is a non-portable cluster size, which the kernel
// is allowed here); the occupancy API's answers are kept per (device, slices, smem), a failed
// query is not.
template <auto kKernel>
bool ClustersFit(int device, int slices, int smem) {
  static std::mutex mu;
  static std::vector<std::array<int, 4>> known;  // (device, slices, smem, fits)
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known) {
    if (k[0] == device && k[1] == slices && k[2] == smem) return k[3] != 0;
  }
  if (slices > 8) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                  "cudaFuncSetAttribute");
  }
  const SliceClusterLaunch launch(dim3(1, 1, static_cast<unsigned>(slices)), smem, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &launch.config) != cudaSuccess) {
    (void)cudaGetLastError();  // the query's own error (a size the device does not take): not kept
    return false;              // nor the answer, so a later call asks again
  }
  known.push_back({device, slices, smem, clusters > 0 ? 1 : 0});
  return clusters > 0;
}

// WgmmaLinearFusedKernel<K, kTok> over `layout`'s slices (`a`: the codes scratch at kTok 64,
// unused at 8). Returns false, launching nothing, where the slices exceed the kernel's cluster
// bound or such clusters do not fit the device.
template <Kind K, int kTok>
bool LaunchWgmmaFused(const Params& p, const wgmma::GemmArgs& a, const WgmmaLinearLayout& layout,
                      cudaStream_t stream) {
  constexpr auto kKernel = wgmma::WgmmaLinearFusedKernel<K, kTok>;
  constexpr int kSmem = kTok == wgmma::XPanel::kTokens ? wgmma::XPanel::Bytes<K>() : wgmma::SmemLayout<K>::kBytes;
  if (layout.slices > wgmma::kMaxClusterSlices) return false;
  if (kTok == wgmma::XPanel::kTokens && p.m > kTok) Fail("the fused Linear's panel holds 8 rows");
  AllowDynamicSmem<kKernel>(layout.device, kSmem);
  if (layout.slices > 1 && !ClustersFit<kKernel>(layout.device, layout.slices, kSmem)) return false;
  const SliceClusterLaunch launch(dim3(static_cast<unsigned>(CeilDiv(p.n, wgmma::kBlockRows)),
                                       static_cast<unsigned>(CeilDiv(p.m, kTok)), static_cast<unsigned>(layout.slices)),
                                  kSmem, stream);
  DI_CUDA_CHECK(cudaLaunchKernelEx(&launch.config, kKernel, p, a, static_cast<float*>(nullptr),
                                   static_cast<int*>(nullptr)),
                "cuda::Linear wgmma, fused");
  g_linear_fused_launches.fetch_add(1);
  return true;
}

// WgmmaLinearFusedKernel<K, 8> without clusters (DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK): x quantized
// in the blocks; split products' slices added by each tile's last block. Returns false, launching
// nothing, where a split product gets no arrival counts (TakeArrivals).
template <Kind K>
bool LaunchWgmmaPanel(const Params& p, const WgmmaLinearLayout& layout, cudaStream_t stream) {
  constexpr auto kKernel = wgmma::WgmmaLinearFusedKernel<K, wgmma::XPanel::kTokens>;
  constexpr int kSmem = wgmma::XPanel::Bytes<K>();
  if (p.m > wgmma::XPanel::kTokens) Fail("the fused Linear's panel holds 8 rows");
  float* partials = nullptr;
  int* arrivals = nullptr;
  if (layout.slices > 1) {
    arrivals = TakeArrivals(layout.device, CeilDiv(p.n, wgmma::kBlockRows), stream);
    if (arrivals == nullptr) return false;
    partials = reinterpret_cast<float*>(static_cast<uint8_t*>(p.scratch) + layout.codes_bytes);
  }
  AllowDynamicSmem<kKernel>(layout.device, kSmem);
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, wgmma::kBlockRows)), 1, static_cast<unsigned>(layout.slices));
  kKernel<<<grid, wgmma::kThreads, kSmem, stream>>>(p, wgmma::GemmArgs{}, partials, arrivals);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear wgmma, x quantized in the blocks");
  g_linear_quantize_in_block_launches.fetch_add(1);
  return true;
}

// wgmma::SumSlicesKernel over y [m][n] (row stride ldy) from `slices` planes of partial sums
// [m][n] at `partials`, on at most 8 blocks an SM of `sms`.
void LaunchSumSlices(const float* partials, int slices, int64_t m, int64_t n, float* y, int64_t ldy, int sms,
                     cudaStream_t stream, const char* what) {
  const int64_t blocks = std::min<int64_t>(CeilDiv(m * n, int64_t{256}), int64_t{sms} * 8);
  wgmma::SumSlicesKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(partials, slices, m, n, y, ldy);
  DI_CUDA_LAUNCH_CHECK(what);
}

// Linear's wgmma path (linear_wgmma.cuh): act_quant of x into p.scratch, then the GEMM (and the
// slices' sum where the layout splits K). Unsplit FP8 products take the TMA kernel where it is
// usable (linear_tma.cuh; the same bits). With DEEPINFER_LINEAR_FUSED, products of 1-8 rows whose
// blocks take at most XPanel::kMaxChunks chunks, and other sliced products, run as one launch
// (after act_quant for the latter): the same bits.
template <Kind K>
void LaunchWgmma(const Params& p, const WgmmaLinearLayout& layout, cudaStream_t stream) {
  const int64_t m_pad = wgmma::PaddedRows(p.m);
  if (m_pad / wgmma::kTokens > 65535) Fail("too many rows for one launch");
  const bool small_tiles = p.m <= 8 && g_linear_small_tiles.On();
  const bool fused = g_linear_fused.On();
  const int64_t block_chunks = layout.slices > 1 ? mma::kSliceChunks : p.k / wgmma::kChunk;
  if (fused && small_tiles && block_chunks <= wgmma::XPanel::kMaxChunks &&
      LaunchWgmmaFused<K, wgmma::XPanel::kTokens>(p, wgmma::GemmArgs{}, layout, stream)) {
    g_linear_small_tile_launches.fetch_add(1);
    return;
  }
  if (!fused && small_tiles && block_chunks <= wgmma::XPanel::kMaxChunks && g_linear_quantize_in_block.On() &&
      LaunchWgmmaPanel<K>(p, layout, stream)) {
    g_linear_small_tile_launches.fetch_add(1);
    return;
  }
  // Split products of 1-8 rows whose tiles' last blocks add the slices
  // (DEEPINFER_LINEAR_SLICE_SUM_IN_BLOCK): their arrival counts, zeroed by the act_quant launch
  // before them. On 64-token tiles a last block would add 64 × 128 outputs of every slice alone,
  // ~5 us from L2 at an SM's share, about what SumSlicesKernel takes over the whole GPU.
  const bool fused_slices = fused && !small_tiles && layout.slices > 1;
  int* arrivals = layout.slices > 1 && small_tiles && g_linear_slice_sum_in_block.On()
                      ? reinterpret_cast<int*>(static_cast<uint8_t*>(p.scratch) + layout.arrivals_offset)
                      : nullptr;
  const wgmma::GemmArgs a = QuantizeIntoScratch(p.x, p.ldx, p.m, m_pad, p.k, p.x_vec, K == Kind::kFp4, p.scratch,
                                                stream, arrivals, arrivals != nullptr ? layout.arrivals : 0);
  if (layout.slices == 1 && tma::Usable(p, K) && EncodeTiled() != nullptr) {
    return LaunchTma(p, a, layout.device, stream);
  }
  if (fused_slices && LaunchWgmmaFused<K, wgmma::kTokens>(p, a, layout, stream)) return;
  float* partials =
      layout.slices > 1 ? reinterpret_cast<float*>(static_cast<uint8_t*>(p.scratch) + layout.codes_bytes) : nullptr;
  constexpr int kSmem = wgmma::SmemLayout<K>::kBytes;
  const unsigned row_blocks = static_cast<unsigned>(CeilDiv(p.n, wgmma::kBlockRows));
  if (small_tiles) {
    AllowDynamicSmem<wgmma::WgmmaLinearKernel<K, 8>>(layout.device, kSmem);
    const dim3 grid(row_blocks, 1, static_cast<unsigned>(layout.slices));
    wgmma::WgmmaLinearKernel<K, 8><<<grid, wgmma::kThreads, kSmem, stream>>>(p, a, partials, arrivals);
    DI_CUDA_LAUNCH_CHECK("cuda::Linear wgmma, 8-token tiles");
    g_linear_small_tile_launches.fetch_add(1);
  } else {
    AllowDynamicSmem<wgmma::WgmmaLinearKernel<K>>(layout.device, kSmem);
    const dim3 grid(row_blocks, static_cast<unsigned>(m_pad / wgmma::kTokens), static_cast<unsigned>(layout.slices));
    wgmma::WgmmaLinearKernel<K><<<grid, wgmma::kThreads, kSmem, stream>>>(p, a, partials, arrivals);
    DI_CUDA_LAUNCH_CHECK("cuda::Linear wgmma");
  }
  if (arrivals != nullptr) {
    g_linear_slice_sum_in_block_launches.fetch_add(1);
  } else if (layout.slices > 1) {
    LaunchSumSlices(partials, layout.slices, p.m, p.n, p.y, p.ldy, layout.sms, stream, "cuda::Linear wgmma slice sum");
  }
}

// DEEPINFER_GROUPED_HALF_BLOCKS (read once; unset or 1: on, 0: off) runs GroupedLinear's TMA-fed
// split-BF16 kernel on blocks of 64 weight rows (one warpgroup) where twice the 128-row grid still
// fits one wave (decode: `wo_a` at batch 1 is 64 blocks of 128 rows on 132 SMs); the same bits
// (measured 2026-12-02: decode `grouped_linear` 0.206 -> 0.184 ms at batch 1, 0.205 -> 0.185 at
// batch 64, docs/performance.md version 25). Tests override it (SetGroupedHalfBlocksForTesting).
std::atomic<uint64_t> g_grouped_half_block_launches{0};  // launches of it (tests)
KernelSwitch g_grouped_half_blocks{"DEEPINFER_GROUPED_HALF_BLOCKS", 1};

// DEEPINFER_GROUPED_SLICES (read once; unset or 1: on, 0: off): GroupedLinear's products of at most
// 8 rows on SplitBf16GroupedTmaSlicesKernel (8-token tiles of 64 weight rows, K's 512-column
// slices over a cluster) where the row blocks alone fit one wave (decode: `wo_a`); the same bits.
// Tests override it (SetGroupedSlicesForTesting).
std::atomic<uint64_t> g_grouped_sliced_launches{0};  // launches of it (tests)
KernelSwitch g_grouped_slices{"DEEPINFER_GROUPED_SLICES", 1};
constexpr int kGroupedCluster = 8;  // slices a cluster spreads: K <= 4096

// DEEPINFER_GROUPED_SLICES_LEAN (read once; unset or 1: on, 0: off): the K-slices kernel on its
// lean layout (wgmma_split::SlicesLayout: 2 stages and one tile set, 22.5 KiB, so 9 blocks an SM
// where the default layout's 47 KiB allow 4); the same bits. Measured on an H100 (2026-12-07,
// docs/performance.md version 67): `wo_a` at batch 1 32 -> 28 us a launch (ncu), the step 1.203
// -> 1.179 ms; batches of more than 8 rows do not take the kernel. Tests override it
// (SetGroupedSlicesLeanForTesting).
KernelSwitch g_grouped_slices_lean{"DEEPINFER_GROUPED_SLICES_LEAN", 1};
std::atomic<uint64_t> g_grouped_slices_lean_launches{0};  // launches of it (tests)

// DEEPINFER_GROUPED_SLICES_WIDE (read once; unset or 1: on, 0: off): the lean K slices on blocks of
// 128 weight rows (two warpgroups; 38 KiB, 5 blocks an SM) instead of 64. At batch 1 `wo_a` is
// then 64 clusters of 8, where an H100 holds 124 at once; on 64-row blocks it is 128 (ncu,
// 2026-12-07: two rounds, 28 µs). The same bits. Measured on an H100 (2026-12-07, docs/
// performance.md version 68): batch 1's step 1.174 -> 1.161 ms, `grouped_linear` 0.090 -> 0.081 ms
// (3 layers). Tests override it (SetGroupedSlicesWideForTesting).
KernelSwitch g_grouped_slices_wide{"DEEPINFER_GROUPED_SLICES_WIDE", 1};
std::atomic<uint64_t> g_grouped_slices_wide_launches{0};  // launches of it (tests)

// DEEPINFER_GROUPED_SLICES_PARTIALS (read once; unset or 0: off, 1: on): those K slices without a
// cluster, where the caller gives scratch for them (GroupedLinearScratchBytes asks for it under the
// switch): each slice's sum stored to the scratch by SplitBf16GroupedTmaPartialsKernel on the lean
// layout, then added in order by SumSlicesKernel (the same bits, one launch more). At batch 1
// `wo_a`'s 1,024 blocks then fit 9 an SM in one round, and no block waits at a cluster barrier
// (14% of the cluster kernel's stall samples, 2026-12-07). Measured on an H100 (2026-12-07,
// version 68): batch 1 1.174 -> 1.158 ms, within noise of the wide layout's 1.161 but one launch
// more and scratch, so off. Tests override it (SetGroupedSlicesPartialsForTesting).
KernelSwitch g_grouped_slices_partials{"DEEPINFER_GROUPED_SLICES_PARTIALS", 0};
std::atomic<uint64_t> g_grouped_slices_partials_launches{0};  // launches of it (tests)

// DEEPINFER_GROUPED_SLICES_UP_TO_32 (read once; unset or 1: on, 0: off): products of 9-32 rows take
// the K slices too, on the lean 128-row layout, in one token tile of 16 (9-16 rows) or 32 tokens
// (17-32), where the slices of 8 rows would run (the switches above). Otherwise those products run
// the TMA-fed kernel over all of K: at decode batch 16-32 `wo_a` is 128 blocks of 64 rows, each
// through 64 chunks in a chain. Measured on an H100 (session 65, docs/performance.md version 73):
// `grouped_linear` at batch 16 0.178 -> 0.088 ms (3 layers), at 32 0.177 -> 0.124, the steps
// -2.4% and -1.4%; 64-token tiles at 33-64 rows were slower (0.180 -> 0.192 at batch 64: 64
// clusters of 73 KiB blocks take two rounds), so those rows keep the TMA-fed kernel. The same bits
// (each output column the same dot product at any tile width, the slices added in order). Tests
// override it (SetGroupedSlicesUpTo32ForTesting).
KernelSwitch g_grouped_slices_up_to_32{"DEEPINFER_GROUPED_SLICES_UP_TO_32", 1};
std::atomic<uint64_t> g_grouped_slices_up_to_32_launches{0};  // launches of it (tests)

// Scratch bytes of the partials path: every slice's sums [slices][m][groups · n] f32.
int64_t GroupedSlicePartialsBytes(int64_t m, int64_t groups, int64_t n, int64_t k) {
  return CeilDiv(k, int64_t{512}) * m * groups * n * 4;
}

// The TMA maps of a grouped product: the weight in boxes of kRows rows × 64 bytes, x in boxes of
// 64 columns × 1 group × kTok tokens.
template <int kRows, int kTok>
std::pair<CUtensorMap, CUtensorMap> GroupedTmaMaps(const Params& p, int64_t groups) {
  const uint64_t w_dims[2] = {static_cast<uint64_t>(p.k), static_cast<uint64_t>(groups * p.n)};
  const uint64_t w_strides[1] = {static_cast<uint64_t>(p.w_row_bytes)};
  const uint32_t w_box[2] = {wgmma_split::kChunkCols, kRows};
  const uint64_t x_dims[3] = {static_cast<uint64_t>(p.k), static_cast<uint64_t>(groups), static_cast<uint64_t>(p.m)};
  const uint64_t x_strides[2] = {static_cast<uint64_t>(p.x_group_stride) * 4, static_cast<uint64_t>(p.ldx) * 4};
  const uint32_t x_box[3] = {wgmma_split::kChunkCols, 1, kTok};
  return {TensorMap(p.w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w_dims, w_strides, w_box, CU_TENSOR_MAP_SWIZZLE_NONE),
          TensorMap(p.x, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, x_dims, x_strides, x_box, CU_TENSOR_MAP_SWIZZLE_NONE)};
}

// SplitBf16GroupedTmaKernel<kParts, kRows> over the grid (n / kRows, tok_blocks, groups).
template <int kParts, int kRows>
void LaunchSplitGroupedTma(const Params& p, int64_t groups, unsigned tok_blocks, int device, cudaStream_t stream) {
  const auto [w_map, x_map] = GroupedTmaMaps<kRows, wgmma::kTokens>(p, groups);
  constexpr int kSmem = wgmma_split::GroupedTmaLayout<kRows>::kBytes;
  AllowDynamicSmem<wgmma_split::SplitBf16GroupedTmaKernel<kParts, kRows>>(device, kSmem);
  const dim3 grid(static_cast<unsigned>(p.n / kRows), tok_blocks, static_cast<unsigned>(groups));
  wgmma_split::SplitBf16GroupedTmaKernel<kParts, kRows><<<grid, 2 * kRows, kSmem, stream>>>(w_map, x_map, p);
  DI_CUDA_LAUNCH_CHECK("cuda::GroupedLinear wgmma split-BF16 TMA");
  g_tma_launches.fetch_add(1);
  if (kRows != wgmma::kBlockRows) g_grouped_half_block_launches.fetch_add(1);
}

// SplitBf16GroupedTmaSlicesKernel<kParts, kRows, kTok, kGroupedCluster, kLean> over the grid
// (n / kRows · kGroupedCluster, ceil(m / kTok), groups); kRows 64 (one warpgroup) or 128 (two);
// kTok 8 for products of at most 8 rows, 16 or 32 past that (DEEPINFER_GROUPED_SLICES_UP_TO_32).
template <int kParts, bool kLean, int kRows = wgmma::kRowsPerGroup, int kTok = 8>
void LaunchSplitGroupedTmaSlices(const Params& p, int64_t groups, int device, cudaStream_t stream) {
  constexpr auto kKernel = wgmma_split::SplitBf16GroupedTmaSlicesKernel<kParts, kRows, kTok, kGroupedCluster, kLean>;
  const auto [w_map, x_map] = GroupedTmaMaps<kRows, kTok>(p, groups);
  constexpr int kSmem = wgmma_split::SlicesLayout<kParts, kRows, kTok, kLean>::kBytes;
  AllowDynamicSmem<kKernel>(device, kSmem);
  const dim3 grid(static_cast<unsigned>(p.n / kRows * kGroupedCluster), static_cast<unsigned>(CeilDiv(p.m, kTok)),
                  static_cast<unsigned>(groups));
  kKernel<<<grid, 2 * kRows, kSmem, stream>>>(w_map, x_map, p);
  DI_CUDA_LAUNCH_CHECK("cuda::GroupedLinear wgmma split-BF16 TMA, K slices");
  g_tma_launches.fetch_add(1);
  g_grouped_sliced_launches.fetch_add(1);
  if (kLean) g_grouped_slices_lean_launches.fetch_add(1);
  if (kRows == wgmma::kBlockRows) g_grouped_slices_wide_launches.fetch_add(1);
  if (kTok > 8) g_grouped_slices_up_to_32_launches.fetch_add(1);
}

// SplitBf16GroupedTmaPartialsKernel<kParts, 64 rows, 8 tokens> over the grid (n / 64 · slices, 1,
// groups), its sums in p.scratch, then SumSlicesKernel into y, for products of at most 8 rows
// given GroupedSlicePartialsBytes of scratch.
template <int kParts>
void LaunchSplitGroupedTmaPartials(const Params& p, int64_t groups, int64_t slices, int device, int sms,
                                   cudaStream_t stream) {
  constexpr int kRows = wgmma::kRowsPerGroup, kTok = 8;
  constexpr auto kKernel = wgmma_split::SplitBf16GroupedTmaPartialsKernel<kParts, kRows, kTok>;
  const auto [w_map, x_map] = GroupedTmaMaps<kRows, kTok>(p, groups);
  constexpr int kSmem = wgmma_split::SlicesLayout<kParts, kRows, kTok, true>::kBytes;
  AllowDynamicSmem<kKernel>(device, kSmem);
  float* partials = static_cast<float*>(p.scratch);
  const dim3 grid(static_cast<unsigned>(p.n / kRows * slices), 1, static_cast<unsigned>(groups));
  kKernel<<<grid, 2 * kRows, kSmem, stream>>>(w_map, x_map, p, static_cast<int>(slices), partials);
  DI_CUDA_LAUNCH_CHECK("cuda::GroupedLinear wgmma split-BF16 TMA, K slices' partial sums");
  // y is [m][groups][n] (ldy = groups · n): one plane of m × ldy outputs.
  LaunchSumSlices(partials, static_cast<int>(slices), p.m, p.ldy, p.y, p.ldy, sms, stream,
                  "cuda::GroupedLinear K slices' sum");
  g_tma_launches.fetch_add(1);
  g_grouped_sliced_launches.fetch_add(1);
  g_grouped_slices_partials_launches.fetch_add(1);
}

// DEEPINFER_GROUPED_BF16 (read once; unset or 1: on, 0: off): GroupedLinear's split-BF16 products
// of at least kGroupedBf16MinRows rows, where the caller gives scratch (GroupedLinearScratchBytes),
// on the weight converted to BF16 once per call and x's parts split once, then
// wgmma_split::GroupedBf16WsKernel (the same bits as the kernels it replaces). Tests override it
// (SetGroupedBf16ForTesting).
KernelSwitch g_grouped_bf16{"DEEPINFER_GROUPED_BF16", 1};
std::atomic<uint64_t> g_grouped_bf16_launches{0};  // launches of GroupedBf16WsKernel (tests)
std::atomic<int64_t> g_grouped_bf16_piece_rows{0};  // tests: rows per piece of x (0: the budget's)
constexpr int64_t kGroupedBf16MinRows = 256;
// x's parts are split and multiplied in pieces of rows whose parts take at most this many bytes.
constexpr int64_t kGroupedBf16PartsBudget = int64_t{512} << 20;

// Rows of x per piece: the budget's (a multiple of 128 tokens, at least one tile), at most m.
int64_t GroupedBf16PieceRows(int64_t m, int64_t groups, int64_t k, int parts) {
  const int64_t test = g_grouped_bf16_piece_rows.load();
  if (test > 0) return std::min(m, test);
  const int64_t tile = wgmma_split::GroupedBf16Layout<1>::kTok;
  const int64_t rows = std::max(tile, kGroupedBf16PartsBudget / (parts * groups * k * 2) / tile * tile);
  return std::min(m, rows);
}

// The path's scratch: the BF16 weight [groups · n][k] (256-byte multiple), then one piece's parts
// [parts][rows][groups · k].
int64_t GroupedBf16WeightBytes(int64_t groups, int64_t n, int64_t k) {
  return CeilDiv(groups * n * k * 2, int64_t{256}) * 256;
}
size_t GroupedBf16Bytes(int64_t m, int64_t groups, int64_t n, int64_t k, int parts) {
  return static_cast<size_t>(GroupedBf16WeightBytes(groups, n, k) +
                             parts * GroupedBf16PieceRows(m, groups, k, parts) * groups * k * 2);
}

// Whether LaunchSplitGroupedParts<parts> takes LaunchGroupedBf16 for p (Usable already holds):
// the switch, enough rows, the scratch, x contiguous [m][groups][k], 32-bit TMA coordinates, the
// driver's tensor-map encoder.
bool GroupedBf16Runs(const Params& p, int64_t groups, int parts) {
  return g_grouped_bf16.On() && p.m >= kGroupedBf16MinRows && p.scratch != nullptr &&
         reinterpret_cast<uintptr_t>(p.scratch) % 256 == 0 && p.ldx == groups * p.k && p.x_group_stride == p.k &&
         groups * p.k < (int64_t{1} << 31) && groups * p.n < (int64_t{1} << 31) && p.m < (int64_t{1} << 31) &&
         p.scratch_bytes >= GroupedBf16Bytes(p.m, groups, p.n, p.k, parts) && EncodeTiled() != nullptr;
}

// A BF16 weight [rows][k], rows row_bytes apart, as GroupedBf16WsKernel reads it: boxes of 128 rows
// × 64 values, 128-byte swizzle (TMA zero-fills rows past `rows`).
CUtensorMap Bf16WeightMap(const void* w, int64_t rows, int64_t k, int64_t row_bytes) {
  const uint64_t dims[2] = {static_cast<uint64_t>(k), static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {static_cast<uint64_t>(row_bytes)};
  const uint32_t box[2] = {wgmma_split::kChunkCols, wgmma_split::kBlockRows};
  return TensorMap(w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// A BF16 weight's tiles (DenseTileOffset's layout: n rows of k columns) as GroupedBf16WsKernel<...,
// kWTiles> reads them: a tensor of [ceil(n / 128) · k / 64 · 128 rows][64 values], 128 bytes a row,
// boxes of 128 rows × 64 values, 128-byte swizzle (the tiles' own zero rows past n).
CUtensorMap Bf16TilesMap(const void* tiles, int64_t n, int64_t k) {
  const int64_t rows =
      CeilDiv(n, int64_t{wgmma_split::kBlockRows}) * (k / wgmma_split::kChunkCols) * wgmma_split::kBlockRows;
  const uint64_t dims[2] = {uint64_t{wgmma_split::kChunkCols}, static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {uint64_t{wgmma_split::kRowBytes}};
  const uint32_t box[2] = {wgmma_split::kChunkCols, wgmma_split::kBlockRows};
  return TensorMap(tiles, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// SplitXPartsKernel<kParts> on rows [0, m) of x (gk columns, ldx apart) into `parts`, [kParts][m][gk]
// BF16. `what` names the launch in its error.
template <int kParts>
void SplitXParts(const float* x, int64_t ldx, int64_t m, int64_t gk, uint16_t* parts, int sms, cudaStream_t stream,
                 const char* what) {
  const int64_t units = m * (gk / 8);
  wgmma_split::SplitXPartsKernel<kParts><<<static_cast<unsigned>(std::min<int64_t>(CeilDiv(units, 256), sms * 8)), 256,
                                           0, stream>>>(x, ldx, m, m, gk, parts);
  DI_CUDA_LAUNCH_CHECK(what);
}

// The tensor map GroupedBf16WsKernel reads x's parts by ([kParts][m][gk] BF16 at `parts`): boxes of
// 1 × `box_rows` rows × 64 values (128: a token tile; 64: half of one, for kPairs), zeros past m.
template <int kParts>
CUtensorMap XPartsMap(const uint16_t* parts, int64_t m, int64_t gk, int box_rows) {
  const uint64_t dims[3] = {static_cast<uint64_t>(gk), static_cast<uint64_t>(m), uint64_t{kParts}};
  const uint64_t strides[2] = {static_cast<uint64_t>(gk) * 2, static_cast<uint64_t>(m * gk) * 2};
  const uint32_t box[3] = {wgmma_split::kChunkCols, static_cast<uint32_t>(box_rows), 1};
  return TensorMap(parts, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

// The x map's box rows for a launch that takes pairs (Bf16WsPairs) or not.
constexpr int XBoxRows(bool pairs) { return wgmma_split::GroupedBf16Layout<1>::kTok / (pairs ? 2 : 1); }

// SplitXParts, and XPartsMap over the parts.
template <int kParts>
CUtensorMap SplitXPartsForWs(const float* x, int64_t ldx, int64_t m, int64_t gk, uint16_t* parts, int sms,
                             cudaStream_t stream, const char* what, int box_rows = XBoxRows(false)) {
  SplitXParts<kParts>(x, ldx, m, gk, parts, sms, stream, what);
  return XPartsMap<kParts>(parts, m, gk, box_rows);
}

bool DeviceLaunchesClusters(int device);  // below

// DEEPINFER_BF16_WS_PAIRS (read once; 1: on, 0: off, unset: dense products of at most two token
// tiles): GroupedBf16WsKernel in clusters of two blocks sharing x's tiles by multicast (kPairs: the
// same bits) where the product has at least two weight row blocks and such clusters fit the device.
// Measured on an H200 (docs/performance.md, version 60): the head at decode batch 256
// `dense_linear` 1.576 -> 1.499 ms, the step 8.248 -> 8.143; the 8k prefill's `grouped_linear`
// 3.869 -> 4.002 and `dense_linear` 2.162 -> 2.192 (x's L2 reads are not what bounds those).
// Tests override it (SetBf16WsPairsForTesting).
KernelSwitch g_bf16_ws_pairs{"DEEPINFER_BF16_WS_PAIRS", -1};
std::atomic<uint64_t> g_bf16_ws_pair_launches{0};  // launches of GroupedBf16WsKernel<*, *, *, true> (tests)

// `blocks` tma::kWsThreads-thread blocks in clusters of two: GroupedBf16WsKernel's pairs.
struct PairClusterLaunch : ClusterLaunch {
  PairClusterLaunch(unsigned blocks, int smem, cudaStream_t stream)
      : ClusterLaunch(dim3(blocks), tma::kWsThreads, dim3(2, 1, 1), smem, stream) {}
};

// ask(device)'s answer, asked once per device (`known` and `mu`: the caller's statics).
template <class T, class Ask>
T AskOncePerDevice(std::mutex& mu, std::map<int, T>& known, int device, const Ask& ask) {
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(device);
  if (it != known.end()) return it->second;
  return known[device] = ask(device);
}

// Clusters of two GroupedBf16WsKernel<kParts, kFreshSlices, kTmaStore, true> blocks resident at once
// on `device` (0: none fit); asked once per (device, kernel).
template <int kParts, bool kFreshSlices, bool kTmaStore, bool kWTiles = false>
int Bf16WsPairsResident(int device) {
  static std::mutex mu;
  static std::map<int, int> known;
  return AskOncePerDevice(mu, known, device, [](int d) {
    constexpr auto kKernel = wgmma_split::GroupedBf16WsKernel<kParts, kFreshSlices, kTmaStore, true, kWTiles>;
    constexpr int kSmem = wgmma_split::GroupedBf16Layout<kParts, kTmaStore>::kBytes;
    AllowDynamicSmem<kKernel>(d, kSmem);
    const PairClusterLaunch launch(2, kSmem, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &launch.config) != cudaSuccess) {
      (void)cudaGetLastError();  // the query's own error: no pairs on this device
      clusters = 0;
    }
    return clusters;
  });
}

// Whether a LaunchBf16Ws<kParts, kFreshSlices> of m rows over weights of n rows a group (`dense`:
// one group, Linear's or LinearsOfOneInput's) takes pairs: the switch (unset: dense and m at most
// two token tiles), at least two row blocks, a device that launches clusters and holds clusters of
// two of each kernel the launch may pick.
template <int kParts, bool kFreshSlices, bool kWTiles = false>
bool Bf16WsPairs(int64_t m, int64_t n, bool dense, int device) {
  const int mode = g_bf16_ws_pairs.Mode();
  const bool wanted = mode < 0 ? dense && m <= 2 * wgmma_split::GroupedBf16Layout<kParts>::kTok : mode == 1;
  if (!wanted || CeilDiv(n, int64_t{wgmma_split::kBlockRows}) < 2 || !DeviceLaunchesClusters(device)) return false;
  if (Bf16WsPairsResident<kParts, kFreshSlices, false, kWTiles>(device) <= 0) return false;
  if constexpr (kParts == 1 && !kFreshSlices && !kWTiles) return Bf16WsPairsResident<1, false, true>(device) > 0;
  return true;
}

// GroupedBf16WsKernel<..., true> in clusters of two over `units` units of two row blocks, as many
// clusters as are resident at once (at most `units`). Fails where none fits the device (x_map has
// half boxes: the caller asked Bf16WsPairs first).
template <int kParts, bool kFreshSlices, bool kTmaStore, bool kWTiles = false>
void LaunchBf16WsPairs(const CUtensorMap& w_map, const CUtensorMap& x_map, const CUtensorMap& y_map, const Params& p,
                       int64_t n_blocks, int64_t tok_blocks, int64_t units, int device, cudaStream_t stream,
                       const char* what) {
  const int resident = Bf16WsPairsResident<kParts, kFreshSlices, kTmaStore, kWTiles>(device);
  if (resident <= 0) Fail("GroupedBf16WsKernel: no cluster of two fits the device (half-box x map)");
  constexpr auto kKernel = wgmma_split::GroupedBf16WsKernel<kParts, kFreshSlices, kTmaStore, true, kWTiles>;
  const PairClusterLaunch launch(static_cast<unsigned>(2 * std::min<int64_t>(units, resident)),
                                 wgmma_split::GroupedBf16Layout<kParts, kTmaStore>::kBytes, stream);
  DI_CUDA_CHECK(cudaLaunchKernelEx(&launch.config, kKernel, w_map, x_map, y_map, p, static_cast<int>(n_blocks),
                                   static_cast<int>(tok_blocks), static_cast<int>(units)),
                what);
  g_bf16_ws_pair_launches.fetch_add(1);
}

// GroupedBf16WsKernel<kParts, kFreshSlices> over p's groups × token tiles × ceil(p.n / 128) row
// blocks, at most one block per SM. `what` names the launch in its error.
// One part of x (rounded to BF16), whole weight blocks per group and y with 16-byte rows take the
// kernel's TMA stores while DEEPINFER_TMA_STORE is on (the same values).
// pairs (Bf16WsPairs; x_map's boxes then of XBoxRows(true) rows): in clusters of two blocks over
// units of two row blocks, where such clusters fit (else x_map must not have half boxes: Fail).
// kWTiles (one group): w_map is Bf16TilesMap's, and the stores are each thread's. kTok: the token
// tile (8: x_map's boxes of 8 rows, neither pairs nor TMA stores).
template <int kParts, bool kFreshSlices, bool kWTiles = false, int kTok = 128>
void LaunchBf16Ws(const CUtensorMap& w_map, const CUtensorMap& x_map, const Params& p, int64_t groups, int device,
                  int sms, cudaStream_t stream, const char* what, bool pairs = false) {
  const int64_t n_blocks = CeilDiv(p.n, int64_t{wgmma_split::kBlockRows});
  const int64_t tok_blocks = CeilDiv(p.m, int64_t{kTok});
  const int64_t tiles = groups * n_blocks * tok_blocks;
  if (tiles > 0x7fffffff) Fail("too many tiles for one launch");
  const int64_t units = groups * CeilDiv(n_blocks, int64_t{2}) * tok_blocks;  // pairs' units
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, sms));
  if constexpr (kParts == 1 && !kFreshSlices && !kWTiles && kTok == 128) {
    if (g_tma_store.On() && p.n % wgmma_split::kBlockRows == 0 && (groups == 1 || p.y_group_stride == p.n) &&
        reinterpret_cast<uintptr_t>(p.y) % 16 == 0 && p.ldy % 4 == 0 && groups * p.n <= p.ldy) {
      using L = wgmma_split::GroupedBf16Layout<1, true>;
      // y as FLOAT32 [m][ldy], boxes of 32 weight rows × 128 tokens, as the kernel stages them.
      const uint64_t y_dims[2] = {static_cast<uint64_t>(p.ldy), static_cast<uint64_t>(p.m)};
      const uint64_t y_strides[1] = {static_cast<uint64_t>(p.ldy) * 4};
      const uint32_t y_box[2] = {L::kStoreBoxRows, L::kTok};
      const CUtensorMap y_map =
          TensorMap(p.y, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, y_dims, y_strides, y_box, CU_TENSOR_MAP_SWIZZLE_128B);
      if (pairs) {
        LaunchBf16WsPairs<1, false, true>(w_map, x_map, y_map, p, n_blocks, tok_blocks, units, device, stream, what);
        g_grouped_tma_store_launches.fetch_add(1);
        return;
      }
      constexpr auto kKernel = wgmma_split::GroupedBf16WsKernel<1, false, true>;
      AllowDynamicSmem<kKernel>(device, L::kBytes);
      kKernel<<<grid, tma::kWsThreads, L::kBytes, stream>>>(w_map, x_map, y_map, p, static_cast<int>(n_blocks),
                                                             static_cast<int>(tok_blocks), static_cast<int>(tiles));
      DI_CUDA_LAUNCH_CHECK(what);
      g_grouped_tma_store_launches.fetch_add(1);
      return;
    }
  }
  if (pairs) {
    if constexpr (kTok == 128) {
      return LaunchBf16WsPairs<kParts, kFreshSlices, false, kWTiles>(w_map, x_map, w_map, p, n_blocks, tok_blocks,
                                                                     units, device, stream, what);
    }
    Fail("GroupedBf16WsKernel: pairs of 128-token tiles only");
  }
  using L = wgmma_split::GroupedBf16Layout<kParts, false, kTok>;
  constexpr auto kKernel = wgmma_split::GroupedBf16WsKernel<kParts, kFreshSlices, false, false, kWTiles, kTok>;
  AllowDynamicSmem<kKernel>(device, L::kBytes);
  kKernel<<<grid, tma::kWsThreads, L::kBytes, stream>>>(w_map, x_map, w_map, p, static_cast<int>(n_blocks),
                                                         static_cast<int>(tok_blocks), static_cast<int>(tiles));
  DI_CUDA_LAUNCH_CHECK(what);
}

// DEEPINFER_CUBLASLT_BF16 (read once; 1: on, 0: off, unset: inside an allowing
// BatchVariantKernelsScope, i.e. --fast-prefill): LaunchGroupedBf16's products on one part (x
// rounded to BF16: `wo_a` with --attn-out-bf16) multiply the converted weight and x's BF16 rows on
// cuBLASLt's strided-batched BF16 GEMM (a batch entry a group, f32 out) instead of
// GroupedBf16WsKernel. Exact products, cuBLASLt's order of sums: not the 512-column slices', so not
// batch invariant. A shape cuBLASLt has no algorithm for keeps the kernel. Tests override it
// (SetCublasLtBf16ForTesting).
KernelSwitch g_cublaslt_bf16{"DEEPINFER_CUBLASLT_BF16", 0, true};
std::atomic<uint64_t> g_cublaslt_bf16_launches{0};

// One piece of a grouped product on cuBLASLt: x's BF16 rows [m][groups · k] at `x16`, the weight
// [groups · n][k] at `w16`. False (nothing enqueued) where cuBLASLt has no algorithm; fails where
// it cannot be loaded or its call fails.
bool RunGroupedOnCublasLt(const uint16_t* x16, const uint16_t* w16, const Params& p, int64_t groups,
                          cudaStream_t stream) {
  Bf16BatchedProduct product;
  product.x = x16;
  product.ldx = groups * p.k;
  product.x_batch_stride = p.k;
  product.w = w16;
  product.w_row_elems = p.k;
  product.w_batch_stride = p.n * p.k;
  product.y = p.y;
  product.ldy = p.ldy;
  product.y_batch_stride = p.y_group_stride;
  product.m = p.m;
  product.n = p.n;
  product.k = p.k;
  product.batch = groups;
  const CublasLtResult result = RunBf16Batched(product, stream);
  if (result.status == CublasLtResult::Status::kUnsupported) return false;
  if (result.status != CublasLtResult::Status::kEnqueued) Fail(("DEEPINFER_CUBLASLT_BF16: " + result.why).c_str());
  g_cublaslt_bf16_launches.fetch_add(1);
  return true;
}

// The weight converted into the scratch once, then per piece of x's rows its parts split and
// GroupedBf16WsKernel<kParts> on at most one block per SM (or, one part under
// DEEPINFER_CUBLASLT_BF16, cuBLASLt).
template <int kParts>
void LaunchGroupedBf16(const Params& p, int64_t groups, cudaStream_t stream) {
  const auto [device, sms] = CurrentDeviceSms();
  const int64_t rows = groups * p.n, gk = groups * p.k;
  uint8_t* base = static_cast<uint8_t*>(p.scratch);
  uint16_t* w16 = reinterpret_cast<uint16_t*>(base);
  uint16_t* parts = reinterpret_cast<uint16_t*>(base + GroupedBf16WeightBytes(groups, p.n, p.k));
  const int64_t w_units = rows * (p.k / 16);
  wgmma_split::ConvertGroupedWeightKernel<<<static_cast<unsigned>(std::min<int64_t>(CeilDiv(w_units, 256), sms * 8)),
                                            256, 0, stream>>>(p.w, p.w_row_bytes, p.scale, p.scale_row_stride, rows,
                                                              p.k, w16);
  DI_CUDA_LAUNCH_CHECK("cuda::GroupedLinear BF16 weight");
  const CUtensorMap w_map = Bf16WeightMap(w16, rows, p.k, p.k * 2);
  const int64_t piece = GroupedBf16PieceRows(p.m, groups, p.k, kParts);
  const bool pairs = Bf16WsPairs<kParts, false>(p.m, p.n, false, device);
  for (int64_t r0 = 0; r0 < p.m; r0 += piece) {
    const int64_t m = std::min(piece, p.m - r0);
    const CUtensorMap x_map = SplitXPartsForWs<kParts>(p.x + r0 * p.ldx, p.ldx, m, gk, parts, sms, stream,
                                                       "cuda::GroupedLinear BF16 x parts", XBoxRows(pairs));
    Params pp = p;
    pp.y = p.y + r0 * p.ldy;
    pp.m = m;
    if (kParts == 1 && g_cublaslt_bf16.On() && RunGroupedOnCublasLt(parts, w16, pp, groups, stream)) continue;
    LaunchBf16Ws<kParts, false>(w_map, x_map, pp, groups, device, sms, stream,
                                "cuda::GroupedLinear BF16 wgmma, warp-specialized", pairs);
    g_grouped_bf16_launches.fetch_add(1);
  }
}

// LaunchSplitGrouped's kernels on kParts = 3 BF16 parts of x (hi, mid, lo) or 1 (x rounded).
template <int kParts>
void LaunchSplitGroupedParts(const Params& p, int64_t groups, cudaStream_t stream) {
  if (GroupedBf16Runs(p, groups, kParts)) return LaunchGroupedBf16<kParts>(p, groups, stream);
  const int64_t tok_blocks = CeilDiv(p.m, wgmma::kTokens);
  if (tok_blocks > 65535) Fail("too many rows for one launch");
  const auto [device, sms] = CurrentDeviceSms();
  const dim3 grid(static_cast<unsigned>(p.n / wgmma::kBlockRows), static_cast<unsigned>(tok_blocks),
                  static_cast<unsigned>(groups));
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  if (wgmma_split::TmaUsable(p, groups, blocks, sms) && EncodeTiled() != nullptr) {
    const int64_t slices = CeilDiv(p.k / wgmma_split::kChunkCols, int64_t{wgmma_split::kSliceChunks});
    const bool slices_fit = g_grouped_slices.On() && slices > 1 && slices <= kGroupedCluster && 2 * blocks <= sms;
    if (slices_fit && p.m > 8 && p.m <= 32 && g_grouped_slices_up_to_32.On() && g_grouped_slices_lean.On() &&
        g_grouped_slices_wide.On()) {
      constexpr int kRows = wgmma::kBlockRows;
      if (p.m <= 16) return LaunchSplitGroupedTmaSlices<kParts, true, kRows, 16>(p, groups, device, stream);
      return LaunchSplitGroupedTmaSlices<kParts, true, kRows, 32>(p, groups, device, stream);
    }
    if (slices_fit && p.m <= 8) {
      if (g_grouped_slices_partials.On() && p.scratch != nullptr && p.y_group_stride == p.n &&
          static_cast<int64_t>(p.scratch_bytes) >= GroupedSlicePartialsBytes(p.m, groups, p.n, p.k)) {
        return LaunchSplitGroupedTmaPartials<kParts>(p, groups, slices, device, sms, stream);
      }
      if (g_grouped_slices_lean.On() && g_grouped_slices_wide.On()) {
        return LaunchSplitGroupedTmaSlices<kParts, true, wgmma::kBlockRows>(p, groups, device, stream);
      }
      if (g_grouped_slices_lean.On()) return LaunchSplitGroupedTmaSlices<kParts, true>(p, groups, device, stream);
      return LaunchSplitGroupedTmaSlices<kParts, false>(p, groups, device, stream);
    }
    if (g_grouped_half_blocks.On() && 2 * blocks <= sms) {
      return LaunchSplitGroupedTma<kParts, wgmma::kRowsPerGroup>(p, groups, grid.y, device, stream);
    }
    return LaunchSplitGroupedTma<kParts, wgmma::kBlockRows>(p, groups, grid.y, device, stream);
  }
  AllowDynamicSmem<wgmma_split::SplitBf16GroupedKernel<kParts>>(device, wgmma_split::kSmemBytes);
  wgmma_split::SplitBf16GroupedKernel<kParts><<<grid, wgmma::kThreads, wgmma_split::kSmemBytes, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::GroupedLinear wgmma split-BF16");
}

// GroupedLinear's split-BF16 products on warpgroup MMAs (linear_wgmma_split.cuh): the TMA-fed
// kernel where it is usable, else the cp.async one (the same bits); x rounded to BF16 as the one
// part where p.x_bf16 says so.
void LaunchSplitGrouped(const Params& p, int64_t groups, cudaStream_t stream) {
  if (p.x_bf16) return LaunchSplitGroupedParts<1>(p, groups, stream);
  LaunchSplitGroupedParts<3>(p, groups, stream);
}

// The split-BF16 staged products with K's slices spread over clusters (mma::StagedSlicesBlock, the
// same bits as StagedLinearKernel and the register-fed LinearKernel): taken where the staged
// kernel's one-block grid would fill fewer than all SMs, K has 2-16 slices, the device launches
// clusters, and the switch allows it. DEEPINFER_STAGED_SLICES unset: past 32 rows only, in place
// of StagedLinearKernel (measured 2026-12-02, docs/performance.md version 20: `dense_linear` at
// batch 64 2.82 -> 1.99 ms, but 0.534 -> 0.580 at batch 1, where the register-fed kernel stays);
// =1: also up to 32 rows; =0: never. Tests override it (SetStagedSlicesForTesting).
std::atomic<uint64_t> g_staged_slices_launches{0};  // launches of it (tests)
KernelSwitch g_staged_slices{"DEEPINFER_STAGED_SLICES", -1};  // 1: where it applies
// Whether the clustered kernel may take a product of `rows` rows.
bool StagedSlicesOn(int64_t rows) {
  const int mode = g_staged_slices.Mode();
  return mode < 0 ? rows > mma::kMaxTm * mma::kTok : mode == 1;
}

// Whether the device launches thread-block clusters (asked once per device).
bool DeviceLaunchesClusters(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  return AskOncePerDevice(mu, known, device, [](int d) {
    int cluster_launch = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, d), "cudaDeviceGetAttribute");
    return cluster_launch != 0;
  });
}

template <Kind K>
bool LaunchStagedSlices(const Params& p, int64_t groups, int64_t row_blocks, int64_t tok_blocks,
                        cudaStream_t stream) {
  const int64_t slices = CeilDiv(p.k, mma::kSlice);
  if (slices < 2 || !StagedSlicesOn(p.m)) return false;
  const int cluster = slices <= 2 ? 2 : slices <= 4 ? 4 : 8;
  if (CeilDiv(slices, cluster) > mma::kMaxSlicesPerRank) return false;
  const auto [device, sms] = CurrentDeviceSms();
  if (row_blocks * tok_blocks * groups >= sms) return false;
  if (!DeviceLaunchesClusters(device)) return false;
  const dim3 grid(static_cast<unsigned>(row_blocks * cluster), static_cast<unsigned>(tok_blocks),
                  static_cast<unsigned>(groups));
  switch (cluster) {
    case 2: mma::StagedSlicesKernel<K, 2><<<grid, mma::kThreads, 0, stream>>>(p); break;
    case 4: mma::StagedSlicesKernel<K, 4><<<grid, mma::kThreads, 0, stream>>>(p); break;
    default: mma::StagedSlicesKernel<K, 8><<<grid, mma::kThreads, 0, stream>>>(p); break;
  }
  DI_CUDA_LAUNCH_CHECK("cuda::Linear mma staged, slices over a cluster");
  g_staged_slices_launches.fetch_add(1);
  return true;
}

// ---- Linear's split-BF16 products of BF16 weights on warpgroup MMAs (linear_wgmma_split.cuh) ----

// DEEPINFER_DENSE_WGMMA=0 (read once) keeps BF16 weights on the mma.sync kernels (for comparison);
// unset or 1: DenseSplitKernel wherever wgmma_split::DenseUsable holds. Tests override it
// (SetDenseSplitForTesting).
std::atomic<uint64_t> g_dense_split_launches{0};  // launches of either dense kernel (tests)
KernelSwitch g_dense_split{"DEEPINFER_DENSE_WGMMA", 1};

// DEEPINFER_DENSE_TILES (read once; unset or 0: off, 1: on): DenseTilesBytes offers BF16 weights
// tiles (Linear's `tiles`), which the dense kernels then read (the 8- and 64-token ones and the
// warp-specialized one; not the K slices' cluster kernel). Tests override it
// (SetDenseTilesForTesting).
KernelSwitch g_dense_tiles{"DEEPINFER_DENSE_TILES", 0};
std::atomic<uint64_t> g_dense_tiles_launches{0};  // launches of a dense kernel on tiles (tests)

// DEEPINFER_DENSE_OVERLAP (read once; unset or 1: on, 0: off) runs the dense kernels (both tile
// sizes, so every M sums alike) with chunk c's MMAs issued while chunk c - 1's may still run, each
// slice begun by an MMA that ignores d instead of zeroed registers (the same bits wherever a sum is
// not an exact zero; an all-zero sum may come out -0 instead of +0; measured 2026-12-02: decode
// `dense_linear` 3.29 -> 3.13 ms at batch 256, 8k prefill 3.90 -> 3.60 ms, docs/performance.md
// version 26). Tests override it (SetDenseOverlapForTesting).
KernelSwitch g_dense_overlap{"DEEPINFER_DENSE_OVERLAP", 1};

// DEEPINFER_DENSE_PARTS (read once; unset or 1: on, 0: off): the 64-token dense split-BF16
// products (overlapped loop, one-block grid) with x's parts split once per call into the caller's
// scratch (wgmma_split::SplitXPartsKernel, then DensePartsKernel: the same bits) where the scratch
// holds them (LinearScratchBytes asks for it). Tests override it (SetDensePartsForTesting).
KernelSwitch g_dense_parts{"DEEPINFER_DENSE_PARTS", 1};
std::atomic<uint64_t> g_dense_parts_launches{0};  // launches of DensePartsKernel (tests)

// Whether a product that reached the 64-token one-block dense kernel takes the parts path.
bool DensePartsOn(const Params& p) {
  return g_dense_parts.On() && g_dense_overlap.On() && p.scratch != nullptr &&
         p.scratch_bytes >= static_cast<size_t>(wgmma_split::DensePartsBytes(p.m, p.k)) &&
         reinterpret_cast<uintptr_t>(p.scratch) % 16 == 0;
}

void LaunchDenseParts(const Params& p, int64_t row_blocks, int device, int sms, cudaStream_t stream) {
  const int64_t m_pad = wgmma::PaddedRows(p.m);
  uint16_t* parts = static_cast<uint16_t*>(p.scratch);
  const int64_t units = m_pad * (p.k / 8);
  const int64_t split_blocks = std::min<int64_t>(CeilDiv(units, 256), int64_t{sms} * 8);
  wgmma_split::SplitXPartsKernel<3>
      <<<static_cast<unsigned>(split_blocks), 256, 0, stream>>>(p.x, p.ldx, p.m, m_pad, p.k, parts);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear split-BF16 x parts");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(m_pad / wgmma::kTokens));
  if (p.w_tiles != nullptr) {  // the weight from its tiles: the same bits
    AllowDynamicSmem<wgmma_split::DensePartsKernel<true>>(device, wgmma_split::kPartsSmemBytes);
    wgmma_split::DensePartsKernel<true>
        <<<grid, wgmma::kThreads, wgmma_split::kPartsSmemBytes, stream>>>(p, parts, m_pad);
    g_dense_tiles_launches.fetch_add(1);
  } else {
    AllowDynamicSmem<wgmma_split::DensePartsKernel<>>(device, wgmma_split::kPartsSmemBytes);
    wgmma_split::DensePartsKernel<><<<grid, wgmma::kThreads, wgmma_split::kPartsSmemBytes, stream>>>(p, parts, m_pad);
  }
  DI_CUDA_LAUNCH_CHECK("cuda::Linear split-BF16 wgmma on x's parts");
  g_dense_parts_launches.fetch_add(1);
}

// DEEPINFER_DENSE_WS (read once; unset or 1: on, 0: off): the 64-token dense split-BF16 products
// of at least DenseWsMinRows() rows whose grid fills the GPU, where the scratch holds x's parts
// (DensePartsBytes), on x's parts split once and wgmma_split::GroupedBf16WsKernel<3> over the BF16
// weight as it is (one group; TMA zero-fills weight rows past n, the store skips them): the same
// MMAs in the same order, each slice begun as the dense loop begins it (kFreshSlices where the
// overlapped loop runs), so the same bits. Tests override it (SetDenseWsForTesting).
KernelSwitch g_dense_ws{"DEEPINFER_DENSE_WS", 1};
std::atomic<uint64_t> g_shared_x_launches{0};  // LinearsOfOneInput's products on shared parts (tests)
std::atomic<uint64_t> g_dense_ws_launches{0};  // launches of the dense GroupedBf16WsKernel (tests)

// The fewest rows that take it: DEEPINFER_DENSE_WS_MIN_ROWS (read once; unset or 256, or 64: the
// head at decode batch 64 too, its 157 row blocks filling the GPU from one token tile); tests
// override it (SetDenseWsMinRowsForTesting).
std::atomic<int64_t> g_dense_ws_min_rows_for_testing{0};
int EnvEither(const char* name, int unset, int other);  // below
int64_t DenseWsMinRows() {
  static const int64_t rows = EnvEither("DEEPINFER_DENSE_WS_MIN_ROWS", 256, 64);
  const int64_t chosen = g_dense_ws_min_rows_for_testing.load();
  return chosen > 0 ? chosen : rows;
}

// The bytes of x's three BF16 parts, m rows of k columns each, that the dense warp-specialized
// kernels read from the scratch (SplitXPartsForWs).
int64_t DenseWsPartsBytes(int64_t m, int64_t k) { return 3 * m * k * 2; }

// Whether p's arguments suit the dense warp-specialized kernels: the scratch holds x's three parts,
// x and the weight aligned for the parts' split and the TMA, sizes within int.
bool DenseWsArgumentsFit(const Params& p) {
  return p.scratch != nullptr && reinterpret_cast<uintptr_t>(p.scratch) % 256 == 0 &&
         p.scratch_bytes >= static_cast<size_t>(DenseWsPartsBytes(p.m, p.k)) &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0 &&
         p.w_row_bytes % 16 == 0 && p.ldx % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
         p.m < (int64_t{1} << 31) && p.n < (int64_t{1} << 31) && p.k < (int64_t{1} << 31) && EncodeTiled() != nullptr;
}

bool DenseWsRuns(const Params& p) { return g_dense_ws.On() && p.m >= DenseWsMinRows() && DenseWsArgumentsFit(p); }

// DEEPINFER_DENSE_WS8 (read once; unset or 1: on, 0: off): the dense split-BF16 products of 1-8
// rows that take DenseSplitKernel<8> (one block per 128 weight rows, over all of K: the head at decode
// batches 1-8), where the scratch holds x's parts (LinearScratchBytes offers them under the switch),
// run on x's parts split once and GroupedBf16WsKernel<3, *, false, false, *, 8> instead: a producer
// warp's TMA ring of 8 stages and no block barriers, the same MMAs in the same order (the same
// bits). Measured on two H100 calls (docs/performance.md, versions 63 and 64): batch 1 -2.6% and
// -1.9% with the head in rows. Tests override it (SetDenseWs8ForTesting).
KernelSwitch g_dense_ws8{"DEEPINFER_DENSE_WS8", 1};
std::atomic<uint64_t> g_dense_ws8_launches{0};

bool DenseWs8Runs(const Params& p) { return g_dense_ws8.On() && p.m >= 1 && p.m <= 8 && DenseWsArgumentsFit(p); }

// DEEPINFER_DENSE_WS64 (read once; unset or 1: on, 0: off): the dense split-BF16 products of 9 rows
// up to DenseWsMinRows() that take the 64-token kernels (DensePartsKernel or DenseSplitKernel<64>:
// one block per 128 weight rows and 64 tokens, over all of K; the head at decode batches 9-255),
// where the scratch holds x's parts, run on x's parts split once and GroupedBf16WsKernel<3, *,
// false, false, *, 64> instead: at most one block per SM walking the tiles, a producer warp's TMA
// ring of 5 stages, no block barriers, the same MMAs in the same order (the same bits). Measured on
// an H100 (docs/performance.md, version 64): the head at batch 64 at 2.97 TB/s (ncu, 89% of DRAM's
// peak), the step -1.9%. Tests override it (SetDenseWs64ForTesting).
KernelSwitch g_dense_ws64{"DEEPINFER_DENSE_WS64", 1};
std::atomic<uint64_t> g_dense_ws64_launches{0};

bool DenseWs64Runs(const Params& p) {
  return g_dense_ws64.On() && p.m > 8 && p.m < DenseWsMinRows() && DenseWsArgumentsFit(p);
}

// Launches of the dense warp-specialized kernels on x rounded to BF16 (Linear's round_x_to_bf16; tests).
std::atomic<uint64_t> g_dense_rounded_x_launches{0};

// launch(std::integral_constant<int, kParts>{}) for x's parts: one (x rounded to BF16; counted in
// g_dense_rounded_x_launches) where one_part, else three.
template <class Launch>
void WithXParts(bool one_part, const Launch& launch) {
  if (one_part) {
    launch(std::integral_constant<int, 1>{});
    g_dense_rounded_x_launches.fetch_add(1);
  } else {
    launch(std::integral_constant<int, 3>{});
  }
}

// DEEPINFER_DENSE_WS_TOKENS_FASTEST (read once; unset or 1: on, 0: off): the dense products of 2-4
// 128-token tiles (the head at decode batches 129-512) on GroupedBf16WsKernel without pairs, its walk
// taking token tiles fastest, so that a weight row block's token tiles run side by side on
// neighbouring SMs and the weight leaves DRAM once instead of once a token tile (pairs share x and
// walk row blocks fastest). Every tile's products and sums are its own: the same bits. Measured on
// an H100 (docs/performance.md, versions 72b and 73): at decode batch 256 the head on one part
// (--head-in-bf16) 1.124 -> 0.848 ms, the step 7.110 -> 6.858; on three parts 1.521 -> 1.437 ms,
// the step 7.545 -> 7.441. Tests override it (SetDenseWsTokensFastestForTesting).
KernelSwitch g_dense_ws_tokens_fastest{"DEEPINFER_DENSE_WS_TOKENS_FASTEST", 1};
std::atomic<uint64_t> g_dense_ws_tokens_fastest_launches{0};
constexpr int64_t kTokensFastestMaxTiles = 4;

// x's three parts (or, with p.x_bf16, x rounded to BF16 as the one part) split into the scratch,
// then GroupedBf16WsKernel on kTok-token tiles (128: the products DenseWsRuns takes, in pairs where
// Bf16WsPairs says, or token tiles fastest under DEEPINFER_DENSE_WS_TOKENS_FASTEST; 8: DenseWs8Runs's;
// 64: DenseWs64Runs's); the weight from its tiles where p.w_tiles has them (the same bits).
template <bool kOverlap, int kTok = 128>
void LaunchDenseWs(const Params& p, int device, int sms, cudaStream_t stream) {
  const int64_t tok_blocks = CeilDiv(p.m, int64_t{kTok});
  const bool tokens_fastest =
      kTok == 128 && tok_blocks >= 2 && tok_blocks <= kTokensFastestMaxTiles && g_dense_ws_tokens_fastest.On();
  auto launch = [&](auto tiles, auto parts) {
    constexpr bool kTiles = decltype(tiles)::value;
    constexpr int kParts = decltype(parts)::value;
    const bool pairs =
        kTok == 128 && !tokens_fastest && Bf16WsPairs<kParts, kOverlap, kTiles>(p.m, p.n, true, device);
    const CUtensorMap x_map = SplitXPartsForWs<kParts>(p.x, p.ldx, p.m, p.k, static_cast<uint16_t*>(p.scratch), sms,
                                                       stream, "cuda::Linear split-BF16 x parts",
                                                       kTok == 128 ? XBoxRows(pairs) : kTok);
    const CUtensorMap w_map = kTiles ? Bf16TilesMap(p.w_tiles, p.n, p.k) : Bf16WeightMap(p.w, p.n, p.k, p.w_row_bytes);
    Params walk = p;
    walk.ws_tokens_fastest = tokens_fastest;
    LaunchBf16Ws<kParts, kOverlap, kTiles, kTok>(w_map, x_map, walk, 1, device, sms, stream,
                                                 "cuda::Linear split-BF16 wgmma, warp-specialized", pairs);
    if (tokens_fastest) g_dense_ws_tokens_fastest_launches.fetch_add(1);
  };
  auto with_parts = [&](auto tiles) { WithXParts(p.x_bf16, [&](auto parts) { launch(tiles, parts); }); };
  if (p.w_tiles != nullptr) {
    with_parts(std::true_type{});
    g_dense_tiles_launches.fetch_add(1);
  } else {
    with_parts(std::false_type{});
  }
  (kTok == 8 ? g_dense_ws8_launches : kTok == 64 ? g_dense_ws64_launches : g_dense_ws_launches).fetch_add(1);
}

// DEEPINFER_DENSE_SLICES_DEEP (read once; unset or 0: off, 1: on): DenseSplitSlicesKernel's 8-token
// form (the dense products of 1-8 rows whose K slices spread over a cluster: the router's gate, the
// compressors' and the indexer's weights at decode) with kDeepDenseStages stages, so that a rank
// copies its whole slice in the prologue instead of two chunks ahead of its MMAs: one block per SM
// instead of two, the same MMAs in the same order (the same bits). ncu on an H100 (2026-12-07,
// batch 1) had every such launch at ~11 us whatever its grid (8 to 64 blocks): a chain of chunk
// latencies, not bandwidth. Measured on an H100 (docs/performance.md, version 66c): the step did
// not move at batch 1, 64 or 256; off. Tests override it (SetDenseSlicesDeepForTesting).
KernelSwitch g_dense_slices_deep{"DEEPINFER_DENSE_SLICES_DEEP", 0};
std::atomic<uint64_t> g_dense_slices_deep_launches{0};

template <int kTok, int kCluster, bool kOverlap, int kStages>
void LaunchDenseSplitSlicesStaged(const Params& p, int64_t row_blocks, int64_t tok_blocks, int device,
                                  cudaStream_t stream) {
  using wgmma_split::DenseSplitSlicesKernel;
  constexpr int kSmem = wgmma_split::DenseSmem<kTok, kStages>::kBytes;
  AllowDynamicSmem<DenseSplitSlicesKernel<kTok, kCluster, kOverlap, kStages>>(device, kSmem);
  const dim3 grid(static_cast<unsigned>(row_blocks * kCluster), static_cast<unsigned>(tok_blocks));
  DenseSplitSlicesKernel<kTok, kCluster, kOverlap, kStages><<<grid, wgmma::kThreads, kSmem, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear split-BF16 wgmma, slices over a cluster");
}

template <int kTok, int kCluster, bool kOverlap>
void LaunchDenseSplitSlices(const Params& p, int64_t row_blocks, int64_t tok_blocks, int device, cudaStream_t stream) {
  if constexpr (kTok == 8) {
    if (g_dense_slices_deep.On()) {
      LaunchDenseSplitSlicesStaged<kTok, kCluster, kOverlap, wgmma_split::kDeepDenseStages>(p, row_blocks, tok_blocks,
                                                                                           device, stream);
      g_dense_slices_deep_launches.fetch_add(1);
      return;
    }
  }
  LaunchDenseSplitSlicesStaged<kTok, kCluster, kOverlap, wgmma_split::kDenseStages>(p, row_blocks, tok_blocks, device,
                                                                                   stream);
}

// DEEPINFER_DENSE_SLICES_NARROW (read once; unset or 0: off, 1: on): the dense K slices of products
// of 9-32 rows (the router's gate, the compressors' and the indexer's weights at decode batches
// 9-32) on 16-token (9-16 rows) or 32-token tiles (17-32) instead of 64, in the overlapped loop,
// where the 64-token tiles would take the slices (DenseTakesSlices<64>: the same grid of one token
// tile). Session 65's trace at batch 16 had the 64-token slices at 23 µs a launch (5 on the path)
// against 16 for the 8-token ones at batch 1: a 64-row x converted into three parts and MMAs 8
// times as wide per chunk for at most 32 rows. The same bits (each output column the same dot
// product at any tile width). Written in session 65 after the device time; not yet measured, so
// off. Tests override it (SetDenseSlicesNarrowForTesting).
KernelSwitch g_dense_slices_narrow{"DEEPINFER_DENSE_SLICES_NARROW", 0};
std::atomic<uint64_t> g_dense_slices_narrow_launches{0};

// DenseSplitSlicesKernel<kTok, 2, 4 or 8 ranks, kOverlap> for K's `slices` 512-column slices.
template <int kTok, bool kOverlap>
void LaunchDenseSlicesOverK(const Params& p, int64_t slices, int64_t row_blocks, int64_t tok_blocks, int device,
                            cudaStream_t stream) {
  if (slices <= 2) return LaunchDenseSplitSlices<kTok, 2, kOverlap>(p, row_blocks, tok_blocks, device, stream);
  if (slices <= 4) return LaunchDenseSplitSlices<kTok, 4, kOverlap>(p, row_blocks, tok_blocks, device, stream);
  LaunchDenseSplitSlices<kTok, 8, kOverlap>(p, row_blocks, tok_blocks, device, stream);
}

// Whether LaunchDenseSplitTiles<kTok> spreads p's K slices over clusters: its one-block grid leaves
// SMs idle and K has 2-8 slices of 512 columns.
template <int kTok>
bool DenseTakesSlices(const Params& p, int device, int sms) {
  const int64_t row_blocks = CeilDiv(p.n, wgmma::kBlockRows), tok_blocks = CeilDiv(p.m, int64_t{kTok});
  const int64_t slices = CeilDiv(p.k, int64_t{512});
  const int64_t slots = sms * wgmma_split::DenseSmem<kTok>::kBlocksPerSm;  // blocks resident at once
  return row_blocks * tok_blocks < slots && slices >= 2 && slices <= wgmma_split::kMaxDenseCluster &&
         DeviceLaunchesClusters(device);
}

constexpr const char* kDenseDoesNotRoundX =
    "x rounded to BF16 reached a dense kernel that does not round it (LinearRoundsXToBf16 said otherwise)";

// One block per 128 weight rows × kTok tokens, over all of K; where that grid leaves SMs idle and
// K has 2-8 slices, K's slices over a cluster instead (the same bits). With p.x_bf16 only the
// warp-specialized kernels may run (DenseRoundsXToBf16).
template <int kTok, bool kOverlap>
void LaunchDenseSplitTiles(const Params& p, cudaStream_t stream) {
  const int64_t row_blocks = CeilDiv(p.n, wgmma::kBlockRows), tok_blocks = CeilDiv(p.m, int64_t{kTok});
  if (tok_blocks > 65535 || row_blocks * wgmma_split::kMaxDenseCluster > 0x7fffffff) {
    Fail("too many rows for one split-BF16 launch");
  }
  const auto [device, sms] = CurrentDeviceSms();
  const int64_t slices = CeilDiv(p.k, int64_t{512});
  g_dense_split_launches.fetch_add(1);
  if (DenseTakesSlices<kTok>(p, device, sms)) {
    if (p.x_bf16) Fail(kDenseDoesNotRoundX);
    if constexpr (kTok == 64 && kOverlap) {
      if (p.m <= 32 && g_dense_slices_narrow.On()) {
        g_dense_slices_narrow_launches.fetch_add(1);
        if (p.m <= 16) return LaunchDenseSlicesOverK<16, kOverlap>(p, slices, row_blocks, 1, device, stream);
        return LaunchDenseSlicesOverK<32, kOverlap>(p, slices, row_blocks, 1, device, stream);
      }
    }
    return LaunchDenseSlicesOverK<kTok, kOverlap>(p, slices, row_blocks, tok_blocks, device, stream);
  }
  if constexpr (kTok == 64) {
    if (DenseWsRuns(p)) return LaunchDenseWs<kOverlap>(p, device, sms, stream);
    if (DenseWs64Runs(p)) return LaunchDenseWs<kOverlap, 64>(p, device, sms, stream);
  }
  if constexpr (kTok == 8) {
    if (DenseWs8Runs(p)) return LaunchDenseWs<kOverlap, 8>(p, device, sms, stream);
  }
  if (p.x_bf16) Fail(kDenseDoesNotRoundX);
  if constexpr (kTok == 64 && kOverlap) {
    if (DensePartsOn(p)) return LaunchDenseParts(p, row_blocks, device, sms, stream);
  }
  constexpr int kSmem = wgmma_split::DenseSmem<kTok>::kBytes;
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(tok_blocks));
  if (p.w_tiles != nullptr) {
    AllowDynamicSmem<wgmma_split::DenseSplitKernel<kTok, kOverlap, true>>(device, kSmem);
    wgmma_split::DenseSplitKernel<kTok, kOverlap, true><<<grid, wgmma::kThreads, kSmem, stream>>>(p);
    DI_CUDA_LAUNCH_CHECK("cuda::Linear split-BF16 wgmma on the weight's tiles");
    g_dense_tiles_launches.fetch_add(1);
    return;
  }
  AllowDynamicSmem<wgmma_split::DenseSplitKernel<kTok, kOverlap>>(device, kSmem);
  wgmma_split::DenseSplitKernel<kTok, kOverlap><<<grid, wgmma::kThreads, kSmem, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear split-BF16 wgmma");
}

// Whether `stream` is capturing a CUDA graph (the cuBLASLt paths stay out of graphs).
bool StreamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  return capture != cudaStreamCaptureStatusNone;
}

// DEEPINFER_CUBLASLT_DENSE=1 (read once; unset or 0: off, --fast-prefill included: measured no
// faster, docs/performance.md version 59): dense split-BF16 products of at least
// kCublasLtDenseMinRows rows (Linear's, and LinearsOfOneInput's on x's parts split once) run as three
// cuBLASLt BF16 GEMMs over the weight as it is, from x's three parts: y = W·x_0, then y += W·x_1
// and y += W·x_2. The same exact products, summed in cuBLASLt's order and part by part, so not
// batch invariant. Operands not 256-byte aligned (cuBLASLt's heuristic assumes it), a graph capture,
// too little scratch for the parts, or a shape cuBLASLt has no algorithm for keep the kernels.
// Tests override it (SetCublasLtDenseForTesting).
KernelSwitch g_cublaslt_dense{"DEEPINFER_CUBLASLT_DENSE", 0};
std::atomic<uint64_t> g_cublaslt_dense_launches{0};  // products (three GEMMs each) on it (tests)
constexpr int64_t kCublasLtDenseMinRows = 512;

// cuBLASLt's BF16 product of p's weight and one part of x ([p.m][p.k] at x16) into p.y.
Bf16BatchedProduct DensePartProduct(const Params& p, const uint16_t* x16, bool accumulate) {
  Bf16BatchedProduct product;
  product.x = x16;
  product.ldx = p.k;
  product.w = reinterpret_cast<const uint16_t*>(p.w);
  product.w_row_elems = p.w_row_bytes / 2;
  product.y = p.y;
  product.ldy = p.ldy;
  product.m = p.m;
  product.n = p.n;
  product.k = p.k;
  product.accumulate = accumulate;
  return product;
}

// Whether p's product (kind, math) runs on RunDenseOnCublasLt: a split-BF16 product of a BF16
// weight on x as it is (not p.x_bf16, which the warp-specialized kernels round), the switch, the rows, scratch for x's parts [3][m][k] at p.scratch, operands aligned, no
// capture, and an algorithm for the shape (asked once per shape: cuBLASLt's plan cache). Fails
// where cuBLASLt cannot be loaded.
bool DenseOnCublasLt(const Params& p, Kind kind, LinearMath math, cudaStream_t stream) {
  if (kind != Kind::kBF16 || p.x_bf16 || PathFor(math, kind, p.scale_f32, p.k) != Path::kSplitBf16 ||
      !g_dense_split.On() || !g_cublaslt_dense.On() || p.m < kCublasLtDenseMinRows) {
    return false;
  }
  const int64_t part_bytes = p.m * p.k * 2;  // each of x's parts 256-byte aligned too
  if (p.scratch == nullptr || !Aligned(p.scratch, part_bytes, 256) ||
      p.scratch_bytes < static_cast<size_t>(3 * part_bytes) || !Aligned(p.w, 0, 256) || !Aligned(p.y, 0, 256) ||
      p.w_row_bytes % 16 != 0 || p.ldy % 4 != 0 || p.k % 8 != 0 || p.ldx % 4 != 0 || !Aligned(p.x, 0, 16) ||
      p.m >= (int64_t{1} << 31) || StreamCapturing(stream)) {
    return false;
  }
  const CublasLtResult plan = PlanBf16Batched(DensePartProduct(p, nullptr, false), stream);
  if (plan.status == CublasLtResult::Status::kUnsupported) return false;
  if (plan.status != CublasLtResult::Status::kPlanned) Fail(("DEEPINFER_CUBLASLT_DENSE: " + plan.why).c_str());
  return true;
}

// p's product from x's parts [3][p.m][p.k] at `parts` as three cuBLASLt GEMMs, where
// DenseOnCublasLt(p, ...) holds. Fails where a call fails.
void RunDenseOnCublasLt(const Params& p, const uint16_t* parts, cudaStream_t stream) {
  for (int part = 0; part < 3; ++part) {
    const CublasLtResult result = RunBf16Batched(DensePartProduct(p, parts + part * p.m * p.k, part > 0), stream);
    if (result.status != CublasLtResult::Status::kEnqueued) Fail(("DEEPINFER_CUBLASLT_DENSE: " + result.why).c_str());
  }
  g_cublaslt_dense_launches.fetch_add(1);
}

// Whether Launch(p, kind, 1, stream, math) takes LaunchKind's dense branch (LaunchDenseSplit): a BF16
// weight's split-BF16 product on the warpgroup-MMA kernels.
bool DenseSplitRuns(const Params& p, Kind kind, LinearMath math) {
  return kind == Kind::kBF16 && PathFor(math, kind, p.scale_f32, p.k) == Path::kSplitBf16 && g_dense_split.On() &&
         wgmma_split::DenseUsable(p, 1);
}

// Whether Launch takes a kernel that reads p.w_tiles for p (BF16 weights with tiles): the split-BF16
// wgmma path, not on cuBLASLt, and not the K slices' cluster kernel (DenseTakesSlices).
bool DenseReadsTiles(const Params& p, Kind kind, LinearMath math) {
  if (p.w_tiles == nullptr || !DenseSplitRuns(p, kind, math) || g_cublaslt_dense.On()) return false;
  const auto [device, sms] = CurrentDeviceSms();
  return p.m <= 8 ? !DenseTakesSlices<8>(p, device, sms) : !DenseTakesSlices<64>(p, device, sms);
}

// Products of at most 8 rows on 8-token tiles, the others on 64-token tiles: the same bits. With
// DenseOverlapOn, both tile sizes take the overlapped loop, whose slices start with scale-d = 0.
// Under DEEPINFER_CUBLASLT_DENSE, products DenseOnCublasLt takes run on cuBLASLt instead.
void LaunchDenseSplit(const Params& p, cudaStream_t stream) {
  if (DenseOnCublasLt(p, Kind::kBF16, LinearMath::kSplitBf16, stream)) {
    auto* parts = static_cast<uint16_t*>(p.scratch);
    SplitXParts<3>(p.x, p.ldx, p.m, p.k, parts, CurrentDeviceSms().second, stream, "cuda::Linear split-BF16 x parts");
    return RunDenseOnCublasLt(p, parts, stream);
  }
  const bool overlap = g_dense_overlap.On();  // one mode for every M: the same sums at every batch size
  if (p.m <= 8) return overlap ? LaunchDenseSplitTiles<8, true>(p, stream) : LaunchDenseSplitTiles<8, false>(p, stream);
  if (overlap) return LaunchDenseSplitTiles<64, true>(p, stream);
  LaunchDenseSplitTiles<64, false>(p, stream);
}

// DEEPINFER_CUBLASLT_FP8 (read once; 1: on, 0: off, unset: inside an allowing
// BatchVariantKernelsScope, i.e. --fast-prefill) runs Linear's products of FP8 weights
// with e8m0 scales under kFp8Act, given scratch, of at least kCublasLtFp8MinRows rows on cuBLASLt's
// block-scaled FP8 GEMM (cublaslt.h): x quantized by QuantizeRowsKernel as for the wgmma path (the
// same codes and scales), the weight's scales widened to f32 into the scratch on each call, y f32.
// cuBLASLt sums in its own order, not linear_wgmma.cuh's 512-column slices, so with it on a row's
// bits depend on whether its batch reached kCublasLtFp8MinRows: batch invariance is given up for
// these products (docs/numerics.md). A shape cuBLASLt has no algorithm for runs on the wgmma path
// (remembered per shape); where cuBLASLt cannot be loaded or its call fails, the call throws the
// reason. Tests override it (SetCublasLtFp8ForTesting).
KernelSwitch g_cublaslt_fp8{"DEEPINFER_CUBLASLT_FP8", 0, true};
std::atomic<uint64_t> g_cublaslt_fp8_launches{0};
std::atomic<int64_t> g_cublaslt_fp8_min_rows_for_testing{0};
constexpr int64_t kCublasLtFp8MinRows = 512;

int64_t CublasLtFp8MinRows() {
  const int64_t test = g_cublaslt_fp8_min_rows_for_testing.load();
  return test > 0 ? test : kCublasLtFp8MinRows;
}

// The path's scratch: x's codes [Round4(m)][k] and scales [k / 128][Round4(m)] in
// wgmma::ScratchLayout's places, then (256-byte aligned) the weight's f32 scales
// [n / 128][BlockScaledWeightScaleLd(k)].
int64_t CublasLtFp8WeightScalesOffset(int64_t m, int64_t k) {
  return CeilDiv(static_cast<int64_t>(wgmma::ScratchBytesForPaddedRows(BlockScaledActScaleLd(m), k)), int64_t{256}) *
         256;
}
size_t CublasLtFp8ScratchBytes(int64_t m, int64_t n, int64_t k) {
  return static_cast<size_t>(CublasLtFp8WeightScalesOffset(m, k) + n / 128 * BlockScaledWeightScaleLd(k) * 4);
}

// Rows of an m-row product that cuBLASLt takes, from the top: a multiple of 4 (cuBLASLt 13.1 has
// no block-scaled algorithm for m = 131; it has for 300 and 8,192), or 0; the rest (at most 3
// rows) run on the wgmma path.
int64_t CublasLtFp8Rows(int64_t m) { return m / 4 * 4; }

// Whether a product of m rows of `w` under `math` takes the path (the scratch aside).
bool CublasLtFp8Takes(int64_t m, const DeviceWeight& w, LinearMath math) {
  return g_cublaslt_fp8.On() && math == LinearMath::kFp8Act && w.format == DeviceWeight::Format::kFp8 &&
         w.scale_dtype == DType::kF8E8M0 && CublasLtFp8Rows(m) >= CublasLtFp8MinRows() && w.out_features % 128 == 0 &&
         w.in_features % 128 == 0 && w.in_features <= mma::kMaxSlices * mma::kSlice && w.data_row_stride % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && wgmma::DeviceHasWgmma();
}

// out[r][c] = 2^(e − 127) for the e8m0 byte e of scale row r, column c < cols; 0 for c in [cols, ld).
__global__ void WidenE8m0ScalesKernel(const uint8_t* __restrict__ scale, int64_t scale_row_stride, int64_t rows,
                                      int64_t cols, int64_t ld, float* __restrict__ out) {
  PdlPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * ld) return;
  const int64_t r = i / ld, c = i % ld;
  out[i] = c < cols ? DecodeE8m0(scale[r * scale_row_stride + c]) : 0.f;
}

// Linear's product of p on cuBLASLt where CublasLtFp8Takes holds, the scratch suffices, the stream
// is not capturing a graph and cuBLASLt has an algorithm for the shape (its plan cache answers, so a
// shape without one costs no quantization): returns the rows it enqueued (CublasLtFp8Rows(p.m), the
// first ones), or 0 with nothing launched. Fails where cuBLASLt cannot be loaded or its call fails.
int64_t LaunchCublasLtFp8(const Params& p, cudaStream_t stream) {
  DeviceWeight w;
  w.format = DeviceWeight::Format::kFp8;
  w.scale_dtype = p.scale_f32 ? DType::kF32 : DType::kF8E8M0;
  w.out_features = p.n;
  w.in_features = p.k;
  w.data = p.w;
  w.data_row_stride = p.w_row_bytes;
  const int64_t rows = CublasLtFp8Rows(p.m);
  if (!CublasLtFp8Takes(p.m, w, LinearMath::kFp8Act) || p.scratch == nullptr || !Aligned(p.scratch, 0, 256) ||
      p.scratch_bytes < CublasLtFp8ScratchBytes(rows, p.n, p.k)) {
    return 0;
  }
  if (StreamCapturing(stream)) return 0;
  // x's codes and scales go where QuantizeIntoScratch writes them, the weight's f32 scales after them.
  const wgmma::GemmArgs a = wgmma::ScratchLayout(p.scratch, rows, p.k);
  float* w_scales =
      reinterpret_cast<float*>(static_cast<uint8_t*>(p.scratch) + CublasLtFp8WeightScalesOffset(rows, p.k));
  BlockScaledFp8Product product;
  product.x_codes = a.codes;
  product.x_scales = a.xscales;
  product.w_codes = p.w;
  product.w_row_bytes = p.w_row_bytes;
  product.w_scales = w_scales;
  product.y = p.y;
  product.ldy = p.ldy;
  product.m = rows;
  product.n = p.n;
  product.k = p.k;
  const CublasLtResult plan = PlanBlockScaledFp8(product, stream);
  if (plan.status == CublasLtResult::Status::kUnsupported) return 0;
  if (plan.status != CublasLtResult::Status::kPlanned) Fail(("DEEPINFER_CUBLASLT_FP8: " + plan.why).c_str());
  QuantizeIntoScratch(p.x, p.ldx, rows, rows, p.k, p.x_vec, false, p.scratch, stream);
  const int64_t scale_rows = p.n / 128, scale_ld = BlockScaledWeightScaleLd(p.k);
  WidenE8m0ScalesKernel<<<static_cast<unsigned>(CeilDiv(scale_rows * scale_ld, 256)), 256, 0, stream>>>(
      p.scale, p.scale_row_stride, scale_rows, p.k / 128, scale_ld, w_scales);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear cuBLASLt weight scales");
  const CublasLtResult result = RunBlockScaledFp8(product, stream);
  if (result.status != CublasLtResult::Status::kEnqueued) {
    Fail(("DEEPINFER_CUBLASLT_FP8: " + result.why).c_str());
  }
  g_cublaslt_fp8_launches.fetch_add(1);
  return rows;
}

template <Kind K>
void LaunchKind(const Params& p, int64_t groups, cudaStream_t stream, LinearMath math) {
  static_assert(kGemvMaxRows == 16, "the GEMV instantiations cover M <= 16");
  if constexpr (K == Kind::kBF16 || K == Kind::kFp8 || K == Kind::kFp4) {
    const Path path = PathFor(math, K, p.scale_f32, p.k);
    if constexpr (K == Kind::kBF16) {
      // BF16 weights' split-BF16 products on warpgroup MMAs, at every M (sm_90a).
      if (path == Path::kSplitBf16 && g_dense_split.On() && wgmma_split::DenseUsable(p, groups)) {
        return LaunchDenseSplit(p, stream);
      }
    }
    if constexpr (K == Kind::kFp8) {
      // Grouped split-BF16 products on warpgroup MMAs, at every M (sm_90a).
      if (SplitGroupedRuns(p, K, groups, math)) return LaunchSplitGrouped(p, groups, stream);
    }
    if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
      // FP8 inputs with scratch on an sm_90a device: x quantized once, then warpgroup MMAs, at
      // every M (their k32 sums differ from mma.sync's; linear_wgmma.cuh).
      if (path == Path::kFp8) {
        if constexpr (K == Kind::kFp8) {
          const int64_t done = groups == 1 ? LaunchCublasLtFp8(p, stream) : 0;
          if (done == p.m) return;
          if (done > 0) {  // the last rows (at most 3) here, after cuBLASLt has read the scratch
            Params tail = p;
            tail.x += done * p.ldx;
            tail.y += done * p.ldy;
            tail.m -= done;
            return LaunchKind<K>(tail, groups, stream, math);
          }
        }
        const WgmmaLinearLayout layout = MakeWgmmaLinearLayout(p.m, p.n, p.k);
        if (wgmma::Usable(p, K, groups, layout.bytes)) {
          return LaunchWgmma<K>(p, layout, stream);
        }
      }
    }
    if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
      // FP8 inputs past 32 rows: shared-memory tiles of 64 x 64 (the same bits per output).
      if (path == Path::kFp8 && p.m > mma::kMaxTm * mma::kTok) {
        const int64_t tok_blocks = CeilDiv(p.m, mma::fp8::kTiledTok);
        if (tok_blocks > 65535) Fail("too many rows for one launch");
        const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, mma::fp8::kTiledRows)), static_cast<unsigned>(tok_blocks),
                        static_cast<unsigned>(groups));
        mma::fp8::TiledLinearKernel<K><<<grid, mma::kThreads, 0, stream>>>(p);
        DI_CUDA_LAUNCH_CHECK("cuda::Linear mma fp8 tiled");
        return;
      }
    }
    if (path == Path::kSplitBf16 && p.m > mma::kMaxTm * mma::kTok) {
      // Past 32 rows: shared-memory tiles of 64 x 32 (the same bits per output).
      const int64_t tok_blocks = CeilDiv(p.m, mma::kStagedTok);
      if (tok_blocks > 65535) Fail("too many rows for one launch");
      const int64_t row_blocks = CeilDiv(p.n, mma::kStagedRows);
      if (LaunchStagedSlices<K>(p, groups, row_blocks, tok_blocks, stream)) return;
      const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(tok_blocks),
                      static_cast<unsigned>(groups));
      mma::StagedLinearKernel<K><<<grid, mma::kThreads, 0, stream>>>(p);
      DI_CUDA_LAUNCH_CHECK("cuda::Linear mma staged");
      return;
    }
    if (path != Path::kSimt) {
      // Up to 32 rows the staged kernel's K slices over a cluster where they are on and fill more
      // of the device than the register-fed kernel (the same bits).
      if (path == Path::kSplitBf16 && LaunchStagedSlices<K>(p, groups, CeilDiv(p.n, mma::kStagedRows), 1, stream)) {
        return;
      }
      if (p.m <= mma::kTok) return LaunchMma<K, 1>(p, groups, stream, path);
      if (p.m <= 2 * mma::kTok) return LaunchMma<K, 2>(p, groups, stream, path);
      return LaunchMma<K, mma::kMaxTm>(p, groups, stream, path);
    }
  }
  if (p.m <= 1) return LaunchGemv<K, 1>(p, groups, stream);
  if (p.m <= 2) return LaunchGemv<K, 2>(p, groups, stream);
  if (p.m <= 4) return LaunchGemv<K, 4>(p, groups, stream);
  if (p.m <= 8) return LaunchGemv<K, 8>(p, groups, stream);
  if (p.m <= 16) return LaunchGemv<K, 16>(p, groups, stream);
  const int64_t m_tiles = CeilDiv(p.m, kTileM);
  if (m_tiles > 65535) Fail("too many rows for one launch");
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kTileN)), static_cast<unsigned>(m_tiles),
                  static_cast<unsigned>(groups));
  LinearTiledKernel<K><<<grid, kTiledThreads, 0, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear tiled");
}

void Launch(const Params& given, Kind kind, int64_t groups, cudaStream_t stream, LinearMath math) {
  Params p = given;
  p.prefetch_w = PrefetchWeights();
  if (groups > 65535) Fail("too many groups");
  if (CeilDiv(p.n, kTileN) > 0x7fffffff) Fail("too many outputs");
  switch (kind) {
    case Kind::kF32: return LaunchKind<Kind::kF32>(p, groups, stream, math);
    case Kind::kBF16: return LaunchKind<Kind::kBF16>(p, groups, stream, math);
    case Kind::kF16: return LaunchKind<Kind::kF16>(p, groups, stream, math);
    case Kind::kFp8: return LaunchKind<Kind::kFp8>(p, groups, stream, math);
    case Kind::kFp4: return LaunchKind<Kind::kFp4>(p, groups, stream, math);
  }
}

// ---- expert-grouped projection: host side ----

// Room in each list for rows_bound rows and num_experts experts: a GEMV tile of kind i holds at
// least kMinRows[i] rows and an expert has at most one; a tiled tile holds at least 17 rows.
struct TileCapacity {
  int64_t tiles[kTileKinds] = {};
  int64_t total = 0;
};

TileCapacity Capacity(int64_t rows_bound, int64_t num_experts) {
  constexpr int64_t kMinRows[kTileKinds] = {1, 3, 5, 9, kGemvMaxRows + 1};
  TileCapacity c;
  for (int kind = 0; kind < kTileKinds; ++kind) {
    int64_t n = rows_bound / kMinRows[kind];
    if (kind != kTiledKind) n = std::min(n, num_experts);
    c.tiles[kind] = n;
    c.total += n;
  }
  return c;
}

// The kTileKinds counts and the plan's tile height, padded to keep the tiles 16-byte aligned.
constexpr size_t kCountsBytes = 32;
static_assert((kTileKinds + 1) * sizeof(int32_t) <= kCountsBytes && sizeof(ExpertTile) == 16);

// What the launches of one ExpertsLinear call share.
struct ExpertsLaunch {
  ExpertsParams params;
  TileLists lists;
  TileCapacity capacity;
  int device = 0;
  int64_t sms = 0;  // multiprocessors of the current device
  Path path = Path::kSimt;  // PathFor the layout
  cudaStream_t stream = nullptr;
  void* codes = nullptr;  // ExpertsLinear's codes scratch (null: none)
  size_t codes_bytes = 0;
  const int32_t* offsets = nullptr;  // the experts' row ranges (device)
  int64_t num_experts = 0;
  int tma_tokens = 0;  // the pre-folded experts on the TMA-fed kernel at 64 or 128 tokens (0: not)
  bool fp4_in_block = false;  // instead, converted in the blocks of ExpertsFp4InBlockKernel (96)
  bool fp4_registers = false;  // of those, converted in registers (ExpertsFp4RegistersTmaKernel, 104)
  bool fp4_tile_pairs = false;  // instead, one converted tile for two token tiles (ExpertsFp4TilePairKernel, 208)
  bool fp4_bf16 = false;  // instead, on BF16 MMAs with the scales folded (ExpertsFp4Bf16Kernel, 208 or 104)
  bool x_in_codes = false;  // x already in the codes scratch (GatherQuantizeRowsBf16 or GatherQuantizeRows)
  const uint8_t* folded = nullptr;  // FP4 experts kept folded for the run (FoldExperts), or null
  const uint32_t* chunk_words = nullptr;  // FP4 experts' chunk words (WriteFp4ChunkWords), or null
  const uint8_t* fp4_tiles = nullptr;     // FP4 experts' tiles (WriteFp4ExpertTiles), or null
};

// Launches `kernel` over the items of list `kind`: a grid of at most as many blocks as the list's
// capacity has items, and no more than fit on the device at once (the kernel strides over the rest).
template <typename Kernel>
void LaunchList(Kernel kernel, int threads, int blocks_per_sm, const ExpertsLaunch& l, int kind,
                int64_t blocks_per_tile, const char* what) {
  if (l.capacity.tiles[kind] == 0) return;
  ExpertsParams ep = l.params;
  ep.count = l.lists.counts + kind;
  ep.tiles = l.lists.tiles[kind];
  ep.blocks_per_tile = static_cast<int32_t>(blocks_per_tile);  // n < 2^31 (checked)
  const int64_t resident = l.sms * std::max(blocks_per_sm, 1);
  const int64_t grid = std::min(l.capacity.tiles[kind] * blocks_per_tile, resident);
  kernel<<<static_cast<unsigned>(grid), threads, 0, l.stream>>>(ep);
  DI_CUDA_LAUNCH_CHECK(what);
}

// The GEMV kind `kind` (tiles of up to MT rows), RPW weight rows per warp as Linear's GEMV.
template <Kind K, int MT, int RPW>
void LaunchExpertsGemv(const ExpertsLaunch& l, int kind) {
  constexpr int kThreads = kGemvWarps * kWarpSize;
  const int64_t blocks_per_tile = CeilDiv(l.params.base.n, kGemvWarps * RPW);
  const int blocks_per_sm = BlocksPerSm<ExpertsGemvKernel<K, MT, RPW>>(kThreads, 0);
  LaunchList(ExpertsGemvKernel<K, MT, RPW>, kThreads, blocks_per_sm, l, kind, blocks_per_tile, "cuda::ExpertsLinear gemv");
}

template <Kind K, int TM, bool kFp8>
void LaunchExpertsMmaKernel(const ExpertsLaunch& l, int kind) {
  const int blocks_per_sm = BlocksPerSm<ExpertsMmaKernel<K, TM, kFp8>>(mma::kThreads, 0);
  LaunchList(ExpertsMmaKernel<K, TM, kFp8>, mma::kThreads, blocks_per_sm, l, kind,
             MmaRowBlocks(l.params.base.n, l.params.base.k), "cuda::ExpertsLinear mma");
}

template <Kind K, bool kFp8>
void LaunchExpertsMmaSmallKernel(const ExpertsLaunch& l) {
  const int blocks_per_sm = BlocksPerSm<ExpertsMmaSmallKernel<K, kFp8>>(mma::kThreads, 0);
  const int64_t capacity = l.capacity.tiles[0] + l.capacity.tiles[1] + l.capacity.tiles[2];
  if (capacity == 0) return;
  ExpertsParams ep = l.params;
  ep.count = nullptr;
  ep.tiles = nullptr;
  const int64_t blocks_per_tile = MmaRowBlocks(l.params.base.n, l.params.base.k);
  ep.blocks_per_tile = static_cast<int32_t>(blocks_per_tile);
  const int64_t grid = std::min(capacity * blocks_per_tile, l.sms * std::max(blocks_per_sm, 1));
  ExpertsMmaSmallKernel<K, kFp8><<<static_cast<unsigned>(grid), mma::kThreads, 0, l.stream>>>(ep, l.lists);
  DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear mma (tiles of up to 8 rows)");
}

// Tiles of 1-8 rows (kinds 0-2, one launch).
template <Kind K>
void LaunchExpertsMmaSmall(const ExpertsLaunch& l) {
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    if (l.path == Path::kFp8) return LaunchExpertsMmaSmallKernel<K, true>(l);
  }
  LaunchExpertsMmaSmallKernel<K, false>(l);
}

template <Kind K, int TM>
void LaunchExpertsMma(const ExpertsLaunch& l, int kind) {
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    if (l.path == Path::kFp8) return LaunchExpertsMmaKernel<K, TM, true>(l, kind);
  }
  LaunchExpertsMmaKernel<K, TM, false>(l, kind);
}

int64_t RowsBound(const ExpertsLaunch& l) { return l.params.base.m; }

// FP4 experts are pre-folded from this many rows per expert on average (rows_bound over the
// experts), in groups of at most kPreFoldBudgetBytes of scratch (at least one expert), where the
// codes scratch has the room (ExpertsLinearCodesBytes asks for it).
// DEEPINFER_FP4_PREFOLD=0 / 1 (read once) asks for never / always instead.
constexpr int64_t kPreFoldMinRowsPerExpert = 64;
constexpr int64_t kPreFoldBudgetBytes = int64_t{1} << 30;

int Fp4PreFoldMode() {
  static const int mode = [] {
    const char* v = std::getenv("DEEPINFER_FP4_PREFOLD");
    if (v == nullptr || *v == '\0') return -1;
    const std::string s(v);
    if (s == "0" || s == "1") return std::stoi(s);
    const std::string message = "DEEPINFER_FP4_PREFOLD must be 0 (never) or 1 (always), got '" + s + "'";
    ThrowCudaError(__FILE__, __LINE__, "cuda::ExpertsLinear", message.c_str());
  }();
  return mode;
}

// The rule, shared by the scratch size and the launch (a scratch with room left over, e.g. one
// sized for the MoE's w1 reused by its w2, does not pre-fold by itself).
bool PreFoldWanted(int64_t rows_bound, int64_t num_experts) {
  const int mode = Fp4PreFoldMode();
  return num_experts > 0 && (mode == 1 || (mode == -1 && rows_bound >= kPreFoldMinRowsPerExpert * num_experts));
}

// Where the pre-folded experts start in the codes scratch: after x's codes and scales.
int64_t PreFoldOffset(int64_t rows_bound, int64_t k) {
  return CeilDiv(static_cast<int64_t>(wgmma::ScratchBytesForPaddedRows(wgmma::ExpertsPaddedRows(rows_bound), k)),
                 256) * 256;
}

// The plan's room for the tiles that take kTok-token tiles (TileTokensOfKind).
template <int kTok>
int64_t TilesInRange(const ExpertsLaunch& l) {
  int64_t tiles = 0;
  for (int kind = 0; kind < kTileKinds; ++kind) {
    if (TileTokensOfKind(kind) == kTok) tiles += l.capacity.tiles[kind];
  }
  return tiles;
}

// kKernel (persistent blocks) over the items of the tiles kTok takes: at most as many blocks as
// fit on the device at once, none where the plan has no room for such tiles.
template <auto kKernel, int kTok, class... Args>
void LaunchTileRange(const ExpertsLaunch& l, const ExpertsParams& ep, int smem, const char* what, Args... args) {
  const int64_t tiles = TilesInRange<kTok>(l);
  if (tiles == 0) return;
  AllowDynamicSmem<kKernel>(l.device, smem);
  const int blocks_per_sm = BlocksPerSm<kKernel>(wgmma::kThreads, smem);
  const int64_t grid = std::min(tiles * ep.blocks_per_tile, l.sms * std::max(blocks_per_sm, 1));
  kKernel<<<static_cast<unsigned>(grid), wgmma::kThreads, smem, l.stream>>>(ep, l.lists, args...);
  DI_CUDA_LAUNCH_CHECK(what);
}

// An environment switch between two values (read by the caller once): `unset` where `name` is
// unset, empty or spells `unset`, `other` where it spells `other`; anything else is an error.
int EnvEither(const char* name, int unset, int other) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0' || std::to_string(unset) == v) return unset;
  if (std::to_string(other) == v) return other;
  const std::string message =
      std::string(name) + " must be " + std::to_string(unset) + " or " + std::to_string(other) + ", got '" + v + "'";
  ThrowCudaError(__FILE__, __LINE__, "cuda::ExpertsLinear", message.c_str());
}

// The 8- and 16-token experts kernels' registers are held to 2 blocks per SM (128 registers, a
// few spills) or 1 (DEEPINFER_SMALL_TILE_BLOCKS=1 or 2, read once; unset: 2; measured 2026-12-02,
// docs/performance.md version 23: `experts_linear` at batch 64 7.01 ms at 2, 8.92 at 1).
int SmallTileBlocksPerSm() {
  static const int blocks = EnvEither("DEEPINFER_SMALL_TILE_BLOCKS", 2, 1);
  return blocks;
}

// ExpertsPreFoldedKernel<kTok> (8 or 16 tokens) at SmallTileBlocksPerSm.
template <int kTok>
void LaunchPreFoldedSmall(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a,
                          const PreFoldLayout& lay, int32_t first, int32_t end, const uint8_t* pre) {
  constexpr int kSmem = wgmma::PreFoldedSmem::kBytes;
  constexpr const char* kWhat = "cuda::ExpertsLinear wgmma pre-folded, 8- or 16-token tiles";
  if (SmallTileBlocksPerSm() == 2) {
    return LaunchTileRange<ExpertsPreFoldedKernel<kTok, 2>, kTok>(l, ep, kSmem, kWhat, a, first, end, lay, pre);
  }
  LaunchTileRange<ExpertsPreFoldedKernel<kTok, 1>, kTok>(l, ep, kSmem, kWhat, a, first, end, lay, pre);
}

// ExpertsPreFoldedKernel over the items of experts [first, end), their codes at `pre`: the tiles
// of 17-64 rows on 64-token tiles, 9-16 on 16, 1-8 on 8.
void LaunchPreFoldedGemm(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a,
                         const PreFoldLayout& lay, int32_t first, int32_t end, const uint8_t* pre) {
  constexpr int kSmem = wgmma::PreFoldedSmem::kBytes;
  LaunchTileRange<ExpertsPreFoldedKernel<64, 1>, 64>(l, ep, kSmem, "cuda::ExpertsLinear wgmma pre-folded", a, first,
                                                     end, lay, pre);
  LaunchPreFoldedSmall<16>(l, ep, a, lay, first, end, pre);
  LaunchPreFoldedSmall<8>(l, ep, a, lay, first, end, pre);
}

// DEEPINFER_TMA_EXPERTS = 64 or 128 (read once) runs the pre-folded experts on
// ExpertsPreFoldedTmaKernel with tiles of that many tokens (version 14b, the same bits; 128 cuts
// the plan in 128-row tiles), 0 on ExpertsPreFoldedKernel. Unset: 64 for experts pre-folded per
// call where the kernel is warp-specialized (DEEPINFER_TMA_WS; version 32: the 8k prefill's
// experts 50.6 -> 40.0 ms), else 0, and 0 for experts kept folded, whose 8- and 16-token launches
// the TMA kernel lacks (docs/performance.md version 23: at batch 64, 8.67 ms on the TMA kernel
// against 5.55). The tests' choice (tma::TestOverride, tma::TestExpertTokens) comes first.
int ExpertsTmaTokens(bool folded) {
  static const int from_environment = [] {
    const char* v = std::getenv("DEEPINFER_TMA_EXPERTS");
    if (v == nullptr || *v == '\0') return -1;
    if (std::strcmp(v, "0") == 0) return 0;
    if (std::strcmp(v, "64") == 0) return 64;
    if (std::strcmp(v, "128") == 0) return 128;
    const std::string message = std::string("DEEPINFER_TMA_EXPERTS must be 0, 64 or 128, got '") + v + "'";
    ThrowCudaError(__FILE__, __LINE__, "cuda::ExpertsLinear", message.c_str());
  }();
  const int unset = !folded && g_tma_warp_specialized.On() ? 64 : 0;
  const int chosen = from_environment < 0 ? unset : from_environment;
  const int mode = tma::TestOverride().load();
  const int tokens = mode < 0 ? chosen : mode == 1 ? tma::TestExpertTokens().load() : 0;
  return tokens > 0 && EncodeTiled() != nullptr ? tokens : 0;
}

// Where the group loop of LaunchExpertsPreFolded starts and how many experts a group holds: 0
// experts where the codes scratch has no room for one after x's codes.
int64_t PreFoldGroup(const PreFoldLayout& lay, int64_t rows_bound, int64_t k, int64_t num_experts, size_t codes_bytes) {
  const int64_t room = static_cast<int64_t>(codes_bytes) - PreFoldOffset(rows_bound, k);
  return room < lay.ExpertBytes() ? 0 : std::min(num_experts, room / lay.ExpertBytes());
}

// DEEPINFER_FP4_IN_BLOCK (read once; unset or 1: on; 0: off): FP4 experts at prefill sizes
// converted in the blocks of ExpertsFp4InBlockKernel (Fp4InBlockFor; the same bits; 96-token
// tiles) instead of pre-folded per call (docs/performance.md, version 38). Tests override it
// (SetFp4InBlockForTesting).
KernelSwitch g_fp4_in_block{"DEEPINFER_FP4_IN_BLOCK", 1};
std::atomic<uint64_t> g_fp4_in_block_launches{0};  // launches of it (tests)
// DEEPINFER_FP4_IN_BLOCK_RS (read once; unset or 1: on; 0: off): those calls, where the experts have
// chunk words, on ExpertsFp4RegistersTmaKernel (the A fragments converted in the MMA warpgroups'
// registers; the same bits; docs/performance.md, version 40). Tests override it
// (SetFp4InBlockRegistersForTesting).
KernelSwitch g_fp4_in_block_rs{"DEEPINFER_FP4_IN_BLOCK_RS", 1};
std::atomic<uint64_t> g_fp4_in_block_rs_launches{0};  // launches of it (tests)
std::atomic<uint64_t> g_fp4_chunk_words_launches{0};  // register-fed and in-block launches reading them (tests)
// DEEPINFER_FP4_TILE_PAIRS (read once; unset or 0: off; 1: on): the calls that would take
// ExpertsFp4RegistersTmaKernel on ExpertsFp4TilePairKernel instead (one converted weight tile for
// two 104-token tiles; the same bits; docs/performance.md, version 55). Tests override it
// (SetFp4TilePairsForTesting).
KernelSwitch g_fp4_tile_pairs{"DEEPINFER_FP4_TILE_PAIRS", 0};
std::atomic<uint64_t> g_fp4_tile_pairs_launches{0};  // launches of it (tests)

// Whether an ExpertsLinear call takes ExpertsFp4InBlockKernel: FP4 experts on the FP8-input path
// on warpgroup MMAs with codes scratch for x (wgmma::ExpertsUsable), not kept folded, at prefill
// sizes (PreFoldWanted's rule; no pre-fold room needed), the TMA-fed experts kernels on
// (ExpertsTmaTokens) and warp-specialized, DEEPINFER_FP4_IN_BLOCK on. It depends on K, so the
// MoE's w1 and w2 may decide differently (the tiny FP4 golden's w2 has K = 64): such calls cut
// their own plan (ExpertsLinear) instead of reusing one cut for the other's tile height.
// Fp4InBlockMayRun: its conditions that the MoE's w1, w3 and w2 share (all but K's and the
// folded experts'): where it holds, a call cuts its own plan.
bool Fp4InBlockMayRun(Kind kind, Path path, int64_t rows_bound, int64_t num_experts) {
  return g_fp4_in_block.On() && kind == Kind::kFp4 && path == Path::kFp8 && PreFoldWanted(rows_bound, num_experts);
}
// Whether the FP4 experts converted in the blocks take ExpertsFp4RegistersTmaKernel: the switch,
// the chunk words, K within rs::kMaxChunks chunks, and the chunk words' offsets within 32 bits.
bool Fp4RegistersPrefillFor(bool chunk_words, int64_t num_experts, int64_t n, int64_t k) {
  return g_fp4_in_block_rs.On() && chunk_words && wgmma::rs::Usable(k) &&
         num_experts * wgmma::rs::ChunkWordsOfExpert(n, k / wgmma::kChunk) <= 0xffffffffLL;
}
bool Fp4InBlockFor(Kind kind, Path path, bool scale_f32, int64_t rows_bound, int64_t num_experts, int64_t k,
                   const void* codes, size_t codes_bytes, bool folded) {
  return Fp4InBlockMayRun(kind, path, rows_bound, num_experts) && !folded &&
         wgmma::ExpertsUsable(kind, scale_f32, k, codes, codes_bytes, rows_bound) && ExpertsTmaTokens(false) != 0 &&
         g_tma_warp_specialized.On();
}

// The TMA-fed pre-folded GEMM's tile tokens for an ExpertsLinear call (0: it does not run), fixed
// before the plan is cut, since at 128 the plan's tiles are 128 rows: FP4 experts on the FP8-input
// path on warpgroup MMAs with codes scratch (wgmma::ExpertsUsable), kept folded for the run
// (`folded`, at any row count) or pre-folded (PreFoldWanted, and room for a group), and
// ExpertsTmaTokens.
int ExpertsTmaTokensFor(Kind kind, Path path, bool scale_f32, int64_t rows_bound, int64_t num_experts, int64_t n,
                        int64_t k, const void* codes, size_t codes_bytes, bool folded) {
  if (kind != Kind::kFp4 || path != Path::kFp8 ||
      !wgmma::ExpertsUsable(kind, scale_f32, k, codes, codes_bytes, rows_bound)) {
    return 0;
  }
  if (!folded && (!PreFoldWanted(rows_bound, num_experts) ||
                  PreFoldGroup(MakePreFoldLayout(n, k), rows_bound, k, num_experts, codes_bytes) == 0)) {
    return 0;
  }
  return ExpertsTmaTokens(folded);
}

// ExpertsPreFoldedTmaKernel<kTok> over the items of experts [first, end) (PreFoldKernel has
// written their codes at `pre`).
template <int kTok>
void LaunchExpertsPreFoldedTma(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a,
                               const PreFoldLayout& lay, int32_t first, int32_t end, const uint8_t* pre) {
  const Params& b = l.params.base;
  const auto [x_map, xs_map] = XTensorMaps(a, b.k, kTok);
  // The group's codes: [experts][n][k] bytes, lay.ExpertBytes() apart.
  const uint64_t w_dims[3] = {static_cast<uint64_t>(b.k), static_cast<uint64_t>(b.n),
                              static_cast<uint64_t>(end - first)};
  const uint64_t w_strides[2] = {static_cast<uint64_t>(b.k), static_cast<uint64_t>(lay.ExpertBytes())};
  const uint32_t w_box[3] = {tma::kChunk, tma::kBlockRows, 1};
  const CUtensorMap w_map =
      TensorMap(pre, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, w_dims, w_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B);
  constexpr int kSmem = ExpertsTmaSmem<kTok>::kBytes;
  const int64_t grid = std::min(l.capacity.total * ep.blocks_per_tile, l.sms);
  if (g_tma_warp_specialized.On()) {
    AllowDynamicSmem<ExpertsPreFoldedTmaKernel<kTok, true>>(l.device, kSmem);
    ExpertsPreFoldedTmaKernel<kTok, true><<<static_cast<unsigned>(grid), tma::kWsThreads, kSmem, l.stream>>>(
        w_map, x_map, xs_map, ep, l.lists, first, end, lay, pre);
    DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear TMA pre-folded, warp-specialized");
    g_tma_ws_launches.fetch_add(1);
  } else {
    AllowDynamicSmem<ExpertsPreFoldedTmaKernel<kTok, false>>(l.device, kSmem);
    ExpertsPreFoldedTmaKernel<kTok, false><<<static_cast<unsigned>(grid), tma::kThreads, kSmem, l.stream>>>(
        w_map, x_map, xs_map, ep, l.lists, first, end, lay, pre);
    DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear TMA pre-folded");
  }
  g_tma_launches.fetch_add(1);
}

// DEEPINFER_FP4_IN_BLOCK_UNITS = 1 or 2 (read once; unset: 2): the units ExpertsFp4InBlockKernel's
// converting warpgroup converts side by side. The tests' choice (SetFp4InBlockForTesting) comes
// first.
std::atomic<int> g_in_block_units_for_testing{0};
int InBlockUnits() {
  static const int units = EnvEither("DEEPINFER_FP4_IN_BLOCK_UNITS", 2, 1);
  const int chosen = g_in_block_units_for_testing.load();
  return chosen != 0 ? chosen : units;
}

// Calls f(std::bool_constant<a>{}, std::bool_constant<b>{}): two run-time flags as template arguments.
template <class F>
void WithFlags(bool a, bool b, const F& f) {
  if (a) {
    b ? f(std::true_type{}, std::true_type{}) : f(std::true_type{}, std::false_type{});
  } else {
    b ? f(std::false_type{}, std::true_type{}) : f(std::false_type{}, std::false_type{});
  }
}

// kKernel, one of the FP4 experts' prefill kernels converting in the blocks (ExpertsFp4InBlockKernel,
// ExpertsFp4RegistersTmaKernel, ExpertsFp4TilePairKernel: their parameters are alike), over every
// item of the plan, once: at most one block an SM, `threads` threads, kSmem bytes of dynamic shared
// memory. ep.blocks_per_tile: the kernel's items per tile.
template <auto kKernel, int kSmem>
void LaunchExpertsFp4Prefill(const ExpertsLaunch& l, const ExpertsParams& ep, const CUtensorMap& x_map,
                             const CUtensorMap& xs_map, int threads, const char* what) {
  AllowDynamicSmem<kKernel>(l.device, kSmem);
  const int64_t grid = std::min(l.capacity.total * ep.blocks_per_tile, l.sms);
  kKernel<<<static_cast<unsigned>(grid), threads, kSmem, l.stream>>>(x_map, xs_map, ep, l.lists,
                                                                     static_cast<int32_t>(l.num_experts));
  DI_CUDA_LAUNCH_CHECK(what);
}
// DEEPINFER_FP4_SLICE_SCALE = 0 or 1 (unset: 1): ExpertsFp4RegistersTmaKernel's up-shifted warps
// (the row scales once a slice; the same bits), and ExpertsFp4TilePairKernel's. Tests override it
// (SetFp4SliceScaleForTesting).
KernelSwitch g_fp4_slice_scale{"DEEPINFER_FP4_SLICE_SCALE", 1};

void LaunchExpertsFp4InBlock(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a) {
  const Params& b = l.params.base;
  if (b.k > 0x7fffffff || b.n > 0x7fffffff) Fail("FP4 experts too large for 32-bit coordinates");
  // The plan's tiles; a pair's two token tiles one box each.
  const uint32_t box_rows = static_cast<uint32_t>(l.fp4_tile_pairs ? kRsTokens : ep.tile_rows);
  const auto [x_map, xs_map] = XTensorMaps(a, b.k, box_rows);
  const bool slice_scale = g_fp4_slice_scale.On();
  if (l.fp4_tile_pairs) {
    ExpertsParams pairs = ep;  // items of 64 weight rows
    pairs.blocks_per_tile = static_cast<int32_t>(CeilDiv(b.n, kPairRows));
    constexpr const char* kWhat = "cuda::ExpertsLinear FP4 tile pairs";
    WithFlags(slice_scale, b.w_sign_split, [&](auto slice, auto split) {
      constexpr auto kKernel = ExpertsFp4TilePairKernel<decltype(slice)::value, decltype(split)::value>;
      LaunchExpertsFp4Prefill<kKernel, TilePair::kBytes>(l, pairs, x_map, xs_map, tma::kWsThreads, kWhat);
    });
    g_fp4_tile_pairs_launches.fetch_add(1);
  } else if (l.fp4_registers) {
    constexpr const char* kWhat = "cuda::ExpertsLinear FP4 converted in registers";
    WithFlags(slice_scale, b.w_sign_split, [&](auto slice, auto split) {
      constexpr auto kKernel = ExpertsFp4RegistersTmaKernel<decltype(slice)::value, decltype(split)::value>;
      LaunchExpertsFp4Prefill<kKernel, RsPrefill::kBytes>(l, ep, x_map, xs_map, 2 * wgmma::rs::kThreads, kWhat);
    });
    g_fp4_in_block_rs_launches.fetch_add(1);
  } else {
    constexpr const char* kWhat = "cuda::ExpertsLinear FP4 converted in the blocks";
    WithFlags(InBlockUnits() == 2, b.w_sign_split, [&](auto two, auto split) {
      constexpr int kUnits = decltype(two)::value ? 2 : 1;
      constexpr auto kKernel = ExpertsFp4InBlockKernel<kUnits, decltype(split)::value>;
      LaunchExpertsFp4Prefill<kKernel, InBlock<kUnits>::kBytes>(l, ep, x_map, xs_map, tma::kWsThreads, kWhat);
    });
  }
  g_tma_launches.fetch_add(1);
  g_tma_ws_launches.fetch_add(1);
  g_fp4_in_block_launches.fetch_add(1);
  if (l.chunk_words != nullptr) g_fp4_chunk_words_launches.fetch_add(1);
}

// DEEPINFER_FP4_BF16 = 0 or 1 (read once; unset: on inside an allowing BatchVariantKernelsScope,
// i.e. --fast-prefill, else off): the FP4 experts that the register-fed kernel would take run on
// ExpertsFp4Bf16Kernel instead, its x written by QuantizeRowsBf16Kernel into the codes scratch
// (Fp4Bf16XBytes). Other bits than the FP8-input path's (the exact products in one chain a row),
// so not batch invariant (docs/performance.md, version 57). Tests override it (SetFp4Bf16ForTesting).
KernelSwitch g_fp4_bf16{"DEEPINFER_FP4_BF16", 0, true};
std::atomic<uint64_t> g_fp4_bf16_launches{0};  // launches of it (tests)

// The codes scratch ExpertsFp4Bf16Kernel's x takes: BF16 [ExpertsPaddedRows][k].
int64_t Fp4Bf16XBytes(int64_t rows_bound, int64_t k) { return wgmma::ExpertsPaddedRows(rows_bound) * k * 2; }

// DEEPINFER_FP4_BF16_TOKENS = 208 or 104 (read once; unset: 208): ExpertsFp4Bf16Kernel's tile tokens
// (measured on the H100, 2026-12-06, layer 0's w1/w3 at the 8k prefill: 2.82 ms at 208, 3.99 at 104;
// docs/performance.md, version 57). Tests override it (SetFp4Bf16ForTesting).
std::atomic<int> g_fp4_bf16_tokens_for_testing{0};
int Fp4Bf16Tokens() {
  static const int tokens = EnvEither("DEEPINFER_FP4_BF16_TOKENS", kPairTokens, kRsTokens);
  const int chosen = g_fp4_bf16_tokens_for_testing.load();
  return chosen != 0 ? chosen : tokens;
}

// DEEPINFER_FP4_BF16_NARROW = 0 or 1 (read once; unset: 1): ExpertsFp4Bf16Kernel<208>'s tiles of at
// most 104 rows on m64n104k16 (narrow_rows; the same bits either way). Tests override it
// (SetFp4Bf16NarrowForTesting).
KernelSwitch g_fp4_bf16_narrow{"DEEPINFER_FP4_BF16_NARROW", 1};

template <int kTok>
void LaunchExpertsFp4Bf16Tiles(const ExpertsLaunch& l, const ExpertsParams& ep, const __nv_bfloat16* x_bf16,
                               int64_t m_pad) {
  const Params& b = l.params.base;
  const uint64_t dims[2] = {static_cast<uint64_t>(b.k), static_cast<uint64_t>(m_pad)};
  const uint64_t strides[1] = {static_cast<uint64_t>(b.k) * 2};
  const uint32_t box[2] = {64, static_cast<uint32_t>(kTok)};
  const CUtensorMap x_map =
      TensorMap(x_bf16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
  constexpr int kSmem = Bf16Prefill<kTok>::kBytes;
  const int64_t grid = std::min(l.capacity.total * ep.blocks_per_tile, l.sms);
  const int32_t narrow_rows = kTok == kPairTokens && g_fp4_bf16_narrow.On() ? kRsTokens : 0;
  const auto launch = [&](auto split) {  // a std::bool_constant: the words sign-split
    constexpr auto kKernel = ExpertsFp4Bf16Kernel<kTok, decltype(split)::value>;
    AllowDynamicSmem<kKernel>(l.device, kSmem);
    kKernel<<<static_cast<unsigned>(grid), 2 * wgmma::rs::kThreads, kSmem, l.stream>>>(
        x_map, ep, l.lists, static_cast<int32_t>(l.num_experts), narrow_rows);
  };
  ep.base.w_sign_split ? launch(std::true_type{}) : launch(std::false_type{});
  DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear FP4 on BF16 MMAs");
}

void LaunchExpertsFp4Bf16(const ExpertsLaunch& l, const ExpertsParams& ep) {
  const Params& b = l.params.base;
  if (b.k > 0x7fffffff || b.n > 0x7fffffff) Fail("FP4 experts too large for 32-bit coordinates");
  const int64_t m_pad = wgmma::ExpertsPaddedRows(b.m);
  auto* x_bf16 = static_cast<__nv_bfloat16*>(l.codes);
  if (!l.x_in_codes) {
    const int64_t quant_blocks = CeilDiv(m_pad * (b.k / wgmma::kChunk), 256 / kWarpSize);
    if (quant_blocks > 0x7fffffff) Fail("too many rows for one launch");
    wgmma::fp4bf16::QuantizeRowsBf16Kernel<<<static_cast<unsigned>(quant_blocks), 256, 0, l.stream>>>(
        b.x, b.ldx, b.m, m_pad, b.k, b.x_vec, x_bf16);
    DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear act_quant to BF16");
  }
  if (l.params.tile_rows == kPairTokens) {
    LaunchExpertsFp4Bf16Tiles<kPairTokens>(l, ep, x_bf16, m_pad);
  } else {
    LaunchExpertsFp4Bf16Tiles<kRsTokens>(l, ep, x_bf16, m_pad);
  }
  g_fp4_bf16_launches.fetch_add(1);
  g_tma_launches.fetch_add(1);
}

// FP4 experts, pre-folded in groups of as many experts as the codes scratch holds after x's
// codes: per group PreFoldKernel, then the GEMM over the items of the group's experts (every block
// walks all items and skips the others'): ExpertsPreFoldedTmaKernel where l.tma_tokens says so,
// else ExpertsPreFoldedKernel. Returns false (nothing launched) where PreFoldWanted says no or the
// scratch holds no expert after x's codes (never with l.tma_tokens set: ExpertsTmaTokensFor).
bool LaunchExpertsPreFolded(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a) {
  const Params& b = l.params.base;
  if (!PreFoldWanted(b.m, l.num_experts)) return false;
  const PreFoldLayout lay = MakePreFoldLayout(b.n, b.k);
  const int64_t group = PreFoldGroup(lay, b.m, b.k, l.num_experts, l.codes_bytes);
  if (group == 0) return false;
  if (lay.n_pad / wgmma::kBlockRows * lay.chunks > 0x7fffffff || group > 65535) Fail("pre-fold grid too large");
  if (b.k > 0x7fffffff || b.n > 0x7fffffff) Fail("pre-folded experts too large for 32-bit coordinates");
  uint8_t* pre = static_cast<uint8_t*>(l.codes) + PreFoldOffset(b.m, b.k);
  for (int64_t e0 = 0; e0 < l.num_experts; e0 += group) {
    const int64_t count = std::min(group, l.num_experts - e0);
    const int32_t first = static_cast<int32_t>(e0), end = static_cast<int32_t>(e0 + count);
    const dim3 fold_grid(static_cast<unsigned>(lay.n_pad / wgmma::kBlockRows * lay.chunks),
                         static_cast<unsigned>(count));
    PreFoldKernel<<<fold_grid, wgmma::kThreads, 0, l.stream>>>(ep, l.offsets, static_cast<int32_t>(b.m), first, lay,
                                                               pre);
    DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear pre-fold");
    if (l.tma_tokens == 128) {
      LaunchExpertsPreFoldedTma<128>(l, ep, a, lay, first, end, pre);
    } else if (l.tma_tokens == 64) {
      LaunchExpertsPreFoldedTma<64>(l, ep, a, lay, first, end, pre);
    } else {
      LaunchPreFoldedGemm(l, ep, a, lay, first, end, pre);
    }
  }
  return true;
}

// ExpertsLinear launches on experts kept folded (tests).
std::atomic<uint64_t> g_folded_launches{0};

// Every item of every expert on the codes FoldExperts wrote for the run (l.folded): the
// pre-folded kernels without their per-call PreFoldKernel, at any row count.
void LaunchExpertsFolded(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a) {
  const Params& b = l.params.base;
  if (b.k > 0x7fffffff || b.n > 0x7fffffff) Fail("folded experts too large for 32-bit coordinates");
  const PreFoldLayout lay = MakePreFoldLayout(b.n, b.k);
  const int32_t end = static_cast<int32_t>(l.num_experts);
  g_folded_launches.fetch_add(1);
  if (l.tma_tokens == 128) return LaunchExpertsPreFoldedTma<128>(l, ep, a, lay, 0, end, l.folded);
  if (l.tma_tokens == 64) return LaunchExpertsPreFoldedTma<64>(l, ep, a, lay, 0, end, l.folded);
  LaunchPreFoldedGemm(l, ep, a, lay, 0, end, l.folded);
}

// DEEPINFER_EXPERTS_REGISTER_A (read once; unset or 1: on, 0: off) runs the FP4 experts' tiles of
// 1-8 rows on ExpertsFp4RegistersKernel (the same bits; measured 2026-12-02: `experts_linear` over
// 3 Flash layers at 8k 0.473 -> 0.330 ms at batch 1, 6.98 -> 5.41 at batch 64, docs/performance.md
// version 27), and with DEEPINFER_EXPERTS_REGISTER_A16 (unset or 1: on) those of 9-16 rows too
// (version 29). Tests override both (SetExpertsRegisterAForTesting).
std::atomic<uint64_t> g_experts_register_a_launches[2] = {0, 0};  // launches on 8- and 16-token tiles (tests)
KernelSwitch g_experts_register_a{"DEEPINFER_EXPERTS_REGISTER_A", 1};
KernelSwitch g_experts_register_a16{"DEEPINFER_EXPERTS_REGISTER_A16", 1};

// DEEPINFER_FP4_CHUNK_WORDS (read once; unset or 1: on, 0: off): FP4 experts keep, from load on,
// the register-fed kernel's chunk word of every (row, 128-column chunk) and each 64-row block's
// later-pass mask (Fp4ChunkWordsBytes: 4 bytes per row and chunk, as many as the e8m0 scales, 1/16
// of the nibbles), so that an item copies them instead of folding its rows' group exponents
// (docs/performance.md, version 30). Tests override it (SetFp4ChunkWordsForTesting).
KernelSwitch g_fp4_chunk_words{"DEEPINFER_FP4_CHUNK_WORDS", 1};

// ExpertsFp4RegistersKernel's register bound: 3 or 4 blocks per SM (DEEPINFER_EXPERTS_REGISTER_A_BLOCKS,
// read once; unset: 3). 4 applies where shared memory lets 4 blocks fit (K up to 2048; at Flash's
// K = 4096 x's codes alone take 32 KiB a block), 3 elsewhere.
int RegisterABlocksPerSm() {
  static const int blocks = EnvEither("DEEPINFER_EXPERTS_REGISTER_A_BLOCKS", 3, 4);
  return blocks;
}

// ExpertsFp4RegistersKernel<16, *>'s register bound: 2 or 3 blocks per SM
// (DEEPINFER_EXPERTS_REGISTER_A16_BLOCKS, read once; unset: 3). 3 applies where shared memory lets 3
// blocks fit (K up to 2048: Flash's w2), 2 elsewhere.
int RegisterA16BlocksPerSm() {
  static const int blocks = EnvEither("DEEPINFER_EXPERTS_REGISTER_A16_BLOCKS", 3, 2);
  return blocks;
}

// DEEPINFER_EXPERTS_TILES (read once; unset or 0: off, 1: on): Fp4ExpertTilesBytes offers FP4
// experts tiles (ExpertsLinear's `fp4_tiles`), which the register-fed kernel of their 1-16-row tiles
// then reads (one contiguous KiB a warp and chunk instead of 16 pieces of 64 bytes a row apart).
// Tests override it (SetFp4ExpertTilesForTesting).
KernelSwitch g_fp4_tiles{"DEEPINFER_EXPERTS_TILES", 0};
std::atomic<uint64_t> g_fp4_tiles_launches{0};  // launches of ExpertsFp4RegistersKernel<*, *, true> (tests)
// DEEPINFER_EXPERTS_TILES_SIGN_SPLIT (read once; unset or 1: on, 0: off): WriteFp4ExpertTiles writes
// every word of the tiles in the sign-split layout (cpu::SignSplitWord), which the register-fed
// kernel converts in 7 instructions instead of 9 (ExpertsFp4RegistersKernel<*, *, true, true>; the
// same bits). The tiles are written and read under the one value. Tests override it
// (SetFp4TilesSignSplitForTesting).
KernelSwitch g_fp4_tiles_sign_split{"DEEPINFER_EXPERTS_TILES_SIGN_SPLIT", 1};
std::atomic<uint64_t> g_fp4_sign_split_launches{0};  // launches of ExpertsFp4RegistersKernel<*, *, true, true>
// DEEPINFER_EXPERTS_TILES_CHUNK_MAJOR (read once; unset or 0: warp-major, 1: chunk-major): the
// order of the tiles in an expert's bytes (wgmma::rs::TileLayoutOf). Chunk-major is the rows' form
// with a 64-byte row stride, which every reader of the rows could take in place; warp-major keeps
// each warp's reads of an item in one run of bytes. Written and read under the one value. Tests
// override it (SetFp4TilesChunkMajorForTesting).
KernelSwitch g_fp4_tiles_chunk_major{"DEEPINFER_EXPERTS_TILES_CHUNK_MAJOR", 0};
// kKernel (an ExpertsFp4RegistersKernel of kTok tokens) over the plan's tiles of its size (ep as
// LaunchExpertsWgmma built it): persistent blocks of `smem` bytes (max_smem: the kernel's most at
// any K), at most as many as fit on the device at once. Returns false, launching nothing, where
// fewer than `required` blocks fit an SM.
template <auto kKernel, int kTok>
bool LaunchRegisterFed(const ExpertsLaunch& l, ExpertsParams ep, const wgmma::GemmArgs& a, int required, int smem,
                       int max_smem) {
  AllowDynamicSmem<kKernel>(l.device, max_smem);
  const int blocks_per_sm = BlocksPerSm<kKernel>(wgmma::rs::kThreads, smem);
  if (blocks_per_sm < required) return false;
  const int64_t tiles = TilesInRange<kTok>(l);
  if (tiles == 0) return true;
  ep.blocks_per_tile = static_cast<int32_t>(CeilDiv(l.params.base.n, wgmma::rs::kRows));
  if (l.chunk_words != nullptr) g_fp4_chunk_words_launches.fetch_add(1);
  const int64_t grid = std::min(tiles * ep.blocks_per_tile, l.sms * std::max(blocks_per_sm, 1));
  kKernel<<<static_cast<unsigned>(grid), wgmma::rs::kThreads, smem, l.stream>>>(ep, l.lists, a);
  DI_CUDA_LAUNCH_CHECK(kTok == 8 ? "cuda::ExpertsLinear FP4 register-fed wgmma, 8-token tiles"
                                 : "cuda::ExpertsLinear FP4 register-fed wgmma, 16-token tiles");
  g_experts_register_a_launches[kTok == 8 ? 0 : 1].fetch_add(1);
  return true;
}

// ExpertsFp4RegistersKernel<kTok, kMinBlocks> over the tiles of 1-8 (kTok = 8) or 9-16 rows (16)
// (ep as LaunchExpertsWgmma built it, for 128-row items): on the experts' tiles where it has them or
// their nibbles are chunk-major in place (read as tiles in the sign-split layout), else on their rows
// (LaunchRegisterFed).
template <int kTok, int kMinBlocks>
bool LaunchExpertsFp4Registers(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a,
                               int required) {
  namespace rs = wgmma::rs;
  const int chunks = static_cast<int>(l.params.base.k / wgmma::kChunk);
  const int smem = rs::Smem{chunks, kTok}.Bytes(), max_smem = rs::Smem{rs::kMaxChunks, kTok}.Bytes();
  if (ep.fp4_tiles != nullptr || ep.base.w_sign_split) {
    const bool sign_split = ep.fp4_tiles != nullptr ? g_fp4_tiles_sign_split.On() : true;
    ExpertsParams tiled = ep;
    if (ep.fp4_tiles == nullptr) {  // in place: every 64-row item's warps have their 16 rows
      if (ep.base.n % rs::kRows != 0 || ep.base.w_chunk_bytes != ep.base.n * rs::kRowBytes) {
        Fail("chunk-major FP4 experts read as tiles: N a multiple of 64 and a chunk stride of N · 64 bytes");
      }
      tiled.fp4_tiles_layout = rs::TileLayout{static_cast<uint32_t>(rs::kTileBytes),
                                              static_cast<uint32_t>(ep.base.w_chunk_bytes)};
    }
    const bool ran =
        sign_split ? LaunchRegisterFed<ExpertsFp4RegistersKernel<kTok, kMinBlocks, true, true>, kTok>(
                         l, tiled, a, required, smem, max_smem)
                   : LaunchRegisterFed<ExpertsFp4RegistersKernel<kTok, kMinBlocks, true>, kTok>(l, tiled, a, required,
                                                                                             smem, max_smem);
    if (ran) g_fp4_tiles_launches.fetch_add(1);
    if (ran && sign_split) g_fp4_sign_split_launches.fetch_add(1);
    return ran;
  }
  return LaunchRegisterFed<ExpertsFp4RegistersKernel<kTok, kMinBlocks>, kTok>(l, ep, a, required, smem, max_smem);
}

// ExpertsWgmmaKernel<K, kTok> (8 or 16 tokens) at SmallTileBlocksPerSm.
template <Kind K, int kTok>
void LaunchExpertsWgmmaSmall(const ExpertsLaunch& l, const ExpertsParams& ep, const wgmma::GemmArgs& a) {
  constexpr int kSmem = wgmma::SmemLayout<K>::kBytes;
  constexpr const char* kWhat = "cuda::ExpertsLinear wgmma, 8- or 16-token tiles";
  if (SmallTileBlocksPerSm() == 2) return LaunchTileRange<ExpertsWgmmaKernel<K, kTok, 2>, kTok>(l, ep, kSmem, kWhat, a);
  LaunchTileRange<ExpertsWgmmaKernel<K, kTok, 1>, kTok>(l, ep, kSmem, kWhat, a);
}

// Every tile of the FP8-input path on warpgroup MMAs: act_quant of every row into the codes
// scratch, then one block per (tile, 128 outputs), walked like LaunchList's items (FP4 experts
// kept folded where the caller holds them: LaunchExpertsFolded; else pre-folded where the scratch
// has room: LaunchExpertsPreFolded).
template <Kind K>
void LaunchExpertsWgmma(const ExpertsLaunch& l) {
  if (l.capacity.total == 0) return;
  const Params& b = l.params.base;
  ExpertsParams ep = l.params;
  ep.count = nullptr;
  ep.tiles = nullptr;
  const int64_t blocks_per_tile = CeilDiv(b.n, wgmma::kBlockRows);
  ep.blocks_per_tile = static_cast<int32_t>(blocks_per_tile);
  if constexpr (K == Kind::kFp4) {
    if (l.fp4_bf16) return LaunchExpertsFp4Bf16(l, ep);
  }
  // x act_quant'ed into the codes here, or already by the MoE's gather or SwiGLU (x_in_codes).
  const wgmma::GemmArgs a =
      l.x_in_codes ? wgmma::ScratchLayout(l.codes, wgmma::ExpertsPaddedRows(b.m), b.k)
                   : QuantizeIntoScratch(b.x, b.ldx, b.m, wgmma::ExpertsPaddedRows(b.m), b.k, b.x_vec,
                                         K == Kind::kFp4, l.codes, l.stream);
  if constexpr (K == Kind::kFp4) {
    // Read by the in-block and register-fed kernels (Fp4ChunkWordsBytes: K within
    // wgmma::rs::kMaxChunks chunks).
    ep.chunk_words = l.chunk_words;
    ep.chunk_words_stride = wgmma::rs::ChunkWordsOfExpert(b.n, b.k / wgmma::kChunk);
    ep.fp4_tiles = l.fp4_tiles;
    ep.fp4_tiles_stride = wgmma::rs::TileBytesOfExpert(b.n, b.k / wgmma::kChunk);
    ep.fp4_tiles_layout = wgmma::rs::TileLayoutOf(g_fp4_tiles_chunk_major.On(), b.n, b.k / wgmma::kChunk);
    if (l.folded != nullptr) return LaunchExpertsFolded(l, ep, a);
    if (l.fp4_in_block) return LaunchExpertsFp4InBlock(l, ep, a);
    if (LaunchExpertsPreFolded(l, ep, a)) return;
    // A plan cut for the TMA-fed kernel (128-row tiles) must not reach the 64-token kernels.
    if (l.tma_tokens != 0) Fail("the pre-folded experts' TMA path was planned but cannot run");
  }
  // The tiles of 17-64 rows, then those of 9-16 and 1-8 on 16- and 8-token tiles (the same sums).
  constexpr int kSmem = wgmma::SmemLayout<K>::kBytes;
  LaunchTileRange<ExpertsWgmmaKernel<K, 64, 1>, 64>(l, ep, kSmem, "cuda::ExpertsLinear wgmma", a);
  bool registers16 = false, registers8 = false;
  if constexpr (K == Kind::kFp4) {
    if (g_experts_register_a.On() && wgmma::rs::Usable(b.k)) {
      if (g_experts_register_a16.On()) {
        registers16 = RegisterA16BlocksPerSm() == 3 && LaunchExpertsFp4Registers<16, 3>(l, ep, a, 3);
        registers16 = registers16 || LaunchExpertsFp4Registers<16, 2>(l, ep, a, 1);
      }
      registers8 = RegisterABlocksPerSm() == 4 && LaunchExpertsFp4Registers<8, 4>(l, ep, a, 4);
      registers8 = registers8 || LaunchExpertsFp4Registers<8, 3>(l, ep, a, 1);
    }
  }
  if (!registers16) LaunchExpertsWgmmaSmall<K, 16>(l, ep, a);
  if (!registers8) LaunchExpertsWgmmaSmall<K, 8>(l, ep, a);
}

template <Kind K>
void LaunchExperts(const ExpertsLaunch& l) {
  static_assert(kGemvMaxRows == 16 && kTileM == 2 * kGemvMaxRows, "the tile kinds cover 1-16 and 17-32 rows");
  if constexpr (K == Kind::kBF16 || K == Kind::kFp8 || K == Kind::kFp4) {
    if (l.path != Path::kSimt) {
      if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
        if (l.path == Path::kFp8 && wgmma::ExpertsUsable(K, l.params.base.scale_f32, l.params.base.k, l.codes,
                                                         l.codes_bytes, RowsBound(l))) {
          return LaunchExpertsWgmma<K>(l);  // every tile, x quantized once
        }
      }
    }
  }
  if (l.params.base.w_sign_split) {  // chunk-major nibbles (SetNibbleLayout)
    Fail("these FP4 experts were rewritten chunk-major (DEEPINFER_EXPERTS_IN_PLACE), which only the FP8-input "
         "warpgroup-MMA kernels read, and this call takes another path (f32 SIMT or split-BF16 math, no codes "
         "scratch, or a device without sm_90a code); set DEEPINFER_EXPERTS_IN_PLACE=0");
  }
  if constexpr (K == Kind::kBF16 || K == Kind::kFp8 || K == Kind::kFp4) {
    if (l.path != Path::kSimt) {
      static_assert(mma::kTok == 8 && mma::kMaxTm * mma::kTok == kTileM, "tiles of <= 8, 16 and 32 rows");
      LaunchExpertsMmaSmall<K>(l);   // 1-8 rows
      LaunchExpertsMma<K, 2>(l, 3);  // 9-16
      if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
        if (l.path == Path::kFp8) {  // 17-64 (the plan's tiles are 64 rows on this path)
          const int blocks_per_sm = BlocksPerSm<ExpertsStagedKernel<K>>(mma::kThreads, 0);
          LaunchList(ExpertsStagedKernel<K>, mma::kThreads, blocks_per_sm, l, kTiledKind,
                     CeilDiv(l.params.base.n, mma::fp8::kTiledRows), "cuda::ExpertsLinear mma fp8 staged");
          return;
        }
      }
      static_assert(mma::kStagedTok == kTileM, "the split-BF16 plan's tiles fit the staged block");
      const int blocks_per_sm = BlocksPerSm<ExpertsStagedSplitKernel<K>>(mma::kThreads, 0);
      LaunchList(ExpertsStagedSplitKernel<K>, mma::kThreads, blocks_per_sm, l, kTiledKind,  // 17-32
                 CeilDiv(l.params.base.n, mma::kStagedRows), "cuda::ExpertsLinear mma staged");
      return;
    }
  }
  LaunchExpertsGemv<K, 2, 2>(l, 0);
  LaunchExpertsGemv<K, 4, 4>(l, 1);
  LaunchExpertsGemv<K, 8, 4>(l, 2);
  LaunchExpertsGemv<K, 16, 4>(l, 3);
  const int blocks_per_sm = BlocksPerSm<ExpertsTiledKernel<K>>(kTiledThreads, 0);
  LaunchList(ExpertsTiledKernel<K>, kTiledThreads, blocks_per_sm, l, kTiledKind, CeilDiv(l.params.base.n, kTileN),
             "cuda::ExpertsLinear tiled");
}

// Whether a weight's products with `math` take the warpgroup-MMA FP8-input path, whatever the rows
// (the scratch-size functions' condition; the launches check the scratch they are given too).
bool WeightTakesWgmma(const DeviceWeight& w, LinearMath math) {
  const bool quantized = w.format == DeviceWeight::Format::kFp8 || w.format == DeviceWeight::Format::kFp4;
  const bool f32_scales = w.scale_dtype == DType::kF32;
  const int64_t k = w.in_features;
  return math == LinearMath::kFp8Act && quantized && wgmma::WeightUsable(KindOf(w), f32_scales) && k > 0 &&
         k % wgmma::kChunk == 0 && PathFor(math, KindOf(w), f32_scales, k) == Path::kFp8 && wgmma::DeviceHasWgmma();
}

}  // namespace

void CheckWeight(const DeviceWeight& w) {
  Params p{};
  SetWeight(w, p);
}

size_t ExpertsLinearScratchBytes(int64_t rows_bound, int64_t num_experts) {
  const TileCapacity cap = Capacity(std::max<int64_t>(rows_bound, 0), std::max<int64_t>(num_experts, 0));
  return kCountsBytes + static_cast<size_t>(cap.total) * sizeof(ExpertTile);
}

size_t ExpertsLinearCodesBytes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout, LinearMath math,
                               bool folded) {
  // Only where LaunchExperts can take the wgmma path (every tile of the FP8-input path).
  if (rows_bound <= 0 || !WeightTakesWgmma(layout, math)) return 0;
  const int64_t k = layout.in_features;
  const size_t codes = wgmma::ScratchBytesForPaddedRows(wgmma::ExpertsPaddedRows(rows_bound), k);
  const bool pre_fold = KindOf(layout) == Kind::kFp4 && !folded && PreFoldWanted(rows_bound, num_experts);
  return pre_fold ? ExpertsLinearPreFoldCodesBytes(rows_bound, num_experts, layout, math) : codes;
}

size_t ExpertsLinearPreFoldCodesBytes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout,
                                      LinearMath math) {
  if (rows_bound <= 0 || num_experts <= 0 || KindOf(layout) != Kind::kFp4 || !WeightTakesWgmma(layout, math)) {
    return 0;
  }
  const PreFoldLayout lay = MakePreFoldLayout(layout.out_features, layout.in_features);
  const int64_t group = std::clamp<int64_t>(kPreFoldBudgetBytes / lay.ExpertBytes(), 1, num_experts);
  return static_cast<size_t>(PreFoldOffset(rows_bound, layout.in_features) + group * lay.ExpertBytes());
}

// Whether an ExpertsLinear call takes ExpertsFp4Bf16Kernel: the register-fed kernel's conditions
// (Fp4InBlockFor, Fp4RegistersPrefillFor), the switch, the codes scratch holding x in BF16, and scale
// rows whose stride keeps them 4-byte aligned.
bool Fp4Bf16For(const DeviceWeight& layout, int64_t rows_bound, int64_t num_experts, LinearMath math,
                const void* codes, size_t codes_bytes, bool folded, bool chunk_words) {
  const Kind kind = KindOf(layout);
  const int64_t n = layout.out_features, k = layout.in_features;
  const bool scale_f32 = layout.scale_dtype == DType::kF32;
  const Path path = PathFor(math, kind, scale_f32, k);
  return Fp4InBlockFor(kind, path, scale_f32, rows_bound, num_experts, k, codes, codes_bytes, folded) &&
         Fp4RegistersPrefillFor(chunk_words, num_experts, n, k) && g_fp4_bf16.On() &&
         static_cast<int64_t>(codes_bytes) >= Fp4Bf16XBytes(rows_bound, k) && layout.scale_row_stride % 4 == 0;
}

// Whether ExpertsLinear takes these experts on the FP8-input warpgroup-MMA path with x act_quant'ed
// once into the codes scratch as e4m3 codes and scales (LaunchExpertsWgmma's QuantizeIntoScratch),
// not on BF16 MMAs (Fp4Bf16For).
bool ExpertsFp8CodesFor(const DeviceWeight& layout, int64_t rows_bound, int64_t num_experts, LinearMath math,
                        const void* codes, size_t codes_bytes, bool folded, bool chunk_words) {
  const Kind kind = KindOf(layout);
  if (kind != Kind::kFp8 && kind != Kind::kFp4) return false;
  const int64_t k = layout.in_features;
  const bool scale_f32 = layout.scale_dtype == DType::kF32;
  return PathFor(math, kind, scale_f32, k) == Path::kFp8 &&
         wgmma::ExpertsUsable(kind, scale_f32, k, codes, codes_bytes, rows_bound) &&
         !(kind == Kind::kFp4 &&
           Fp4Bf16For(layout, rows_bound, num_experts, math, codes, codes_bytes, folded, chunk_words));
}

// DEEPINFER_EXPERTS_X_CODES (read once; unset or 1: on, 0: off): ExpertsLinearTakesFp8Codes holds
// where ExpertsFp8CodesFor does, so that the MoE's gather and SwiGLU write the experts' e4m3 codes
// themselves (GatherQuantizeRows, SwiGluQuantizeRows) instead of f32 rows that a QuantizeRowsKernel
// launch in each ExpertsLinear call quantizes: the same bits, two launches fewer a layer (on batch
// 1's longest path of 3 Flash layers, 6 of its 13 act_quant launches, 2026-12-07). Measured on an
// H100 (docs/performance.md, version 66): the 8k prefill 69.1 -> 66.7 ms, batch 256 7.768 -> 7.718
// ms, batch 1 1.302 -> 1.294. Tests override it (SetExpertsXCodesForTesting).
KernelSwitch g_experts_x_codes{"DEEPINFER_EXPERTS_X_CODES", 1};

bool ExpertsLinearTakesFp8Codes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout,
                                LinearMath math, const void* codes, size_t codes_bytes, bool folded,
                                bool chunk_words) {
  return rows_bound > 0 && num_experts > 0 && g_experts_x_codes.On() &&
         ExpertsFp8CodesFor(layout, rows_bound, num_experts, math, codes, codes_bytes, folded, chunk_words);
}

void SetExpertsXCodesForTesting(int mode) { g_experts_x_codes.SetForTesting(mode, "SetExpertsXCodesForTesting"); }

// The arguments of the MoE gathers that act_quant x's rows into the codes (`what`: the caller, for
// the message); returns their launch's blocks (a warp a row and chunk, 8 a block).
int64_t GatherIntoCodesBlocks(const char* what, const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots,
                              int64_t top_k, int64_t max_rows, const float* expert_weights, const float* row_weights,
                              const void* codes) {
  const std::string name(what);
  if (x == nullptr || sorted_slots == nullptr || codes == nullptr ||
      (row_weights != nullptr && expert_weights == nullptr)) {
    Fail((name + ": null x, slots, codes or expert weights").c_str());
  }
  if (d <= 0 || d % wgmma::kChunk != 0 || ldx < d || top_k <= 0) {
    Fail((name + ": d must be a positive multiple of 128 within ldx, top_k positive").c_str());
  }
  const int64_t blocks = CeilDiv(max_rows * (d / wgmma::kChunk), 256 / kWarpSize);
  if (blocks > 0x7fffffff) Fail((name + ": too many rows for one launch").c_str());
  return blocks;
}

// The arguments of the MoE SwiGLUs that act_quant w2's input into the codes; returns their launch's
// blocks.
int64_t SwiGluIntoCodesBlocks(const char* what, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m,
                              int64_t n, const void* codes) {
  const std::string name(what);
  if (g == nullptr || u == nullptr || codes == nullptr) Fail((name + ": null g, u or codes").c_str());
  if (n <= 0 || n % wgmma::kChunk != 0 || ldg < n || ldu < n || ldg % 4 != 0 || ldu % 4 != 0 ||
      !Aligned(g, 0, 16) || !Aligned(u, 0, 16)) {
    Fail((name + ": n must be a positive multiple of 128, g and u rows 16-byte aligned").c_str());
  }
  const int64_t blocks = CeilDiv(m * (n / wgmma::kChunk), 256 / kWarpSize);
  if (blocks > 0x7fffffff) Fail((name + ": too many rows for one launch").c_str());
  return blocks;
}

void GatherQuantizeRows(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, const int32_t* row_count,
                        int64_t top_k, int64_t max_rows, const float* expert_weights, float* row_weights,
                        const DeviceWeight& layout, void* codes, size_t codes_bytes, cudaStream_t stream) {
  if (max_rows <= 0) return;
  const int64_t blocks = GatherIntoCodesBlocks("GatherQuantizeRows", x, ldx, d, sorted_slots, top_k, max_rows,
                                               expert_weights, row_weights, codes);
  if (d != layout.in_features) Fail("GatherQuantizeRows: d must be the experts' K");
  const int64_t m_pad = wgmma::ExpertsPaddedRows(max_rows);
  if (codes_bytes < wgmma::ScratchBytesForPaddedRows(m_pad, d)) Fail("GatherQuantizeRows: codes too small");
  const wgmma::GemmArgs a = wgmma::ScratchLayout(codes, m_pad, d);
  wgmma::GatherQuantizeRowsKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      x, ldx, d, sorted_slots, row_count, top_k, max_rows, m_pad, Aligned(x, ldx * 4, 16),
      KindOf(layout) == Kind::kFp4, expert_weights, row_weights, const_cast<uint8_t*>(a.codes),
      const_cast<float*>(a.xscales));
  DI_CUDA_LAUNCH_CHECK("cuda::GatherQuantizeRows");
}

void SwiGluQuantizeRows(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                        const float* row_weights, const int32_t* row_count, const DeviceWeight& layout, void* codes,
                        size_t codes_bytes, cudaStream_t stream) {
  if (m <= 0) return;
  const int64_t blocks = SwiGluIntoCodesBlocks("SwiGluQuantizeRows", g, ldg, u, ldu, m, n, codes);
  if (n != layout.in_features) Fail("SwiGluQuantizeRows: n must be the experts' K");
  const int64_t m_pad = wgmma::ExpertsPaddedRows(m);
  if (codes_bytes < wgmma::ScratchBytesForPaddedRows(m_pad, n)) Fail("SwiGluQuantizeRows: codes too small");
  const wgmma::GemmArgs a = wgmma::ScratchLayout(codes, m_pad, n);
  wgmma::SwiGluQuantizeRowsKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      g, ldg, u, ldu, m, n, m_pad, limit, row_weights, row_count, KindOf(layout) == Kind::kFp4,
      const_cast<uint8_t*>(a.codes), const_cast<float*>(a.xscales));
  DI_CUDA_LAUNCH_CHECK("cuda::SwiGluQuantizeRows");
}

void ExpertsLinear(const float* x, int64_t ldx, int64_t rows_bound, const int32_t* offsets, int64_t num_experts,
                   const DeviceWeight* weights, const DeviceWeight& layout, float* y, int64_t ldy, void* scratch,
                   cudaStream_t stream, LinearMath math, bool plan_in_scratch, void* codes, size_t codes_bytes,
                   const void* folded, const void* chunk_words, const void* fp4_tiles, bool x_in_codes) {
  const Kind kind = KindOf(layout);
  const int64_t n = layout.out_features, k = layout.in_features;
  if (n < 0 || k < 0) Fail("negative weight shape");
  if (kind == Kind::kFp4 && k % kFp4Block != 0) Fail("FP4 weight in_features must be a multiple of 32");
  if (rows_bound < 0 || num_experts < 0) Fail("negative row bound or expert count");
  if (rows_bound > 0x7fffffff || num_experts > (int64_t{1} << 24)) Fail("2^31 rows or 2^24 experts or more");
  if (n > 0x7fffffff) Fail("2^31 outputs or more");
  if (rows_bound == 0 || num_experts == 0 || n == 0) return;
  if (ldx < k || ldy < n) Fail("row stride of x or y below its row length");
  if (x == nullptr || y == nullptr || offsets == nullptr || weights == nullptr || scratch == nullptr) {
    Fail("x, y, offsets, weights or scratch is null");
  }
  if (reinterpret_cast<uintptr_t>(scratch) % alignof(ExpertTile) != 0) Fail("scratch is not 16-byte aligned");

  ExpertsLaunch l{};
  l.capacity = Capacity(rows_bound, num_experts);
  l.lists.counts = static_cast<int32_t*>(scratch);
  ExpertTile* tiles = reinterpret_cast<ExpertTile*>(static_cast<uint8_t*>(scratch) + kCountsBytes);
  for (int i = 0; i < kTileKinds; ++i) {
    l.lists.tiles[i] = tiles;
    l.lists.capacity[i] = static_cast<int32_t>(l.capacity.tiles[i]);
    tiles += l.capacity.tiles[i];
  }
  l.path = PathFor(math, kind, layout.scale_dtype == DType::kF32, k);
  if (folded != nullptr) {
    if (FoldedExpertsBytes(layout, num_experts, math) == 0) Fail("folded experts given where no kernel reads them");
    if (reinterpret_cast<uintptr_t>(folded) % 256 != 0) Fail("folded experts not 256-byte aligned");
    l.folded = static_cast<const uint8_t*>(folded);
  }
  if (chunk_words != nullptr) {
    if (Fp4ChunkWordsBytes(layout, num_experts, math) == 0) Fail("FP4 chunk words given where no kernel reads them");
    if (reinterpret_cast<uintptr_t>(chunk_words) % 256 != 0) Fail("FP4 chunk words not 256-byte aligned");
    l.chunk_words = static_cast<const uint32_t*>(chunk_words);
  }
  CheckWeight(layout);
  if (fp4_tiles != nullptr) {
    if (Fp4ExpertTilesBytes(layout, num_experts, math) == 0) Fail("FP4 expert tiles given where no kernel reads them");
    if (reinterpret_cast<uintptr_t>(fp4_tiles) % 256 != 0) Fail("FP4 expert tiles not 256-byte aligned");
    l.fp4_tiles = static_cast<const uint8_t*>(fp4_tiles);
  }
  const bool scale_f32 = layout.scale_dtype == DType::kF32;
  l.fp4_in_block = Fp4InBlockFor(kind, l.path, scale_f32, rows_bound, num_experts, k, codes, codes_bytes,
                                 l.folded != nullptr);
  l.fp4_registers = l.fp4_in_block && Fp4RegistersPrefillFor(l.chunk_words != nullptr, num_experts, n, k);
  l.fp4_bf16 = l.fp4_registers && Fp4Bf16For(layout, rows_bound, num_experts, math, codes, codes_bytes,
                                              l.folded != nullptr, l.chunk_words != nullptr);
  if (x_in_codes && !l.fp4_bf16 &&
      !ExpertsLinearTakesFp8Codes(rows_bound, num_experts, layout, math, codes, codes_bytes, l.folded != nullptr,
                                  l.chunk_words != nullptr)) {
    Fail("x given in the codes scratch where neither the FP4 experts on BF16 MMAs (GatherQuantizeRowsBf16) nor, "
         "under DEEPINFER_EXPERTS_X_CODES, the FP8-input path with x quantized once (GatherQuantizeRows) runs");
  }
  l.x_in_codes = x_in_codes;
  l.fp4_tile_pairs = l.fp4_registers && !l.fp4_bf16 && g_fp4_tile_pairs.On();
  l.tma_tokens = l.fp4_in_block ? 0
                                : ExpertsTmaTokensFor(kind, l.path, scale_f32, rows_bound, num_experts, n, k, codes,
                                                      codes_bytes, l.folded != nullptr);
  // The FP8-input path's tiles are 64 rows (its kernels' token tiles), kInBlockTokens for the FP4
  // experts converted in the blocks (kRsTokens where in registers), 128 for the TMA-fed pre-folded
  // kernel at 128 tokens: either is then certain to run (ExpertsTmaTokensFor).
  const int32_t tile_rows = l.path != Path::kFp8 ? kTileM
                            : l.fp4_bf16          ? Fp4Bf16Tokens()
                            : l.fp4_tile_pairs    ? kPairTokens
                            : l.fp4_registers     ? kRsTokens
                            : l.fp4_in_block      ? kInBlockTokens
                            : l.tma_tokens == 128 ? 128
                                                  : mma::fp8::kTiledTok;
  l.params.plan_tile_rows = l.lists.counts + kTileKinds;
  l.params.tile_rows = tile_rows;
  // Where the in-block kernel may run, a call cuts its own plan: its 96- or 104-row tiles or the others' 64
  // depend on K (Fp4InBlockFor), which the MoE's w1 and w2 need not share.
  if (!plan_in_scratch || Fp4InBlockMayRun(kind, l.path, rows_bound, num_experts)) {
    ExpertTilesKernel<<<1, kPlanThreads, 0, stream>>>(offsets, static_cast<int32_t>(num_experts),
                                                      static_cast<int32_t>(rows_bound), tile_rows, l.lists);
    DI_CUDA_LAUNCH_CHECK("cuda::ExpertsLinear tiles");
  }

  std::tie(l.device, l.sms) = CurrentDeviceSms();
  l.stream = stream;
  l.codes = codes;
  l.codes_bytes = codes_bytes;
  l.offsets = offsets;
  l.num_experts = num_experts;
  ExpertsParams& ep = l.params;
  ep.base.m = rows_bound;  // the launches' row bound (each tile sets its own m)
  ep.base.x = x;
  ep.base.ldx = ldx;
  ep.base.y = y;
  ep.base.ldy = ldy;
  ep.base.n = n;
  ep.base.k = k;
  ep.base.num_slabs = CeilDiv(k, kSlab);
  ep.base.x_vec = Aligned(x, ldx * 4, 16);  // then every row start is aligned too
  ep.base.scale_f32 = layout.scale_dtype == DType::kF32;  // the launch's choices (each tile sets its own)
  // Every expert of the table has the layout's nibbles (RewriteFp4ExpertsChunkMajor rewrites all).
  SetNibbleLayout(layout, ep.base);
  ep.weights = weights;
  switch (kind) {
    case Kind::kF32: return LaunchExperts<Kind::kF32>(l);
    case Kind::kBF16: return LaunchExperts<Kind::kBF16>(l);
    case Kind::kF16: return LaunchExperts<Kind::kF16>(l);
    case Kind::kFp8: return LaunchExperts<Kind::kFp8>(l);
    case Kind::kFp4: return LaunchExperts<Kind::kFp4>(l);
  }
}

bool ExpertsLinearTakesBf16X(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout, LinearMath math,
                             const void* codes, size_t codes_bytes, bool chunk_words) {
  return rows_bound > 0 && num_experts > 0 &&
         Fp4Bf16For(layout, rows_bound, num_experts, math, codes, codes_bytes, false, chunk_words);
}

void GatherQuantizeRowsBf16(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots,
                            const int32_t* row_count, int64_t top_k, int64_t max_rows, const float* expert_weights,
                            float* row_weights, void* codes, size_t codes_bytes, cudaStream_t stream) {
  if (max_rows <= 0) return;
  const int64_t blocks = GatherIntoCodesBlocks("GatherQuantizeRowsBf16", x, ldx, d, sorted_slots, top_k, max_rows,
                                               expert_weights, row_weights, codes);
  if (static_cast<int64_t>(codes_bytes) < Fp4Bf16XBytes(max_rows, d)) Fail("GatherQuantizeRowsBf16: codes too small");
  wgmma::fp4bf16::GatherQuantizeRowsBf16Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      x, ldx, d, sorted_slots, row_count, top_k, max_rows, Aligned(x, ldx * 4, 16), expert_weights, row_weights,
      static_cast<__nv_bfloat16*>(codes));
  DI_CUDA_LAUNCH_CHECK("cuda::GatherQuantizeRowsBf16");
}

bool SwiGluQuantizeRowsBf16On() {
  static const KernelSwitch on{"DEEPINFER_SWIGLU_BF16", 1};
  return on.On();
}

void SwiGluQuantizeRowsBf16(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n,
                            float limit, const float* row_weights, const int32_t* row_count, void* codes,
                            size_t codes_bytes, cudaStream_t stream) {
  if (m <= 0) return;
  const int64_t blocks = SwiGluIntoCodesBlocks("SwiGluQuantizeRowsBf16", g, ldg, u, ldu, m, n, codes);
  if (static_cast<int64_t>(codes_bytes) < Fp4Bf16XBytes(m, n)) Fail("SwiGluQuantizeRowsBf16: codes too small");
  wgmma::fp4bf16::SwiGluQuantizeRowsBf16Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      g, ldg, u, ldu, m, n, limit, row_weights, row_count, static_cast<__nv_bfloat16*>(codes));
  DI_CUDA_LAUNCH_CHECK("cuda::SwiGluQuantizeRowsBf16");
}

size_t FoldedExpertsBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math) {
  if (num_experts <= 0 || KindOf(layout) != Kind::kFp4 || !WeightTakesWgmma(layout, math)) return 0;
  return static_cast<size_t>(num_experts * MakePreFoldLayout(layout.out_features, layout.in_features).ExpertBytes());
}

namespace {

// The checks of a load-time pass over FP4 experts (`what`: its name) that writes `needed` bytes
// (0: no kernel would read them) into `out` of `bytes`.
void CheckExpertsLoadOutput(const char* what, size_t needed, const DeviceWeight* weights, int64_t num_experts,
                            const void* out, size_t bytes) {
  const std::string name(what);
  if (needed == 0) Fail((name + ": FP4 experts with e8m0 scales on a warpgroup-MMA device only").c_str());
  if (out == nullptr || weights == nullptr || bytes < needed) Fail((name + ": null pointer or too few bytes").c_str());
  if (reinterpret_cast<uintptr_t>(out) % 256 != 0) Fail((name + ": output not 256-byte aligned").c_str());
  if (num_experts > 65535) Fail((name + ": more than 65535 experts").c_str());
}

}  // namespace

void FoldExperts(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                 size_t bytes, cudaStream_t stream) {
  CheckExpertsLoadOutput("FoldExperts", FoldedExpertsBytes(layout, num_experts, LinearMath::kFp8Act), weights,
                         num_experts, out, bytes);
  const PreFoldLayout lay = MakePreFoldLayout(layout.out_features, layout.in_features);
  if (lay.n_pad / wgmma::kBlockRows * lay.chunks > 0x7fffffff) Fail("FoldExperts: grid too large");
  ExpertsParams ep{};
  ep.base.n = layout.out_features;
  ep.base.k = layout.in_features;
  ep.weights = weights;
  // PreFoldKernel folds the experts that have rows: offsets 0, 1, ..., E give every expert one.
  std::vector<int32_t> offsets(static_cast<size_t>(num_experts) + 1);
  for (size_t e = 0; e < offsets.size(); ++e) offsets[e] = static_cast<int32_t>(e);
  int32_t* device_offsets = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&device_offsets, offsets.size() * sizeof(int32_t)), "FoldExperts: cudaMalloc");
  cudaError_t status = cudaMemcpyAsync(device_offsets, offsets.data(), offsets.size() * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess) {
    const dim3 grid(static_cast<unsigned>(lay.n_pad / wgmma::kBlockRows * lay.chunks),
                    static_cast<unsigned>(num_experts));
    PreFoldKernel<<<grid, wgmma::kThreads, 0, stream>>>(ep, device_offsets, static_cast<int32_t>(num_experts), 0, lay,
                                                        static_cast<uint8_t*>(out));
    status = cudaGetLastError();
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  cudaFree(device_offsets);
  DI_CUDA_CHECK(status, "FoldExperts");
}

// Block (64-row block blockIdx.x, expert blockIdx.y): the chunk words of the block's rows of
// `n` (wgmma::rs::ChunkWordOf of cpu::FirstFoldPassWord over the chunk's four group exponents, as
// the register-fed block computes them per item, with the row's up-shift in its slice,
// cpu::SliceUpShift) and the block's later-pass mask, into the
// expert's wgmma::rs::ChunkWordsOfExpert words of `out`.
__global__ void __launch_bounds__(256) Fp4ChunkWordsKernel(const DeviceWeight* weights, int64_t n, int64_t k,
                                                           uint32_t* out) {
  PdlPrologue();
  __shared__ uint32_t mask[2];
  const int64_t chunks = k / wgmma::kChunk, expert = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * wgmma::rs::kRows;
  const DeviceWeight& w = weights[expert];
  const uint8_t* scale = static_cast<const uint8_t*>(w.scale);
  uint32_t* words = out + expert * wgmma::rs::ChunkWordsOfExpert(n, chunks);
  if (threadIdx.x < 2) mask[threadIdx.x] = 0u;
  __syncthreads();
  for (int64_t u = threadIdx.x; u < wgmma::rs::kRows * chunks; u += blockDim.x) {
    const int64_t row = row0 + u / chunks, c = u % chunks;
    if (row >= n) break;  // u grows with the row
    // The pass-0 words of the chunk's slice (mma::kSliceChunks chunks, or K's last fewer).
    const int64_t c0 = c - c % mma::kSliceChunks;
    const int count = static_cast<int>(min(int64_t{mma::kSliceChunks}, chunks - c0));
    uint32_t folds[mma::kSliceChunks];
    for (int j = 0; j < count; ++j) {
      const uint8_t* s = scale + row * w.scale_row_stride + 4 * (c0 + j);
      const int e[4] = {s[0], s[1], s[2], s[3]};
      folds[j] = cpu::FirstFoldPassWord(e);
    }
    const uint32_t fold = folds[c - c0];
    const uint32_t up = cpu::SliceUpShift(folds, count, static_cast<int>(c - c0));
    words[row * chunks + c] = wgmma::rs::ChunkWordWithUpShift(wgmma::rs::ChunkWordOf(fold), up);
    if (cpu::FoldWordMore(fold)) atomicOr(&mask[c / 32], 1u << (c % 32));
  }
  __syncthreads();
  if (threadIdx.x < 2) wgmma::rs::LaterPassMasks(words, n, chunks, row0)[threadIdx.x] = mask[threadIdx.x];
}

size_t Fp4ChunkWordsBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math) {
  if (num_experts <= 0 || KindOf(layout) != Kind::kFp4 || !WeightTakesWgmma(layout, math) ||
      !wgmma::rs::Usable(layout.in_features) || !g_fp4_chunk_words.On()) {
    return 0;
  }
  const int64_t words = wgmma::rs::ChunkWordsOfExpert(layout.out_features, layout.in_features / wgmma::kChunk);
  return static_cast<size_t>(num_experts * words * 4);
}

void WriteFp4ChunkWords(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                        size_t bytes, cudaStream_t stream) {
  CheckExpertsLoadOutput("WriteFp4ChunkWords", Fp4ChunkWordsBytes(layout, num_experts, LinearMath::kFp8Act), weights,
                         num_experts, out, bytes);
  const int64_t row_blocks = CeilDiv(layout.out_features, int64_t{wgmma::rs::kRows});
  if (row_blocks > 0x7fffffff) Fail("WriteFp4ChunkWords: grid too large");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(num_experts));
  Fp4ChunkWordsKernel<<<grid, 256, 0, stream>>>(weights, layout.out_features, layout.in_features,
                                                static_cast<uint32_t*>(out));
  DI_CUDA_LAUNCH_CHECK("WriteFp4ChunkWords");
  DI_CUDA_CHECK(cudaStreamSynchronize(stream), "WriteFp4ChunkWords");
}

size_t Fp4ExpertTilesBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math) {
  if (num_experts <= 0 || KindOf(layout) != Kind::kFp4 || layout.data_chunk_stride != 0 ||
      !WeightTakesWgmma(layout, math) ||
      !wgmma::rs::Usable(layout.in_features) || !g_fp4_tiles.On()) {
    return 0;
  }
  return static_cast<size_t>(num_experts *
                             wgmma::rs::TileBytesOfExpert(layout.out_features, layout.in_features / wgmma::kChunk));
}

namespace {
// Grid-stride over every expert's tiles in 16-byte units: unit i of expert e is unit i % kTileUnits
// of the tile (warp block, chunk) numbered (i % expert_units) / kTileUnits warp block by warp block,
// written where `layout` (wgmma::rs::TileLayoutOf, as the kernels read it) puts that tile, copied
// from the expert's rows (zeros past n). sign_split: each word in the sign-split layout
// (cpu::SignSplitWord), else as stored.
__global__ void WriteFp4ExpertTilesKernel(const DeviceWeight* __restrict__ weights, int64_t n, int64_t chunks,
                                          int64_t expert_units, int64_t units, bool sign_split,
                                          wgmma::rs::TileLayout layout, uint4* __restrict__ out) {
  PdlPrologue();
  namespace rs = wgmma::rs;
  constexpr int64_t kTileUnits = rs::kTileBytes / 16, kRowUnits = rs::kRowBytes / 16;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i / expert_units, tile = (i % expert_units) / kTileUnits, unit = i % kTileUnits;
    const int64_t block = tile / chunks, chunk = tile % chunks;
    const int64_t row = block * rs::kWarpRows + unit / kRowUnits;
    const DeviceWeight& w = weights[e];
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row < n) {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + row * w.data_row_stride + chunk * rs::kRowBytes +
                           (unit % kRowUnits) * 16;
      uint32_t word[4];
      for (int j = 0; j < 4; ++j) {  // byte loads: any row alignment
        word[j] = 0u;
        for (int b = 0; b < 4; ++b) word[j] |= static_cast<uint32_t>(src[4 * j + b]) << (8 * b);
        if (sign_split) word[j] = cpu::SignSplitWord(word[j]);
      }
      v = make_uint4(word[0], word[1], word[2], word[3]);
    }
    const int64_t at = e * expert_units * 16 + block * layout.block_stride + chunk * layout.chunk_stride + unit * 16;
    out[at / 16] = v;
  }
}
}  // namespace

void WriteFp4ExpertTiles(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                         size_t bytes, cudaStream_t stream) {
  CheckExpertsLoadOutput("WriteFp4ExpertTiles", Fp4ExpertTilesBytes(layout, num_experts, LinearMath::kFp8Act), weights,
                         num_experts, out, bytes);
  const int64_t chunks = layout.in_features / wgmma::kChunk;
  const int64_t expert_units = wgmma::rs::TileBytesOfExpert(layout.out_features, chunks) / 16;
  const int64_t units = num_experts * expert_units;
  const int sms = CurrentDeviceSms().second;
  const int64_t blocks = std::min<int64_t>(CeilDiv(units, 256), int64_t{sms} * 8);
  WriteFp4ExpertTilesKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      weights, layout.out_features, chunks, expert_units, units, g_fp4_tiles_sign_split.On(),
      wgmma::rs::TileLayoutOf(g_fp4_tiles_chunk_major.On(), layout.out_features, chunks), static_cast<uint4*>(out));
  DI_CUDA_LAUNCH_CHECK("cuda::WriteFp4ExpertTiles");
  DI_CUDA_CHECK(cudaStreamSynchronize(stream), "cuda::WriteFp4ExpertTiles");  // load time
}

// DEEPINFER_EXPERTS_IN_PLACE (read once; unset or 1: on, 0: off): FP4 experts on the FP8-input
// warpgroup-MMA path are rewritten chunk-major in place at load (RewriteFp4ExpertsChunkMajor), so
// that each warp's 16 rows of a chunk are one contiguous KiB, the tiles' chunk-major bytes, without
// a second copy; each word in the sign-split layout, which the decode kernel converts in fewer
// instructions. Tests override it (SetExpertsInPlaceForTesting).
KernelSwitch g_experts_in_place{"DEEPINFER_EXPERTS_IN_PLACE", 1};

bool Fp4ExpertsChunkMajorInPlace(const DeviceWeight& layout, LinearMath math) {
  return g_experts_in_place.On() && KindOf(layout) == Kind::kFp4 && layout.data_chunk_stride == 0 &&
         layout.in_features % wgmma::kChunk == 0 && layout.out_features % wgmma::rs::kRows == 0 &&
         layout.data_row_stride == layout.in_features / 2 && WeightTakesWgmma(layout, math);
}

namespace {
// Rewrites `pieces` ranges of device memory in place, each through one scratch of scratch_bytes
// bytes (allocated here and freed before returning, on errors too): range(i) gives piece i as
// {start, bytes} (bytes at most scratch_bytes); the piece is copied aside on `stream`, then
// write(aside, start, bytes, grid) queues the kernel that writes it back rewritten (`grid`: blocks of
// 256 threads for bytes / 16 units). Synchronizes `stream` (load time). `what` names its failures.
template <class Range, class Write>
void RewriteThroughScratch(int64_t scratch_bytes, int64_t pieces, cudaStream_t stream, const char* what,
                           const Range& range, const Write& write) {
  void* aside = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&aside, static_cast<size_t>(scratch_bytes)), what);
  const int sms = CurrentDeviceSms().second;
  cudaError_t status = cudaSuccess;
  for (int64_t i = 0; i < pieces && status == cudaSuccess; ++i) {
    const auto [at, bytes] = range(i);
    status = cudaMemcpyAsync(aside, at, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream);
    if (status != cudaSuccess) break;
    write(static_cast<const uint8_t*>(aside), at, bytes,
          static_cast<unsigned>(std::min<int64_t>(CeilDiv(bytes / 16, int64_t{256}), int64_t{sms} * 8)));
    status = cudaGetLastError();
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);  // before the scratch goes
  const cudaError_t freed = cudaFree(aside);
  DI_CUDA_CHECK(status, what);
  DI_CUDA_CHECK(freed, what);
}

// Grid-stride over `units` 16-byte units of chunk-major nibbles: unit i is byte 16·i of
// [chunks][n][64 bytes], from rows of row_bytes bytes at `rows`, each 32-bit word sign-split
// (cpu::SignSplitWord).
__global__ void ChunkMajorKernel(const uint8_t* __restrict__ rows, int64_t row_bytes, int64_t n, int64_t units,
                                 uint4* __restrict__ out) {
  PdlPrologue();
  constexpr int64_t kPieceUnits = wgmma::kChunk / 2 / 16;  // a row's 64 bytes of one chunk
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / (n * kPieceUnits), r = (i / kPieceUnits) % n, u = i % kPieceUnits;
    const uint4 v = *reinterpret_cast<const uint4*>(rows + r * row_bytes + c * (wgmma::kChunk / 2) + u * 16);
    out[i] = make_uint4(cpu::SignSplitWord(v.x), cpu::SignSplitWord(v.y), cpu::SignSplitWord(v.z),
                        cpu::SignSplitWord(v.w));
  }
}
}  // namespace

DeviceWeight ChunkMajorOf(const DeviceWeight& w) {
  DeviceWeight d = w;
  d.data_row_stride = wgmma::kChunk / 2;
  d.data_chunk_stride = w.out_features * (wgmma::kChunk / 2);
  return d;
}

void RewriteFp4ExpertsChunkMajor(const DeviceWeight* experts, int64_t num_experts, LinearMath math,
                                 cudaStream_t stream) {
  if (num_experts <= 0) return;
  for (int64_t e = 0; e < num_experts; ++e) {
    CheckWeight(experts[e]);
    if (!Fp4ExpertsChunkMajorInPlace(experts[e], math) || experts[e].out_features != experts[0].out_features ||
        experts[e].in_features != experts[0].in_features) {
      Fail("RewriteFp4ExpertsChunkMajor: FP4 experts of one shape in rows without padding, K a multiple of 128, "
           "N of 64, read on the FP8-input warpgroup-MMA path, with DEEPINFER_EXPERTS_IN_PLACE on");
    }
    if (reinterpret_cast<uintptr_t>(experts[e].data) % 16 != 0) {
      Fail("RewriteFp4ExpertsChunkMajor: an expert's nibbles not 16-byte aligned");
    }
  }
  const int64_t n = experts[0].out_features, row_bytes = experts[0].in_features / 2, bytes = n * row_bytes;
  if (bytes == 0) return;
  RewriteThroughScratch(
      bytes, num_experts, stream, "cuda::RewriteFp4ExpertsChunkMajor",
      [&](int64_t e) { return std::pair{static_cast<uint8_t*>(const_cast<void*>(experts[e].data)), bytes}; },
      [&](const uint8_t* aside, uint8_t* at, int64_t piece_bytes, unsigned grid) {
        ChunkMajorKernel<<<grid, 256, 0, stream>>>(aside, row_bytes, n, piece_bytes / 16, reinterpret_cast<uint4*>(at));
      });
}

void SetExpertsInPlaceForTesting(int mode) { g_experts_in_place.SetForTesting(mode, "SetExpertsInPlaceForTesting"); }

void SetFp4ExpertTilesForTesting(int mode) { g_fp4_tiles.SetForTesting(mode, "SetFp4ExpertTilesForTesting"); }

uint64_t Fp4ExpertTilesLaunchesForTesting() { return g_fp4_tiles_launches.load(); }

void SetFp4TilesSignSplitForTesting(int mode) {
  g_fp4_tiles_sign_split.SetForTesting(mode, "SetFp4TilesSignSplitForTesting");
}

uint64_t Fp4TilesSignSplitLaunchesForTesting() { return g_fp4_sign_split_launches.load(); }

void SetFp4TilesChunkMajorForTesting(int mode) {
  g_fp4_tiles_chunk_major.SetForTesting(mode, "SetFp4TilesChunkMajorForTesting");
}

void SetFp4ChunkWordsForTesting(int mode) { g_fp4_chunk_words.SetForTesting(mode, "SetFp4ChunkWordsForTesting"); }

uint64_t Fp4ChunkWordsLaunchesForTesting() { return g_fp4_chunk_words_launches.load(); }

bool Fp8ActOnWarpgroupMma() { return wgmma::DeviceHasWgmma(); }

void SetTmaKernelsForTesting(int mode, int expert_tokens) {
  if (mode < -1 || mode > 1) Fail("SetTmaKernelsForTesting takes -1, 0 or 1");
  if (expert_tokens != 64 && expert_tokens != 128) Fail("SetTmaKernelsForTesting: expert tiles of 64 or 128 tokens");
  tma::TestExpertTokens().store(expert_tokens);
  tma::TestOverride().store(mode);
}

bool TmaKernelsAvailable() { return wgmma::DeviceHasWgmma() && EncodeTiled() != nullptr; }

uint64_t TmaLaunchesForTesting() { return g_tma_launches.load(); }

void SetStagedSlicesForTesting(int mode) { g_staged_slices.SetForTesting(mode, "SetStagedSlicesForTesting"); }

uint64_t StagedSlicesLaunchesForTesting() { return g_staged_slices_launches.load(); }

void SetDenseSplitForTesting(int mode) { g_dense_split.SetForTesting(mode, "SetDenseSplitForTesting"); }

uint64_t DenseSplitLaunchesForTesting() { return g_dense_split_launches.load(); }

void SetDenseSlicesDeepForTesting(int mode) { g_dense_slices_deep.SetForTesting(mode, "SetDenseSlicesDeepForTesting"); }

uint64_t DenseSlicesDeepLaunchesForTesting() { return g_dense_slices_deep_launches.load(); }

namespace {
// Grid-stride over the tiles' 16-byte units: unit i is byte 16·(i % 1024) of tile i / 1024
// (wgmma_split::DenseTileOffset's layout), copied from the weight's row-major rows (zeros past n).
__global__ void WriteDenseTilesKernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n, int64_t k,
                                      int64_t units, uint4* __restrict__ out) {
  PdlPrologue();
  constexpr int64_t kTileUnits = wgmma_split::kDenseWBytes / 16, kRowUnits = wgmma_split::kRowBytes / 16;
  const int64_t chunks = k / wgmma_split::kChunkCols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tile = i / kTileUnits, unit = i % kTileUnits;
    const int64_t row = (tile / chunks) * wgmma::kBlockRows + unit / kRowUnits, chunk = tile % chunks;
    out[i] = row < n ? *reinterpret_cast<const uint4*>(w + row * row_bytes + chunk * wgmma_split::kRowBytes +
                                                       (unit % kRowUnits) * 16)
                     : make_uint4(0u, 0u, 0u, 0u);
  }
}
}  // namespace

namespace {
// DenseTilesBytes without its switch: the tiles' bytes where a kernel would read them, else 0.
size_t DenseTilesBytesWhereRead(const DeviceWeight& w, LinearMath math) {
  if (KindOf(w) != Kind::kBF16 || PathFor(math, Kind::kBF16, false, w.in_features) != Path::kSplitBf16 ||
      !g_dense_split.On() || w.out_features <= 0 || w.in_features <= 0 ||
      w.in_features % wgmma_split::kChunkCols != 0 ||
      !Aligned(w.data, w.data_row_stride * 2, 16) || !wgmma::DeviceHasWgmma()) {
    return 0;
  }
  // None where a product of 1-8 rows takes the K slices over a cluster (LaunchDenseSplitTiles's
  // choice, which depends on the shape alone), whose kernel reads the rows; the others (the 8- and
  // 64-token kernels, the warp-specialized one) read the tiles where they are given.
  Params p{};
  p.n = w.out_features;
  p.k = w.in_features;
  p.m = 1;
  const auto [device, sms] = CurrentDeviceSms();
  if (DenseTakesSlices<8>(p, device, sms)) return 0;
  return static_cast<size_t>(wgmma_split::DenseTileOffset(CeilDiv(w.out_features, wgmma::kBlockRows), 0,
                                                          w.in_features));
}
}  // namespace

size_t DenseTilesBytes(const DeviceWeight& w, LinearMath math) {
  return g_dense_tiles.On() ? DenseTilesBytesWhereRead(w, math) : 0;
}

void WriteDenseTiles(const DeviceWeight& w, void* out, size_t bytes, cudaStream_t stream) {
  const size_t needed = DenseTilesBytes(w, LinearMath::kSplitBf16);
  if (needed == 0) {
    Fail("WriteDenseTiles: BF16 weights in 16-byte aligned rows of a multiple of 64 columns, whose products of "
         "1-8 rows take the 8-token kernel, on a warpgroup-MMA device, with DEEPINFER_DENSE_TILES=1");
  }
  Params checked{};
  SetWeight(w, checked);  // the weight's own checks (data, row stride) before the kernel reads it
  if (out == nullptr || bytes < needed) Fail("WriteDenseTiles: null output or too few bytes");
  if (reinterpret_cast<uintptr_t>(out) % 256 != 0) Fail("WriteDenseTiles: output not 256-byte aligned");
  const int64_t units = static_cast<int64_t>(needed / 16);
  const int sms = CurrentDeviceSms().second;
  const int64_t blocks = std::min<int64_t>(CeilDiv(units, 256), int64_t{sms} * 8);
  WriteDenseTilesKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<const uint8_t*>(w.data), w.data_row_stride * 2, w.out_features, w.in_features, units,
      static_cast<uint4*>(out));
  DI_CUDA_LAUNCH_CHECK("cuda::WriteDenseTiles");
  DI_CUDA_CHECK(cudaStreamSynchronize(stream), "cuda::WriteDenseTiles");  // load time: ready for any stream
}

// DEEPINFER_DENSE_TILES_IN_PLACE (read once; unset or 1: on, 0: off): BF16 weights whose tiles
// would be read and take exactly their rows' bytes are rewritten as their tiles in place
// (RewriteAsDenseTiles), without a second copy (DEEPINFER_DENSE_TILES's); not with
// DEEPINFER_CUBLASLT_DENSE=1, whose products read rows. Tests override it
// (SetDenseTilesInPlaceForTesting).
KernelSwitch g_dense_tiles_in_place{"DEEPINFER_DENSE_TILES_IN_PLACE", 1};

bool DenseTilesInPlace(const DeviceWeight& w, LinearMath math) {
  if (!g_dense_tiles_in_place.On() || g_cublaslt_dense.On()) return false;
  return w.out_features % wgmma::kBlockRows == 0 && w.data_row_stride == w.in_features &&
         DenseTilesBytesWhereRead(w, math) > 0;
}

void RewriteAsDenseTiles(const DeviceWeight& w, cudaStream_t stream) {
  if (!DenseTilesInPlace(w, LinearMath::kSplitBf16)) {
    Fail("RewriteAsDenseTiles: a BF16 weight whose tiles a kernel would read, of a multiple of 128 rows without "
         "row padding, with DEEPINFER_DENSE_TILES_IN_PLACE=1 and DEEPINFER_CUBLASLT_DENSE off");
  }
  // Each 128-row block's bytes (1 row block = its `chunks` tiles, the same bytes) are permuted within
  // themselves: a group of row blocks is copied aside, then written back as tiles.
  const int64_t block_bytes = wgmma::kBlockRows * w.in_features * 2;
  const int64_t row_blocks = w.out_features / wgmma::kBlockRows;
  const int64_t group = std::max<int64_t>(1, std::min<int64_t>(row_blocks, (int64_t{64} << 20) / block_bytes));
  uint8_t* data = static_cast<uint8_t*>(const_cast<void*>(w.data));
  RewriteThroughScratch(
      group * block_bytes, CeilDiv(row_blocks, group), stream, "cuda::RewriteAsDenseTiles",
      [&](int64_t i) {
        return std::pair{data + i * group * block_bytes, std::min(group, row_blocks - i * group) * block_bytes};
      },
      [&](const uint8_t* aside, uint8_t* at, int64_t bytes, unsigned grid) {
        const int64_t rows = bytes / block_bytes * wgmma::kBlockRows;
        WriteDenseTilesKernel<<<grid, 256, 0, stream>>>(aside, w.in_features * 2, rows, w.in_features, bytes / 16,
                                                        reinterpret_cast<uint4*>(at));
      });
}

void SetDenseTilesInPlaceForTesting(int mode) {
  g_dense_tiles_in_place.SetForTesting(mode, "SetDenseTilesInPlaceForTesting");
}

void SetDenseTilesForTesting(int mode) { g_dense_tiles.SetForTesting(mode, "SetDenseTilesForTesting"); }

uint64_t DenseTilesLaunchesForTesting() { return g_dense_tiles_launches.load(); }

uint64_t SharedXPartsLaunchesForTesting() { return g_shared_x_launches.load(); }

void SetLinearSmallTilesForTesting(int mode) {
  g_linear_small_tiles.SetForTesting(mode, "SetLinearSmallTilesForTesting");
}

uint64_t LinearSmallTilesLaunchesForTesting() { return g_linear_small_tile_launches.load(); }

void SetLinearFusedForTesting(int mode) { g_linear_fused.SetForTesting(mode, "SetLinearFusedForTesting"); }

uint64_t LinearFusedLaunchesForTesting() { return g_linear_fused_launches.load(); }

void SetGroupedHalfBlocksForTesting(int mode) {
  g_grouped_half_blocks.SetForTesting(mode, "SetGroupedHalfBlocksForTesting");
}

uint64_t GroupedHalfBlocksLaunchesForTesting() { return g_grouped_half_block_launches.load(); }

void SetGroupedSlicesForTesting(int mode) { g_grouped_slices.SetForTesting(mode, "SetGroupedSlicesForTesting"); }
void SetGroupedSlicesLeanForTesting(int mode) {
  g_grouped_slices_lean.SetForTesting(mode, "SetGroupedSlicesLeanForTesting");
}
uint64_t GroupedSlicesLeanLaunchesForTesting() { return g_grouped_slices_lean_launches.load(); }
void SetGroupedSlicesWideForTesting(int mode) {
  g_grouped_slices_wide.SetForTesting(mode, "SetGroupedSlicesWideForTesting");
}
uint64_t GroupedSlicesWideLaunchesForTesting() { return g_grouped_slices_wide_launches.load(); }
void SetDenseSlicesNarrowForTesting(int mode) {
  g_dense_slices_narrow.SetForTesting(mode, "SetDenseSlicesNarrowForTesting");
}
uint64_t DenseSlicesNarrowLaunchesForTesting() { return g_dense_slices_narrow_launches.load(); }
void SetGroupedSlicesUpTo32ForTesting(int mode) {
  g_grouped_slices_up_to_32.SetForTesting(mode, "SetGroupedSlicesUpTo32ForTesting");
}
uint64_t GroupedSlicesUpTo32LaunchesForTesting() { return g_grouped_slices_up_to_32_launches.load(); }
void SetGroupedSlicesPartialsForTesting(int mode) {
  g_grouped_slices_partials.SetForTesting(mode, "SetGroupedSlicesPartialsForTesting");
}
uint64_t GroupedSlicesPartialsLaunchesForTesting() { return g_grouped_slices_partials_launches.load(); }

uint64_t GroupedSlicedLaunchesForTesting() { return g_grouped_sliced_launches.load(); }

void SetGroupedBf16ForTesting(int mode, int64_t piece_rows) {
  if (piece_rows < 0) Fail("SetGroupedBf16ForTesting: negative piece rows");
  g_grouped_bf16.SetForTesting(mode, "SetGroupedBf16ForTesting");
  g_grouped_bf16_piece_rows.store(piece_rows);
}

uint64_t GroupedBf16LaunchesForTesting() { return g_grouped_bf16_launches.load(); }

void SetTmaWarpSpecializedForTesting(int mode) {
  g_tma_warp_specialized.SetForTesting(mode, "SetTmaWarpSpecializedForTesting");
}

uint64_t TmaWarpSpecializedLaunchesForTesting() { return g_tma_ws_launches.load(); }

void SetTmaStoreForTesting(int mode) { g_tma_store.SetForTesting(mode, "SetTmaStoreForTesting"); }
uint64_t TmaStoreLaunchesForTesting() { return g_tma_store_launches.load(); }
uint64_t GroupedTmaStoreLaunchesForTesting() { return g_grouped_tma_store_launches.load(); }

void SetFp4SliceScaleForTesting(int mode) { g_fp4_slice_scale.SetForTesting(mode, "SetFp4SliceScaleForTesting"); }
void SetFp4InBlockRegistersForTesting(int mode) {
  g_fp4_in_block_rs.SetForTesting(mode, "SetFp4InBlockRegistersForTesting");
}

uint64_t Fp4InBlockRegistersLaunchesForTesting() { return g_fp4_in_block_rs_launches.load(); }
void SetFp4Bf16ForTesting(int mode, int tokens) {
  if (tokens != 0 && tokens != kRsTokens && tokens != kPairTokens) Fail("SetFp4Bf16ForTesting: 0, 104 or 208 tokens");
  g_fp4_bf16.SetForTesting(mode, "SetFp4Bf16ForTesting");
  g_fp4_bf16_tokens_for_testing.store(tokens);
}
uint64_t Fp4Bf16LaunchesForTesting() { return g_fp4_bf16_launches.load(); }
void SetFp4Bf16NarrowForTesting(int mode) { g_fp4_bf16_narrow.SetForTesting(mode, "SetFp4Bf16NarrowForTesting"); }

BatchVariantKernelsScope::BatchVariantKernelsScope(bool allowed) : previous_(t_batch_variant_allowed) {
  t_batch_variant_allowed = allowed;
}
BatchVariantKernelsScope::~BatchVariantKernelsScope() { t_batch_variant_allowed = previous_; }

void SetCublasLtBf16ForTesting(int mode) { g_cublaslt_bf16.SetForTesting(mode, "SetCublasLtBf16ForTesting"); }
void SetCublasLtDenseForTesting(int mode) { g_cublaslt_dense.SetForTesting(mode, "SetCublasLtDenseForTesting"); }
uint64_t CublasLtDenseLaunchesForTesting() { return g_cublaslt_dense_launches.load(); }
uint64_t CublasLtBf16LaunchesForTesting() { return g_cublaslt_bf16_launches.load(); }

void SetCublasLtFp8ForTesting(int mode, int64_t min_rows) {
  if (min_rows < 0) Fail("SetCublasLtFp8ForTesting: negative row count");
  g_cublaslt_fp8.SetForTesting(mode, "SetCublasLtFp8ForTesting");
  g_cublaslt_fp8_min_rows_for_testing.store(min_rows);
}
uint64_t CublasLtFp8LaunchesForTesting() { return g_cublaslt_fp8_launches.load(); }

void SetFp4TilePairsForTesting(int mode) { g_fp4_tile_pairs.SetForTesting(mode, "SetFp4TilePairsForTesting"); }
uint64_t Fp4TilePairsLaunchesForTesting() { return g_fp4_tile_pairs_launches.load(); }

void SetFp4InBlockForTesting(int mode, int units) {
  if (units != 0 && units != 1 && units != 2) Fail("SetFp4InBlockForTesting: 1 or 2 units");
  g_fp4_in_block.SetForTesting(mode, "SetFp4InBlockForTesting");
  g_in_block_units_for_testing.store(units);
}

uint64_t Fp4InBlockLaunchesForTesting() { return g_fp4_in_block_launches.load(); }

void SetDenseOverlapForTesting(int mode) { g_dense_overlap.SetForTesting(mode, "SetDenseOverlapForTesting"); }

void SetDenseWsForTesting(int mode) { g_dense_ws.SetForTesting(mode, "SetDenseWsForTesting"); }

void SetDenseWs8ForTesting(int mode) { g_dense_ws8.SetForTesting(mode, "SetDenseWs8ForTesting"); }

void SetDenseWs64ForTesting(int mode) { g_dense_ws64.SetForTesting(mode, "SetDenseWs64ForTesting"); }
void SetDenseWsTokensFastestForTesting(int mode) {
  g_dense_ws_tokens_fastest.SetForTesting(mode, "SetDenseWsTokensFastestForTesting");
}
uint64_t DenseWsTokensFastestLaunchesForTesting() { return g_dense_ws_tokens_fastest_launches.load(); }

uint64_t DenseWs64LaunchesForTesting() { return g_dense_ws64_launches.load(); }

uint64_t DenseWs8LaunchesForTesting() { return g_dense_ws8_launches.load(); }

void SetDenseWsMinRowsForTesting(int64_t rows) {
  if (rows < 0) Fail("SetDenseWsMinRowsForTesting: rows must be 0 (the environment's) or more");
  g_dense_ws_min_rows_for_testing.store(rows);
}

uint64_t DenseWsLaunchesForTesting() { return g_dense_ws_launches.load(); }
uint64_t DenseRoundedXLaunchesForTesting() { return g_dense_rounded_x_launches.load(); }

void SetLinearSliceSumInBlockForTesting(int mode) {
  g_linear_slice_sum_in_block.SetForTesting(mode, "SetLinearSliceSumInBlockForTesting");
}

uint64_t LinearSliceSumInBlockLaunchesForTesting() { return g_linear_slice_sum_in_block_launches.load(); }

void SetLinearQuantizeInBlockForTesting(int mode) {
  g_linear_quantize_in_block.SetForTesting(mode, "SetLinearQuantizeInBlockForTesting");
}

uint64_t LinearQuantizeInBlockLaunchesForTesting() { return g_linear_quantize_in_block_launches.load(); }

void SetLinearSliceMaxRowsForTesting(int64_t rows) {
  g_linear_slice_max_rows_for_testing.store(rows < 0 ? -1 : rows);
}

void SetBf16WsPairsForTesting(int mode) { g_bf16_ws_pairs.SetForTesting(mode, "SetBf16WsPairsForTesting"); }

uint64_t Bf16WsPairLaunchesForTesting() { return g_bf16_ws_pair_launches.load(); }

void SetDensePartsForTesting(int mode) { g_dense_parts.SetForTesting(mode, "SetDensePartsForTesting"); }

uint64_t DensePartsLaunchesForTesting() { return g_dense_parts_launches.load(); }

uint64_t FoldedExpertsLaunchesForTesting() { return g_folded_launches.load(); }

void SetExpertsRegisterAForTesting(int mode) {
  g_experts_register_a.SetForTesting(mode, "SetExpertsRegisterAForTesting");
  g_experts_register_a16.SetForTesting(mode, "SetExpertsRegisterAForTesting");
}

uint64_t ExpertsRegisterALaunchesForTesting(int tile_tokens) {
  if (tile_tokens != 8 && tile_tokens != 16) Fail("ExpertsRegisterALaunchesForTesting takes 8 or 16 tokens");
  return g_experts_register_a_launches[tile_tokens == 8 ? 0 : 1].load();
}

namespace {
// Thread i: word i·65537 + salt's two halves (every 16-bit pattern in each half over the grid)
// through E2m1x8ToE4m3x8Table against E2m1x4ToE4m3x4Table per half, for each folded table
// (shifts 0-8); counts the words that differ.
__global__ void Fp4CodesCheckKernel(uint32_t salt, unsigned long long* mismatches) {
  PdlPrologue();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t word = i * 65537u + salt;
  for (int d = 0; d <= cpu::kFp4FoldMaxShift; ++d) {
    const uint32_t lo = wgmma::kFoldedTables[d][0], hi = wgmma::kFoldedTables[d][1];
    uint32_t out0 = 0u, out1 = 0u;
    mma::fp8::E2m1x8ToE4m3x8Table(word, lo, hi, out0, out1);
    if (out0 != mma::fp8::E2m1x4ToE4m3x4Table(word & 0xffffu, lo, hi) ||
        out1 != mma::fp8::E2m1x4ToE4m3x4Table(word >> 16, lo, hi)) {
      atomicAdd(mismatches, 1ull);
    }
  }
}
}  // namespace

uint64_t Fp4CodeMismatchesForTesting() {
  return DeviceCountForTesting("Fp4CodeMismatchesForTesting", [](unsigned long long* count) {
    cudaError_t e = cudaSuccess;
    for (const uint32_t salt : {0u, 0x9e3779b9u, 0x7f4a7c15u}) {
      if (e == cudaSuccess) Fp4CodesCheckKernel<<<256, 256>>>(salt, count);
      if (e == cudaSuccess) e = cudaGetLastError();
    }
    return e;
  });
}

bool QuantizesFp8Input(const DeviceWeight& w) {
  Params p{};
  const Kind kind = SetWeight(w, p);
  return PathFor(LinearMath::kFp8Act, kind, p.scale_f32, w.in_features) == Path::kFp8;
}

bool GroupedRoundsXToBf16(const DeviceWeight& w, int64_t num_groups, LinearMath math) {
  Params p{};
  const Kind kind = SetWeight(w, p);
  // SplitGroupedRuns for an x at a 16-byte aligned address (GroupedSplitOnWarpgroupMma's Usable).
  return PathFor(math, kind, p.scale_f32, p.k) == Path::kSplitBf16 && GroupedSplitOnWarpgroupMma(w, num_groups);
}

bool GroupedSplitOnWarpgroupMma(const DeviceWeight& w, int64_t num_groups) {
  Params p{};
  const Kind kind = SetWeight(w, p);
  if (num_groups <= 0 || w.out_features % num_groups != 0) return false;
  p.n = w.out_features / num_groups;
  p.x_vec = true;  // x rows of K % 64 == 0 floats from an aligned base
  return wgmma_split::Usable(p, kind, num_groups);
}

size_t LinearScratchBytes(int64_t m, const DeviceWeight& w, LinearMath math) {
  if (m <= 0 || w.out_features <= 0) return 0;
  // BF16 weights under split-BF16 on the dense kernels: x's parts, past 8 rows for DensePartsKernel
  // (the 64-token kernels) or the 64- and 128-token warp-specialized ones (DensePartsBytes >=
  // DenseWsPartsBytes), wherever they may run (the launch decides; the bytes depend on m and K
  // alone), and at 1-8 rows under DEEPINFER_DENSE_WS8 (on unless 0) for the 8-token warp-specialized
  // kernel.
  if (KindOf(w) == Kind::kBF16 && math == LinearMath::kSplitBf16 && w.in_features > 0 &&
      w.in_features % wgmma_split::kChunkCols == 0 && wgmma::DeviceHasWgmma()) {
    if (m > 8 && (g_dense_parts.On() || g_dense_ws64.On())) {
      return static_cast<size_t>(CeilDiv(wgmma_split::DensePartsBytes(m, w.in_features), int64_t{256}) * 256);
    }
    if (m <= 8 && g_dense_ws8.On()) {
      return static_cast<size_t>(CeilDiv(DenseWsPartsBytes(m, w.in_features), int64_t{256}) * 256);
    }
  }
  // Elsewhere only where LaunchKind takes the wgmma path (any M, any row alignment; one group),
  // or cuBLASLt's.
  if (!WeightTakesWgmma(w, math)) return 0;
  const size_t wgmma_bytes = MakeWgmmaLinearLayout(m, w.out_features, w.in_features).bytes;
  if (!CublasLtFp8Takes(m, w, math)) return wgmma_bytes;
  // cuBLASLt's rows, or the wgmma path for all m where cuBLASLt has no algorithm, then the tail's.
  const int64_t rows = CublasLtFp8Rows(m), tail = m - rows;
  size_t bytes = std::max(wgmma_bytes, CublasLtFp8ScratchBytes(rows, w.out_features, w.in_features));
  if (tail > 0) bytes = std::max(bytes, MakeWgmmaLinearLayout(tail, w.out_features, w.in_features).bytes);
  return bytes;
}

namespace {

// Linear's Params for one product (its checks; m > 0 and out_features > 0 are the caller's).
Kind SetLinearParams(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
                     void* scratch, size_t scratch_bytes, Params& p) {
  const Kind kind = SetWeight(w, p);
  if (ldx < w.in_features || ldy < w.out_features) Fail("row stride of x or y below its row length");
  if (x == nullptr || y == nullptr) Fail("x or y is null");
  p.x = x;
  p.ldx = ldx;
  p.x_group_stride = 0;
  p.y = y;
  p.ldy = ldy;
  p.y_group_stride = 0;
  p.m = m;
  p.n = w.out_features;
  p.x_vec = Aligned(x, ldx * 4, 16);
  p.scratch = scratch;
  p.scratch_bytes = scratch_bytes;
  return kind;
}

// The environment's switches of the TMA-fed kernels are read (and a bad value reported) at the
// first product, not at the first one that would take them.
void ReadSwitches() {
  static const bool switches_read =
      (tma::TurnedOff(), wgmma_split::GroupedTmaMode(), ExpertsTmaTokens(false), g_staged_slices.Mode(),
       g_dense_split.Mode(), SmallTileBlocksPerSm(), g_linear_small_tiles.Mode(), g_grouped_half_blocks.Mode(),
       g_dense_overlap.Mode(), g_tma_warp_specialized.Mode(), g_grouped_bf16.Mode(), g_linear_fused.Mode(),
       g_cublaslt_fp8.Mode(), true);
  (void)switches_read;
}

// Whether Launch(p, kind, 1, stream, math) ends in LaunchDenseWs (the one path on x's parts split
// into the scratch as SplitXPartsForWs<3> lays them out).
bool TakesDenseWs(const Params& p, Kind kind, LinearMath math, int device, int sms) {
  return DenseSplitRuns(p, kind, math) && p.m > 8 && !DenseTakesSlices<wgmma::kTokens>(p, device, sms) &&
         DenseWsRuns(p);
}

// Whether Launch(p, kind, 1, stream, math) with p.x_bf16 set ends in LaunchDenseWs (the only dense
// kernels that round x): LaunchKind's dense branch, then LaunchDenseSplitTiles' warp-specialized
// branches, not its K slices (DenseOnCublasLt never takes p.x_bf16).
bool DenseRoundsXToBf16(const Params& p, Kind kind, LinearMath math) {
  if (!DenseSplitRuns(p, kind, math)) return false;
  const auto [device, sms] = CurrentDeviceSms();
  if (p.m <= 8) return !DenseTakesSlices<8>(p, device, sms) && DenseWs8Runs(p);
  return !DenseTakesSlices<64>(p, device, sms) && (DenseWsRuns(p) || DenseWs64Runs(p));
}

// p for Linear's arguments (SetLinearParams, the tiles), with the checks Linear makes.
Kind SetLinearCall(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
                   void* scratch, size_t scratch_bytes, const void* tiles, Params& p) {
  const Kind kind = SetLinearParams(x, ldx, m, w, y, ldy, scratch, scratch_bytes, p);
  if (kind == Kind::kBF16 && tiles != nullptr) {
    if (reinterpret_cast<uintptr_t>(tiles) % 16 != 0) Fail("the weight's tiles are not 16-byte aligned");
    p.w_tiles = static_cast<const uint8_t*>(tiles);
  }
  return kind;
}

}  // namespace

bool LinearRoundsXToBf16(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
                         LinearMath math, void* scratch, size_t scratch_bytes, const void* tiles) {
  ReadSwitches();
  if (m <= 0 || w.out_features == 0 || w.data_chunk_stride != 0) return false;
  Params p{};
  const Kind kind = SetLinearCall(x, ldx, m, w, y, ldy, scratch, scratch_bytes, tiles, p);
  return DenseRoundsXToBf16(p, kind, math);
}

void Linear(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
            cudaStream_t stream, LinearMath math, void* scratch, size_t scratch_bytes, const void* tiles,
            bool round_x_to_bf16) {
  ReadSwitches();
  if (m < 0) Fail("negative row count");
  if (m == 0 || w.out_features == 0) {
    Params p{};
    SetWeight(w, p);  // its checks
    return;
  }
  if (w.data_chunk_stride != 0) {
    Fail("a chunk-major FP4 weight (RewriteFp4ExpertsChunkMajor) is an expert's: ExpertsLinear reads it");
  }
  Params p{};
  const Kind kind = SetLinearCall(x, ldx, m, w, y, ldy, scratch, scratch_bytes, tiles, p);
  if (round_x_to_bf16) {
    if (!DenseRoundsXToBf16(p, kind, math)) {
      Fail("round_x_to_bf16: no kernel rounds x for this product (a BF16 weight's split-BF16 product on the dense "
           "warp-specialized kernels, with scratch for x's parts, on sm_90a; LinearRoundsXToBf16)");
    }
    p.x_bf16 = true;
  }
  // Rows rewritten as tiles in place (RewriteAsDenseTiles): only the kernels that read tiles may run.
  if (tiles != nullptr && tiles == w.data && !DenseReadsTiles(p, kind, math)) {
    Fail("this weight's rows were rewritten as its tiles (DEEPINFER_DENSE_TILES_IN_PLACE), and this product "
         "would take a kernel that reads rows (f32 SIMT math, DEEPINFER_DENSE_WGMMA=0, DEEPINFER_CUBLASLT_DENSE=1 "
         "or K slices over a cluster); load it with DEEPINFER_DENSE_TILES_IN_PLACE=0");
  }
  Launch(p, kind, 1, stream, math);
}

void LinearsOfOneInput(const float* x, int64_t ldx, int64_t m, const LinearOutput* outputs, int count,
                       cudaStream_t stream, LinearMath math, void* scratch, size_t scratch_bytes, bool x_is_bf16) {
  ReadSwitches();
  if (m < 0) Fail("negative row count");
  if (count < 0 || (count > 0 && outputs == nullptr)) Fail("bad product list");
  for (int i = 0; i < count; ++i) {
    if (outputs[i].w == nullptr) Fail("null weight in the product list");
    if (outputs[i].w->in_features != outputs[0].w->in_features) Fail("the products of one x differ in in_features");
  }
  std::vector<Params> params(static_cast<size_t>(count));
  std::vector<Kind> kinds(static_cast<size_t>(count));
  std::vector<char> shared(static_cast<size_t>(count), 0);   // on x's parts split once below
  std::vector<char> on_lt(static_cast<size_t>(count), 0);    // of those, on cuBLASLt (DenseOnCublasLt)
  auto has_work = [&](int i) { return m > 0 && outputs[i].w->out_features > 0; };
  int sharing = 0;
  const auto [device, sms] = m > 0 ? CurrentDeviceSms() : std::pair<int, int>{0, 0};
  for (int i = 0; i < count; ++i) {
    Params& p = params[static_cast<size_t>(i)];
    if (!has_work(i)) {
      SetWeight(*outputs[i].w, p);  // its checks; nothing to launch
      continue;
    }
    kinds[i] = SetLinearParams(x, ldx, m, *outputs[i].w, outputs[i].y, outputs[i].ldy, scratch, scratch_bytes, p);
    // BF16 values: cuBLASLt's products take three parts, so they run alone, as Linear runs them.
    on_lt[i] = !x_is_bf16 && DenseOnCublasLt(p, kinds[i], math, stream);
    shared[i] = on_lt[i] || TakesDenseWs(p, kinds[i], math, device, sms);
    sharing += shared[i];
  }
  // With fewer than two sharing, each runs as Linear runs it, in list order. Else the others
  // first (with the scratch, which they may use), then x's parts once and the products that share
  // them. BF16 values: one part where a product alone takes a kernel that rounds x (their rounding
  // is themselves), else three of which two are zeros.
  for (int i = 0; i < count; ++i) {
    if (!has_work(i) || (sharing >= 2 && shared[i])) continue;
    Params& p = params[i];
    p.x_bf16 = x_is_bf16 && DenseRoundsXToBf16(p, kinds[i], math);
    Launch(p, kinds[i], 1, stream, math);
  }
  if (sharing < 2) return;
  const int64_t k = outputs[0].w->in_features;
  auto* parts = static_cast<uint16_t*>(scratch);
  const char* split_what = "cuda::LinearsOfOneInput split-BF16 x parts";
  CUtensorMap x_map{};  // for the warp-specialized kernel's products, where there are any
  bool kernel_shares = false;
  for (int i = 0; i < count; ++i) kernel_shares = kernel_shares || (shared[i] && !on_lt[i]);
  if (x_is_bf16) {  // x as its one part (no cuBLASLt product shares it: on_lt is false)
    x_map = SplitXPartsForWs<1>(x, ldx, m, k, parts, sms, stream, split_what);
  } else if (kernel_shares) {
    x_map = SplitXPartsForWs<3>(x, ldx, m, k, parts, sms, stream, split_what);
  } else {
    SplitXParts<3>(x, ldx, m, k, parts, sms, stream, split_what);
  }
  for (int i = 0; i < count; ++i) {
    const Params& p = params[i];
    if (!shared[i]) continue;
    g_shared_x_launches.fetch_add(1);
    if (on_lt[i]) {
      RunDenseOnCublasLt(p, parts, stream);
      continue;
    }
    const CUtensorMap w_map = Bf16WeightMap(p.w, p.n, p.k, p.w_row_bytes);
    const char* what = "cuda::LinearsOfOneInput split-BF16 wgmma, warp-specialized";
    // Pairs read the same parts through half boxes.
    auto launch = [&](auto overlap, auto x_parts) {
      constexpr bool kOverlap = decltype(overlap)::value;
      constexpr int kParts = decltype(x_parts)::value;
      const bool pairs = Bf16WsPairs<kParts, kOverlap>(p.m, p.n, true, device);
      const CUtensorMap half_map = pairs ? XPartsMap<kParts>(parts, m, k, XBoxRows(true)) : CUtensorMap{};
      LaunchBf16Ws<kParts, kOverlap>(w_map, pairs ? half_map : x_map, p, 1, device, sms, stream, what, pairs);
    };
    auto with_parts = [&](auto overlap) {
      WithXParts(x_is_bf16, [&](auto x_parts) { launch(overlap, x_parts); });
    };
    if (g_dense_overlap.On()) {
      with_parts(std::true_type{});
    } else {
      with_parts(std::false_type{});
    }
    g_dense_split_launches.fetch_add(1);
    g_dense_ws_launches.fetch_add(1);
  }
}

size_t GroupedLinearScratchBytes(int64_t m, int64_t num_groups, const DeviceWeight& w, LinearMath math,
                                 bool round_x_to_bf16) {
  if (num_groups <= 0 || w.out_features % num_groups != 0) return 0;
  const bool partials = m >= 1 && m <= 8 && g_grouped_slices_partials.On();
  if (!partials && (m < kGroupedBf16MinRows || !g_grouped_bf16.On())) return 0;
  Params p{};
  const Kind kind = SetWeight(w, p);
  p.n = w.out_features / num_groups;
  p.x_vec = true;  // the launch checks x's alignment
  if (!SplitGroupedRuns(p, kind, num_groups, math)) return 0;
  if (partials) return static_cast<size_t>(GroupedSlicePartialsBytes(m, num_groups, p.n, p.k));
  return GroupedBf16Bytes(m, num_groups, p.n, p.k, round_x_to_bf16 ? 1 : 3);
}

void GroupedLinear(const float* x, int64_t m, int64_t num_groups, const DeviceWeight& w, float* y,
                   cudaStream_t stream, LinearMath math, bool round_x_to_bf16, void* scratch, size_t scratch_bytes) {
  Params p{};
  const Kind kind = SetWeight(w, p);
  if (m < 0) Fail("negative row count");
  if (num_groups <= 0 || w.out_features % num_groups != 0) Fail("out_features not divisible by the groups");
  const int64_t k = w.in_features, r = w.out_features / num_groups;
  if (m == 0 || r == 0) return;
  if (x == nullptr || y == nullptr) Fail("x or y is null");
  p.x = x;
  p.ldx = num_groups * k;
  p.x_group_stride = k;
  p.y = y;
  p.ldy = num_groups * r;
  p.y_group_stride = r;
  p.m = m;
  p.n = r;
  p.x_vec = Aligned(x, k * 4, 16);  // k % 4 == 0 makes every row and group start aligned too
  p.x_bf16 = round_x_to_bf16;
  p.scratch = scratch;
  p.scratch_bytes = scratch == nullptr ? 0 : scratch_bytes;
  if (round_x_to_bf16 && !SplitGroupedRuns(p, kind, num_groups, math)) {  // no other kernel rounds x
    Fail("grouped linear: x rounded to BF16 is taken by the warpgroup-MMA split-BF16 kernels only");
  }
  Launch(p, kind, num_groups, stream, math);
}

}  // namespace deepinfer::cuda
