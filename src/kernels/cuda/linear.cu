#include "kernels/cuda/linear.h"

#include "kernels/cuda/cuda_common.cuh"

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
  bool x_vec;                // x rows allow float4 loads
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

// e4m3fn code -> f32, exact and branch-free: the 7 magnitude bits placed under an f32 exponent of
// bias 127 read as the value · 2^-120 (subnormals included), so one exact multiply rebiases them.
__device__ __forceinline__ float E4m3Value(uint32_t b) {
  const float v = __fmul_rn(__uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)), 0x1p120f);
  return (b & 0x7fu) == 0x7fu ? __int_as_float(0x7fc00000) : v;
}

// e2m1 nibble -> f32 (bit 3 = sign), exact: the same trick with bias 1 (factor 2^126).
__device__ __forceinline__ float E2m1Value(uint32_t n) {
  return __fmul_rn(__uint_as_float(((n & 0x8u) << 28) | ((n & 0x7u) << 22)), 0x1p126f);
}

// The 8 weights of a chunk as f32: exact for kDense; code value · scale (one f32 rounding, the
// CPU's DequantizeRow) for kFp8 / kFp4.
template <Kind K>
__device__ __forceinline__ void Dequantize(const WChunk<K>& c, float (&w)[kChunk]) {
#pragma unroll
  for (int e = 0; e < kChunk; ++e) {
    if constexpr (K == Kind::kF32) {
      w[e] = __uint_as_float(c.word[e]);
    } else if constexpr (K == Kind::kBF16) {
      w[e] = __uint_as_float(((c.word[e / 2] >> (16 * (e % 2))) & 0xffffu) << 16);
    } else if constexpr (K == Kind::kF16) {
      w[e] = __half2float(__ushort_as_half(static_cast<unsigned short>(c.word[e / 2] >> (16 * (e % 2)))));
    } else if constexpr (K == Kind::kFp8) {
      w[e] = __fmul_rn(E4m3Value((c.word[e / 4] >> (8 * (e % 4))) & 0xffu), c.scale);
    } else {
      w[e] = __fmul_rn(E2m1Value((c.word[0] >> (4 * e)) & 0xfu), c.scale);
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

// Sums N per-lane partial vectors over the warp with the butterfly tree of linear.h (levels
// lane^16, ^8, ^4, ^2, ^1), as a reduce-scatter: while more than one value is left, a level sends
// half of them to the partner and adds the received half to the kept one (the pairs added are
// exactly the butterfly's, and a + b == b + a bit for bit); once one value is left, the remaining
// levels are a plain butterfly. Afterwards v[0, max(N/32, 1)) hold finished sums; ReducedIndex
// names which. N is a power of two.
template <int N, int D = 16>
__device__ __forceinline__ void WarpReduceScatter(float* v, int lane) {
  if constexpr (D >= 1) {
    if constexpr (N > 1) {
      constexpr int kHalf = N / 2;
      const bool upper = (lane & D) != 0;
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const float send = upper ? v[i] : v[i + kHalf];
        const float keep = upper ? v[i + kHalf] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, D);
      }
      WarpReduceScatter<kHalf, D / 2>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], D);
      WarpReduceScatter<1, D / 2>(v, lane);
    }
  }
}

// The input index of v[i] after WarpReduceScatter<N> on `lane`.
template <int N>
__device__ __forceinline__ int ReducedIndex(int lane, int i) {
  int idx = i;
  int n = N;
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) {
    if (n > 1) {
      n /= 2;
      if (lane & d) idx += n;
    }
  }
  return idx;
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

// ---- GEMV: M <= MT rows ------------------------------------------------------------------------
// Grid (ceil(n / (kGemvWarps·RPW)), groups). Warp w of block b owns outputs
// [(b·kGemvWarps + w)·RPW, +RPW) of group blockIdx.y; per slab each lane loads its chunk of the
// RPW weight rows (the next slab's chunk is prefetched), dequantizes it, and folds it into the
// partials of all m rows (x chunks come through L1).
template <Kind K, int MT, int RPW>
__global__ void __launch_bounds__(kGemvWarps* kWarpSize) LinearGemvKernel(const Params p) {
  constexpr int kAcc = MT * RPW;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t g = blockIdx.y;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * RPW;  // within the group
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
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      if (mi < p.m) {
        float xv[kChunk];
        LoadXChunk(p, x + mi * p.ldx, c, xv);
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) acc[mi * RPW + r] = fmaf(xv[e], wv[r][e], acc[mi * RPW + r]);
        }
      }
    }
  }

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

// ---- Tiled GEMM: any M ----------------------------------------------------------------------
// Grid (ceil(n / kTileN), ceil(m / kTileM), groups). Per slab the block stages the x tile and the
// dequantized weight tile in shared memory, laid out so that columns 2h, 2h+1 of lane l's chunk
// are float2 [h·32 + l] of the row (h = 0..3): conflict-free 8-byte reads and writes.
template <Kind K>
__global__ void __launch_bounds__(kTiledThreads, 2) LinearTiledKernel(const Params p) {
  constexpr int kPairs = kChunk / 2;
  __shared__ float2 xs[kTileM][kPairs * kWarpSize];  // 32 KiB
  __shared__ float2 ws[kTileN][kPairs * kWarpSize];  // 16 KiB
  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int wm = warp / kTiledWarpsN;
  const int wn = warp % kTiledWarpsN;
  const int64_t g = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
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

// ---- host side ---------------------------------------------------------------------------------

[[noreturn]] void Fail(const char* what) { ThrowCudaError(__FILE__, __LINE__, "cuda::Linear", what); }

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

bool Aligned(const void* ptr, int64_t bytes, int64_t a) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(a) == 0 && bytes % a == 0;
}

// Validates `w` and fills the weight part of `p`.
Kind SetWeight(const DeviceWeight& w, Params& p) {
  const Kind kind = KindOf(w);
  const int64_t in = w.in_features, out = w.out_features;
  if (in < 0 || out < 0) Fail("negative weight shape");
  if (w.data == nullptr && in > 0 && out > 0) Fail("weight data is null");
  int64_t row_bytes = 0, vec_align = 4;
  switch (kind) {
    case Kind::kF32: row_bytes = w.data_row_stride * 4, vec_align = 16; break;
    case Kind::kBF16:
    case Kind::kF16: row_bytes = w.data_row_stride * 2, vec_align = 16; break;
    case Kind::kFp8: row_bytes = w.data_row_stride, vec_align = 8; break;
    case Kind::kFp4: row_bytes = w.data_row_stride, vec_align = 4; break;
  }
  if (kind == Kind::kFp4) {
    if (in % kFp4Block != 0) Fail("FP4 weight in_features must be a multiple of 32");
    if (w.data_row_stride < in / 2) Fail("FP4 weight row stride below in_features / 2 bytes");
  } else if (w.data_row_stride < in) {
    Fail("weight row stride below in_features");
  }
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_row_bytes = row_bytes;
  p.w_vec = Aligned(w.data, row_bytes, vec_align);
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

template <Kind K, int MT>
void LaunchGemv(const Params& p, int64_t groups, cudaStream_t stream) {
  constexpr int kRpw = MT <= 2 ? 2 : 4;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kGemvWarps * kRpw)), static_cast<unsigned>(groups));
  LinearGemvKernel<K, MT, kRpw><<<grid, kGemvWarps * kWarpSize, 0, stream>>>(p);
  DI_CUDA_LAUNCH_CHECK("cuda::Linear gemv");
}

template <Kind K>
void LaunchKind(const Params& p, int64_t groups, cudaStream_t stream) {
  static_assert(kGemvMaxRows == 16, "the GEMV instantiations cover M <= 16");
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

void Launch(const Params& p, Kind kind, int64_t groups, cudaStream_t stream) {
  if (groups > 65535) Fail("too many groups");
  if (CeilDiv(p.n, kTileN) > 0x7fffffff) Fail("too many outputs");
  switch (kind) {
    case Kind::kF32: return LaunchKind<Kind::kF32>(p, groups, stream);
    case Kind::kBF16: return LaunchKind<Kind::kBF16>(p, groups, stream);
    case Kind::kF16: return LaunchKind<Kind::kF16>(p, groups, stream);
    case Kind::kFp8: return LaunchKind<Kind::kFp8>(p, groups, stream);
    case Kind::kFp4: return LaunchKind<Kind::kFp4>(p, groups, stream);
  }
}

}  // namespace

void Linear(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
            cudaStream_t stream) {
  Params p{};
  const Kind kind = SetWeight(w, p);
  if (m < 0) Fail("negative row count");
  if (m == 0 || w.out_features == 0) return;
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
  Launch(p, kind, 1, stream);
}

void GroupedLinear(const float* x, int64_t m, int64_t num_groups, const DeviceWeight& w, float* y,
                   cudaStream_t stream) {
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
  Launch(p, kind, num_groups, stream);
}

}  // namespace deepinfer::cuda
