#include "kernels/cuda/indexer.h"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/cuda/bf16_split.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

// ---- Scoring ----------------------------------------------------------------------------------

constexpr int kScoreThreads = 256;
constexpr int kKeyTile = 64;    // candidates per block
constexpr int kHeadTile = 64;   // all heads of a query (Hi <= 64), zero padded
constexpr int kChunk = 32;      // dk elements staged per step
constexpr int kTilePad = 68;    // row pitch of the k-major tiles: a multiple of 4 for float4 reads
constexpr int kDotPitch = kHeadTile + 1;
static_assert(kKeyTile == kHeadTile, "candidates and heads are staged by the same loop");
static_assert(kScoreThreads == (kKeyTile / 4) * (kHeadTile / 4), "a 4x4 tile per thread");

// A candidate's score from its dot products with the heads: Σ_h ReLU(dot[h]) · w[h], heads in
// order, the sum a plain f32 chain from +0 (ReLU as std::max(v, 0.f): NaN passes through).
__device__ __forceinline__ float WeightedHeadSum(const float* dot, const float* w, int num_heads) {
  float s = 0.f;
  for (int h = 0; h < num_heads; ++h) {
    const float v = dot[h];
    s += (v < 0.f ? 0.f : v) * w[h];
  }
  return s;
}

// A scoring block's tile: query m = blockIdx.x, candidates j0 = blockIdx.y·64 … j0 + 63 of the
// query's nv visible ones.
struct ScoreTile {
  int64_t m, j0, nv, max_keys;
  __device__ __forceinline__ ScoreTile(const int32_t* num_visible, int64_t max_keys_per_query)
      : m(blockIdx.x),
        j0(static_cast<int64_t>(blockIdx.y) * kKeyTile),
        nv(min(max(static_cast<int64_t>(num_visible[blockIdx.x]), int64_t{0}), max_keys_per_query)),
        max_keys(max_keys_per_query) {}
  __device__ __forceinline__ bool empty() const { return j0 >= nv; }
  // Threads 0 … 63 stage the tile's pool row ids (−1 past nv) and the query's head weights (0 past
  // num_heads); the caller's barrier publishes them.
  __device__ __forceinline__ void Stage(const int32_t* key_ids, const float* weights, int64_t weights_stride,
                                        int num_heads, int32_t* ids, float* ws) const {
    const int tid = threadIdx.x;
    if (tid < kKeyTile) ids[tid] = j0 + tid < nv ? key_ids[m * max_keys + j0 + tid] : -1;
    if (tid < kHeadTile) ws[tid] = tid < num_heads ? weights[m * weights_stride + tid] : 0.f;
  }
};

// One block per (query m = blockIdx.x, candidates j0 = blockIdx.y·64 … j0+63). Thread (tx, ty) =
// (tid % 16, tid / 16) computes the dot products of candidates 4ty…4ty+3 with heads 4tx…4tx+3,
// accumulating over dk in order; then thread t < 64 sums candidate j0+t over the heads in order.
__global__ void __launch_bounds__(kScoreThreads)
    IndexerScoreKernel(const float* __restrict__ q, int64_t q_stride, const float* __restrict__ weights,
                       int64_t weights_stride, int num_heads, int dk, const float* __restrict__ keys,
                       int64_t key_stride, const int32_t* __restrict__ key_ids, int64_t max_keys,
                       const int32_t* __restrict__ num_visible, float* __restrict__ scores) {
  PdlPrologue();
  __shared__ __align__(16) float qs[kChunk][kTilePad];  // [k][head]
  __shared__ __align__(16) float ks[kChunk][kTilePad];  // [k][candidate]
  __shared__ float dots[kKeyTile][kDotPitch];          // [candidate][head]
  __shared__ float ws[kHeadTile];
  __shared__ int32_t ids[kKeyTile];

  const ScoreTile tile(num_visible, max_keys);
  if (tile.empty()) return;  // uniform over the block
  const int64_t m = tile.m, j0 = tile.j0, nv = tile.nv;
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;

  tile.Stage(key_ids, weights, weights_stride, num_heads, ids, ws);
  const float* q_m = q + m * q_stride;

  float acc[4][4];  // [candidate 4ty+i][head 4tx+j]
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  }
  __syncthreads();  // ids

  for (int k0 = 0; k0 < dk; k0 += kChunk) {
    // Stage dk elements k0 … k0+31 of the 64 candidates and the 64 heads, transposed to k-major;
    // a warp reads 32 consecutive floats of one row. Missing rows, heads and k are zeros.
    for (int e = tid; e < kKeyTile * kChunk; e += kScoreThreads) {
      const int row = e / kChunk, kk = e % kChunk, k = k0 + kk;
      const int32_t id = ids[row];
      ks[kk][row] = id >= 0 && k < dk ? keys[static_cast<int64_t>(id) * key_stride + k] : 0.f;
      qs[kk][row] = row < num_heads && k < dk ? q_m[static_cast<int64_t>(row) * dk + k] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kChunk; ++kk) {
      const float4 hv = *reinterpret_cast<const float4*>(&qs[kk][4 * tx]);
      const float4 cv = *reinterpret_cast<const float4*>(&ks[kk][4 * ty]);
      const float h4[4] = {hv.x, hv.y, hv.z, hv.w};
      const float c4[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(c4[i], h4[j], acc[i][j]);
      }
    }
    __syncthreads();  // the next chunk overwrites qs and ks
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) dots[4 * ty + i][4 * tx + j] = acc[i][j];
  }
  __syncthreads();
  if (tid < kKeyTile && j0 + tid < nv) scores[m * max_keys + j0 + tid] = WeightedHeadSum(dots[tid], ws, num_heads);
}

// ---- Scoring on tensor cores ------------------------------------------------------------------

constexpr int kMmaScoreThreads = 128;  // 4 warps, 16 candidates each

// IndexerScoreKernel's scores with the dot products on BF16 tensor cores, for q and keys whose
// every value is exact in BF16 (IndexerTopK's bf16_exact): one block per (query, 64 candidates),
// the tile's candidates and the query's heads converted to BF16 in shared memory, warp w computing
// candidates 16w … 16w + 15 against the 64 heads with mma.sync m16n8k16 (f32 accumulation), k in
// steps of 16 in order; then the same epilogue. The products are exact; the sums round where the
// SIMT kernel's sequential fmaf chain rounds only if some partial sum is not exact in f32, which
// FP4 codes with power-of-two block scales rule out unless a row's block scales span more than
// 2^9 (docs/performance.md, version 50).
template <int kDk>
__global__ void __launch_bounds__(kMmaScoreThreads)
    IndexerScoreMmaKernel(const float* __restrict__ q, int64_t q_stride, const float* __restrict__ weights,
                          int64_t weights_stride, int num_heads, const float* __restrict__ keys, int64_t key_stride,
                          const int32_t* __restrict__ key_ids, int64_t max_keys,
                          const int32_t* __restrict__ num_visible, float* __restrict__ scores) {
  PdlPrologue();
  constexpr int kPitch = kDk + 8;  // BF16 a row: rows 16 bytes apart mod 128 (ldmatrix without conflicts)
  constexpr int kF4 = kDk / 4;
  // The BF16 tiles, then (after every warp's MMAs) the dot products in the same memory.
  struct Tiles {
    __nv_bfloat16 ks[kKeyTile][kPitch];   // [candidate][k]
    __nv_bfloat16 qs[kHeadTile][kPitch];  // [head][k]
  };
  union Memory {
    Tiles tiles;
    float dots[kKeyTile][kDotPitch];  // [candidate][head]
  };
  __shared__ __align__(16) Memory mem;
  auto& ks = mem.tiles.ks;
  auto& qs = mem.tiles.qs;
  auto& dots = mem.dots;
  __shared__ float ws[kHeadTile];
  __shared__ int32_t ids[kKeyTile];

  const ScoreTile tile(num_visible, max_keys);
  if (tile.empty()) return;  // uniform over the block
  const int64_t m = tile.m, j0 = tile.j0, nv = tile.nv;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  tile.Stage(key_ids, weights, weights_stride, num_heads, ids, ws);
  __syncthreads();  // ids
  const float* q_m = q + m * q_stride;
  for (int e = tid; e < kKeyTile * kF4; e += kMmaScoreThreads) {
    const int row = e / kF4, c4 = e % kF4;
    const int32_t id = ids[row];
    const float4 k = id >= 0
                         ? __ldg(reinterpret_cast<const float4*>(keys + static_cast<int64_t>(id) * key_stride) + c4)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 h = row < num_heads
                         ? __ldg(reinterpret_cast<const float4*>(q_m + static_cast<int64_t>(row) * kDk) + c4)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    const __nv_bfloat162 k01 = __floats2bfloat162_rn(k.x, k.y), k23 = __floats2bfloat162_rn(k.z, k.w);
    const __nv_bfloat162 h01 = __floats2bfloat162_rn(h.x, h.y), h23 = __floats2bfloat162_rn(h.z, h.w);
    *reinterpret_cast<uint2*>(&ks[row][4 * c4]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&k01), *reinterpret_cast<const uint32_t*>(&k23));
    *reinterpret_cast<uint2*>(&qs[row][4 * c4]) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&h01), *reinterpret_cast<const uint32_t*>(&h23));
  }
  __syncthreads();

  float acc[kHeadTile / 8][4];
#pragma unroll
  for (int n = 0; n < kHeadTile / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  // A: rows 16·warp + (l % 8) + 8·((l / 8) % 2), columns k0 + 8·(l / 16); B (two n8 tiles of heads):
  // rows 8·n + (l % 8) + 8·(l / 16), columns k0 + 8·((l / 8) % 2).
  const int a_row = 16 * warp + lane % 8 + 8 * ((lane / 8) % 2), b_row = lane % 8 + 8 * (lane / 16);
  const uint32_t a_base = static_cast<uint32_t>(__cvta_generic_to_shared(&ks[a_row][8 * (lane / 16)]));
  const uint32_t b_base = static_cast<uint32_t>(__cvta_generic_to_shared(&qs[b_row][8 * ((lane / 8) % 2)]));
#pragma unroll
  for (int k0 = 0; k0 < kDk; k0 += 16) {
    uint32_t a[4];
    LdMatrixX4(a, a_base + 2 * k0);
#pragma unroll
    for (int n = 0; n < kHeadTile / 8; n += 2) {
      uint32_t b[4];
      LdMatrixX4(b, b_base + 2 * (8 * n * kPitch + k0));
      MmaBf16(acc[n], a[0], a[1], a[2], a[3], b[0], b[1]);
      MmaBf16(acc[n + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
    }
  }
  const int gq = lane / 4, tq = lane % 4;
  __syncthreads();  // every warp's ldmatrix reads are done before the dots overwrite the tiles
#pragma unroll
  for (int n = 0; n < kHeadTile / 8; ++n) {
    dots[16 * warp + gq][8 * n + 2 * tq] = acc[n][0];
    dots[16 * warp + gq][8 * n + 2 * tq + 1] = acc[n][1];
    dots[16 * warp + gq + 8][8 * n + 2 * tq] = acc[n][2];
    dots[16 * warp + gq + 8][8 * n + 2 * tq + 1] = acc[n][3];
  }
  __syncthreads();
  if (tid < kKeyTile && j0 + tid < nv) scores[m * max_keys + j0 + tid] = WeightedHeadSum(dots[tid], ws, num_heads);
}

// ---- Selection --------------------------------------------------------------------------------

constexpr int kSelectThreads = 1024;
constexpr int kSelectWarps = kSelectThreads / kWarpSize;
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr int kBinsPerLane = kBins / kWarpSize;

// A key whose unsigned order is the selection order of the scores: larger is better, all NaNs
// equal and above +inf, −0 equal to +0.
__device__ inline uint32_t OrderKey(float s) {
  if (isnan(s)) return 0xffffffffu;
  const uint32_t bits = s == 0.f ? 0u : __float_as_uint(s);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// One block per query. Finds the key T of the k-th best candidate by a most-significant-digit
// radix select (4 passes of 8 bits; integer shared-memory histograms, so exact), then writes, in
// ascending j, every candidate with key > T and the first `need` candidates with key == T.
__global__ void __launch_bounds__(kSelectThreads)
    IndexerSelectKernel(const float* __restrict__ scores, int64_t max_keys, const int32_t* __restrict__ num_visible,
                        int top_k, int32_t* __restrict__ selected, int32_t* __restrict__ counts) {
  PdlPrologue();
  __shared__ int hist[kBins];
  __shared__ int warp_eq[kSelectWarps];
  __shared__ int warp_sel[kSelectWarps];
  __shared__ uint32_t s_bin;
  __shared__ int s_above;

  const int64_t m = blockIdx.x;
  const int nv = static_cast<int>(min(max(static_cast<int64_t>(num_visible[m]), int64_t{0}), max_keys));
  const int k = min(top_k, nv);
  const float* s = scores + m * max_keys;
  int32_t* out = selected + m * static_cast<int64_t>(top_k);
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  if (tid == 0) counts[m] = k;
  if (k == 0 || k == nv) {  // none, or every visible candidate
    for (int j = tid; j < top_k; j += kSelectThreads) out[j] = j < k ? j : -1;
    return;
  }

  // Radix select: after the pass at `shift`, `prefix` holds the top bits of T and k_rem counts
  // the candidates still to take among those whose key starts with `prefix`.
  uint32_t prefix = 0, mask = 0;
  int k_rem = k;
  for (int shift = 32 - kRadixBits; shift >= 0; shift -= kRadixBits) {
    for (int b = tid; b < kBins; b += kSelectThreads) hist[b] = 0;
    __syncthreads();
    for (int j = tid; j < nv; j += kSelectThreads) {
      const uint32_t u = OrderKey(s[j]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & (kBins - 1)], 1);
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l holds bins kBinsPerLane·l …; find the bin where the count from the top reaches k_rem.
      int c[kBinsPerLane];
      int lane_sum = 0;
#pragma unroll
      for (int b = 0; b < kBinsPerLane; ++b) lane_sum += (c[b] = hist[lane * kBinsPerLane + b]);
      int suffix = lane_sum;  // Σ over lanes >= lane
      for (int offset = 1; offset < kWarpSize; offset <<= 1) {
        const int v = __shfl_down_sync(0xffffffffu, suffix, offset);
        if (lane + offset < kWarpSize) suffix += v;
      }
      const int above_lane = suffix - lane_sum;
      if (above_lane < k_rem && k_rem <= suffix) {  // exactly one lane
        int above = above_lane;
        int b = kBinsPerLane - 1;
        for (; b > 0; --b) {
          if (above + c[b] >= k_rem) break;
          above += c[b];
        }
        s_bin = static_cast<uint32_t>(lane * kBinsPerLane + b);
        s_above = above;
      }
    }
    __syncthreads();
    prefix |= s_bin << shift;
    mask |= static_cast<uint32_t>(kBins - 1) << shift;
    k_rem -= s_above;
  }
  const uint32_t threshold = prefix;
  const int need = k_rem;  // how many candidates with key == threshold to take, lowest j first

  // Compaction in ascending j, 1024 candidates per round; ranks from warp ballots.
  const unsigned lower_lanes = (1u << lane) - 1u;
  int eq_before_round = 0, sel_before_round = 0;
  for (int base = 0; base < nv; base += kSelectThreads) {
    const int j = base + tid;
    const uint32_t u = j < nv ? OrderKey(s[j]) : 0u;
    const bool gt = j < nv && u > threshold;
    const bool eq = j < nv && u == threshold;
    const unsigned eq_mask = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_eq[warp] = __popc(eq_mask);
    __syncthreads();
    int eq_rank = eq_before_round + __popc(eq_mask & lower_lanes);
    for (int w = 0; w < warp; ++w) eq_rank += warp_eq[w];
    const bool sel = gt || (eq && eq_rank < need);
    const unsigned sel_mask = __ballot_sync(0xffffffffu, sel);
    if (lane == 0) warp_sel[warp] = __popc(sel_mask);
    __syncthreads();
    int pos = sel_before_round + __popc(sel_mask & lower_lanes);
    for (int w = 0; w < warp; ++w) pos += warp_sel[w];
    if (sel) out[pos] = j;
    for (int w = 0; w < kSelectWarps; ++w) eq_before_round += warp_eq[w], sel_before_round += warp_sel[w];
    __syncthreads();  // warp_eq and warp_sel are rewritten next round
  }
  for (int j = k + tid; j < top_k; j += kSelectThreads) out[j] = -1;
}

std::atomic<uint64_t>& IndexerMmaLaunches() {
  static std::atomic<uint64_t> launches{0};
  return launches;
}

// DEEPINFER_INDEXER_MMA=0 (read once) keeps the SIMT scoring for bf16_exact too: for comparisons.
bool IndexerMmaEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DEEPINFER_INDEXER_MMA");
    if (v == nullptr || *v == '\0' || std::string(v) == "1") return true;
    if (std::string(v) == "0") return false;
    const std::string message = std::string("DEEPINFER_INDEXER_MMA must be 0 or 1, got '") + v + "'";
    ThrowCudaError(__FILE__, __LINE__, "cuda::IndexerTopK", message.c_str());
  }();
  return enabled;
}

// The tensor-core scoring's shapes: dk 64 or 128, q and keys 16-byte aligned with strides of whole
// float4s (q's heads contiguous: q_stride is only the query's).
bool IndexerMmaUsable(const float* q, int64_t q_stride, const float* keys, int64_t key_stride, int64_t head_dim) {
  const auto aligned = [](const void* p, int64_t stride_floats) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride_floats % 4 == 0;
  };
  return (head_dim == 64 || head_dim == 128) && aligned(q, q_stride) && aligned(keys, key_stride);
}

}  // namespace

uint64_t IndexerMmaLaunchesForTesting() { return IndexerMmaLaunches().load(); }

void IndexerTopK(const float* q, int64_t q_stride, const float* weights, int64_t weights_stride,
                 int64_t num_queries, int64_t num_heads, int64_t head_dim, const float* keys,
                 int64_t key_stride, const int32_t* key_ids, int64_t max_keys, const int32_t* num_visible,
                 int64_t top_k, float* scores, int32_t* selected, int32_t* counts, cudaStream_t stream,
                 bool bf16_exact) {
  const char* name = "cuda::IndexerTopK";
  if (num_queries < 0 || num_queries > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "bad num_queries");
  if (num_heads < 1 || num_heads > kHeadTile) ThrowCudaError(__FILE__, __LINE__, name, "num_heads must be in [1, 64]");
  if (head_dim < 1 || head_dim > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "bad head_dim");
  if (max_keys < 0 || CeilDiv(max_keys, kKeyTile) > 65535) ThrowCudaError(__FILE__, __LINE__, name, "bad max_keys");
  if (top_k < 0 || top_k > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "bad top_k");
  if (q_stride < num_heads * head_dim || weights_stride < num_heads || key_stride < head_dim) {
    ThrowCudaError(__FILE__, __LINE__, name, "a row stride is smaller than the row");
  }
  if (num_queries == 0) return;
  if (q == nullptr || weights == nullptr || num_visible == nullptr || counts == nullptr ||
      (top_k > 0 && selected == nullptr) ||
      (max_keys > 0 && (keys == nullptr || key_ids == nullptr || scores == nullptr))) {
    ThrowCudaError(__FILE__, __LINE__, name, "null pointer");
  }
  if (max_keys > 0) {
    const dim3 grid(static_cast<unsigned>(num_queries), static_cast<unsigned>(CeilDiv(max_keys, kKeyTile)));
    if (bf16_exact && IndexerMmaEnabled() && IndexerMmaUsable(q, q_stride, keys, key_stride, head_dim)) {
      auto kernel = head_dim == 64 ? IndexerScoreMmaKernel<64> : IndexerScoreMmaKernel<128>;
      kernel<<<grid, kMmaScoreThreads, 0, stream>>>(q, q_stride, weights, weights_stride, static_cast<int>(num_heads),
                                                    keys, key_stride, key_ids, max_keys, num_visible, scores);
      IndexerMmaLaunches().fetch_add(1, std::memory_order_relaxed);
    } else {
      IndexerScoreKernel<<<grid, kScoreThreads, 0, stream>>>(q, q_stride, weights, weights_stride,
                                                             static_cast<int>(num_heads), static_cast<int>(head_dim),
                                                             keys, key_stride, key_ids, max_keys, num_visible, scores);
    }
    DI_CUDA_LAUNCH_CHECK("cuda::IndexerTopK scores");
  }
  IndexerSelectKernel<<<static_cast<unsigned>(num_queries), kSelectThreads, 0, stream>>>(
      scores, max_keys, num_visible, static_cast<int>(top_k), selected, counts);
  DI_CUDA_LAUNCH_CHECK("cuda::IndexerTopK select");
}

}  // namespace deepinfer::cuda
