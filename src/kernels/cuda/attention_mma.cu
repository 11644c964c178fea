// cuda::AttentionWithSinkSplitBf16: the sparse attention of attention.cu on BF16 tensor cores
// (mma.sync m16n8k16, f32 accumulation), for rows whose every value is exact in BF16 (the
// reference's state rows: e4m3 codes times power-of-two scales on the nope channels, BF16 on the
// rope channels; Numerics::kv_fp8).
//
// Every head of a query reads the same rows (one KV head, K = V), so per query and block of
// kGroups·16 heads the scores are S = Q·R^T (M = heads, N = rows, K = d) and the output
// O = P·R (M = heads, N = d, K = rows). Q and P are f32 and enter as their three BF16 parts
// (bf16_split.cuh), R as BF16, so every product is exact and only the f32 sums round differently
// from the SIMT kernel and the CPU.
//
// Work split. As in attention.cu, a cluster of kSplit blocks per (query, head block) (2 by default;
// 1, 4 or 8 on request: AttentionSplitBf16Blocks); block `rank` takes the rank-th run of
// ceil(tiles / kSplit) tiles of kTileRows rows (a function of the query's row count and kSplit
// alone: batch invariant), runs an online softmax over them, and the cluster merges the
// runs' states in rank order through distributed shared memory. Inside a block, warp w takes head
// group g = w % kGroups (16 heads, the MMA's M) and half = w / kGroups: for S the tile's rows
// [32·half, 32·half + 32), for O the columns [half·d/2, (half + 1)·d/2). The two warps of a group
// exchange their row maxima and probabilities through shared memory (a named barrier per group).
//
// Order of every sum (fixed by d and the query's row count; the same for every batch and grid):
//   score(h, t) = scale · (Σ over k-steps of 16 columns, ascending, of the MMAs of Q's hi, mid,
//   lo parts in that order); per tile, the running maximum and the rescale α = e^{max_old −
//   max_new} (1 when equal) as in attention.cu; the probabilities p = e^{s − max}; each warp's
//   running sum of its half's p (sum = sum·α + Σ its p, in lane-quad order), the two halves added
//   (half 0 + half 1) at the end of the run; O = O·α + Σ over 16-row steps of P's hi, mid, lo MMAs.
//   The runs merge as in attention.cu: M = max_r max_r, f_r = e^{max_r − M} (1 when equal),
//   S = Σ_r f_r·sum_r + e^{sink − M}, out = Σ_r f_r·O_r / S (ranks in order, fmaf from +0).
//
// bf16_inputs (kBf16): q is rounded to BF16 once per block into shared memory and each p to BF16
// as the softmax stores it (the running sums take p unrounded); both then enter the MMAs as their
// one part (the order above with the mid and lo MMAs left out: they would add zeros).
#include <cooperative_groups.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/bf16_split.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kTileRows = 64;            // rows per tile
constexpr int kGroupHeads = 16;          // heads per warp: the MMA's M
constexpr int kQPad = 8;                 // floats after each q row in shared memory
constexpr int kRPad = 8;                 // BF16 values after each tile row
constexpr int kPStride = kTileRows + 8;  // floats (or BF16 values) per head of the probabilities

// kBf16: q and the probabilities rounded to BF16 (bf16_inputs), held as BF16 in shared memory and
// fed to the MMAs by ldmatrix; otherwise f32, split into three parts per fragment.
template <int kGroups, int kD, int kSplit, bool kBf16>
struct Shape {
  static_assert(kD % 64 == 0, "d: whole n8 tiles per half (16-column pairs), 16-column k-steps");
  static_assert(kD % (4 * kSplit) == 0, "d: a float4-wide output slice per block of the cluster");
  static constexpr int kHeads = kGroups * kGroupHeads;  // per block
  static constexpr int kWarps = 2 * kGroups;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kQStride = kD + kQPad;   // floats: rows 8 banks apart (float2 A loads)
  static constexpr int kRStride = kD + kRPad;   // BF16: rows 16 bytes apart mod 128 (ldmatrix)
  static constexpr int kHalf = kD / 2;          // output columns per warp
  static constexpr int kHalfTiles = kHalf / 8;  // n8 tiles per warp in P·R
  static constexpr int kStatFloats = kHeads * (2 + 2 + 1 + 1 + kSplit + 1);
  static constexpr size_t kValueBytes = kBf16 ? 2 : 4;  // of q and of the probabilities
  static constexpr size_t kQBytes = kValueBytes * kHeads * (kBf16 ? kRStride : kQStride);
  static constexpr size_t kRBytes = size_t{2} * kTileRows * kRStride;
  static constexpr size_t kPBytes = kValueBytes * kHeads * kPStride;
  static constexpr size_t kSmemBytes = kQBytes + kRBytes + kPBytes + size_t{4} * kStatFloats;
  // The merge's f32 O [kHeads][kQStride] overwrites q and, if BF16 q is smaller, the row tile.
  static_assert(size_t{4} * kHeads * kQStride <= kQBytes + kRBytes, "O fits the memory of q and the row tile");
  static_assert(kQBytes % 16 == 0 && kRBytes % 16 == 0 && kPBytes % 16 == 0, "16-byte aligned regions");
};

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The two warps of head group g (64 threads) meet at barrier 1 + g (0 is __syncthreads').
__device__ __forceinline__ void GroupBarrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "r"(2 * kWarpSize) : "memory");
}

// The A fragment of rows (gq, gq + 8) and columns (2tq, 2tq + 1, 2tq + 8, 2tq + 9) of a 16×16
// f32 tile at `top` (the row of gq, column 2tq) and `bottom` (row gq + 8), as three BF16 parts.
__device__ __forceinline__ void SplitFragment(const float* top, const float* bottom, uint32_t (&hi)[4],
                                              uint32_t (&mid)[4], uint32_t (&lo)[4]) {
  const float2 x00 = *reinterpret_cast<const float2*>(top);
  const float2 x10 = *reinterpret_cast<const float2*>(bottom);
  const float2 x01 = *reinterpret_cast<const float2*>(top + 8);
  const float2 x11 = *reinterpret_cast<const float2*>(bottom + 8);
  SplitPair(x00.x, x00.y, hi[0], mid[0], lo[0]);
  SplitPair(x10.x, x10.y, hi[1], mid[1], lo[1]);
  SplitPair(x01.x, x01.y, hi[2], mid[2], lo[2]);
  SplitPair(x11.x, x11.y, hi[3], mid[3], lo[3]);
}

// acc += A·B for the three parts of A, hi first.
__device__ __forceinline__ void MmaParts(float (&acc)[4], const uint32_t (&hi)[4], const uint32_t (&mid)[4],
                                         const uint32_t (&lo)[4], uint32_t b0, uint32_t b1) {
  MmaBf16(acc, hi[0], hi[1], hi[2], hi[3], b0, b1);
  MmaBf16(acc, mid[0], mid[1], mid[2], mid[3], b0, b1);
  MmaBf16(acc, lo[0], lo[1], lo[2], lo[3], b0, b1);
}

// d0 += A·B over b[0..1] and d1 += A·B over b[2..3] (one ldmatrix's two n8 tiles): A's three parts
// (MmaParts), or with kOnePart its one BF16 part in `hi` (mid and lo are not read).
template <bool kOnePart>
__device__ __forceinline__ void MmaTwoTiles(float (&d0)[4], float (&d1)[4], const uint32_t (&hi)[4],
                                            const uint32_t (&mid)[4], const uint32_t (&lo)[4], const uint32_t (&b)[4]) {
  if constexpr (kOnePart) {
    MmaBf16(d0, hi[0], hi[1], hi[2], hi[3], b[0], b[1]);
    MmaBf16(d1, hi[0], hi[1], hi[2], hi[3], b[2], b[3]);
  } else {
    MmaParts(d0, hi, mid, lo, b[0], b[1]);
    MmaParts(d1, hi, mid, lo, b[2], b[3]);
  }
}

// s[j] += part·B_j for the four n8 tiles of a warp's 32 score rows: tiles 0 and 1 from the first
// ldmatrix (b0: rows 0-7 in b0[0..1], rows 8-15 in b0[2..3]), tiles 2 and 3 from the second.
__device__ __forceinline__ void ScoreStep(float (&s)[4][4], const uint32_t (&part)[4], const uint32_t (&b0)[4],
                                          const uint32_t (&b1)[4]) {
  MmaBf16(s[0], part[0], part[1], part[2], part[3], b0[0], b0[1]);
  MmaBf16(s[1], part[0], part[1], part[2], part[3], b0[2], b0[3]);
  MmaBf16(s[2], part[0], part[1], part[2], part[3], b1[0], b1[1]);
  MmaBf16(s[3], part[0], part[1], part[2], part[3], b1[2], b1[3]);
}

// A tile's row ids, two a lane (rows lane and lane + 32 of the 64), handed to the whole warp by
// shuffles: Of(r) is row r's id (0 past tile_n). Every lane of the warp must call Of together.
struct TileRowIds {
  int32_t low, high;
  __device__ __forceinline__ TileRowIds(const int32_t* ids, int tile_n, int lane)
      : low(lane < tile_n ? ids[lane] : 0), high(lane + kWarpSize < tile_n ? ids[lane + kWarpSize] : 0) {}
  __device__ __forceinline__ int32_t Of(int r) const {
    return __shfl_sync(0xffffffffu, r < kWarpSize ? low : high, r % kWarpSize);
  }
};

// The tile's rows ids[0 .. tile_n) into rs as BF16 (round to nearest: exact for BF16-exact rows),
// zero rows up to the next multiple of 16 (the P·R k-steps read them against p = 0). Each warp
// takes kBatch rows at a time with all their loads in flight before the conversions.
template <int kGroups, int kD, int kSplit, bool kBf16>
__device__ __forceinline__ void LoadTile(const AttentionArgs& a, const int32_t* ids, int tile_n, __nv_bfloat16* rs,
                                         int warp, int lane) {
  using S = Shape<kGroups, kD, kSplit, kBf16>;
  constexpr int kF4 = kD / 4;                     // float4 per row
  constexpr int kPerLane = (kF4 + kWarpSize - 1) / kWarpSize;
  constexpr int kBatch = kPerLane >= 8 ? 1 : 8 / kPerLane;
  const TileRowIds row_ids(ids, tile_n, lane);
  const int padded = min(kTileRows, (tile_n + 15) / 16 * 16);
  for (int r0 = warp * kBatch; r0 < padded; r0 += S::kWarps * kBatch) {
    float4 v[kBatch][kPerLane];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = r0 + b;
      const int32_t id = row_ids.Of(r);
      const float4* src = reinterpret_cast<const float4*>(a.rows + static_cast<int64_t>(id) * a.row_stride);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c4 = lane + kWarpSize * i;
        v[b][i] = r < tile_n && c4 < kF4 ? __ldg(src + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = r0 + b;
      if (r >= padded) break;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c4 = lane + kWarpSize * i;
        if (c4 < kF4) {
          const __nv_bfloat162 lo = __floats2bfloat162_rn(v[b][i].x, v[b][i].y);
          const __nv_bfloat162 hi = __floats2bfloat162_rn(v[b][i].z, v[b][i].w);
          uint2 packed;
          packed.x = *reinterpret_cast<const uint32_t*>(&lo);
          packed.y = *reinterpret_cast<const uint32_t*>(&hi);
          *reinterpret_cast<uint2*>(rs + r * S::kRStride + 4 * c4) = packed;
        }
      }
    }
  }
}

// LoadTile for packed rows (state_row.cuh; a.packed.fp8_end >= 0): lane l takes the 16 channels of
// group g = l + 32·i (g < kD / 16). A group of e4m3 channels is one 16-byte load of codes and its
// block's scale byte, a group of BF16 channels two 16-byte loads (the BF16 values as they are); the
// loads of kBatch rows are all issued, without branches, before any conversion. The values are
// DecodePacked4's, so the BF16 tile equals LoadTile's of the f32 rows they encode.
template <int kGroups, int kD, int kSplit, bool kBf16>
__device__ __forceinline__ void LoadTilePacked(const AttentionArgs& a, const int32_t* ids, int tile_n,
                                               __nv_bfloat16* rs, int warp, int lane) {
  using S = Shape<kGroups, kD, kSplit, kBf16>;
  constexpr int kG = kD / 16;  // 16-channel groups a row
  constexpr int kPerLane = (kG + kWarpSize - 1) / kWarpSize;
  constexpr int kBatch = 4;
  const PackedRowArgs p = a.packed;
  const TileRowIds row_ids(ids, tile_n, lane);
  const int padded = min(kTileRows, (tile_n + 15) / 16 * 16);
  for (int r0 = warp * kBatch; r0 < padded; r0 += S::kWarps * kBatch) {
    uint4 first[kBatch][kPerLane], second[kBatch][kPerLane];
    uint32_t scale_byte[kBatch][kPerLane];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = r0 + b;
      const int32_t id = row_ids.Of(r);
      const uint8_t* row = reinterpret_cast<const uint8_t*>(a.rows + static_cast<int64_t>(id) * a.row_stride);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = 16 * (lane + kWarpSize * i);
        const bool load = r < tile_n && c < kD;
        const bool codes = c < p.fp8_end;
        // Codes at byte c; BF16 channels c … c + 15 at fp8_end + 2·(c − fp8_end).
        const uint4* src = reinterpret_cast<const uint4*>(row + (codes ? c : 2 * c - p.fp8_end));
        first[b][i] = load ? __ldg(src) : make_uint4(0u, 0u, 0u, 0u);
        second[b][i] = load && !codes ? __ldg(src + 1) : make_uint4(0u, 0u, 0u, 0u);
        scale_byte[b][i] = load && codes ? __ldg(row + p.scale_offset + c / p.block) : 0u;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = r0 + b;
      if (r >= padded) break;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = 16 * (lane + kWarpSize * i);
        if (c >= kD) continue;
        uint4 lo = first[b][i], hi = second[b][i];
        if (c < p.fp8_end) {
          const float scale = __uint_as_float(scale_byte[b][i] << 23);
          const uint32_t words[4] = {first[b][i].x, first[b][i].y, first[b][i].z, first[b][i].w};
          uint32_t out[8];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float4 f = DecodeE4m3x4(words[k], scale);
            const __nv_bfloat162 v01 = __floats2bfloat162_rn(f.x, f.y), v23 = __floats2bfloat162_rn(f.z, f.w);
            out[2 * k] = *reinterpret_cast<const uint32_t*>(&v01);
            out[2 * k + 1] = *reinterpret_cast<const uint32_t*>(&v23);
          }
          lo = make_uint4(out[0], out[1], out[2], out[3]);
          hi = make_uint4(out[4], out[5], out[6], out[7]);
        }
        uint4* dst = reinterpret_cast<uint4*>(rs + r * S::kRStride + c);
        dst[0] = lo;
        dst[1] = hi;
      }
    }
  }
}

// Blocks of one or two head groups may share an SM (where their shared memory fits: BF16 q and p).
template <int kGroups, int kD, int kSplit, bool kBf16>
__global__ void __cluster_dims__(kSplit, 1, 1)
    __launch_bounds__(Shape<kGroups, kD, kSplit, kBf16>::kThreads, kGroups <= 2 ? 2 : 1)
        AttentionSplitBf16Kernel(AttentionArgs a) {
  PdlPrologue(PdlTriggerFirst{});
  namespace cg = cooperative_groups;
  using S = Shape<kGroups, kD, kSplit, kBf16>;
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  float* qs = reinterpret_cast<float*>(smem);  // [kHeads][kQStride] f32, or kBf16: [kHeads][kRStride] BF16
  __nv_bfloat16* qs_bf16 = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* rs = reinterpret_cast<__nv_bfloat16*>(smem + S::kQBytes);     // [kTileRows][kRStride]
  float* ps = reinterpret_cast<float*>(smem + S::kQBytes + S::kRBytes);  // [kHeads][kPStride] f32, or kBf16: BF16
  __nv_bfloat16* ps_bf16 = reinterpret_cast<__nv_bfloat16*>(ps);
  float* red_max = reinterpret_cast<float*>(smem + S::kQBytes + S::kRBytes + S::kPBytes);  // [2][kHeads]
  float* red_sum = red_max + 2 * S::kHeads;                                    // [2][kHeads]
  float* max_s = red_sum + 2 * S::kHeads;                                      // [kHeads]
  float* sum_s = max_s + S::kHeads;                                            // [kHeads]
  float* factor_s = sum_s + S::kHeads;                                         // [kHeads][kSplit]
  float* total_s = factor_s + S::kHeads * kSplit;                              // [kHeads]

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t m = blockIdx.x / kSplit;
  const int head0 = blockIdx.y * S::kHeads;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int group = warp % kGroups, half = warp / kGroups;
  const int gq = lane / 4, tq = lane % 4;
  float* out_m = a.out + m * a.out_stride;
  const int n = static_cast<int>(min(max(static_cast<int64_t>(a.counts[m]), int64_t{0}), a.max_rows));
  if (n == 0) {  // uniform over the cluster: no block reaches a cluster barrier
    if (rank == 0) {
      for (int e = tid; e < S::kHeads * kD; e += S::kThreads) {
        if (head0 + e / kD < a.num_heads) out_m[static_cast<int64_t>(head0) * kD + e] = 0.f;
      }
    }
    return;
  }
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int tiles_per_rank = (tiles + kSplit - 1) / kSplit;
  const int used_ranks = (tiles + tiles_per_rank - 1) / tiles_per_rank;  // ranks past it have no rows
  const int row_begin = min(n, rank * tiles_per_rank * kTileRows);
  const int row_end = min(n, row_begin + tiles_per_rank * kTileRows);

  if (row_begin < row_end) {  // uniform over the block; the first tile's wait completes the copies
    const float* q_m = a.q + m * a.q_stride + static_cast<int64_t>(head0) * kD;
    constexpr int kD4 = kD / 4;
    if constexpr (kBf16) {  // rounded to nearest once per block; the first tile's barrier covers it
      // kD / 16 float4 a thread (kHeads·kD4 = kThreads·kD/16), loaded kBatch at a time before
      // their conversions so that their latencies overlap.
      constexpr int kPerThread = kD / 16;
      constexpr int kBatch = kPerThread < 8 ? kPerThread : 8;
      static_assert(kPerThread % kBatch == 0, "whole batches of q's float4");
      for (int b0 = 0; b0 < kPerThread; b0 += kBatch) {
        float4 v[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int e4 = tid + (b0 + b) * S::kThreads, h = e4 / kD4, c4 = e4 % kD4;
          v[b] = head0 + h < a.num_heads ? __ldg(reinterpret_cast<const float4*>(q_m + h * kD) + c4)
                                         : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int e4 = tid + (b0 + b) * S::kThreads, h = e4 / kD4, c4 = e4 % kD4;
          const __nv_bfloat162 lo = __floats2bfloat162_rn(v[b].x, v[b].y), hi = __floats2bfloat162_rn(v[b].z, v[b].w);
          uint2 packed;
          packed.x = *reinterpret_cast<const uint32_t*>(&lo);
          packed.y = *reinterpret_cast<const uint32_t*>(&hi);
          *reinterpret_cast<uint2*>(qs_bf16 + h * S::kRStride + 4 * c4) = packed;
        }
      }
    } else {
      for (int e4 = tid; e4 < S::kHeads * kD4; e4 += S::kThreads) {
        const int h = e4 / kD4, c4 = e4 % kD4;
        float* dst = qs + h * S::kQStride + 4 * c4;
        if (head0 + h < a.num_heads) {
          CpAsync16(dst, q_m + static_cast<int64_t>(h) * kD + 4 * c4);
        } else {
          *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    }
  }

  // This thread's two heads (MMA rows gq and gq + 8 of its group) and their softmax state: the
  // maximum (the same in both warps of the group) and this warp's half of the sum.
  const int h_lo = kGroupHeads * group + gq, h_hi = h_lo + 8;
  float max_lo = head0 + h_lo < a.num_heads ? a.sinks[head0 + h_lo] : 0.f;
  float max_hi = head0 + h_hi < a.num_heads ? a.sinks[head0 + h_hi] : 0.f;
  float sum_lo = 0.f, sum_hi = 0.f;
  float o[S::kHalfTiles][4];
#pragma unroll
  for (int j = 0; j < S::kHalfTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  const int32_t* ids = a.row_ids + m * a.max_rows;
  const int r_half = 32 * half;  // this warp's first tile row for S
  const float* q_top = qs + h_lo * S::kQStride + 2 * tq;
  const float* q_bottom = q_top + 8 * S::kQStride;
  const float* p_top = ps + h_lo * kPStride + 2 * tq;
  const float* p_bottom = p_top + 8 * kPStride;
  // ldmatrix row addresses: for S (no transpose) lane l reads tile row r_half + 16p + (l % 8) +
  // 8·(l / 16) at column k + 8·((l / 8) % 2); for P·R (transposed) tile row 16ks + (l % 8) +
  // 8·((l / 8) % 2) at column c + 8·(l / 16).
  const uint32_t rs_s = SmemAddress(rs + (r_half + lane % 8 + 8 * (lane / 16)) * S::kRStride + 8 * ((lane / 8) % 2));
  const uint32_t rs_o =
      SmemAddress(rs + (lane % 8 + 8 * ((lane / 8) % 2)) * S::kRStride + half * S::kHalf + 8 * (lane / 16));
  // kBf16: the A fragments (the group's 16 heads × 16 columns) by ldmatrix: lane l reads head
  // 16·group + (l % 8) + 8·((l / 8) % 2) at column k + 8·(l / 16) (q) or tile row 16ks + 8·(l / 16) (p).
  const int a_row = kGroupHeads * group + lane % 8 + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
  const uint32_t qa = SmemAddress(qs_bf16 + a_row * S::kRStride + a_col);
  const uint32_t pa = SmemAddress(ps_bf16 + a_row * kPStride + a_col);

  for (int t0 = row_begin; t0 < row_end; t0 += kTileRows) {
    const int tile_n = min(kTileRows, row_end - t0);
    if (a.packed.fp8_end >= 0) {
      LoadTilePacked<kGroups, kD, kSplit, kBf16>(a, ids + t0, tile_n, rs, warp, lane);
    } else {
      LoadTile<kGroups, kD, kSplit, kBf16>(a, ids + t0, tile_n, rs, warp, lane);
    }
    CpAsyncWaitAll();
    __syncthreads();

    // 1. Scores of the group's 16 heads against this warp's 32 tile rows (4 n8 tiles; a pair of
    // them per ldmatrix), skipping pairs wholly past tile_n.
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    const int pairs = min(2, max(0, (tile_n - r_half + 15) / 16));
    if (pairs == 2) {
      // Both pairs hold rows (half 0 from 17 tile rows on, half 1 from 49): the four accumulators
      // take each part in turn, so four MMA chains are in flight instead of two; each accumulator
      // still takes hi, mid, lo in that order, as in the loop below: the same bits.
      for (int k = 0; k < kD; k += 16) {
        uint32_t b0[4], b1[4];
        LdMatrixX4(b0, rs_s + static_cast<uint32_t>(k * 2));
        LdMatrixX4(b1, rs_s + static_cast<uint32_t>((16 * S::kRStride + k) * 2));
        if constexpr (kBf16) {
          uint32_t q16[4];
          LdMatrixX4(q16, qa + static_cast<uint32_t>(k * 2));
          ScoreStep(s, q16, b0, b1);
        } else {
          uint32_t hi[4], mid[4], lo[4];
          SplitFragment(q_top + k, q_bottom + k, hi, mid, lo);
          ScoreStep(s, hi, b0, b1);
          ScoreStep(s, mid, b0, b1);
          ScoreStep(s, lo, b0, b1);
        }
      }
    } else {
      for (int k = 0; k < kD; k += 16) {
        uint32_t hi[4], mid[4], lo[4];
        if constexpr (kBf16) {
          LdMatrixX4(hi, qa + static_cast<uint32_t>(k * 2));
        } else {
          SplitFragment(q_top + k, q_bottom + k, hi, mid, lo);
        }
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          if (p < pairs) {
            uint32_t b[4];
            LdMatrixX4(b, rs_s + static_cast<uint32_t>((16 * p * S::kRStride + k) * 2));
            MmaTwoTiles<kBf16>(s[2 * p], s[2 * p + 1], hi, mid, lo, b);
          }
        }
      }
    }

    // 2. Online softmax. C fragment: s[j][0..1] are head h_lo at tile rows r_half + 8j + 2tq + {0,1},
    // s[j][2..3] head h_hi at the same rows.
    float tile_lo = -INFINITY, tile_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = r_half + 8 * j + 2 * tq + e < tile_n;
        s[j][e] = valid ? a.scale * s[j][e] : -INFINITY;
        s[j][2 + e] = valid ? a.scale * s[j][2 + e] : -INFINITY;
        tile_lo = fmaxf(tile_lo, s[j][e]);
        tile_hi = fmaxf(tile_hi, s[j][2 + e]);
      }
    }
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      tile_lo = fmaxf(tile_lo, __shfl_xor_sync(0xffffffffu, tile_lo, x));
      tile_hi = fmaxf(tile_hi, __shfl_xor_sync(0xffffffffu, tile_hi, x));
    }
    if (tq == 0) {
      red_max[half * S::kHeads + h_lo] = tile_lo;
      red_max[half * S::kHeads + h_hi] = tile_hi;
    }
    GroupBarrier(group);
    const float new_lo = fmaxf(max_lo, fmaxf(red_max[h_lo], red_max[S::kHeads + h_lo]));
    const float new_hi = fmaxf(max_hi, fmaxf(red_max[h_hi], red_max[S::kHeads + h_hi]));
    const float alpha_lo = new_lo == max_lo ? 1.f : expf(max_lo - new_lo);
    const float alpha_hi = new_hi == max_hi ? 1.f : expf(max_hi - new_hi);
    max_lo = new_lo;
    max_hi = new_hi;
    float part_lo = 0.f, part_hi = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float p0 = expf(s[j][0] - new_lo), p1 = expf(s[j][1] - new_lo);
      const float p2 = expf(s[j][2] - new_hi), p3 = expf(s[j][3] - new_hi);
      part_lo = part_lo + p0 + p1;
      part_hi = part_hi + p2 + p3;
      const int c = r_half + 8 * j + 2 * tq;
      if constexpr (kBf16) {  // rounded to nearest; the sums above take them unrounded
        *reinterpret_cast<__nv_bfloat162*>(ps_bf16 + h_lo * kPStride + c) = __floats2bfloat162_rn(p0, p1);
        *reinterpret_cast<__nv_bfloat162*>(ps_bf16 + h_hi * kPStride + c) = __floats2bfloat162_rn(p2, p3);
      } else {
        *reinterpret_cast<float2*>(ps + h_lo * kPStride + c) = make_float2(p0, p1);
        *reinterpret_cast<float2*>(ps + h_hi * kPStride + c) = make_float2(p2, p3);
      }
    }
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      part_lo += __shfl_xor_sync(0xffffffffu, part_lo, x);
      part_hi += __shfl_xor_sync(0xffffffffu, part_hi, x);
    }
    sum_lo = sum_lo * alpha_lo + part_lo;
    sum_hi = sum_hi * alpha_hi + part_hi;
    GroupBarrier(group);  // the group's probabilities for all 64 tile rows are in ps

    // 3. O = O·α + P·R over this warp's d/2 columns, 16 tile rows per step up to tile_n.
#pragma unroll
    for (int j = 0; j < S::kHalfTiles; ++j) {
      o[j][0] *= alpha_lo;
      o[j][1] *= alpha_lo;
      o[j][2] *= alpha_hi;
      o[j][3] *= alpha_hi;
    }
    const int steps = (tile_n + 15) / 16;
    for (int ks = 0; ks < steps; ++ks) {
      uint32_t hi[4], mid[4], lo[4];
      if constexpr (kBf16) {
        LdMatrixX4(hi, pa + static_cast<uint32_t>(16 * ks * 2));
      } else {
        SplitFragment(p_top + 16 * ks, p_bottom + 16 * ks, hi, mid, lo);
      }
#pragma unroll
      for (int p = 0; p < S::kHalfTiles / 2; ++p) {
        uint32_t b[4];
        LdMatrixX4Trans(b, rs_o + static_cast<uint32_t>((16 * ks * S::kRStride + 16 * p) * 2));
        MmaTwoTiles<kBf16>(o[2 * p], o[2 * p + 1], hi, mid, lo, b);
      }
    }
    __syncthreads();  // the next tile overwrites rs, ps and red_max
  }

  // This block's state for the merge: O into the q memory (free once every warp is past its last
  // S), the maxima and the sums (half 0 + half 1) per head. Blocks without rows (rank >=
  // used_ranks) write nothing: the merge skips them.
  float* acc_s = qs;  // [kHeads][kQStride]
  if (row_begin < row_end) {
    if (tq == 0) {
      red_sum[half * S::kHeads + h_lo] = sum_lo;
      red_sum[half * S::kHeads + h_hi] = sum_hi;
    }
#pragma unroll
    for (int j = 0; j < S::kHalfTiles; ++j) {
      const int c = half * S::kHalf + 8 * j + 2 * tq;
      *reinterpret_cast<float2*>(acc_s + h_lo * S::kQStride + c) = make_float2(o[j][0], o[j][1]);
      *reinterpret_cast<float2*>(acc_s + h_hi * S::kQStride + c) = make_float2(o[j][2], o[j][3]);
    }
    __syncthreads();
    if (half == 0 && tq == 0) {
      max_s[h_lo] = max_lo;
      max_s[h_hi] = max_hi;
      sum_s[h_lo] = red_sum[h_lo] + red_sum[S::kHeads + h_lo];
      sum_s[h_hi] = red_sum[h_hi] + red_sum[S::kHeads + h_hi];
    }
  }
  cluster.sync();

  // Merge factors per head, over the ranks with rows, in rank order.
  for (int h = tid; h < S::kHeads; h += S::kThreads) {
    if (head0 + h >= a.num_heads) continue;
    float mr[kSplit], sr[kSplit];
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kSplit; ++r) {
      if (r < used_ranks) {
        mr[r] = *cluster.map_shared_rank(max_s + h, r);
        sr[r] = *cluster.map_shared_rank(sum_s + h, r);
        mx = fmaxf(mx, mr[r]);
      }
    }
    float denom = 0.f;
#pragma unroll
    for (int r = 0; r < kSplit; ++r) {
      if (r < used_ranks) {
        const float f = mr[r] == mx ? 1.f : expf(mr[r] - mx);
        denom = fmaf(f, sr[r], denom);
        factor_s[h * kSplit + r] = f;
      }
    }
    total_s[h] = denom + expf(a.sinks[head0 + h] - mx);
  }
  __syncthreads();

  // out for this block's slice of d/kSplit columns of every head, float4 at a time.
  constexpr int kSlice = kD / kSplit;
  constexpr int kSlice4 = kSlice / 4;
  const int c0 = rank * kSlice;
  for (int e = tid; e < S::kHeads * kSlice4; e += S::kThreads) {
    const int h = e / kSlice4, c = c0 + 4 * (e % kSlice4);
    if (head0 + h >= a.num_heads) continue;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int r = 0; r < kSplit; ++r) {
      if (r < used_ranks) {
        const float f = factor_s[h * kSplit + r];
        const float4 part = *reinterpret_cast<const float4*>(cluster.map_shared_rank(acc_s + h * S::kQStride + c, r));
        v.x = fmaf(f, part.x, v.x);
        v.y = fmaf(f, part.y, v.y);
        v.z = fmaf(f, part.z, v.z);
        v.w = fmaf(f, part.w, v.w);
      }
    }
    const float total = total_s[h];
    float* dst = out_m + static_cast<int64_t>(head0 + h) * kD + c;
    dst[0] = v.x / total;
    dst[1] = v.y / total;
    dst[2] = v.z / total;
    dst[3] = v.w / total;
  }
  ClusterSyncBeforeExit();  // no block leaves (freeing its shared memory) while another still reads it
}

template <int kGroups, int kD, int kSplit, bool kBf16>
void LaunchSplit(const AttentionArgs& a, int64_t num_queries, cudaStream_t stream) {
  using S = Shape<kGroups, kD, kSplit, kBf16>;
  static_assert(S::kSmemBytes <= 227 * 1024, "the block's shared memory fits an sm_90 SM");
  const dim3 grid(static_cast<unsigned>(num_queries * kSplit), static_cast<unsigned>(CeilDiv(a.num_heads, S::kHeads)));
  auto* kernel = AttentionSplitBf16Kernel<kGroups, kD, kSplit, kBf16>;
  if (S::kSmemBytes > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(S::kSmemBytes)),
                  "AttentionWithSinkSplitBf16: shared memory opt-in");
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared),
                  "AttentionWithSinkSplitBf16: shared memory carveout");
  }
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(a);
  DI_CUDA_LAUNCH_CHECK("AttentionWithSinkSplitBf16");
}

template <int kD, int kSplit, bool kBf16>
void LaunchGroups(const AttentionArgs& a, int64_t num_queries, int heads_per_block, cudaStream_t stream) {
  if (a.num_heads <= kGroupHeads) {
    LaunchSplit<1, kD, kSplit, kBf16>(a, num_queries, stream);
  } else if (a.num_heads <= 2 * kGroupHeads || heads_per_block == 2 * kGroupHeads) {
    LaunchSplit<2, kD, kSplit, kBf16>(a, num_queries, stream);
  } else {
    LaunchSplit<4, kD, kSplit, kBf16>(a, num_queries, stream);
  }
}

template <int kD, int kSplit>
void LaunchInputs(const AttentionArgs& a, int64_t num_queries, int heads_per_block, cudaStream_t stream) {
  if (a.bf16_inputs) {
    LaunchGroups<kD, kSplit, true>(a, num_queries, heads_per_block, stream);
  } else {
    LaunchGroups<kD, kSplit, false>(a, num_queries, heads_per_block, stream);
  }
}

template <int kD>
void LaunchBlocks(const AttentionArgs& a, int64_t num_queries, int blocks, int heads_per_block, cudaStream_t stream) {
  switch (blocks) {
    case 1: return LaunchInputs<kD, 1>(a, num_queries, heads_per_block, stream);
    case 2: return LaunchInputs<kD, 2>(a, num_queries, heads_per_block, stream);
    case 4: return LaunchInputs<kD, 4>(a, num_queries, heads_per_block, stream);
    default: return LaunchInputs<kD, 8>(a, num_queries, heads_per_block, stream);
  }
}

}  // namespace

int AttentionSplitBf16Blocks() {
  static const int blocks = [] {
    const char* v = std::getenv("DEEPINFER_ATTENTION_SPLIT");
    if (v == nullptr || *v == '\0') return 2;
    const std::string s(v);
    if (s == "1" || s == "2" || s == "4" || s == "8") return std::stoi(s);
    const std::string message = "DEEPINFER_ATTENTION_SPLIT must be 1, 2, 4 or 8 (blocks per query), got '" + s + "'";
    ThrowCudaError(__FILE__, __LINE__, "cuda::AttentionWithSinkSplitBf16", message.c_str());
  }();
  return blocks;
}

int AttentionSplitBf16BlockHeads() {
  static const int heads = [] {
    const char* v = std::getenv("DEEPINFER_ATTENTION_HEADS");
    if (v == nullptr || *v == '\0') return 64;
    const std::string s(v);
    if (s == "32" || s == "64") return std::stoi(s);
    const std::string message = "DEEPINFER_ATTENTION_HEADS must be 32 or 64 (heads per block), got '" + s + "'";
    ThrowCudaError(__FILE__, __LINE__, "cuda::AttentionWithSinkSplitBf16", message.c_str());
  }();
  return heads;
}

bool AttentionSplitBf16Usable(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                              int64_t num_heads, int64_t head_dim, const cpu::PackedRowFormat* packed) {
  const bool shape = (head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512) && num_heads >= 1 &&
                     num_heads <= 65535;
  const bool rows_ok = packed == nullptr || (packed->dim == head_dim && PackedRowsDecodable(*packed) &&
                                             row_stride >= packed->row_floats());
  return shape && rows_ok && Aligned(q, q_stride * 4, 16) && Aligned(rows, row_stride * 4, 16);
}

void AttentionWithSinkSplitBf16(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                                const int32_t* row_ids, const int32_t* counts, int64_t max_rows, const float* sinks,
                                int64_t num_queries, int64_t num_heads, int64_t head_dim, float scale, float* out,
                                int64_t out_stride, cudaStream_t stream, int blocks_per_query, bool bf16_inputs,
                                int heads_per_block, const cpu::PackedRowFormat* packed) {
  const char* name = "cuda::AttentionWithSinkSplitBf16";
  const int blocks = blocks_per_query == 0 ? AttentionSplitBf16Blocks() : blocks_per_query;
  if (blocks != 1 && blocks != 2 && blocks != 4 && blocks != 8) {
    ThrowCudaError(__FILE__, __LINE__, name, "blocks_per_query must be 0 (the default), 1, 2, 4 or 8");
  }
  const int block_heads = heads_per_block == 0 ? AttentionSplitBf16BlockHeads() : heads_per_block;
  if (block_heads != 32 && block_heads != 64) {
    ThrowCudaError(__FILE__, __LINE__, name, "heads_per_block must be 0 (the default), 32 or 64");
  }
  if (num_queries < 0 || num_queries > INT_MAX / blocks) ThrowCudaError(__FILE__, __LINE__, name, "bad num_queries");
  if (max_rows < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative max_rows");
  const int64_t row_floats = packed != nullptr ? packed->row_floats() : head_dim;
  if (q_stride < num_heads * head_dim || out_stride < num_heads * head_dim || row_stride < row_floats) {
    ThrowCudaError(__FILE__, __LINE__, name, "a row stride is smaller than the row");
  }
  if (!AttentionSplitBf16Usable(q, q_stride, rows, row_stride, num_heads, head_dim, packed)) {
    ThrowCudaError(__FILE__, __LINE__, name,
                   "needs head_dim 64, 128, 256 or 512, 1 <= H <= 65535, q and rows 16-byte aligned with strides "
                   "of whole float4s, and packed rows (if any) of dim head_dim with fp8_end and block multiples of "
                   "16 (AttentionSplitBf16Usable)");
  }
  if (num_queries == 0) return;
  if (q == nullptr || out == nullptr || counts == nullptr || sinks == nullptr ||
      (max_rows > 0 && (rows == nullptr || row_ids == nullptr))) {
    ThrowCudaError(__FILE__, __LINE__, name, "null pointer");
  }
  AttentionArgs a{q,     q_stride, rows, row_stride, row_ids, counts, max_rows, sinks, static_cast<int>(num_heads),
                  static_cast<int>(head_dim), scale, out, out_stride, /*vec_rows=*/true, /*vec_q=*/true,
                  bf16_inputs};
  a.packed = ToPackedRowArgs(packed);
  switch (head_dim) {
    case 64: return LaunchBlocks<64>(a, num_queries, blocks, block_heads, stream);
    case 128: return LaunchBlocks<128>(a, num_queries, blocks, block_heads, stream);
    case 256: return LaunchBlocks<256>(a, num_queries, blocks, block_heads, stream);
    default: return LaunchBlocks<512>(a, num_queries, blocks, block_heads, stream);
  }
}

}  // namespace deepinfer::cuda
