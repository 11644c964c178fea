#include "kernels/cuda/hc.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kMixThreads = 256;
constexpr int kMixWarps = kMixThreads / kWarpSize;
// Mix rows accumulated per pass over a token's W values. One token per block (decode): all 24 of
// HcPre at S = 4 (Flash) in one pass, so that each thread has 24 fn loads in flight per step of
// its stride instead of 8 (three passes took about three times the memory latency), at 2 blocks
// per SM. Four tokens per block, and HcHead (S rows): 8. A row's sum does not depend on which pass
// computes it.
template <int kTok, bool kHead>
constexpr int RowChunk() {
  return !kHead && kTok == 1 ? 24 : 8;
}
constexpr int kMaxRows = (2 + kHcMaxStreams) * kHcMaxStreams;
constexpr int kMixCluster = 8;  // blocks per cluster of HcMixKernel (the portable maximum)
constexpr int kPostThreads = 256;
// At or above this many tokens a mix block serves 4 tokens (fn is read once for 4); below, one
// token per block for more blocks. The per-token arithmetic is identical either way. 64 since
// 2026-12-02: at batch 64 one token per block re-read fn's 1.5 MiB per token, and 4-token blocks
// took hc_pre from 0.449 to 0.283 ms a step (3 layers; docs/performance.md, version 28).
// DEEPINFER_HC_MULTI_TOKEN_MIN (a positive integer, read once) moves the threshold.
constexpr int64_t kMultiTokenMin = 64;
int64_t MultiTokenMin() {
  static const int64_t min_tokens = [] {
    const char* v = std::getenv("DEEPINFER_HC_MULTI_TOKEN_MIN");
    if (v == nullptr || *v == '\0') return kMultiTokenMin;
    char* end = nullptr;
    const long long parsed = std::strtoll(v, &end, 10);
    if (*end != '\0' || parsed < 1) {
      const std::string message =
          std::string("DEEPINFER_HC_MULTI_TOKEN_MIN must be a positive number of tokens, got '") + v + "'";
      ThrowCudaError(__FILE__, __LINE__, "cuda::HcPre", message.c_str());
    }
    return static_cast<int64_t>(parsed);
  }();
  return min_tokens;
}
// There, HcPre at S = 4 defers the Sinkhorn to HcSinkhorn4Kernel (same bits): in the mix kernel one
// warp per token ran it with 4 of 32 lanes while the whole cluster of 8 SMs waited. (8 tokens per
// block, version 16, was slower at the 8k prefill: 1.73 ms a launch at 156 registers and 12%
// occupancy against 1.28 ms at 124 and 24% (ncu); docs/performance.md.)

// The CPU's sigmoid, unfused: 1 / (1 + exp(−v)).
__device__ inline float Sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// v · scale + base with the CPU's two roundings (no FMA).
__device__ inline float Affine(float v, float scale, float base) { return __fadd_rn(__fmul_rn(v, scale), base); }

// Sinkhorn-Knopp on the s×s matrix c (shared memory) by one warp, in the CPU's order: lane j owns
// row j for row steps and column j for column steps; each element sees the same operations as in
// the CPU loop. All 32 lanes must call it.
__device__ void SinkhornWarp(float* c, int s, int64_t iters, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  if (lane < s) {
    float* row = c + lane * s;
    float mx = row[0];
    for (int k = 1; k < s; ++k) mx = fmaxf(mx, row[k]);
    float sum = 0.f;
    for (int k = 0; k < s; ++k) {
      row[k] = expf(row[k] - mx);
      sum += row[k];
    }
    for (int k = 0; k < s; ++k) row[k] = row[k] / sum + eps;
  }
  __syncwarp();
  auto normalize_columns = [&] {
    if (lane < s) {
      float sum = 0.f;
      for (int j = 0; j < s; ++j) sum += c[j * s + lane];
      for (int j = 0; j < s; ++j) c[j * s + lane] /= (sum + eps);
    }
    __syncwarp();
  };
  normalize_columns();
  for (int64_t it = 1; it < iters; ++it) {
    if (lane < s) {
      float* row = c + lane * s;
      float sum = 0.f;
      for (int k = 0; k < s; ++k) sum += row[k];
      for (int k = 0; k < s; ++k) row[k] /= (sum + eps);
    }
    __syncwarp();
    normalize_columns();
  }
}

// SinkhornWarp at S = 4 with an element per lane (lane 4j + k holds c[j][k]; lanes 16-31 mirror
// 0-15): each row's or column's four values reach its lanes by shuffles and are summed left to
// right from +0, then each lane divides its own element. Every element sees SinkhornWarp's
// operations in its order (the same bits), with a step's 16 divisions side by side instead of
// four in a row per lane, and no shared-memory round trips between the steps. All 32 lanes must
// call it; c is read and written in shared memory as SinkhornWarp does.
__device__ void SinkhornShuffle4(float* c, int64_t iters, float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int e = lane & 15, j = e / 4, k = e % 4;
  auto row_value = [&](float v, int i) { return __shfl_sync(0xffffffffu, v, 4 * j + i); };
  auto column_value = [&](float v, int i) { return __shfl_sync(0xffffffffu, v, 4 * i + k); };
  float v = c[e];
  float mx = row_value(v, 0);
  for (int i = 1; i < 4; ++i) mx = fmaxf(mx, row_value(v, i));
  v = expf(v - mx);
  float sum = 0.f;
  for (int i = 0; i < 4; ++i) sum += row_value(v, i);
  v = v / sum + eps;
  auto normalize_column = [&] {
    float col = 0.f;
    for (int i = 0; i < 4; ++i) col += column_value(v, i);
    v /= (col + eps);
  };
  normalize_column();
  for (int64_t it = 1; it < iters; ++it) {
    float row = 0.f;
    for (int i = 0; i < 4; ++i) row += row_value(v, i);
    v /= (row + eps);
    normalize_column();
  }
  __syncwarp();
  if (lane < 16) c[e] = v;
  __syncwarp();
}

// What thread threadIdx.x of a mix block asks L2 for before its PDL wait: fn row threadIdx.x (of
// `rows`) over the W values of the block's rank (blockIdx.x % kMixCluster); only the first cluster
// asks (the others read the same bytes), and only with p.prefetch_fn.
__device__ __forceinline__ L2Range MixFnPrefetch(const HcParams& p, int rows, int w) {
  if (!p.prefetch_fn || blockIdx.x >= kMixCluster || static_cast<int>(threadIdx.x) >= rows) return {};
  const int slice = static_cast<int>(CeilDiv(w, kMixCluster));
  const int i_begin = min(w, static_cast<int>(blockIdx.x % kMixCluster) * slice);
  const int i_end = min(w, i_begin + slice);
  return {p.fn + static_cast<int64_t>(threadIdx.x) * w + i_begin, int64_t{4} * (i_end - i_begin)};
}

// One cluster of kMixCluster blocks per kTok consecutive tokens (the last cluster may hold
// fewer). Block q of a cluster owns the q-th of kMixCluster equal slices of the W values:
//   1. partial mix[t, r] = Σ_i fn[r, i] · X[t, i] and ss[t] = Σ_i X[t, i]² over its slice, each
//      thread striding over i, then a warp butterfly and a sum over warps in warp order;
//   2. after a cluster barrier every block sums the kMixCluster partials in rank order from the
//      blocks' shared memory (the same sums in every block), then one warp per token:
//      mix ·= 1/sqrt(ss/W + norm_eps), the stream weights (and, for HcPre, post and the Sinkhorn's
//      input, in rank 0; with kDeferSinkhorn the input is what comb gets);
//   3. out[t, i] = Σ_j weight_j · X[t, j, i], stream by stream like the CPU, block q writing the
//      q-th slice of the D channels; in rank 0 (HcPre, Sinkhorn not deferred) warp t runs token t's
//      Sinkhorn and writes comb meanwhile, and the other warps write the slice.
// The order of every sum is fixed by W alone, so a token's outputs do not depend on m or kTok.
// Splitting W over a cluster keeps fn's 4·W·(2+S)·S bytes (1.5 MiB at Flash shapes) streaming
// through kMixCluster SMs per token instead of one (one block per token took ~130 us per call at
// batch 1 on the H200, 2026-11-30 profile).
// kHead: rows = s, weights = head weights, no post/comb. Otherwise rows = (2+s)·s.
// kDeferSinkhorn (HcPre): comb gets the Sinkhorn's input (the affine mix) and HcSinkhorn4Kernel
// runs the Sinkhorn after this kernel, 16 lanes a token, so that no cluster waits for it.
// kUnroll: 1, the stride loop as the compiler unrolls it, or 4: unrolled four times (the fn and x
// loads of four steps in flight together; each acc still takes its products in increasing i, so
// the same bits).
// One-token blocks run 2 an SM (at most 128 registers) unless unrolled: then 1, for the registers of
// kUnroll steps' 24 fn loads in flight.
template <int kTok, bool kHead, bool kDeferSinkhorn = false, int kUnroll = 1>
__global__ void __cluster_dims__(kMixCluster, 1, 1) __launch_bounds__(kMixThreads, kTok == 1 && kUnroll == 1 ? 2 : 1)
    HcMixKernel(const float* __restrict__ x, int64_t m, int s, int d, HcParams p, float* __restrict__ out,
                int64_t ldo, float* __restrict__ post, float* __restrict__ comb) {
  PdlPrologue(MixFnPrefetch(p, kHead ? s : (2 + s) * s, s * d));
  static_assert(kTok <= kMixWarps, "one epilogue warp per token");
  constexpr int kRowChunk = RowChunk<kTok, kHead>();
  static_assert(kTok * kRowChunk <= kMixThreads, "one thread per (token, row) of a pass in the warp sum");
  namespace cg = cooperative_groups;
  __shared__ float red[kMixWarps][kTok * kRowChunk];
  __shared__ float ss_red[kMixWarps][kTok];
  __shared__ float part_mix[kTok][kMaxRows];  // this block's slice sums, read by the whole cluster
  __shared__ float part_ss[kTok];
  __shared__ float mix[kTok][kMaxRows];
  __shared__ float ss_tok[kTok];
  __shared__ float weights[kTok][kHcMaxStreams];
  __shared__ float cmat[kTok][kHcMaxStreams * kHcMaxStreams];

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int w = s * d;
  const int rows = kHead ? s : (2 + s) * s;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x / kMixCluster) * kTok;
  const int ntok = static_cast<int>(min(static_cast<int64_t>(kTok), m - t0));
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int slice = static_cast<int>(CeilDiv(w, kMixCluster));
  const int i_begin = min(w, rank * slice);
  const int i_end = min(w, i_begin + slice);

  // Tokens past the end alias the last one: their sums are computed and dropped.
  const float* xt[kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) xt[t] = x + (t0 + min(t, ntok - 1)) * w;

  for (int r0 = 0; r0 < rows; r0 += kRowChunk) {
    const float* f[kRowChunk];
#pragma unroll
    for (int k = 0; k < kRowChunk; ++k) f[k] = p.fn + static_cast<int64_t>(min(r0 + k, rows - 1)) * w;
    float acc[kTok][kRowChunk];
    float ss[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      ss[t] = 0.f;
#pragma unroll
      for (int k = 0; k < kRowChunk; ++k) acc[t][k] = 0.f;
    }
    if constexpr (kUnroll == 1) {  // the compiler's own unrolling, as before the switch
      for (int i = i_begin + static_cast<int>(threadIdx.x); i < i_end; i += kMixThreads) {
        float fv[kRowChunk];
#pragma unroll
        for (int k = 0; k < kRowChunk; ++k) fv[k] = __ldg(f[k] + i);
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          const float xv = __ldg(xt[t] + i);
          if (r0 == 0) ss[t] = fmaf(xv, xv, ss[t]);
#pragma unroll
          for (int k = 0; k < kRowChunk; ++k) acc[t][k] = fmaf(xv, fv[k], acc[t][k]);
        }
      }
    } else {  // the same steps, kUnroll of them at a time
#pragma unroll(kUnroll)
      for (int i = i_begin + static_cast<int>(threadIdx.x); i < i_end; i += kMixThreads) {
        float fv[kRowChunk];
#pragma unroll
        for (int k = 0; k < kRowChunk; ++k) fv[k] = __ldg(f[k] + i);
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          const float xv = __ldg(xt[t] + i);
          if (r0 == 0) ss[t] = fmaf(xv, xv, ss[t]);
#pragma unroll
          for (int k = 0; k < kRowChunk; ++k) acc[t][k] = fmaf(xv, fv[k], acc[t][k]);
        }
      }
    }
    if constexpr (kTok * kRowChunk >= 24) {
      // 24 or 32 sums of the pass by one reduce-scatter (the same bits as WarpSum of each): v[0]
      // is then sum ReducedIndex<32>(lane, 0) = lane.
      float v[kWarpSize];
#pragma unroll
      for (int e = 0; e < kWarpSize; ++e) v[e] = e < kTok * kRowChunk ? acc[e / kRowChunk][e % kRowChunk] : 0.f;
      WarpReduceScatter<kWarpSize>(v, lane);
      if (lane < kTok * kRowChunk) red[warp][lane] = v[0];
    } else {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
#pragma unroll
        for (int k = 0; k < kRowChunk; ++k) {
          const float v = WarpSum(acc[t][k]);
          if (lane == 0) red[warp][t * kRowChunk + k] = v;
        }
      }
    }
    if (r0 == 0) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        const float v = WarpSum(ss[t]);
        if (lane == 0) ss_red[warp][t] = v;
      }
    }
    __syncthreads();
    if (threadIdx.x < kTok * kRowChunk) {
      const int t = threadIdx.x / kRowChunk, k = threadIdx.x % kRowChunk;
      float sum = 0.f;
      for (int wp = 0; wp < kMixWarps; ++wp) sum += red[wp][threadIdx.x];
      if (r0 + k < rows) part_mix[t][r0 + k] = sum;
    }
    if (r0 == 0 && threadIdx.x < kTok) {
      float sum = 0.f;
      for (int wp = 0; wp < kMixWarps; ++wp) sum += ss_red[wp][threadIdx.x];
      part_ss[threadIdx.x] = sum;
    }
    __syncthreads();  // red is rewritten by the next pass
  }

  cluster.sync();  // every block's part_mix and part_ss are complete
  for (int e = threadIdx.x; e < kTok * (rows + 1); e += kMixThreads) {
    const int t = e / (rows + 1), r = e % (rows + 1);
    float sum = 0.f;
    for (int q = 0; q < kMixCluster; ++q) {
      const float* remote = r < rows ? cluster.map_shared_rank(&part_mix[t][r], q) : cluster.map_shared_rank(&part_ss[t], q);
      sum += *remote;
    }
    if (r < rows) {
      mix[t][r] = sum;
    } else {
      ss_tok[t] = sum;
    }
  }
  __syncthreads();          // mix and ss_tok complete for the epilogue's warps (the next barrier orders nothing)
  ClusterSyncBeforeExit();  // no block leaves (freeing its shared memory) while another still reads it

  if (warp < ntok) {
    const int t = warp;
    const int64_t tok = t0 + t;
    const float inv = 1.f / sqrtf(ss_tok[t] / static_cast<float>(w) + p.norm_eps);
    float* mt = mix[t];
    for (int r = lane; r < rows; r += kWarpSize) mt[r] = __fmul_rn(mt[r], inv);
    __syncwarp();
    if constexpr (kHead) {
      if (lane < s) weights[t][lane] = Sigmoid(Affine(mt[lane], p.scale[0], p.base[lane])) + p.hc_eps;
    } else {
      if (lane < s) {
        weights[t][lane] = Sigmoid(Affine(mt[lane], p.scale[0], p.base[lane])) + p.hc_eps;
        if (rank == 0) post[tok * s + lane] = __fmul_rn(2.f, Sigmoid(Affine(mt[s + lane], p.scale[1], p.base[s + lane])));
      }
      if constexpr (kDeferSinkhorn) {
        if (rank == 0) {
          for (int e = lane; e < s * s; e += kWarpSize) {
            comb[tok * s * s + e] = Affine(mt[2 * s + e], p.scale[2], p.base[2 * s + e]);
          }
        }
      } else if (rank == 0) {  // the Sinkhorn's input; its warp runs it below, beside the output
        float* c = cmat[t];
        for (int e = lane; e < s * s; e += kWarpSize) c[e] = Affine(mt[2 * s + e], p.scale[2], p.base[2 * s + e]);
      }
    }
  }
  __syncthreads();

  // Rank 0's warp t runs token t's Sinkhorn (only rank 0 stores comb, so the other ranks skip it)
  // while the block's other warps write the block's slice of out: the block's output threads are
  // then those of warps ntok.. (kOwnSinkhorn, rank 0), else all of them.
  constexpr bool kOwnSinkhorn = !kHead && !kDeferSinkhorn;
  static_assert(!kOwnSinkhorn || kTok < kMixWarps, "warps are left for the output beside the Sinkhorn's");
  const bool sinkhorn_block = kOwnSinkhorn && rank == 0;
  if (sinkhorn_block && warp < ntok) {
    const int t = warp;
    float* c = cmat[t];
    if (s == 4) {
      SinkhornShuffle4(c, p.sinkhorn_iters, p.hc_eps);
    } else {
      SinkhornWarp(c, s, p.sinkhorn_iters, p.hc_eps);
    }
    for (int e = lane; e < s * s; e += kWarpSize) comb[(t0 + t) * s * s + e] = c[e];
    return;
  }
  const int out_first = sinkhorn_block ? ntok * kWarpSize : 0;  // the first output thread
  const int out_threads = kMixThreads - out_first;
  const int d_slice = static_cast<int>(CeilDiv(d, kMixCluster));
  const int o_begin = min(d, rank * d_slice);
  const int o_end = min(d, o_begin + d_slice);
  for (int t = 0; t < ntok; ++t) {
    const float* xr = x + (t0 + t) * w;
    float* o = out + (t0 + t) * ldo;
    for (int i = o_begin + static_cast<int>(threadIdx.x) - out_first; i < o_end; i += out_threads) {
      float acc = 0.f;
      for (int j = 0; j < s; ++j) acc = __fadd_rn(acc, __fmul_rn(weights[t][j], xr[static_cast<int64_t>(j) * d + i]));
      o[i] = acc;
    }
  }
}

// HcPre at S = 4 from kPersistentMixMinTokens on, persistent: the sums, order and outputs of
// HcMixKernel<4, false, true> (so the same bits as both HcMixKernel forms). A cluster of
// kMixCluster blocks takes token groups g = cluster, cluster + clusters, ... of kPersistTok
// tokens; block q keeps its slice of fn in shared memory for the whole launch (24 rows × up to
// kPersistSteps · kMixThreads values, 192 KiB at Flash's W = 16384) instead of reading it from L2
// once per group (HcMixKernel's 1.5 MiB per 4 tokens; ~3 GB a call at the 8k prefill). Thread j's
// chain for (token, row) is HcMixKernel's: fmaf over i = i_begin + j + 256·k in k order, then the
// same reduce-scatter, warp-order and rank-order sums. The next group's x values are loaded while
// the group's sums are exchanged. part_mix is double-buffered by group parity, so one cluster
// barrier a group orders both its exchange and the reuse of the buffer two groups later.
constexpr int kPersistTok = 4;
constexpr int kPersistRows = 24;  // (2 + S)·S at S = 4
constexpr int kPersistSteps = 8;  // values of the W slice per thread (slice <= 2,048)
constexpr int kPersistSmem = kPersistSteps * kPersistRows * kMixThreads * 4;  // fn slice, bytes

__global__ void __cluster_dims__(kMixCluster, 1, 1) __launch_bounds__(kMixThreads, 1)
    HcPreMixPersistentKernel(const float* __restrict__ x, int64_t m, int d, HcParams p, float* __restrict__ out,
                             int64_t ldo, float* __restrict__ post, float* __restrict__ comb) {
  PdlPrologue();
  constexpr int kS = 4, kRows = kPersistRows, kTok = kPersistTok, kSums = kTok * kRows;
  namespace cg = cooperative_groups;
  extern __shared__ float4 fn_slice[];  // [k][row / 4][thread]: rows 4r..4r+3 at i_begin + thread + 256k
  __shared__ float red[kMixWarps][kSums];
  __shared__ float ss_red[kMixWarps][kTok];
  __shared__ float part_mix[2][kTok][kRows];  // by group parity, read by the whole cluster
  __shared__ float part_ss[2][kTok];
  __shared__ float mix[kTok][kRows];
  __shared__ float ss_tok[kTok];
  __shared__ float weights[kTok][kS];

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int w = kS * d;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int slice = static_cast<int>(CeilDiv(w, kMixCluster));
  const int i_begin = min(w, rank * slice);
  const int i_end = min(w, i_begin + slice);
  const int i0 = i_begin + static_cast<int>(threadIdx.x);  // this thread's k-th value: i0 + 256k
  const int64_t groups = CeilDiv(m, int64_t{kTok});
  const int64_t clusters = gridDim.x / kMixCluster;

#pragma unroll
  for (int k = 0; k < kPersistSteps; ++k) {
    const bool valid = i0 + k * kMixThreads < i_end;
#pragma unroll
    for (int r4 = 0; r4 < kRows / 4; ++r4) {
      float v[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        v[c] = valid ? __ldg(p.fn + static_cast<int64_t>(4 * r4 + c) * w + i0 + k * kMixThreads) : 0.f;
      }
      fn_slice[(k * (kRows / 4) + r4) * kMixThreads + threadIdx.x] = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
  // x values of group g (tokens past m alias the last one: their sums are computed and dropped).
  float xv[kTok][kPersistSteps];
  auto load_x = [&](int64_t g) {
    const int64_t t0 = g * kTok;
    const int ntok = static_cast<int>(min(int64_t{kTok}, m - t0));
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const float* xt = x + (t0 + min(t, ntok - 1)) * w + i0;
#pragma unroll
      for (int k = 0; k < kPersistSteps; ++k) {
        xv[t][k] = i0 + k * kMixThreads < i_end ? __ldg(xt + k * kMixThreads) : 0.f;
      }
    }
  };
  int64_t g = blockIdx.x / kMixCluster;
  if (g < groups) load_x(g);
  __syncthreads();  // fn_slice complete

  for (int parity = 0; g < groups; g += clusters, parity ^= 1) {
    const int64_t t0 = g * kTok;
    const int ntok = static_cast<int>(min(int64_t{kTok}, m - t0));
    float acc[kTok][kRows], ss[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      ss[t] = 0.f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[t][r] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < kPersistSteps; ++k) {
      if (i0 + k * kMixThreads < i_end) {
#pragma unroll
        for (int r4 = 0; r4 < kRows / 4; ++r4) {
          const float4 f4 = fn_slice[(k * (kRows / 4) + r4) * kMixThreads + threadIdx.x];
          const float fv[4] = {f4.x, f4.y, f4.z, f4.w};
#pragma unroll
          for (int t = 0; t < kTok; ++t) {
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[t][4 * r4 + c] = fmaf(xv[t][k], fv[c], acc[t][4 * r4 + c]);
          }
        }
#pragma unroll
        for (int t = 0; t < kTok; ++t) ss[t] = fmaf(xv[t][k], xv[t][k], ss[t]);
      }
    }
    if (g + clusters < groups) load_x(g + clusters);  // in flight during the exchange and the output

    // The sums 32 at a time by one reduce-scatter each: v[0] is then sum 32·b + lane.
#pragma unroll
    for (int b = 0; b < kSums / kWarpSize; ++b) {
      float v[kWarpSize];
#pragma unroll
      for (int e = 0; e < kWarpSize; ++e) v[e] = acc[(b * kWarpSize + e) / kRows][(b * kWarpSize + e) % kRows];
      WarpReduceScatter<kWarpSize>(v, lane);
      red[warp][b * kWarpSize + lane] = v[0];
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const float v = WarpSum(ss[t]);
      if (lane == 0) ss_red[warp][t] = v;
    }
    __syncthreads();
    if (threadIdx.x < kSums) {
      float sum = 0.f;
      for (int wp = 0; wp < kMixWarps; ++wp) sum += red[wp][threadIdx.x];
      part_mix[parity][threadIdx.x / kRows][threadIdx.x % kRows] = sum;
    } else if (threadIdx.x < kSums + kTok) {
      const int t = static_cast<int>(threadIdx.x) - kSums;
      float sum = 0.f;
      for (int wp = 0; wp < kMixWarps; ++wp) sum += ss_red[wp][t];
      part_ss[parity][t] = sum;
    }
    cluster.sync();  // every block's part_mix[parity] and part_ss[parity] are complete
    if (threadIdx.x < kTok * (kRows + 1)) {
      const int t = threadIdx.x / (kRows + 1), r = threadIdx.x % (kRows + 1);
      float sum = 0.f;
      for (int q = 0; q < kMixCluster; ++q) {
        const float* remote = r < kRows ? cluster.map_shared_rank(&part_mix[parity][t][r], q)
                                        : cluster.map_shared_rank(&part_ss[parity][t], q);
        sum += *remote;
      }
      if (r < kRows) {
        mix[t][r] = sum;
      } else {
        ss_tok[t] = sum;
      }
    }
    __syncthreads();
    if (warp < ntok) {  // HcMixKernel's epilogue at S = 4 with the Sinkhorn deferred
      const int t = warp;
      const int64_t tok = t0 + t;
      const float inv = 1.f / sqrtf(ss_tok[t] / static_cast<float>(w) + p.norm_eps);
      const float mt = lane < kRows ? __fmul_rn(mix[t][lane], inv) : 0.f;
      const float pre_mix = __shfl_sync(0xffffffffu, mt, lane % kS);
      const float post_mix = __shfl_sync(0xffffffffu, mt, kS + lane % kS);
      if (lane < kS) {
        weights[t][lane] = Sigmoid(Affine(pre_mix, p.scale[0], p.base[lane])) + p.hc_eps;
        if (rank == 0) post[tok * kS + lane] = __fmul_rn(2.f, Sigmoid(Affine(post_mix, p.scale[1], p.base[kS + lane])));
      }
      if (rank == 0 && lane >= 2 * kS && lane < kRows) {
        comb[tok * kS * kS + lane - 2 * kS] = Affine(mt, p.scale[2], p.base[lane]);
      }
    }
    __syncthreads();
    // out[t, i] = Σ_j weight_j · X[t, j, i] on block q's slice of the D channels, all tokens' and
    // streams' values of a channel loaded before any is used (one L2 latency, not one per token).
    const int d_slice = static_cast<int>(CeilDiv(d, kMixCluster));
    const int o_begin = min(d, rank * d_slice);
    const int o_end = min(d, o_begin + d_slice);
    for (int i = o_begin + static_cast<int>(threadIdx.x); i < o_end; i += kMixThreads) {
      float xo[kTok][kS];
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
#pragma unroll
        for (int j = 0; j < kS; ++j) {
          xo[t][j] = t < ntok ? __ldg(x + (t0 + t) * w + static_cast<int64_t>(j) * d + i) : 0.f;
        }
      }
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t < ntok) {
          float a = 0.f;
#pragma unroll
          for (int j = 0; j < kS; ++j) a = __fadd_rn(a, __fmul_rn(weights[t][j], xo[t][j]));
          out[(t0 + t) * ldo + i] = a;
        }
      }
    }
  }
  ClusterSyncBeforeExit();  // no block leaves (freeing its shared memory) while another may still read it
}

// SinkhornShuffle4 on each token's 4×4 matrix in comb (in place), 16 lanes a token (lane 4j + k
// of a half-warp holds c[j][k]), the matrix in registers: every element sees SinkhornShuffle4's
// operations in its order (expf, IEEE divisions, the row and column sums left to right from +0),
// so the same bits as SinkhornWarp and the mix kernel's own Sinkhorn. One thread a token, the
// matrix in its registers, took ~24 us a call at decode batch 64 (ncu, 2026-12-05): 20 iterations
// of 32 divisions in one thread's chain, at 3% occupancy. The lanes of tokens past m run on zeros
// (every lane must take part in the shuffles) and store nothing.
constexpr int kSinkhornThreads = 128;
__global__ void __launch_bounds__(kSinkhornThreads) HcSinkhorn4Kernel(float* __restrict__ comb, int64_t m,
                                                                      int64_t iters, float eps) {
  PdlPrologue();
  constexpr int kLanes = 16;
  const int64_t tok = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int e = threadIdx.x % kLanes, j = e / 4, k = e % 4;
  const bool live = tok < m;
  auto row_value = [&](float v, int i) { return __shfl_sync(0xffffffffu, v, 4 * j + i, kLanes); };
  auto column_value = [&](float v, int i) { return __shfl_sync(0xffffffffu, v, 4 * i + k, kLanes); };
  float v = live ? comb[tok * kLanes + e] : 0.f;
  float mx = row_value(v, 0);
#pragma unroll
  for (int i = 1; i < 4; ++i) mx = fmaxf(mx, row_value(v, i));
  v = expf(v - mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) sum += row_value(v, i);
  v = v / sum + eps;
  auto normalize_column = [&] {
    float col = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) col += column_value(v, i);
    v /= (col + eps);
  };
  normalize_column();
  for (int64_t it = 1; it < iters; ++it) {
    float row = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) row += row_value(v, i);
    v /= (row + eps);
    normalize_column();
  }
  if (live) comb[tok * kLanes + e] = v;
}

// V floats from p (16-byte aligned where V == 4), through the read-only path.
template <int V>
__device__ __forceinline__ void LoadFloats(const float* p, float (&v)[V]) {
  static_assert(V == 1 || V == 4, "one float or a float4");
  if constexpr (V == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    v[0] = __ldg(p);
  }
}

// One thread per (token, V consecutive channels from i): all s outputs of those channels (s at
// most kS), each element with the same operations in the same order whatever V and kS. V = 4, kS
// = 4 (Flash's hc_mult) where every row start is 16-byte aligned: a quarter of the threads, four
// times the bytes per load, few registers.
template <int V, int kS>
__global__ void __launch_bounds__(kPostThreads)
    HcPostKernel(const float* __restrict__ o, int64_t ldo, const float* __restrict__ x,
                 const float* __restrict__ post, const float* __restrict__ comb, int s, int d,
                 float* __restrict__ x_out) {
  PdlPrologue(PdlTriggerFirst{});
  const int64_t tok = blockIdx.x;
  const int i = (blockIdx.y * kPostThreads + threadIdx.x) * V;
  if (i >= d) return;  // d % V == 0
  const float* xr = x + tok * s * d;
  float xv[kS][V];
#pragma unroll
  for (int j = 0; j < kS; ++j) {
    if (j < s) {
      LoadFloats<V>(xr + static_cast<int64_t>(j) * d + i, xv[j]);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) xv[j][v] = 0.f;
    }
  }
  float ov[V];
  LoadFloats<V>(o + tok * ldo + i, ov);
  const float* pr = post + tok * s;
  const float* c = comb + tok * s * s;
  float* outr = x_out + tok * s * d;
  for (int k = 0; k < s; ++k) {
    const float pk = __ldg(pr + k);
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = __fmul_rn(pk, ov[v]);
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      if (j < s) {
        const float cj = __ldg(c + j * s + k);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = __fadd_rn(acc[v], __fmul_rn(cj, xv[j][v]));
      }
    }
    float* dst = outr + static_cast<int64_t>(k) * d + i;
    if constexpr (V == 4) {
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    } else {
      dst[0] = acc[0];
    }
  }
}

void CheckShape(const char* what, int64_t m, int64_t s, int64_t d, int64_t ld) {
  if (s < 1 || s > kHcMaxStreams) ThrowCudaError(__FILE__, __LINE__, what, "hc_mult must be in [1, 16]");
  if (m < 0 || d < 1 || s * d > INT_MAX) ThrowCudaError(__FILE__, __LINE__, what, "bad token count or width");
  if (ld < d) ThrowCudaError(__FILE__, __LINE__, what, "row stride smaller than the width");
}

// DEEPINFER_HC_PERSISTENT (read once; unset or 1: on, 0: off) runs HcPre from
// kPersistentMixMinTokens tokens on at S = 4 on HcPreMixPersistentKernel where W fits its shared
// memory (the same bits as HcMixKernel<4, false, true>). Tests override it
// (SetHcPersistentMixForTesting).
std::atomic<int> g_persistent_mix_test{-1};
std::atomic<uint64_t> g_persistent_mix_launches{0};

// From this many tokens on (measured 2026-12-03: hc_pre at batch 64 0.267 -> 0.282 ms a step on
// the persistent kernel, 16 groups for ~16 clusters; batch 256 0.460 -> 0.401; the 8k prefill
// 7.07 -> 5.57).
constexpr int64_t kPersistentMixMinTokens = 256;

bool PersistentMixUsable(int64_t m, int64_t s, int64_t d) {
  static const bool from_environment = EnvSwitch("DEEPINFER_HC_PERSISTENT", true, "cuda::HcPre");
  return TestOrEnvironment(g_persistent_mix_test, from_environment) && m >= kPersistentMixMinTokens && s == 4 &&
         CeilDiv(s * d, int64_t{kMixCluster}) <= int64_t{kPersistSteps} * kMixThreads;
}

// Clusters of HcPreMixPersistentKernel resident at once on the current device (its grid), once
// per device.
int64_t PersistentMixClusters() {
  static std::mutex mutex;
  static std::map<int, int64_t> by_device;
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = by_device.find(device);
  if (found != by_device.end()) return found->second;
  DI_CUDA_CHECK(cudaFuncSetAttribute(HcPreMixPersistentKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kPersistSmem),
                "cudaFuncSetAttribute");
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kMixCluster);
  config.blockDim = dim3(kMixThreads);
  config.dynamicSmemBytes = kPersistSmem;
  int clusters = 0;
  DI_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, HcPreMixPersistentKernel, &config),
                "cudaOccupancyMaxActiveClusters");
  if (clusters < 1) {
    ThrowCudaError(__FILE__, __LINE__, "cuda::HcPre", "no cluster of the persistent mix fits the device's SMs");
  }
  by_device[device] = clusters;
  return clusters;
}

// DEEPINFER_HC_MIX_UNROLL (read once; unset or 1: on, 0: off): the 4-token mix kernels with their
// stride loop unrolled four times (HcMixKernel's kUnroll; the same bits; measured 2026-12-05 on the
// H100, docs/performance.md version 46: `hc_pre` at batch 64 0.155 -> 0.134 ms, the decode steps
// -0.3 to -1.5%). Tests override it (SetHcMixUnrollForTesting).
std::atomic<int> g_mix_unroll_test{-1};
std::atomic<uint64_t> g_mix_unroll_launches{0};

bool MixUnrolled() {
  static const bool from_environment = EnvSwitch("DEEPINFER_HC_MIX_UNROLL", true, "cuda::HcPre");
  return TestOrEnvironment(g_mix_unroll_test, from_environment);
}

// DEEPINFER_HC_MIX_ONE_TOKEN_UNROLL (read once; unset or 1: on, 0: off): the one-token mix kernel
// (HcPre and HcHead below DEEPINFER_HC_MULTI_TOKEN_MIN tokens: decode batches 1-63) with its stride
// loop unrolled four times, so that a thread has 4 steps' 24 fn loads in flight instead of one
// step's (the same bits; 254 registers, one block an SM). At batch 1 the launch is a cluster of 8
// blocks, each reading 192 KiB of fn over 8 steps: ~13 us a launch rolled, 6 launches on the path
// of 3 layers (trace and ncu, 2026-12-07). Measured on an H100 (docs/performance.md, version 66):
// the step at batch 1 1.231 -> 1.212 ms, batches 64 and 256 unchanged. Tests override it
// (SetHcMixOneTokenUnrollForTesting).
std::atomic<int> g_mix1_unroll_test{-1};
std::atomic<uint64_t> g_mix1_unroll_launches{0};

bool OneTokenMixUnrolled() {
  static const bool from_environment = EnvSwitch("DEEPINFER_HC_MIX_ONE_TOKEN_UNROLL", true, "cuda::HcPre");
  return TestOrEnvironment(g_mix1_unroll_test, from_environment);
}

// HcMixKernel<4, kHead, kDefer> with the stride loop as MixUnrolled() says.
template <bool kHead, bool kDefer>
void LaunchMix4(const float* x, int64_t m, int64_t s, int64_t d, const HcParams& p, float* out, int64_t ldo,
                float* post, float* comb, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(CeilDiv(m, int64_t{4}) * kMixCluster);
  if (MixUnrolled()) {
    HcMixKernel<4, kHead, kDefer, 4><<<grid, kMixThreads, 0, stream>>>(x, m, static_cast<int>(s), static_cast<int>(d),
                                                                      p, out, ldo, post, comb);
    g_mix_unroll_launches.fetch_add(1);
  } else {
    HcMixKernel<4, kHead, kDefer, 1><<<grid, kMixThreads, 0, stream>>>(x, m, static_cast<int>(s), static_cast<int>(d),
                                                                      p, out, ldo, post, comb);
  }
}

template <bool kHead>
void LaunchMix(const char* what, const float* x, int64_t m, int64_t s, int64_t d, const HcParams& caller_params,
               float* out, int64_t ldo, float* post, float* comb, cudaStream_t stream) {
  if (caller_params.fn == nullptr || caller_params.base == nullptr || caller_params.scale == nullptr) {
    ThrowCudaError(__FILE__, __LINE__, what, "fn, base and scale are required");
  }
  HcParams p = caller_params;
  p.prefetch_fn = PrefetchWeights();
  const int64_t multi_min = MultiTokenMin();
  if (m >= multi_min && !kHead && s == 4) {  // Flash's hc_mult: the Sinkhorn after the mixes
    if (PersistentMixUsable(m, s, d)) {
      const int64_t clusters = std::min(CeilDiv(m, int64_t{kPersistTok}), PersistentMixClusters());
      HcPreMixPersistentKernel<<<static_cast<unsigned>(clusters * kMixCluster), kMixThreads, kPersistSmem, stream>>>(
          x, m, static_cast<int>(d), p, out, ldo, post, comb);
      g_persistent_mix_launches.fetch_add(1);
    } else {
      LaunchMix4<false, true>(x, m, s, d, p, out, ldo, post, comb, stream);
    }
    DI_CUDA_LAUNCH_CHECK(what);
    HcSinkhorn4Kernel<<<static_cast<unsigned>(CeilDiv(m * 16, int64_t{kSinkhornThreads})), kSinkhornThreads, 0,
                        stream>>>(comb, m, p.sinkhorn_iters, p.hc_eps);
  } else if (m >= multi_min) {
    LaunchMix4<kHead, false>(x, m, s, d, p, out, ldo, post, comb, stream);
  } else if (OneTokenMixUnrolled()) {
    HcMixKernel<1, kHead, false, 4><<<static_cast<unsigned>(m * kMixCluster), kMixThreads, 0, stream>>>(
        x, m, static_cast<int>(s), static_cast<int>(d), p, out, ldo, post, comb);
    g_mix1_unroll_launches.fetch_add(1);
  } else {
    HcMixKernel<1, kHead><<<static_cast<unsigned>(m * kMixCluster), kMixThreads, 0, stream>>>(
        x, m, static_cast<int>(s), static_cast<int>(d), p, out, ldo, post, comb);
  }
  DI_CUDA_LAUNCH_CHECK(what);
}

}  // namespace

void HcPre(const float* x, int64_t m, int64_t s, int64_t d, const HcParams& p, float* a, int64_t lda,
           float* post, float* comb, cudaStream_t stream) {
  CheckShape("hc_pre", m, s, d, lda);
  if (m == 0) return;
  LaunchMix<false>("hc_pre", x, m, s, d, p, a, lda, post, comb, stream);
}

void HcHead(const float* x, int64_t m, int64_t s, int64_t d, const HcParams& p, float* y, int64_t ldy,
            cudaStream_t stream) {
  CheckShape("hc_head", m, s, d, ldy);
  if (m == 0) return;
  LaunchMix<true>("hc_head", x, m, s, d, p, y, ldy, nullptr, nullptr, stream);
}

void HcPost(const float* o, int64_t ldo, const float* x, const float* post, const float* comb, int64_t m,
            int64_t s, int64_t d, float* x_out, cudaStream_t stream) {
  CheckShape("hc_post", m, s, d, ldo);
  if (m == 0) return;
  if (x_out == x) ThrowCudaError(__FILE__, __LINE__, "hc_post", "the output must not alias the input");
  if (m > INT_MAX) ThrowCudaError(__FILE__, __LINE__, "hc_post", "too many tokens");
  // Four channels per thread at hc_mult 4 where every row of o, x and x_out starts 16-byte aligned.
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (s == 4 && d % 4 == 0 && ldo % 4 == 0 && aligned(o) && aligned(x) && aligned(x_out)) {
    const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(CeilDiv(d, 4 * kPostThreads)));
    HcPostKernel<4, 4><<<grid, kPostThreads, 0, stream>>>(o, ldo, x, post, comb, static_cast<int>(s),
                                                          static_cast<int>(d), x_out);
  } else {
    const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>(CeilDiv(d, kPostThreads)));
    HcPostKernel<1, kHcMaxStreams><<<grid, kPostThreads, 0, stream>>>(o, ldo, x, post, comb, static_cast<int>(s),
                                                                      static_cast<int>(d), x_out);
  }
  DI_CUDA_LAUNCH_CHECK("hc_post");
}

namespace {

// One warp per block: 32 values a lane from a hash of (salt, block, lane, value), over 2^-20 .. 2^20
// with either sign (sums that cancel, sums that round); counts the values whose sum by
// WarpReduceScatter<32> differs in any bit from their WarpSum (with `perturb`, lane 0's value 0 is one ulp off in the
// transposed sum's input: the count must then be nonzero).
__global__ void __launch_bounds__(kWarpSize) WarpReduceScatterCheckKernel(uint32_t salt, bool perturb,
                                                                          unsigned long long* mismatches) {
  PdlPrologue();
  const int lane = static_cast<int>(threadIdx.x);
  float v[kWarpSize], expected[kWarpSize];
#pragma unroll
  for (int k = 0; k < kWarpSize; ++k) {
    uint32_t h = salt ^ (blockIdx.x * 0x9e3779b9u) ^ (static_cast<uint32_t>(lane * kWarpSize + k) * 0x85ebca6bu);
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    const float mantissa = 1.f + static_cast<float>(h & 0xffffu) / 65536.f;
    const float value = ldexpf(h & 0x80000000u ? -mantissa : mantissa, static_cast<int>((h >> 16) % 41) - 20);
    expected[k] = WarpSum(value);
    v[k] = perturb && lane == 0 && k == 0 ? nextafterf(value, INFINITY) : value;
  }
  WarpReduceScatter<kWarpSize>(v, lane);  // v[0]: value ReducedIndex<32>(lane, 0) = lane's sum
  if (__float_as_uint(v[0]) != __float_as_uint(expected[lane])) atomicAdd(mismatches, 1ull);
}

}  // namespace

void SetHcPersistentMixForTesting(int mode) {
  if (mode < -1 || mode > 1) ThrowCudaError(__FILE__, __LINE__, "SetHcPersistentMixForTesting", "takes -1, 0 or 1");
  g_persistent_mix_test.store(mode);
}

uint64_t HcPersistentMixLaunchesForTesting() { return g_persistent_mix_launches.load(); }

void SetHcMixUnrollForTesting(int mode) {
  if (mode < -1 || mode > 1) ThrowCudaError(__FILE__, __LINE__, "SetHcMixUnrollForTesting", "takes -1, 0 or 1");
  g_mix_unroll_test.store(mode);
}

uint64_t HcMixUnrollLaunchesForTesting() { return g_mix_unroll_launches.load(); }

void SetHcMixOneTokenUnrollForTesting(int mode) {
  if (mode < -1 || mode > 1) {
    ThrowCudaError(__FILE__, __LINE__, "SetHcMixOneTokenUnrollForTesting", "takes -1, 0 or 1");
  }
  g_mix1_unroll_test.store(mode);
}

uint64_t HcMixOneTokenUnrollLaunchesForTesting() { return g_mix1_unroll_launches.load(); }

uint64_t WarpReduceScatterMismatchesForTesting(bool perturb) {
  return DeviceCountForTesting("WarpReduceScatterMismatchesForTesting", [&](unsigned long long* count) {
    cudaError_t e = cudaSuccess;
    for (const uint32_t salt : {1u, 0x7f4a7c15u}) {
      if (e == cudaSuccess) WarpReduceScatterCheckKernel<<<4096, kWarpSize>>>(salt, perturb, count);
      if (e == cudaSuccess) e = cudaGetLastError();
    }
    return e;
  });
}

}  // namespace deepinfer::cuda
