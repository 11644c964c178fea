#include "kernels/cuda/attention.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <climits>

#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
// Rows per tile. Equal to the warp size: the softmax step gives one lane to each row of a tile.
constexpr int kTile = kWarpSize;
constexpr int kMaxHeadDim = 1024;
// Per-head softmax bookkeeping slots in shared memory (alpha, denominator); at least kMaxHeads
// and a multiple of 4 floats so that what follows stays 16-byte aligned.
constexpr int kMaxHeads = 8;

// x rounded to the nearest BF16 (ties to even), as f32.
__device__ __forceinline__ float RoundToBf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// Blocks per (query, head group): a thread-block cluster whose blocks take consecutive runs of
// the query's row tiles and merge their softmax states through distributed shared memory.
constexpr int kSplit = 8;
static_assert(kTile >= kMaxHeads, "the merge keeps kHeads rows of d in the row tile's memory");
static_assert(kTile == kWarpSize, "lane t of a warp holds the id of the tile's row t");

// Shared memory of a block, in floats: scores [kHeads][kTile], probabilities [kTile][kHeads],
// alpha [kMaxHeads], denominator [kMaxHeads], q [kHeads][d], the row tile [kTile][d].
template <int kHeads>
constexpr int64_t SmemFloats(int d) {
  return 2 * kHeads * kTile + 2 * kMaxHeads + static_cast<int64_t>(kHeads + kTile) * d;
}

// One cluster of kSplit blocks per (query m = blockIdx.x / kSplit, group of kHeads heads starting
// at blockIdx.y·kHeads). Block q of the cluster runs the online softmax over the q-th run of
// ceil(tiles / kSplit) row tiles of the query (tiles of kTile rows in the given order), starting
// from the state (max = sink, sum = 0, acc = 0); then, after a cluster barrier, block q merges the
// kSplit states for the q-th slice of the d columns, in rank order:
//   M = max_r max_r, f_r = e^{max_r − M} (1 when equal), S = Σ_r f_r·sum_r + e^{sink − M},
//   out = Σ_r f_r·acc_r / S (each Σ a chain of fmaf from +0, ranks in order).
// The split depends only on the query's own row count, so a query's result does not depend on
// the batch. Thread `tid` owns output columns tid + i·kThreads (i < kCols) of every head in the
// group; warp w < kHeads owns the softmax state of head w of the group. Heads past num_heads in
// the last group run on zeros and are not written.
template <int kHeads, int kCols>
__global__ void __cluster_dims__(kSplit, 1, 1) __launch_bounds__(kThreads) AttentionWithSinkKernel(AttentionArgs a) {
  PdlPrologue();
  namespace cg = cooperative_groups;
  static_assert(kHeads <= kWarps && kHeads <= kMaxHeads, "one warp per head of the group");
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* scores = smem;                        // [kHeads][kTile]
  float* probs = scores + kHeads * kTile;      // [kTile][kHeads]
  float* alpha_s = probs + kTile * kHeads;     // [kMaxHeads]
  float* denom_s = alpha_s + kMaxHeads;        // [kMaxHeads]
  float* qs = denom_s + kMaxHeads;             // [kHeads][d]
  float* rs = qs + kHeads * a.d;               // [kTile][d]

  const int d = a.d;
  const int64_t m = blockIdx.x / kSplit;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int head0 = blockIdx.y * kHeads;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  float* out_m = a.out + m * a.out_stride;
  const int n = static_cast<int>(min(max(static_cast<int64_t>(a.counts[m]), int64_t{0}), a.max_rows));
  if (n == 0) {  // uniform over the cluster: no block reaches a cluster barrier
    if (rank == 0) {
      for (int e = tid; e < kHeads * d; e += kThreads) {
        if (head0 + e / d < a.num_heads) out_m[static_cast<int64_t>(head0) * d + e] = 0.f;
      }
    }
    return;
  }
  const int tiles_per_rank = static_cast<int>(CeilDiv(CeilDiv(n, kTile), kSplit));
  const int row_begin = min(n, rank * tiles_per_rank * kTile);
  const int row_end = min(n, row_begin + tiles_per_rank * kTile);

  const float* q_m = a.q + m * a.q_stride;
  if (row_begin < row_end) {  // uniform over the block; an empty run reads no q
    if (a.bf16_inputs) {
      for (int e = tid; e < kHeads * d; e += kThreads) {
        qs[e] = head0 + e / d < a.num_heads ? RoundToBf16(q_m[static_cast<int64_t>(head0) * d + e]) : 0.f;
      }
    } else if (a.vec_q) {
      // Asynchronous: the first tile's wait completes these copies too.
      const int d4 = d / 4;
      for (int e4 = tid; e4 < kHeads * d4; e4 += kThreads) {
        if (head0 + e4 / d4 < a.num_heads) {
          CpAsync16(qs + 4 * e4, q_m + static_cast<int64_t>(head0) * d + 4 * e4);
        } else {
          reinterpret_cast<float4*>(qs)[e4] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    } else {
      for (int e = tid; e < kHeads * d; e += kThreads) {
        qs[e] = head0 + e / d < a.num_heads ? q_m[static_cast<int64_t>(head0) * d + e] : 0.f;
      }
    }
  }
  // Softmax state of head `head0 + warp`, replicated in every lane of that warp.
  const bool state_warp = warp < kHeads;
  const bool real_head = state_warp && head0 + warp < a.num_heads;
  const float sink = real_head ? a.sinks[head0 + warp] : 0.f;
  float run_max = sink, run_sum = 0.f;

  float acc[kHeads][kCols];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int i = 0; i < kCols; ++i) acc[h][i] = 0.f;
  }

  const int32_t* ids = a.row_ids + m * a.max_rows;
  const bool vec_q = d % 4 == 0;
  const int d4 = d / 4;
  for (int t0 = row_begin; t0 < row_end; t0 += kTile) {
    const int tile_n = min(kTile, row_end - t0);
    // 1. The tile's rows into shared memory, one warp per row. Lane t reads the tile's t-th row id
    // (kTile == kWarpSize), so a warp's rows need one id load; the rows themselves go by
    // asynchronous copies, all in flight before the one wait.
    const int32_t lane_id = lane < tile_n ? ids[t0 + lane] : 0;
    for (int t = warp; t < tile_n; t += kWarps) {
      const float* src = a.rows + static_cast<int64_t>(__shfl_sync(0xffffffffu, lane_id, t)) * a.row_stride;
      float* dst = rs + t * d;
      if (a.packed.fp8_end >= 0) {  // decoded here: d % 4 == 0 and rs 16-byte aligned (checked at launch)
        const uint8_t* row = reinterpret_cast<const uint8_t*>(src);
        for (int k4 = lane; k4 < d4; k4 += kWarpSize) {
          *reinterpret_cast<float4*>(dst + 4 * k4) = DecodePacked4(row, k4, a.packed);
        }
      } else if (a.vec_rows) {
        for (int k4 = lane; k4 < d4; k4 += kWarpSize) CpAsync16(dst + 4 * k4, src + 4 * k4);
      } else {
        for (int k = lane; k < d; k += kWarpSize) dst[k] = src[k];
      }
    }
    CpAsyncWaitAll();
    __syncthreads();

    // 2. Scores scale·q[h]·row[t], one warp per row, the lanes splitting d.
    for (int t = warp; t < tile_n; t += kWarps) {
      const float* r = rs + t * d;
      float part[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) part[h] = 0.f;
      if (vec_q) {
        for (int k4 = lane; k4 < d4; k4 += kWarpSize) {
          const float4 rv = reinterpret_cast<const float4*>(r)[k4];
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
            const float4 qv = reinterpret_cast<const float4*>(qs + h * d)[k4];
            part[h] = fmaf(qv.x, rv.x, part[h]);
            part[h] = fmaf(qv.y, rv.y, part[h]);
            part[h] = fmaf(qv.z, rv.z, part[h]);
            part[h] = fmaf(qv.w, rv.w, part[h]);
          }
        }
      } else {
        for (int k = lane; k < d; k += kWarpSize) {
          const float rv = r[k];
#pragma unroll
          for (int h = 0; h < kHeads; ++h) part[h] = fmaf(qs[h * d + k], rv, part[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float s = WarpSum(part[h]);
        if (lane == 0) scores[h * kTile + t] = a.scale * s;
      }
    }
    __syncthreads();

    // 3. Online softmax: warp h takes the tile's scores of head h (one lane per row), raises the
    // running max, and leaves e^{s − max} in `probs` and the rescale of older terms in alpha_s.
    if (state_warp) {
      const float s = lane < tile_n ? scores[warp * kTile + lane] : -INFINITY;
      const float new_max = fmaxf(run_max, WarpMax(s));
      const float alpha = new_max == run_max ? 1.f : expf(run_max - new_max);
      const float p = lane < tile_n ? expf(s - new_max) : 0.f;
      run_sum = run_sum * alpha + WarpSum(p);
      run_max = new_max;
      probs[lane * kHeads + warp] = a.bf16_inputs ? RoundToBf16(p) : p;
      if (lane == 0) alpha_s[warp] = alpha;
    }
    __syncthreads();

    // 4. acc = alpha·acc + Σ_t p[t]·row[t], rows in order.
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float al = alpha_s[h];
#pragma unroll
      for (int i = 0; i < kCols; ++i) acc[h][i] *= al;
    }
    for (int t = 0; t < tile_n; ++t) {
      float p[kHeads];
      if constexpr (kHeads % 4 == 0) {
#pragma unroll
        for (int h = 0; h < kHeads; h += 4) {
          const float4 pv = *reinterpret_cast<const float4*>(probs + t * kHeads + h);
          p[h] = pv.x, p[h + 1] = pv.y, p[h + 2] = pv.z, p[h + 3] = pv.w;
        }
      } else {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) p[h] = probs[t * kHeads + h];
      }
      const float* r = rs + t * d;
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        const int c = tid + i * kThreads;
        if (c < d) {
          const float rv = r[c];
#pragma unroll
          for (int h = 0; h < kHeads; ++h) acc[h][i] = fmaf(p[h], rv, acc[h][i]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites rs, scores, probs and alpha_s
  }

  // This block's state for the merge: acc into the row tile's memory (free after the loop's last
  // barrier; kTile >= kHeads rows of d), max and sum per head.
  float* acc_s = rs;           // [kHeads][d]
  float* max_s = alpha_s;      // [kMaxHeads]
  float* sum_s = denom_s;      // [kMaxHeads]
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int c = tid + i * kThreads;
      if (c < d) acc_s[h * d + c] = acc[h][i];
    }
  }
  if (state_warp && lane == 0) {
    max_s[warp] = run_max;
    sum_s[warp] = run_sum;
  }
  cluster.sync();

  // The merge factors, once per head: warp h gathers the kSplit (max, sum) pairs (lane r reads
  // rank r's), and every lane evaluates, in rank order, M = max_r max_r, f_r = e^{max_r − M} (1
  // when equal) and S = Σ_r f_r·sum_r + e^{sink − M}; lane 0 leaves f_r and S in this block's
  // scores memory (free since the loop's last barrier).
  float* factor_s = scores;                   // [kHeads][kSplit]
  float* total_s = scores + kHeads * kSplit;  // [kHeads]
  static_assert(kHeads * (kSplit + 1) <= kHeads * kTile, "the merge factors fit the scores memory");
  static_assert(kSplit <= kWarpSize, "one lane per rank gathers the (max, sum) pairs");
  if (real_head) {
    const float mine_max = lane < kSplit ? *cluster.map_shared_rank(max_s + warp, lane) : 0.f;
    const float mine_sum = lane < kSplit ? *cluster.map_shared_rank(sum_s + warp, lane) : 0.f;
    float mr[kSplit], sr[kSplit];
#pragma unroll
    for (int r = 0; r < kSplit; ++r) {
      mr[r] = __shfl_sync(0xffffffffu, mine_max, r);
      sr[r] = __shfl_sync(0xffffffffu, mine_sum, r);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < kSplit; ++r) mx = fmaxf(mx, mr[r]);
    float denom = 0.f;
    float f[kSplit];
#pragma unroll
    for (int r = 0; r < kSplit; ++r) {
      f[r] = mr[r] == mx ? 1.f : expf(mr[r] - mx);
      denom = fmaf(f[r], sr[r], denom);
    }
    denom = denom + expf(sink - mx);
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kSplit; ++r) factor_s[warp * kSplit + r] = f[r];
      total_s[warp] = denom;
    }
  }
  __syncthreads();

  // out[c] = (Σ_r f_r·acc_r[c], in rank order) / S for this block's slice [c0, c1) of the d
  // columns of every head: the block's threads spread over (head, column) pairs, and each loads
  // the kSplit partial sums before adding them.
  const int cols = static_cast<int>(CeilDiv(d, kSplit));
  const int c0 = min(d, rank * cols), c1 = min(d, c0 + cols);
  const int slice = c1 - c0;
  for (int e = tid; e < kHeads * slice; e += kThreads) {
    const int h = e / slice, c = c0 + e % slice;
    if (head0 + h >= a.num_heads) continue;
    float part[kSplit];
#pragma unroll
    for (int r = 0; r < kSplit; ++r) part[r] = *cluster.map_shared_rank(acc_s + h * d + c, r);
    float v = 0.f;
#pragma unroll
    for (int r = 0; r < kSplit; ++r) v = fmaf(factor_s[h * kSplit + r], part[r], v);
    out_m[static_cast<int64_t>(head0 + h) * d + c] = v / total_s[h];
  }
  ClusterSyncBeforeExit();  // no block leaves (freeing its shared memory) while another still reads it
}

template <int kHeads, int kCols>
void Launch(const AttentionArgs& a, int64_t num_queries, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_queries * kSplit), static_cast<unsigned>(CeilDiv(a.num_heads, kHeads)));
  const size_t smem = static_cast<size_t>(SmemFloats<kHeads>(a.d)) * sizeof(float);
  auto* kernel = AttentionWithSinkKernel<kHeads, kCols>;
  if (smem > 48 * 1024) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                  "AttentionWithSink: shared memory opt-in");
  }
  kernel<<<grid, kThreads, smem, stream>>>(a);
  DI_CUDA_LAUNCH_CHECK("AttentionWithSink");
}

template <int kHeads>
void LaunchCols(const AttentionArgs& a, int64_t num_queries, cudaStream_t stream) {
  if (a.d <= kThreads) {
    Launch<kHeads, 1>(a, num_queries, stream);
  } else if (a.d <= 2 * kThreads) {
    Launch<kHeads, 2>(a, num_queries, stream);
  } else {
    Launch<kHeads, 4>(a, num_queries, stream);
  }
}

}  // namespace

void AttentionWithSink(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                       const int32_t* row_ids, const int32_t* counts, int64_t max_rows,
                       const float* sinks, int64_t num_queries, int64_t num_heads, int64_t head_dim,
                       float scale, float* out, int64_t out_stride, cudaStream_t stream, bool bf16_inputs,
                       const cpu::PackedRowFormat* packed) {
  static_assert(kMaxHeadDim <= 4 * kThreads, "kCols = 4 covers the largest head_dim");
  const char* name = "cuda::AttentionWithSink";
  if (num_queries < 0 || num_queries > INT_MAX / kSplit) ThrowCudaError(__FILE__, __LINE__, name, "bad num_queries");
  if (num_heads < 1 || num_heads > 65535) ThrowCudaError(__FILE__, __LINE__, name, "bad num_heads");
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    ThrowCudaError(__FILE__, __LINE__, name, "head_dim must be in [1, 1024]");
  }
  if (max_rows < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative max_rows");
  const int64_t row_floats = packed != nullptr ? packed->row_floats() : head_dim;
  if (q_stride < num_heads * head_dim || out_stride < num_heads * head_dim || row_stride < row_floats) {
    ThrowCudaError(__FILE__, __LINE__, name, "a row stride is smaller than the row");
  }
  if (packed != nullptr && (packed->dim != head_dim || !PackedRowsDecodable(*packed) ||
                            !Aligned(rows, row_stride * 4, 16))) {
    ThrowCudaError(__FILE__, __LINE__, name,
                   "packed rows need dim == head_dim, dim, fp8_end and block multiples of 16, and rows and row_stride "
                   "16-byte aligned");
  }
  if (num_queries == 0) return;
  if (q == nullptr || out == nullptr || counts == nullptr || sinks == nullptr ||
      (max_rows > 0 && (rows == nullptr || row_ids == nullptr))) {
    ThrowCudaError(__FILE__, __LINE__, name, "null pointer");
  }
  const int d = static_cast<int>(head_dim);
  const bool vec_rows = d % 4 == 0 && Aligned(rows, row_stride * 4, 16);
  const bool vec_q = d % 4 == 0 && Aligned(q, q_stride * 4, 16);
  AttentionArgs a{q, q_stride, rows, row_stride, row_ids, counts, max_rows, sinks,
                  static_cast<int>(num_heads), d, scale, out, out_stride, vec_rows, vec_q, bf16_inputs};
  a.packed = ToPackedRowArgs(packed);
  // Heads per block: the smallest of 1, 2, 4, 8 that covers min(H, 8). The result of a head does
  // not depend on this choice.
  if (num_heads >= 5) {
    LaunchCols<8>(a, num_queries, stream);
  } else if (num_heads >= 3) {
    LaunchCols<4>(a, num_queries, stream);
  } else if (num_heads == 2) {
    LaunchCols<2>(a, num_queries, stream);
  } else {
    LaunchCols<1>(a, num_queries, stream);
  }
}

}  // namespace deepinfer::cuda
