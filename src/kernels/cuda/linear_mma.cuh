// The tensor-core paths of cuda::Linear / GroupedLinear / ExpertsLinear (LinearMath::kSplitBf16
// first, then kFp8Act in namespace fp8), included by linear.cu only: they use linear.cu's Params,
// Kind and format decoders. Each path has a register-fed block (Block: up to 32 rows of x) and a
// shared-memory one (StagedBlock) that computes every output with the same operations.
//
// Numerics. A BF16 weight, and an FP8 (e4m3 × e8m0) or FP4 (e2m1 × e8m0) weight dequantized with
// its power-of-two scale, is exact in BF16 (barring scales below about 2^-118, which no
// checkpoint uses). An f32 activation is the exact sum of three BF16 parts, each truncated toward
// zero: hi = bf16(x), mid = bf16(x − hi), lo = bf16(x − hi − mid) (each difference is exact in
// f32; the last part has at most 8 significant bits left; exact for |x| >= 2^-110). So
// y = Σ_k W·hi + W·mid + W·lo has exact products, and the MMAs (mma.sync m16n8k16, f32
// accumulation) differ from the f32 SIMT kernels only in how the f32 sums are rounded.
//
// Order of every output (fixed by K alone, so the same for every M, every row or token tile and
// every grid: batch invariant, and ExpertsLinear equals Linear bit for bit):
//   K is cut into slices of kSlice = 512 columns and slices into chunks of kChunk = 128. Inside a
//   chunk, MMA step j (0..7) takes from lane quad t (lane % 4) the four columns 32t + 4j + {0..3},
//   which play the MMA's logical columns {2t, 2t+1, 2t+8, 2t+9}. Per slice s an accumulator
//   starts at +0 and takes, for each chunk in ascending order, for j = 0..7, the MMAs of the hi,
//   mid and lo parts in that order; then y = P_0, y += P_1, ... in slice order.
// Columns past K enter as zero weights times zero activations.
//
// Work split. A row tile is 16 weight rows (the MMA's M), a token tile 8 rows of x (the MMA's N).
// A block of kWarps warps takes tiles_per_block row tiles × TM token tiles; each row tile gets
// warps_per_tile warps (the next power of two ≥ the slice count, at most kWarps), warp slot w of a
// row tile computing slices w, w + warps_per_tile, ... The warps write their slice partials to
// shared memory and the block adds them in slice order. Weight bytes go straight from global
// memory to registers (each is used by one warp only), 32 columns per lane and chunk, the next
// chunk prefetched while the MMAs of this one run; x comes through L1. The staged blocks below
// trade that split of K across warps for x staged once per block.
#pragma once
// Needs <cuda_fp8.h>, kernels/cpu/ue8m0.h and kernels/cuda/bf16_split.cuh (TruncPair, SplitPair,
// MmaBf16), which linear.cu includes at file scope.

namespace mma {

constexpr int kChunk = 128;
constexpr int kSliceChunks = 4;
constexpr int kSlice = kChunk * kSliceChunks;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRows = 16;
constexpr int kTok = 8;
constexpr int kMaxSlices = 16;  // K <= 8192 on this path
constexpr int kMaxTm = 4;       // up to 32 tokens per block

struct Layout {
  int slices;
  int warps_per_tile;
  int tiles_per_block;
};

__host__ __device__ inline Layout MakeLayout(int64_t k) {
  Layout l{};
  l.slices = static_cast<int>(CeilDiv(k, kSlice));
  l.warps_per_tile = 1;
  while (l.warps_per_tile < l.slices && l.warps_per_tile < kWarps) l.warps_per_tile *= 2;
  l.tiles_per_block = kWarps / l.warps_per_tile;
  return l;
}

// Raw bytes of the 32 columns [32t, 32t+32) of one chunk of one weight row, and their scale.
template <Kind K>
struct Raw {
  static constexpr int kWords = K == Kind::kBF16 ? 16 : K == Kind::kFp8 ? 8 : 4;
  uint32_t word[kWords];
  float scale;
};

template <Kind K>
__device__ __forceinline__ void LoadRaw(const Params& p, int64_t row, bool row_valid, int64_t chunk, int quad,
                                        Raw<K>& r) {
#pragma unroll
  for (int i = 0; i < Raw<K>::kWords; ++i) r.word[i] = 0u;
  r.scale = 1.f;
  const int64_t k0 = chunk * kChunk + 32 * quad;
  if (!row_valid || k0 >= p.k) return;
  constexpr int kBytes = Raw<K>::kWords * 4;
  const uint8_t* src = p.w + row * p.w_row_bytes + (K == Kind::kFp4 ? k0 / 2 : K == Kind::kBF16 ? k0 * 2 : k0);
  if (p.w_vec16 && (K == Kind::kFp4 || k0 + 32 <= p.k)) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + i);
      r.word[4 * i] = v.x, r.word[4 * i + 1] = v.y, r.word[4 * i + 2] = v.z, r.word[4 * i + 3] = v.w;
    }
  } else {
    // Unaligned rows or the last, partial chunk: byte by byte (FP4 chunks are always whole).
    const int64_t valid_cols = min(static_cast<int64_t>(32), p.k - k0);
    const int valid_bytes = static_cast<int>(K == Kind::kFp4 ? 16 : K == Kind::kBF16 ? 2 * valid_cols : valid_cols);
#pragma unroll
    for (int b = 0; b < kBytes; ++b) {
      if (b < valid_bytes) r.word[b / 4] |= static_cast<uint32_t>(__ldg(src + b)) << (8 * (b % 4));
    }
  }
  if constexpr (K == Kind::kFp8 || K == Kind::kFp4) {
    const int64_t srow = K == Kind::kFp8 ? row / kFp8Block : row;
    const int64_t scol = K == Kind::kFp8 ? k0 / kFp8Block : k0 / kFp4Block;
    const int64_t si = srow * p.scale_row_stride + scol;
    r.scale = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
  }
}

__device__ __forceinline__ uint32_t PackBf16(float lo_col, float hi_col) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo_col, hi_col);  // .x (low 16 bits) = lo_col
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The 32 weights as 16 BF16 pairs (pair i = columns 2i, 2i+1): exact for e8m0 scales.
// The values are linear.cu's Dequantize's: FP8 through E4m3PairValues, FP4 with Fp4Factor's single
// multiply where it applies.
template <Kind K>
__device__ __forceinline__ void ToBf16Pairs(const Raw<K>& r, uint32_t (&pairs)[16]) {
  if constexpr (K == Kind::kBF16) {
#pragma unroll
    for (int i = 0; i < 16; ++i) pairs[i] = r.word[i];
  } else if constexpr (K == Kind::kFp8) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float2 v = E4m3PairValues(r.word[i / 2] >> (16 * (i % 2)));
      pairs[i] = PackBf16(__fmul_rn(v.x, r.scale), __fmul_rn(v.y, r.scale));
    }
  } else {
    // Two loops writing the same pairs, so that the branch is taken once per chunk.
    float factor;
    if (Fp4Factor(r.scale, factor)) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = r.word[i / 4] >> (8 * (i % 4));
        pairs[i] = PackBf16(__fmul_rn(E2m1Scaled(w & 0xfu), factor), __fmul_rn(E2m1Scaled((w >> 4) & 0xfu), factor));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = r.word[i / 4] >> (8 * (i % 4));
        pairs[i] = PackBf16(__fmul_rn(__fmul_rn(E2m1Scaled(w & 0xfu), 0x1p126f), r.scale),
                            __fmul_rn(__fmul_rn(E2m1Scaled((w >> 4) & 0xfu), 0x1p126f), r.scale));
      }
    }
  }
}

// Columns 32·quad + 4j + {0..3} of chunk `chunk` of x row `row` (x: the group's row 0; zeros
// past K or m).
__device__ __forceinline__ float4 LoadX4(const Params& p, const float* x, int64_t row, int64_t chunk, int quad,
                                         int j) {
  const int64_t k0 = chunk * kChunk + 32 * quad + 4 * j;
  if (row >= p.m || k0 >= p.k) return make_float4(0.f, 0.f, 0.f, 0.f);
  const float* src = x + row * p.ldx + k0;
  if (p.x_vec && k0 + 4 <= p.k) return __ldg(reinterpret_cast<const float4*>(src));
  return make_float4(__ldg(src), k0 + 1 < p.k ? __ldg(src + 1) : 0.f, k0 + 2 < p.k ? __ldg(src + 2) : 0.f,
                     k0 + 3 < p.k ? __ldg(src + 3) : 0.f);
}

// Partial sums of one block: [tile_in_block · slices + slice][row · 8·TM + token].
template <int TM>
struct Smem {
  float part[kMaxSlices][kRows * kTok * TM];
};

// The helpers below are shared by the split-BF16 and the FP8 blocks, so the two paths store, add
// and write their outputs the same way.

// This warp's partial of one slice (the C fragments of its TM token tiles) into sm.part[index].
template <int TM>
__device__ __forceinline__ void StorePartial(Smem<TM>& sm, int index, int group, int quad, const float (&acc)[TM][4]) {
  float* part = sm.part[index];
#pragma unroll
  for (int tt = 0; tt < TM; ++tt) {
    const int t = tt * kTok + 2 * quad;
    part[group * (kTok * TM) + t] = acc[tt][0];
    part[group * (kTok * TM) + t + 1] = acc[tt][1];
    part[(group + 8) * (kTok * TM) + t] = acc[tt][2];
    part[(group + 8) * (kTok * TM) + t + 1] = acc[tt][3];
  }
}

// Once every warp stored its partials: each output of the block's row tiles and tokens is its
// slices added in order (y = P_0, y += P_1, ...), written to y. Every thread of the block must
// call it; it synchronizes before and after (sm.part is rewritten by the block's next item).
template <int TM>
__device__ __forceinline__ void SumSlicesIntoY(const Params& p, const Smem<TM>& sm, const Layout& l, int64_t row_block,
                                               int64_t tok0, int64_t g) {
  __syncthreads();
  constexpr int kTileOut = kRows * kTok * TM;
  for (int e = threadIdx.x; e < l.tiles_per_block * kTileOut; e += kThreads) {
    const int tib = e / kTileOut, i = e % kTileOut;
    const int64_t o = (row_block * l.tiles_per_block + tib) * kRows + i / (kTok * TM);
    const int64_t r = tok0 + i % (kTok * TM);
    if (o >= p.n || r >= p.m) continue;
    float sum = 0.f;
    for (int s = 0; s < l.slices; ++s) sum = s == 0 ? sm.part[tib * l.slices][i] : sum + sm.part[tib * l.slices + s][i];
    p.y[g * p.y_group_stride + r * p.ldy + o] = sum;
  }
  __syncthreads();
}

// The staged blocks' form of the same sum: at a slice's last chunk the slice's partial is folded
// into the running total (total = P_0 for the first slice, then total + P_s) and cleared.
template <int TM>
__device__ __forceinline__ void FoldSlice(float (&total)[TM][4], float (&part)[TM][4], bool first_slice) {
#pragma unroll
  for (int tt = 0; tt < TM; ++tt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      total[tt][i] = first_slice ? part[tt][i] : total[tt][i] + part[tt][i];
      part[tt][i] = 0.f;
    }
  }
}

// One C fragment into y: weight rows ra and ra + 8 (within group g), tokens r and r + 1, each
// written only where it exists.
__device__ __forceinline__ void WriteFragment(const Params& p, int64_t g, int64_t ra, int64_t r, const float (&v)[4]) {
  float* y = p.y + g * p.y_group_stride;
  if (ra < p.n && r < p.m) y[r * p.ldy + ra] = v[0];
  if (ra < p.n && r + 1 < p.m) y[(r + 1) * p.ldy + ra] = v[1];
  if (ra + 8 < p.n && r < p.m) y[r * p.ldy + ra + 8] = v[2];
  if (ra + 8 < p.n && r + 1 < p.m) y[(r + 1) * p.ldy + ra + 8] = v[3];
}

// One warp's place in a register-fed block (Block, fp8::Block): its row tile and its slot among
// the tile's warps, the lane's MMA quad ("thread in group") and group, and the two weight rows
// (group, group + 8 of the tile, as rows of the whole weight) the lane loads.
struct WarpTile {
  int quad, group, tile_in_block, slot;
  int64_t row0;            // the tile's first weight row within the group
  int64_t wrow_a, wrow_b;  // the lane's weight rows
  bool row_a, row_b;       // whether they exist

  __device__ __forceinline__ WarpTile(const Params& p, const Layout& l, int64_t row_block, int64_t g) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    quad = lane % 4;
    group = lane / 4;
    tile_in_block = warp / l.warps_per_tile;
    slot = warp % l.warps_per_tile;
    row0 = (row_block * l.tiles_per_block + tile_in_block) * kRows;
    row_a = row0 + group < p.n;
    row_b = row0 + group + 8 < p.n;
    wrow_a = g * p.n + row0 + group;
    wrow_b = wrow_a + 8;
  }
};

// Row block `row_block` (tiles_per_block row tiles of group g) × token block `tok_block` (8·TM
// rows of x). Every thread of the block must call it (it synchronizes); shared memory is free
// again when it returns.
template <Kind K, int TM>
__device__ __forceinline__ void Block(const Params& p, int64_t row_block, int64_t tok_block, int64_t g) {
  __shared__ Smem<TM> sm;
  const Layout l = MakeLayout(p.k);
  const WarpTile wt(p, l, row_block, g);
  const int64_t tok0 = tok_block * (kTok * TM);
  const int64_t num_chunks = CeilDiv(p.k, kChunk);
  const float* x = p.x + g * p.x_group_stride;

  if (wt.row0 < p.n) {
    // The warp's chunks: slices slot, slot + warps_per_tile, ...; chunk c of slice s is 4s + c.
    int s = wt.slot;
    int64_t c = static_cast<int64_t>(s) * kSliceChunks;
    Raw<K> next_a, next_b;
    if (s < l.slices) {
      LoadRaw<K>(p, wt.wrow_a, wt.row_a, c, wt.quad, next_a);
      LoadRaw<K>(p, wt.wrow_b, wt.row_b, c, wt.quad, next_b);
    }
    while (s < l.slices) {
      float acc[TM][4];
#pragma unroll
      for (int tt = 0; tt < TM; ++tt) acc[tt][0] = acc[tt][1] = acc[tt][2] = acc[tt][3] = 0.f;
      const int64_t slice_end = min(num_chunks, static_cast<int64_t>(s + 1) * kSliceChunks);
      for (; c < slice_end; ++c) {
        uint32_t wa[16], wb[16];
        ToBf16Pairs<K>(next_a, wa);
        ToBf16Pairs<K>(next_b, wb);
        // Prefetch the warp's next chunk (in this slice or the first of its next slice).
        const int64_t c_next = c + 1 < slice_end ? c + 1 : static_cast<int64_t>(s + l.warps_per_tile) * kSliceChunks;
        if (c + 1 < slice_end || s + l.warps_per_tile < l.slices) {
          LoadRaw<K>(p, wt.wrow_a, wt.row_a, c_next, wt.quad, next_a);
          LoadRaw<K>(p, wt.wrow_b, wt.row_b, c_next, wt.quad, next_b);
        }
#pragma unroll
        for (int tt = 0; tt < TM; ++tt) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float4 xv = LoadX4(p, x, tok0 + tt * kTok + wt.group, c, wt.quad, j);
            uint32_t h0, m0, l0, h1, m1, l1;
            SplitPair(xv.x, xv.y, h0, m0, l0);
            SplitPair(xv.z, xv.w, h1, m1, l1);
            MmaBf16(acc[tt], wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], h0, h1);
            MmaBf16(acc[tt], wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], m0, m1);
            MmaBf16(acc[tt], wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], l0, l1);
          }
        }
      }
      StorePartial<TM>(sm, wt.tile_in_block * l.slices + s, wt.group, wt.quad, acc);
      s += l.warps_per_tile;
      c = static_cast<int64_t>(s) * kSliceChunks;
    }
  }
  SumSlicesIntoY<TM>(p, sm, l, row_block, tok0, g);
}

// Grid (row blocks, token blocks, groups).
template <Kind K, int TM>
__global__ void __launch_bounds__(kThreads) LinearKernel(const Params p) {
  PdlPrologue();
  Block<K, TM>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// ---- split-BF16, large M: shared-memory tiles, the same arithmetic per output -------------------
//
// A block computes kStagedRows weight rows × kStagedTok x rows. Per 128-column chunk the block
// stages its weight rows as BF16 and its x rows as the three BF16 parts, each once (four threads
// per row, each a quarter of the chunk, through the same LoadRaw / ToBf16Pairs / SplitPair as
// Block), in shared memory; warp (wr, wt) then runs Block's MMA sequence for its 16 weight rows and
// 2 token tiles with the same operands: per slice an accumulator from +0 taking, per chunk, per step
// j, the hi, mid and lo MMAs; the slices added in order. So every output has Block's bits.
// Layout of a staged row: column 32t + 4j + e (quarter t, step j, e < 4) sits at element
// 16j + 4t + e, so a lane's four columns of a step are one 8-byte read and the 32 lanes of a read
// hit distinct banks (row stride 288 bytes).
constexpr int kStagedRows = 64;
constexpr int kStagedTok = 32;
constexpr int kStagedWarpsW = kStagedRows / kRows;                          // 4
constexpr int kStagedTokPerWarp = kStagedTok / (kWarps / kStagedWarpsW);    // 16
constexpr int kStagedTm = kStagedTokPerWarp / kTok;                         // 2
constexpr int kStagedStride = kChunk + 16;  // BF16 elements per staged row (288 bytes)

struct StagedSmem {
  __nv_bfloat16 w[kStagedRows][kStagedStride];
  __nv_bfloat16 x[3][kStagedTok][kStagedStride];  // hi, mid, lo
};

__device__ __forceinline__ uint2 Lds64(const __nv_bfloat16* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ void Sts64(__nv_bfloat16* p, uint32_t lo, uint32_t hi) {
  *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
}

// StagedBlock's chunks [c_begin, c_end) (c_begin a multiple of kSliceChunks; c_end a multiple of it
// or the chunk count): per 512-column slice s an accumulator from +0 over its chunks, handed to
// on_slice(s, acc) (which may keep it; acc restarts from +0 after). Every thread of the block calls
// it (it synchronizes); shared memory is free again when it returns.
template <Kind K, class OnSlice>
__device__ __forceinline__ void StagedChunks(const Params& p, int64_t row_block, int64_t tok_block, int64_t g,
                                             int64_t c_begin, int64_t c_end, StagedSmem& sm, OnSlice&& on_slice) {
  static_assert(kThreads == 4 * kStagedRows && kThreads >= 4 * kStagedTok, "four threads per staged row");
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int quad = lane % 4, group = lane / 4;
  const int wr = warp % kStagedWarpsW, wt = warp / kStagedWarpsW;
  const int64_t row0 = row_block * kStagedRows;  // within the group
  const int64_t tok0 = tok_block * kStagedTok;
  const float* x = p.x + g * p.x_group_stride;
  const int srow = tid / 4, squarter = tid % 4;  // the staged row (weight; x when < kStagedTok)
  const bool w_valid = row0 + srow < p.n;
  const int64_t w_row = g * p.n + row0 + srow;

  float acc[kStagedTm][4];
#pragma unroll
  for (int tt = 0; tt < kStagedTm; ++tt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[tt][i] = 0.f;
  }

  for (int64_t c = c_begin; c < c_end; ++c) {
    {
      Raw<K> raw;
      LoadRaw<K>(p, w_row, w_valid, c, squarter, raw);
      uint32_t pairs[16];
      ToBf16Pairs<K>(raw, pairs);
#pragma unroll
      for (int j = 0; j < 8; ++j) Sts64(&sm.w[srow][16 * j + 4 * squarter], pairs[2 * j], pairs[2 * j + 1]);
      if (srow < kStagedTok) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float4 xv = LoadX4(p, x, tok0 + srow, c, squarter, j);
          uint32_t h0, m0, l0, h1, m1, l1;
          SplitPair(xv.x, xv.y, h0, m0, l0);
          SplitPair(xv.z, xv.w, h1, m1, l1);
          Sts64(&sm.x[0][srow][16 * j + 4 * squarter], h0, h1);
          Sts64(&sm.x[1][srow][16 * j + 4 * squarter], m0, m1);
          Sts64(&sm.x[2][srow][16 * j + 4 * squarter], l0, l1);
        }
      }
    }
    __syncthreads();
    const int ra = kRows * wr + group, rb = ra + 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint2 a = Lds64(&sm.w[ra][16 * j + 4 * quad]), b = Lds64(&sm.w[rb][16 * j + 4 * quad]);
#pragma unroll
      for (int tt = 0; tt < kStagedTm; ++tt) {
        const int tb = kStagedTokPerWarp * wt + kTok * tt + group;
        const uint2 h = Lds64(&sm.x[0][tb][16 * j + 4 * quad]);
        const uint2 m = Lds64(&sm.x[1][tb][16 * j + 4 * quad]);
        const uint2 l = Lds64(&sm.x[2][tb][16 * j + 4 * quad]);
        MmaBf16(acc[tt], a.x, b.x, a.y, b.y, h.x, h.y);
        MmaBf16(acc[tt], a.x, b.x, a.y, b.y, m.x, m.y);
        MmaBf16(acc[tt], a.x, b.x, a.y, b.y, l.x, l.y);
      }
    }
    if ((c + 1) % kSliceChunks == 0 || c + 1 == c_end) {
      on_slice(static_cast<int>(c / kSliceChunks), acc);
#pragma unroll
      for (int tt = 0; tt < kStagedTm; ++tt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[tt][i] = 0.f;
      }
    }
    __syncthreads();  // the next chunk overwrites the staged rows
  }
}

// This thread's C fragments of a staged block into y: weight rows ra and ra + 8 of its warp's row
// tile, the tokens of its warp's token tiles.
__device__ __forceinline__ void WriteStagedFragments(const Params& p, int64_t row_block, int64_t tok_block, int64_t g,
                                                     const float (&total)[kStagedTm][4]) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int wr = warp % kStagedWarpsW, wt = warp / kStagedWarpsW;
  const int64_t ra = row_block * kStagedRows + kRows * wr + lane / 4;
  const int64_t tok = tok_block * kStagedTok + kStagedTokPerWarp * wt + 2 * (lane % 4);
#pragma unroll
  for (int tt = 0; tt < kStagedTm; ++tt) WriteFragment(p, g, ra, tok + kTok * tt, total[tt]);
}

template <Kind K>
__device__ __forceinline__ void StagedBlock(const Params& p, int64_t row_block, int64_t tok_block, int64_t g) {
  __shared__ StagedSmem sm;
  float total[kStagedTm][4] = {};
  StagedChunks<K>(p, row_block, tok_block, g, 0, CeilDiv(p.k, kChunk), sm,
                  [&](int slice, float (&acc)[kStagedTm][4]) { FoldSlice<kStagedTm>(total, acc, slice == 0); });
  WriteStagedFragments(p, row_block, tok_block, g, total);
}

// StagedBlock's products with K's slices spread over a cluster of kCluster blocks, for
// decode-sized M where StagedBlock's grid would leave most SMs idle. Rank r computes slices
// [r·q, (r+1)·q) of the row and token block (q = ceil(slices / kCluster) <= kMaxSlicesPerRank) and
// keeps each slice's sum apart; after a cluster barrier rank 0 adds P_0, P_1, ... in slice order
// from the ranks' shared memory, as FoldSlice does in one block: StagedBlock's bits.
constexpr int kMaxSlicesPerRank = 2;  // kMaxSlices over the largest cluster (8)
static_assert(sizeof(float) * kMaxSlicesPerRank * kThreads * kStagedTm * 4 <= sizeof(StagedSmem),
              "the slice sums fit the staged rows' shared memory");

template <Kind K, int kCluster>
__device__ __forceinline__ void StagedSlicesBlock(const Params& p, int64_t row_block, int64_t tok_block, int64_t g) {
  __shared__ StagedSmem sm;
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int slices = static_cast<int>(CeilDiv(p.k, kSlice));
  const int per_rank = (slices + kCluster - 1) / kCluster;
  const int64_t num_chunks = CeilDiv(p.k, kChunk);
  const int64_t c_begin = min(num_chunks, static_cast<int64_t>(rank) * per_rank * kSliceChunks);
  const int64_t c_end = min(num_chunks, static_cast<int64_t>(rank + 1) * per_rank * kSliceChunks);
  float held[kMaxSlicesPerRank][kStagedTm][4] = {};
  StagedChunks<K>(p, row_block, tok_block, g, c_begin, c_end, sm, [&](int slice, float (&acc)[kStagedTm][4]) {
    const int j = slice - rank * per_rank;
#pragma unroll
    for (int h = 0; h < kMaxSlicesPerRank; ++h) {
      if (h == j) {
#pragma unroll
        for (int tt = 0; tt < kStagedTm; ++tt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) held[h][tt][i] = acc[tt][i];
        }
      }
    }
  });
  // The slice sums at [h][element][thread] in the staged rows' memory (free: StagedChunks ended
  // with a barrier).
  constexpr int kElems = kStagedTm * 4;
  float* sums = reinterpret_cast<float*>(&sm);
  const int tid = threadIdx.x;
#pragma unroll
  for (int h = 0; h < kMaxSlicesPerRank; ++h) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) sums[(h * kElems + e) * kThreads + tid] = held[h][e / 4][e % 4];
  }
  cluster.sync();
  if (rank == 0) {
    float total[kStagedTm][4] = {};
    for (int s = 0; s < slices; ++s) {
      const float* peer = cluster.map_shared_rank(sums, s / per_rank) + (s % per_rank) * kElems * kThreads;
#pragma unroll
      for (int e = 0; e < kElems; ++e) {
        const float v = peer[e * kThreads + tid];
        total[e / 4][e % 4] = s == 0 ? v : __fadd_rn(total[e / 4][e % 4], v);
      }
    }
    WriteStagedFragments(p, row_block, tok_block, g, total);
  }
  ClusterSyncBeforeExit();  // no rank leaves (freeing its shared memory) while rank 0 reads it
}

// Grid (ceil(n / kStagedRows), ceil(m / kStagedTok), groups).
template <Kind K>
__global__ void __launch_bounds__(kThreads) StagedLinearKernel(const Params p) {
  PdlPrologue();
  mma::StagedBlock<K>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// Grid (ceil(n / kStagedRows) · kCluster, ceil(m / kStagedTok), groups) in clusters of kCluster
// blocks along x: row block blockIdx.x / kCluster.
template <Kind K, int kCluster>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads) StagedSlicesKernel(const Params p) {
  PdlPrologue();
  mma::StagedSlicesBlock<K, kCluster>(p, blockIdx.x / kCluster, blockIdx.y, blockIdx.z);
}

// ---- FP8 inputs (LinearMath::kFp8Act): e4m3 × e4m3 MMAs ---------------------------------------
//
// For FP8 (e4m3 × e8m0 per 128×128) and FP4 (e2m1 × e8m0 per 1×32) weights whose input the
// reference quantizes (its act_quant: e4m3 per row and 128 columns, power-of-two scale): the block
// quantizes each 128-column chunk of each x row itself (the scale rule of kernels/cpu/ue8m0.h; on
// an input the model already rounded through Fp8RoundTripRows this reproduces its values exactly,
// possibly as twice the codes at half the scale), multiplies the codes on the tensor cores
// (mma.sync m16n8k32 e4m3, f32 accumulators; FP4 codes become e4m3 exactly) and applies the
// power-of-two scales in f32 afterwards:
//   FP8 weights: per chunk, the 4 MMA steps (k32 each) chain from +0, then
//                P_s = P_s + acc · (w_scale · x_scale), rounded as written;
//   FP4 weights: per step (one 32-column scale group), the MMA starts from +0, then
//                P_s = P_s + acc · (w_scale_group · x_scale).
// Step j of a chunk covers its columns [32j, 32j+32): lane quad t supplies columns 32j + 4t + {0..3}
// (the MMA's logical columns 4t..4t+3) and 32j + 16 + 4t + {0..3} (logical 16 + 4t..). Slices,
// warps and the slice sum in slice order are those of the BF16 path, so the order of every output
// is again fixed by K alone. The products are exact; the tensor cores' f32 accumulation inside an
// MMA may keep fewer bits than f32 (DeepSeek reports about 14 on Hopper), which is why the scales
// are applied, and the sum promoted to CUDA-core f32, after every chunk (FP8) or step (FP4).
namespace fp8 {

__device__ __forceinline__ void MmaE4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four e2m1 nibbles (bits 0-15, column order) -> four e4m3 bytes through the magnitude table
// (lo, hi): byte b of the table holds the code of magnitude index b (lo: 0-3, hi: 4-7), each
// nibble's low 3 bits select it and its bit 3 becomes the byte's sign.
__device__ __forceinline__ uint32_t E2m1x4ToE4m3x4Table(uint32_t nibbles, uint32_t lo, uint32_t hi) {
  const uint32_t signs = ((nibbles & 0x8u) << 4) | ((nibbles & 0x80u) << 8) | ((nibbles & 0x800u) << 12) |
                         ((nibbles & 0x8000u) << 16);
  return __byte_perm(lo, hi, nibbles & 0x7777u) | signs;
}

// prmt.b32 in its generic form, where a selector nibble's bit 3 replicates the selected byte's bit 7
// over the output byte (the __byte_perm intrinsic is documented with that bit ignored).
__device__ __forceinline__ uint32_t PrmtGeneric(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// Eight e2m1 nibbles (a word, column order) -> eight e4m3 bytes, columns 0-3 in out0 and 4-7 in
// out1: E2m1x4ToE4m3x4Table of each half, in 9 instructions instead of ~22. Bit 7 of byte i of
// nibbles << 4 is the sign of nibble 2i, bit 7 of byte i of nibbles that of nibble 2i + 1, so one
// sign-replicating prmt per half lines the signs up on their bytes' bit 7. The lookups' selectors
// are the magnitudes, masked once for both halves (prmt reads a selector's low 16 bits only).
// `sign_mask` keeps the signs (0x80808080) or drops them (0: a table of zeros then gives +0
// codes, not -0).
__device__ __forceinline__ void E2m1x8ToE4m3x8Table(uint32_t nibbles, uint32_t lo, uint32_t hi, uint32_t& out0,
                                                    uint32_t& out1, uint32_t sign_mask = 0x80808080u) {
  const uint32_t shifted = nibbles << 4;
  const uint32_t signs0 = PrmtGeneric(shifted, nibbles, 0xd9c8u);  // bytes: y0, x0, y1, x1 (replicated)
  const uint32_t signs1 = PrmtGeneric(shifted, nibbles, 0xfbeau);  // bytes: y2, x2, y3, x3
  const uint32_t magnitudes = nibbles & 0x77777777u;
  out0 = PrmtGeneric(lo, hi, magnitudes) | (signs0 & sign_mask);
  out1 = PrmtGeneric(lo, hi, magnitudes >> 16) | (signs1 & sign_mask);
}

// E2m1x8ToE4m3x8Table's codes from the word in the sign-split layout (cpu::SignSplitWord of the
// stored word): the signs of out0's codes are the word's bits 7, 15, 23, 31 and those of out1's its
// bits 3, 11, 19, 27, so each merges with one LOP3 (7 instructions a word where the stored order
// takes 9). The same codes for the same nibbles.
__device__ __forceinline__ void E2m1x8SignSplitToE4m3x8Table(uint32_t word, uint32_t lo, uint32_t hi, uint32_t& out0,
                                                            uint32_t& out1, uint32_t sign_mask = 0x80808080u) {
  const uint32_t magnitudes = word & 0x77777777u;
  out0 = PrmtGeneric(lo, hi, magnitudes) | (word & sign_mask);
  out1 = PrmtGeneric(lo, hi, magnitudes >> 16) | ((word << 4) & sign_mask);
}

// The same codes from a word in the layout `sign_split` names (warp-uniform): the sign-split
// layout's conversion or the stored order's.
__device__ __forceinline__ void E2m1x8WordToE4m3x8Table(bool sign_split, uint32_t word, uint32_t lo, uint32_t hi,
                                                        uint32_t& out0, uint32_t& out1,
                                                        uint32_t sign_mask = 0x80808080u) {
  if (sign_split) {
    E2m1x8SignSplitToE4m3x8Table(word, lo, hi, out0, out1, sign_mask);
  } else {
    E2m1x8ToE4m3x8Table(word, lo, hi, out0, out1, sign_mask);
  }
}

// Exact: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are the e4m3 codes 0x00, 0x30, 0x38, 0x3c, 0x40,
// 0x44, 0x48, 0x4c.
__device__ __forceinline__ uint32_t E2m1x4ToE4m3x4(uint32_t nibbles) {
  return E2m1x4ToE4m3x4Table(nibbles, 0x3c383000u, 0x4c484440u);
}

// Weight codes of one row for step j of a chunk: w0 = columns 32j + 4t + {0..3}, w1 = 32j + 16 +
// 4t + {0..3}, as e4m3 bytes (zero past K or for an invalid row).
template <Kind K>
__device__ __forceinline__ void LoadWStep(const Params& p, int64_t row, bool row_valid, int64_t chunk, int quad,
                                          int j, uint32_t& w0, uint32_t& w1) {
  w0 = w1 = 0u;
  const int64_t k0 = chunk * kChunk + 32 * j + 4 * quad;
  if (!row_valid || k0 >= p.k) return;
  const uint8_t* rowp = p.w + row * p.w_row_bytes;
  if constexpr (K == Kind::kFp8) {
    for (int half = 0; half < 2; ++half) {
      const int64_t k = k0 + 16 * half;
      uint32_t v = 0u;
      if (p.w_vec && k + 4 <= p.k) {
        v = __ldg(reinterpret_cast<const unsigned int*>(rowp + k));
      } else {
        for (int b = 0; b < 4; ++b) {
          if (k + b < p.k) v |= static_cast<uint32_t>(__ldg(rowp + k + b)) << (8 * b);
        }
      }
      (half == 0 ? w0 : w1) = v;
    }
  } else {
    // K % 32 == 0: a step is whole. Two bytes hold the four nibbles of each half.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* src = rowp + (k0 + 16 * half) / 2;
      const uint32_t nibbles = p.w_vec ? static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(src)))
                                       : static_cast<uint32_t>(__ldg(src)) | static_cast<uint32_t>(__ldg(src + 1)) << 8;
      (half == 0 ? w0 : w1) = E2m1x4ToE4m3x4(nibbles);
    }
  }
}

// The weight scale of `row` for step j of a chunk (FP8: the chunk's 128-column block; FP4: the
// step's 32-column group); 1 for an invalid row.
template <Kind K>
__device__ __forceinline__ float WeightScale(const Params& p, int64_t row, bool row_valid, int64_t chunk, int j) {
  if (!row_valid) return 1.f;
  const int64_t srow = K == Kind::kFp8 ? row / kFp8Block : row;
  const int64_t scol = K == Kind::kFp8 ? chunk : (chunk * kChunk + 32 * j) / kFp4Block;
  if (K == Kind::kFp4 && scol * kFp4Block >= p.k) return 1.f;
  const int64_t si = srow * p.scale_row_stride + scol;
  return p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
}

// act_quant of this lane's 32 values of chunk `chunk` of x row `row` (zeros past K or m): the
// quad's amax gives the row's chunk scale; codes[j] = the e4m3 bytes of columns 32j + 4t + {0..3}
// (code0) and 32j + 16 + 4t + {0..3} (code1). Returns the scale. All lanes must call it.
__device__ __forceinline__ float QuantizeX(const Params& p, const float* x, int64_t row, int64_t chunk, int quad,
                                           uint32_t (&code0)[4], uint32_t (&code1)[4]) {
  float4 v[4][2];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t k0 = chunk * kChunk + 32 * j + 16 * half + 4 * quad;
      float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < p.m && k0 < p.k) {
        const float* src = x + row * p.ldx + k0;
        if (p.x_vec && k0 + 4 <= p.k) {
          a = __ldg(reinterpret_cast<const float4*>(src));
        } else {
          a = make_float4(__ldg(src), k0 + 1 < p.k ? __ldg(src + 1) : 0.f, k0 + 2 < p.k ? __ldg(src + 2) : 0.f,
                          k0 + 3 < p.k ? __ldg(src + 3) : 0.f);
        }
      }
      v[j][half] = a;
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))));
    }
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float scale = cpu::Ue8m0BlockScale(amax, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax);
  const float inv = __frcp_rn(scale);  // exact: a power of two
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float4 a = v[j][half];
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a.x, inv), __fmul_rn(a.y, inv)),
                                                   __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a.z, inv), __fmul_rn(a.w, inv)),
                                                   __NV_SATFINITE, __NV_E4M3);
      (half == 0 ? code0[j] : code1[j]) = lo | (hi << 16);
    }
  }
  return scale;
}

template <Kind K, int TM>
__device__ __forceinline__ void Block(const Params& p, int64_t row_block, int64_t tok_block, int64_t g) {
  static_assert(K == Kind::kFp8 || K == Kind::kFp4, "FP8 inputs pair with FP8 or FP4 weights");
  __shared__ Smem<TM> sm;
  const Layout l = MakeLayout(p.k);
  const WarpTile wt(p, l, row_block, g);
  const int64_t tok0 = tok_block * (kTok * TM);
  const int64_t num_chunks = CeilDiv(p.k, kChunk);
  const float* x = p.x + g * p.x_group_stride;

  if (wt.row0 < p.n) {  // uniform per warp
    for (int s = wt.slot; s < l.slices; s += l.warps_per_tile) {
      float part[TM][4];
#pragma unroll
      for (int tt = 0; tt < TM; ++tt) part[tt][0] = part[tt][1] = part[tt][2] = part[tt][3] = 0.f;
      const int64_t slice_end = min(num_chunks, static_cast<int64_t>(s + 1) * kSliceChunks);
      for (int64_t c = static_cast<int64_t>(s) * kSliceChunks; c < slice_end; ++c) {
        uint32_t wa0[4], wa1[4], wb0[4], wb1[4];
        float sa[4], sb[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          LoadWStep<K>(p, wt.wrow_a, wt.row_a, c, wt.quad, j, wa0[j], wa1[j]);
          LoadWStep<K>(p, wt.wrow_b, wt.row_b, c, wt.quad, j, wb0[j], wb1[j]);
          sa[j] = WeightScale<K>(p, wt.wrow_a, wt.row_a, c, j);
          sb[j] = WeightScale<K>(p, wt.wrow_b, wt.row_b, c, j);
        }
#pragma unroll
        for (int tt = 0; tt < TM; ++tt) {
          uint32_t x0[4], x1[4];
          const float xs = QuantizeX(p, x, tok0 + tt * kTok + wt.group, c, wt.quad, x0, x1);
          // The C fragment's columns are tokens 2·quad and 2·quad + 1 of the tile; their scales
          // live in the lanes of groups 2·quad and 2·quad + 1.
          const float xs0 = __shfl_sync(0xffffffffu, xs, 8 * wt.quad);
          const float xs1 = __shfl_sync(0xffffffffu, xs, 8 * wt.quad + 4);
          if constexpr (K == Kind::kFp8) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int j = 0; j < 4; ++j) MmaE4m3(acc, wa0[j], wb0[j], wa1[j], wb1[j], x0[j], x1[j]);
            part[tt][0] = __fadd_rn(part[tt][0], __fmul_rn(acc[0], __fmul_rn(sa[0], xs0)));
            part[tt][1] = __fadd_rn(part[tt][1], __fmul_rn(acc[1], __fmul_rn(sa[0], xs1)));
            part[tt][2] = __fadd_rn(part[tt][2], __fmul_rn(acc[2], __fmul_rn(sb[0], xs0)));
            part[tt][3] = __fadd_rn(part[tt][3], __fmul_rn(acc[3], __fmul_rn(sb[0], xs1)));
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              float acc[4] = {0.f, 0.f, 0.f, 0.f};
              MmaE4m3(acc, wa0[j], wb0[j], wa1[j], wb1[j], x0[j], x1[j]);
              part[tt][0] = __fadd_rn(part[tt][0], __fmul_rn(acc[0], __fmul_rn(sa[j], xs0)));
              part[tt][1] = __fadd_rn(part[tt][1], __fmul_rn(acc[1], __fmul_rn(sa[j], xs1)));
              part[tt][2] = __fadd_rn(part[tt][2], __fmul_rn(acc[2], __fmul_rn(sb[j], xs0)));
              part[tt][3] = __fadd_rn(part[tt][3], __fmul_rn(acc[3], __fmul_rn(sb[j], xs1)));
            }
          }
        }
      }
      StorePartial<TM>(sm, wt.tile_in_block * l.slices + s, wt.group, wt.quad, part);
    }
  }
  SumSlicesIntoY<TM>(p, sm, l, row_block, tok0, g);
}

template <Kind K, int TM>
__global__ void __launch_bounds__(kThreads) LinearKernel(const Params p) {
  PdlPrologue();
  Block<K, TM>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

// ---- FP8 inputs, large M: shared-memory tiles, the same arithmetic per output ------------------
//
// A block computes kTiledRows weight rows × kTiledTok x rows. Per 128-column chunk the block
// quantizes its x rows once (four threads per row, each a quarter of the chunk, exactly as a lane
// quad of Block does) and stages the e4m3 codes of its weight rows, both in shared memory; warp
// (wr, wt) then runs, for its 16 weight rows and 4 token tiles, the MMA sequence of Block with the
// same operands, the same chains and the same f32 expressions: per slice a partial from +0, the
// slices added in order. Only where the operands come from differs, so every output has Block's
// bits (batch invariance across the M at which Linear switches kernels).
constexpr int kTiledRows = 64;
constexpr int kTiledTok = 64;
constexpr int kTiledWarpsW = kTiledRows / kRows;                   // 4
constexpr int kTiledTokPerWarp = kTiledTok / (kWarps / kTiledWarpsW);  // 32
constexpr int kTiledTm = kTiledTokPerWarp / kTok;                    // 4
constexpr int kRowBytes = kChunk + 16;  // staged row stride: 144 bytes, conflict-free 4-byte reads

struct TiledSmem {
  uint8_t w[kTiledRows][kRowBytes];   // weight codes of the chunk
  uint8_t x[kTiledTok][kRowBytes];    // x codes of the chunk
  float w_scale[kTiledRows][4];       // per row: the chunk's scale (FP8) or the 4 group scales (FP4)
  float x_scale[kTiledTok];
};

template <Kind K>
__device__ __forceinline__ uint32_t Lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <Kind K>
__device__ __forceinline__ void StagedBlock(const Params& p, int64_t row_block, int64_t tok_block, int64_t g) {
  static_assert(K == Kind::kFp8 || K == Kind::kFp4, "FP8 inputs pair with FP8 or FP4 weights");
  static_assert(kThreads == 4 * kTiledTok && kThreads == 4 * kTiledRows, "four threads per staged row");
  __shared__ TiledSmem sm;
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int quad = lane % 4, group = lane / 4;
  const int wr = warp % kTiledWarpsW, wt = warp / kTiledWarpsW;
  const int64_t row0 = row_block * kTiledRows;  // within the group
  const int64_t tok0 = tok_block * kTiledTok;
  const int64_t num_chunks = CeilDiv(p.k, kChunk);
  const float* x = p.x + g * p.x_group_stride;
  // Staging: thread tid handles staged row tid / 4 (of W and of x) and its quarter tid % 4.
  const int srow = tid / 4, squarter = tid % 4;
  const bool w_valid = row0 + srow < p.n;
  const int64_t w_row = g * p.n + row0 + srow;

  float total[kTiledTm][4], part[kTiledTm][4];
#pragma unroll
  for (int tt = 0; tt < kTiledTm; ++tt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) total[tt][i] = part[tt][i] = 0.f;
  }

  for (int64_t c = 0; c < num_chunks; ++c) {
    // 1. Stage the chunk: x codes and scale of row tok0 + srow (QuantizeX's quarter `squarter`,
    //    the scale agreed by the four threads of the row), weight codes and scales of row srow.
    {
      uint32_t c0[4], c1[4];
      const float xs = QuantizeX(p, x, tok0 + srow, c, squarter, c0, c1);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        *reinterpret_cast<uint32_t*>(&sm.x[srow][32 * j + 4 * squarter]) = c0[j];
        *reinterpret_cast<uint32_t*>(&sm.x[srow][32 * j + 16 + 4 * squarter]) = c1[j];
      }
      if (squarter == 0) sm.x_scale[srow] = xs;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t w0, w1;
        LoadWStep<K>(p, w_row, w_valid, c, squarter, j, w0, w1);
        *reinterpret_cast<uint32_t*>(&sm.w[srow][32 * j + 4 * squarter]) = w0;
        *reinterpret_cast<uint32_t*>(&sm.w[srow][32 * j + 16 + 4 * squarter]) = w1;
      }
      sm.w_scale[srow][squarter] = WeightScale<K>(p, w_row, w_valid, c, squarter);
    }
    __syncthreads();

    // 2. The MMAs of warp (wr, wt): weight rows 16·wr + group (+8), tokens 32·wt + 8·tt + group.
    const int ra = kRows * wr + group, rb = ra + 8;
    const float sa0 = sm.w_scale[ra][0], sb0 = sm.w_scale[rb][0];
#pragma unroll
    for (int tt = 0; tt < kTiledTm; ++tt) {
      const int tb = kTiledTokPerWarp * wt + kTok * tt + group;  // B operand's token
      const int tc = kTiledTokPerWarp * wt + kTok * tt + 2 * quad;  // C fragment's tokens tc, tc + 1
      const float xs0 = sm.x_scale[tc], xs1 = sm.x_scale[tc + 1];
      if constexpr (K == Kind::kFp8) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          MmaE4m3(acc, Lds32<K>(&sm.w[ra][32 * j + 4 * quad]), Lds32<K>(&sm.w[rb][32 * j + 4 * quad]),
                  Lds32<K>(&sm.w[ra][32 * j + 16 + 4 * quad]), Lds32<K>(&sm.w[rb][32 * j + 16 + 4 * quad]),
                  Lds32<K>(&sm.x[tb][32 * j + 4 * quad]), Lds32<K>(&sm.x[tb][32 * j + 16 + 4 * quad]));
        }
        part[tt][0] = __fadd_rn(part[tt][0], __fmul_rn(acc[0], __fmul_rn(sa0, xs0)));
        part[tt][1] = __fadd_rn(part[tt][1], __fmul_rn(acc[1], __fmul_rn(sa0, xs1)));
        part[tt][2] = __fadd_rn(part[tt][2], __fmul_rn(acc[2], __fmul_rn(sb0, xs0)));
        part[tt][3] = __fadd_rn(part[tt][3], __fmul_rn(acc[3], __fmul_rn(sb0, xs1)));
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
          MmaE4m3(acc, Lds32<K>(&sm.w[ra][32 * j + 4 * quad]), Lds32<K>(&sm.w[rb][32 * j + 4 * quad]),
                  Lds32<K>(&sm.w[ra][32 * j + 16 + 4 * quad]), Lds32<K>(&sm.w[rb][32 * j + 16 + 4 * quad]),
                  Lds32<K>(&sm.x[tb][32 * j + 4 * quad]), Lds32<K>(&sm.x[tb][32 * j + 16 + 4 * quad]));
          const float sa = sm.w_scale[ra][j], sb = sm.w_scale[rb][j];
          part[tt][0] = __fadd_rn(part[tt][0], __fmul_rn(acc[0], __fmul_rn(sa, xs0)));
          part[tt][1] = __fadd_rn(part[tt][1], __fmul_rn(acc[1], __fmul_rn(sa, xs1)));
          part[tt][2] = __fadd_rn(part[tt][2], __fmul_rn(acc[2], __fmul_rn(sb, xs0)));
          part[tt][3] = __fadd_rn(part[tt][3], __fmul_rn(acc[3], __fmul_rn(sb, xs1)));
        }
      }
    }
    // 3. At a slice's end: fold the partial into the total in slice order (Block's final sum).
    if ((c + 1) % kSliceChunks == 0 || c + 1 == num_chunks) {
      FoldSlice<kTiledTm>(total, part, c < kSliceChunks);
    }
    __syncthreads();  // the next chunk overwrites the staged codes
  }

  const int64_t ra = row0 + kRows * wr + group;
#pragma unroll
  for (int tt = 0; tt < kTiledTm; ++tt) {
    WriteFragment(p, g, ra, tok0 + kTiledTokPerWarp * wt + kTok * tt + 2 * quad, total[tt]);
  }
}

// Grid (ceil(n / kTiledRows), ceil(m / kTiledTok), groups).
template <Kind K>
__global__ void __launch_bounds__(kThreads) TiledLinearKernel(const Params p) {
  PdlPrologue();
  fp8::StagedBlock<K>(p, blockIdx.x, blockIdx.y, blockIdx.z);
}

}  // namespace fp8

}  // namespace mma
