#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "base/switches.h"

namespace deepinfer::cuda {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 32;

__device__ float Softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// p of one expert's logit under the sqrt-softplus or sigmoid score (softmax needs the row).
__device__ __forceinline__ float ElementScore(RouterScoreFn score, float logit) {
  return score == RouterScoreFn::kSqrtSoftplus ? sqrtf(Softplus(logit)) : 1.f / (1.f + expf(-logit));
}

// The top-k order: a larger key first, ties to the lower expert id.
__device__ __forceinline__ void KeepBetter(float v, int i, float& best, int& best_id) {
  if (v > best || (v == best && i < best_id)) best = v, best_id = i;
}

// The warp's best (key, id) of its lanes' (KeepBetter over shuffles).
__device__ __forceinline__ void WarpBest(float& best, int& best_id) {
  for (int off = kWarpSize / 2; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int oi = __shfl_xor_sync(0xffffffffu, best_id, off);
    KeepBetter(ov, oi, best, best_id);
  }
}

// The weights of a token's chosen experts `ids` (k of them; -1: none, NaN weight): p[id] each, their
// sum in choice order, divided by it where the params normalize (not softmax), times route_scale.
// One thread.
__device__ void RouteWeights(const int32_t* ids, const float* p, const DeviceRouterParams& params, float* w) {
  const int k = static_cast<int>(params.top_k);
  float sum = 0.f;
  for (int j = 0; j < k; ++j) {
    w[j] = ids[j] >= 0 ? p[ids[j]] : __int_as_float(0x7fc00000);
    sum += w[j];
  }
  const bool normalize = params.normalize && params.score != RouterScoreFn::kSoftmax;
  for (int j = 0; j < k; ++j) {
    if (normalize) w[j] /= sum;
    w[j] *= params.route_scale;
  }
}

// One block per token. p (unbiased scores) and the biased keys live in shared memory; the top-k
// is k rounds of an arg-max over (key desc, id asc) in warp 0, which reproduces the CPU's
// partial_sort order exactly.
__global__ void RouteKernel(const float* logits, const int32_t* token_ids, DeviceRouterParams params,
                            int32_t* expert_ids, float* expert_weights) {
  PdlPrologue();
  extern __shared__ float shared[];
  const int e = static_cast<int>(params.num_experts);
  const int k = static_cast<int>(params.top_k);
  float* p = shared;       // [E]
  float* key = shared + e; // [E], −inf once taken
  __shared__ int chosen[kMaxTopK];
  __shared__ float scratch[32];
  const float* lr = logits + static_cast<int64_t>(blockIdx.x) * e;

  if (params.score == RouterScoreFn::kSoftmax) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < e; i += blockDim.x) mx = fmaxf(mx, lr[i]);
    mx = BlockMax(mx, scratch);
    for (int i = threadIdx.x; i < e; i += blockDim.x) p[i] = expf(lr[i] - mx);
    __syncthreads();
    // The CPU sums in expert order; one thread does the same.
    if (threadIdx.x == 0) {
      float sum = 0.f;
      for (int i = 0; i < e; ++i) sum += p[i];
      scratch[0] = sum;
    }
    __syncthreads();
    const float sum = scratch[0];
    __syncthreads();
    for (int i = threadIdx.x; i < e; i += blockDim.x) p[i] /= sum;
  } else {
    for (int i = threadIdx.x; i < e; i += blockDim.x) p[i] = ElementScore(params.score, lr[i]);
  }
  __syncthreads();

  if (params.tid2eid != nullptr) {
    if (threadIdx.x < k) {
      const int32_t tok = token_ids[blockIdx.x];
      int64_t id = -1;
      if (tok >= 0 && tok < params.tid2eid_rows) id = params.tid2eid[static_cast<int64_t>(tok) * k + threadIdx.x];
      chosen[threadIdx.x] = id >= 0 && id < e ? static_cast<int>(id) : -1;
    }
  } else {
    for (int i = threadIdx.x; i < e; i += blockDim.x) key[i] = p[i] + (params.bias != nullptr ? params.bias[i] : 0.f);
    __syncthreads();
    // Warp 0 alone, without block barriers: lane l keeps the best of its keys l, l + 32, …; each
    // round the warp's best of those is chosen (an exact arg-max, so the order of the reduction
    // does not matter), its key becomes −inf and only its lane rescans (E >= k: checked on the host).
    const int lane = threadIdx.x % kWarpSize;
    if (threadIdx.x < kWarpSize) {
      float best = -INFINITY;
      int best_id = 0x7fffffff;
      for (int i = lane; i < e; i += kWarpSize) KeepBetter(key[i], i, best, best_id);
      for (int round = 0; round < k; ++round) {
        float b = best;
        int bi = best_id;
        WarpBest(b, bi);
        // No key left that compares (all NaN): no expert, as RouteWeights reads -1.
        if (lane == 0) chosen[round] = bi == 0x7fffffff ? -1 : bi;
        if (bi != 0x7fffffff && lane == bi % kWarpSize) {
          key[bi] = -INFINITY;
          best = -INFINITY;
          best_id = 0x7fffffff;
          for (int i = lane; i < e; i += kWarpSize) KeepBetter(key[i], i, best, best_id);
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* ids = expert_ids + static_cast<int64_t>(blockIdx.x) * k;
    for (int j = 0; j < k; ++j) ids[j] = chosen[j];
    RouteWeights(chosen, p, params, expert_weights + static_cast<int64_t>(blockIdx.x) * k);
  }
}

}  // namespace

namespace {

// Route's limits on its parameters and m (> 0) tokens.
void CheckRoute(const DeviceRouterParams& params, int64_t m) {
  if (params.num_experts <= 0 || params.num_experts > 1024 || params.top_k <= 0 || params.top_k > kMaxTopK ||
      params.top_k > params.num_experts) {
    ThrowCudaError(__FILE__, __LINE__, "route", "need 0 < top_k <= min(32, num_experts) and num_experts <= 1024");
  }
  if (m > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "route", "more than 2^31 tokens");
}

}  // namespace

void Route(const float* logits, int64_t m, const int32_t* token_ids, const DeviceRouterParams& params,
           int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  if (m == 0) return;
  CheckRoute(params, m);
  const size_t smem = 2 * static_cast<size_t>(params.num_experts) * sizeof(float);
  RouteKernel<<<static_cast<unsigned>(m), kRouteThreads, smem, stream>>>(logits, token_ids, params, expert_ids,
                                                                        expert_weights);
  DI_CUDA_LAUNCH_CHECK("route");
}

}  // namespace deepinfer::cuda

namespace deepinfer::cuda {

namespace {

constexpr int kAlignThreads = 1024;
static_assert(kAlignThreads % kWarpSize == 0 && kAlignThreads <= kWarpSize * kWarpSize, "one scan warp");

// Single block of kAlignThreads (a multiple of 32). Pass 1: keep flags (first occurrence of an
// expert within a token) and per-expert counts (integer atomics: order-free). Pass 2: exclusive
// scan (block-wide). Pass 3: place each kept slot at
// its expert's offset + its rank among the expert's kept slots with a smaller slot number.
__device__ void AlignSlotsInBlock(const int32_t* expert_ids, int m, int k, int num_experts, int32_t* offsets,
                                  int32_t* sorted_slots, int32_t* slot_rows, int32_t* counts, int32_t* cursor) {
  const int slots = m * k;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < slots; i += blockDim.x) {
    const int t = i / k, j = i % k;
    const int e = expert_ids[i];
    bool keep = e >= 0 && e < num_experts;
    for (int jj = 0; jj < j && keep; ++jj) keep = expert_ids[t * k + jj] != e;
    slot_rows[i] = keep ? 0 : -1;
    sorted_slots[i] = -1;
    if (keep) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  {
    // Exclusive scan of the counts: thread i sums a run of ceil(E / blockDim) experts, a block
    // scan of those sums gives each run's start (integers: exact in any order).
    __shared__ int32_t warp_start[kAlignThreads / kWarpSize];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    const int per = (num_experts + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
    const int e0 = min(num_experts, static_cast<int>(threadIdx.x) * per), e1 = min(num_experts, e0 + per);
    int32_t local = 0;
    for (int e = e0; e < e1; ++e) local += counts[e];
    int32_t inclusive = local;
    for (int off = 1; off < kWarpSize; off <<= 1) {
      const int32_t v = __shfl_up_sync(0xffffffffu, inclusive, off);
      if (lane >= off) inclusive += v;
    }
    if (lane == kWarpSize - 1) warp_start[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
      const int32_t total = lane < num_warps ? warp_start[lane] : 0;
      int32_t scan = total;
      for (int off = 1; off < kWarpSize; off <<= 1) {
        const int32_t v = __shfl_up_sync(0xffffffffu, scan, off);
        if (lane >= off) scan += v;
      }
      if (lane < num_warps) warp_start[lane] = scan - total;
    }
    __syncthreads();
    int32_t run = warp_start[warp] + inclusive - local;
    for (int e = e0; e < e1; ++e) {
      offsets[e] = run;
      cursor[e] = run;
      run += counts[e];
    }
    // The last thread's run ends at the total (threads past the experts have empty runs).
    if (threadIdx.x == blockDim.x - 1) offsets[num_experts] = run;
  }
  __syncthreads();
  // Slots are visited in chunks of blockDim in increasing order; within a chunk, a slot's rank
  // among same-expert slots is counted directly, so placement is stable and deterministic.
  __shared__ int32_t chunk_expert[kAlignThreads];
  for (int base = 0; base < slots; base += blockDim.x) {
    const int i = base + threadIdx.x;
    // Entries past the chunk's slots hold -1, which matches no expert: the scan for a later
    // same-expert slot stops there (at batch 1 it walked ~1000 entries, one shared load each).
    const int chunk_slots = min(static_cast<int>(blockDim.x), slots - base);
    const int e = i < slots && slot_rows[i] >= 0 ? expert_ids[i] : -1;
    chunk_expert[threadIdx.x] = e;
    __syncthreads();
    if (e >= 0) {
      int rank = 0;
      for (int q = 0; q < static_cast<int>(threadIdx.x); ++q) rank += chunk_expert[q] == e;
      const int row = cursor[e] + rank;
      sorted_slots[row] = i;
      slot_rows[i] = row;
    }
    __syncthreads();
    if (e >= 0) {
      // The last slot of each expert in this chunk advances the cursor.
      bool last = true;
      for (int q = threadIdx.x + 1; q < chunk_slots && last; ++q) last = chunk_expert[q] != e;
      if (last) {
        int count = 0;
        for (int q = 0; q <= static_cast<int>(threadIdx.x); ++q) count += chunk_expert[q] == e;
        cursor[e] += count;
      }
    }
    __syncthreads();
  }
}

__global__ void MoeAlignKernel(const int32_t* expert_ids, int m, int k, int num_experts, int32_t* offsets,
                               int32_t* sorted_slots, int32_t* slot_rows, int32_t* counts, int32_t* cursor) {
  PdlPrologue();
  AlignSlotsInBlock(expert_ids, m, k, num_experts, offsets, sorted_slots, slot_rows, counts, cursor);
}

// Route's outputs for token t by one warp, p and key (E floats each) in shared memory: RouteKernel's
// values, selection and order (the top-k rounds' arg-max over (key desc, id asc) is exact in any
// reduction order; the softmax sum and the weights' sum run in one lane in expert and choice order,
// as RouteKernel's thread 0 runs them).
__device__ void RouteTokenInWarp(const float* logits, const int32_t* token_ids, const DeviceRouterParams& params,
                                 int t, float* p, float* key, int32_t* expert_ids, float* expert_weights) {
  const int e = static_cast<int>(params.num_experts), k = static_cast<int>(params.top_k);
  const int lane = threadIdx.x % kWarpSize;
  const float* lr = logits + static_cast<int64_t>(t) * e;
  int32_t* ids = expert_ids + static_cast<int64_t>(t) * k;
  float* w = expert_weights + static_cast<int64_t>(t) * k;
  if (params.score == RouterScoreFn::kSoftmax) {
    float mx = -INFINITY;
    for (int i = lane; i < e; i += kWarpSize) mx = fmaxf(mx, lr[i]);
    mx = WarpMax(mx);
    for (int i = lane; i < e; i += kWarpSize) p[i] = expf(lr[i] - mx);
    __syncwarp();
    float sum = 0.f;
    if (lane == 0) {
      for (int i = 0; i < e; ++i) sum += p[i];
    }
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int i = lane; i < e; i += kWarpSize) p[i] /= sum;
  } else {
    for (int i = lane; i < e; i += kWarpSize) p[i] = ElementScore(params.score, lr[i]);
  }
  __syncwarp();
  if (params.tid2eid != nullptr) {
    if (lane < k) {
      const int32_t tok = token_ids[t];
      int64_t id = -1;
      if (tok >= 0 && tok < params.tid2eid_rows) id = params.tid2eid[static_cast<int64_t>(tok) * k + lane];
      ids[lane] = id >= 0 && id < e ? static_cast<int32_t>(id) : -1;
    }
  } else {
    for (int i = lane; i < e; i += kWarpSize) key[i] = p[i] + (params.bias != nullptr ? params.bias[i] : 0.f);
    __syncwarp();
    for (int round = 0; round < k; ++round) {
      float best = -INFINITY;
      int best_id = 0x7fffffff;
      for (int i = lane; i < e; i += kWarpSize) KeepBetter(key[i], i, best, best_id);
      WarpBest(best, best_id);
      if (lane == 0) {
        ids[round] = best_id;
        key[best_id] = -INFINITY;
      }
      __syncwarp();
    }
  }
  __syncwarp();
  if (lane == 0) RouteWeights(ids, p, params, w);
}

// Route then MoeAlign for at most kRouteAlignMaxTokens tokens in one block of kAlignThreads: warp
// t routes token t (its p and keys in the dynamic shared memory, 2E floats a warp), then the block
// aligns the slots as MoeAlignKernel does. The same outputs as the two kernels.
constexpr int kRouteAlignMaxTokens = 8;
__global__ void __launch_bounds__(kAlignThreads) RouteAlignKernel(const float* logits, const int32_t* token_ids,
                                                                  DeviceRouterParams params, int m,
                                                                  int32_t* expert_ids, float* expert_weights,
                                                                  int32_t* offsets, int32_t* sorted_slots,
                                                                  int32_t* slot_rows, int32_t* counts,
                                                                  int32_t* cursor) {
  PdlPrologue();
  extern __shared__ float route_rows[];
  const int warp = threadIdx.x / kWarpSize;
  const int e = static_cast<int>(params.num_experts);
  if (warp < m) {
    float* p = route_rows + static_cast<int64_t>(warp) * 2 * e;
    RouteTokenInWarp(logits, token_ids, params, warp, p, p + e, expert_ids, expert_weights);
  }
  __syncthreads();  // every token's ids in global memory, seen by the whole block
  AlignSlotsInBlock(expert_ids, m, static_cast<int>(params.top_k), e, offsets, sorted_slots, slot_rows, counts,
                    cursor);
}

// From kMoeAlignDeviceSlots slots on, MoeAlign runs over the whole device instead of one block,
// with the same outputs (they are defined exactly: rows in increasing slot order per expert):
//   MoeCountKernel, grid-strided over the slots: slot_rows[i] = sorted_slots[i] = -1, and each
//     kept slot (a valid expert, first in its token) counted into counts[e] (integer atomics);
//   MoePlaceKernel, one warp per expert e: its offset (the counts below e summed), then every
//     slot in order, 32 at a time: the kept slots of e by ballot, each at offset + the kept slots
//     of e before it.
// The single block places chunk by chunk with a quadratic rank count per chunk: ~2 ms for the
// 49,152 slots of an 8k Flash prefill (2026-12-01 profile), and ~65 us a call at decode batch 256
// (1,536 slots; 2026-12-05 per-op profile), when the device-wide path began at 4,096 slots.
constexpr int kPlaceThreads = 256;
constexpr int kPlaceUnroll = 8;  // slot loads in flight per lane

// Whether slot i = (t, j) is kept for expert e = ids[i]: a valid expert not named earlier by t.
__device__ __forceinline__ bool KeptSlot(const int32_t* ids, int i, int k, int e, int num_experts) {
  if (e < 0 || e >= num_experts) return false;
  const int t = i / k, j = i % k;
  for (int jj = 0; jj < j; ++jj) {
    if (ids[t * k + jj] == e) return false;
  }
  return true;
}

__global__ void __launch_bounds__(256) MoeCountKernel(const int32_t* __restrict__ ids, int slots, int k,
                                                      int num_experts, int32_t* counts, int32_t* sorted_slots,
                                                      int32_t* slot_rows) {
  PdlPrologue();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < slots; i += gridDim.x * blockDim.x) {
    sorted_slots[i] = -1;
    slot_rows[i] = -1;
    const int e = ids[i];
    if (KeptSlot(ids, i, k, e, num_experts)) atomicAdd(&counts[e], 1);
  }
}

__global__ void __launch_bounds__(kPlaceThreads) MoePlaceKernel(const int32_t* __restrict__ ids, int slots, int k,
                                                                int num_experts, const int32_t* counts,
                                                                int32_t* offsets, int32_t* sorted_slots,
                                                                int32_t* slot_rows) {
  PdlPrologue();
  const int e = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / kWarpSize);
  if (e >= num_experts) return;  // uniform per warp
  const int lane = threadIdx.x % kWarpSize;
  int32_t below = 0;
  for (int q = lane; q < e; q += kWarpSize) below += counts[q];
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) below += __shfl_xor_sync(0xffffffffu, below, offset);
  if (lane == 0) {
    offsets[e] = below;
    if (e == num_experts - 1) offsets[num_experts] = below + counts[e];
  }
  const uint32_t lower = (1u << lane) - 1u;
  int32_t row = below;
  for (int base = 0; base < slots; base += kWarpSize * kPlaceUnroll) {
    int32_t id[kPlaceUnroll];
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u) {
      const int i = base + u * kWarpSize + lane;
      id[u] = i < slots ? __ldg(ids + i) : -1;
    }
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u) {
      const int i = base + u * kWarpSize + lane;
      const bool kept = id[u] == e && KeptSlot(ids, i, k, e, num_experts);
      const uint32_t mask = __ballot_sync(0xffffffffu, kept);
      if (kept) {
        const int32_t r = row + __popc(mask & lower);
        sorted_slots[r] = i;
        slot_rows[i] = r;
      }
      row += __popc(mask);
    }
  }
}

__global__ void MoeGatherKernel(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots,
                                const int32_t* row_count, int64_t top_k, const float* expert_weights, float* xe,
                                float* row_weights, bool vec) {
  PdlPrologue();
  const int64_t r = blockIdx.x;
  if (row_count != nullptr && r >= *row_count) return;
  const int32_t slot = sorted_slots[r];
  if (slot < 0) return;
  const float* src = x + (slot / top_k) * ldx;
  float* dst = xe + r * d;
  if (vec) {  // float4 copies: a quarter of the load-then-store round trips
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* dst4 = reinterpret_cast<float4*>(dst);
    for (int64_t i = threadIdx.x; i < d / 4; i += blockDim.x) dst4[i] = __ldg(src4 + i);
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = src[i];
  }
  if (threadIdx.x == 0 && row_weights != nullptr) row_weights[r] = expert_weights[slot];
}

// Rows of ye a thread loads before adding them (all in flight together), per column group.
constexpr int kCombineBatch = 8;
constexpr int64_t kCombineColumnBlocks = 4;  // the most blocks MoeCombine gives a token

__device__ __forceinline__ void AddTo(float& acc, float v) { acc += v; }
__device__ __forceinline__ void AddTo(float4& acc, const float4& v) {
  acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
}

// One token's out_row[i] = Σ_q ye[rows[q]][i] (q in order, from +0) + shared_row[i] (if given), for
// i < width elements of T (float, or float4: four columns at once); the token's gridDim.y blocks
// take the elements blockIdx.y · blockDim.x + threadIdx.x, + gridDim.y · blockDim.x, ..., and each
// thread loads kCombineBatch rows' values before adding them.
template <typename T>
__device__ __forceinline__ void CombineColumns(const T* ye, int64_t width, const int32_t* rows, int n,
                                               const T* shared_row, T* out_row) {
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < width; i += stride) {
    T acc{};
    for (int q0 = 0; q0 < n; q0 += kCombineBatch) {
      T v[kCombineBatch];
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u) {
        if (q0 + u < n) v[u] = __ldg(ye + static_cast<int64_t>(rows[q0 + u]) * width + i);
      }
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u) {
        if (q0 + u < n) AddTo(acc, v[u]);
      }
    }
    if (shared_row != nullptr) AddTo(acc, __ldg(shared_row + i));
    out_row[i] = acc;
  }
}

// out[t] = Σ (the token's kept rows of ye, by ascending expert id) + shared[t], added in that order
// from +0 (the CPU model's order). Grid (tokens, column blocks): each block of token blockIdx.x
// puts the slots through shared memory; thread 0 orders them (k <= 32: insertion sort by expert id,
// slot order among equals). Each thread then takes columns (four at a time where `vec`), loading up
// to kCombineBatch rows' values before adding them. A column's adds do not depend on the grid.
__global__ void MoeCombineKernel(const float* ye, const int32_t* slot_rows, const int32_t* expert_ids, int64_t k,
                                 int64_t d, const float* shared, float* out, bool vec) {
  PdlPrologue(PdlTriggerFirst{});
  __shared__ int32_t s_rows[kMaxTopK];
  __shared__ int32_t s_experts[kMaxTopK];
  __shared__ int32_t s_sorted[kMaxTopK];
  __shared__ int s_n;
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    s_rows[threadIdx.x] = slot_rows[t * k + threadIdx.x];
    s_experts[threadIdx.x] = expert_ids[t * k + threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t experts[kMaxTopK];
    int n = 0;
    for (int j = 0; j < k; ++j) {
      const int32_t row = s_rows[j];
      if (row < 0) continue;
      const int32_t e = s_experts[j];
      int p = n++;
      while (p > 0 && experts[p - 1] > e) {
        experts[p] = experts[p - 1];
        s_sorted[p] = s_sorted[p - 1];
        --p;
      }
      experts[p] = e;
      s_sorted[p] = row;
    }
    s_n = n;
  }
  __syncthreads();
  if (vec) {
    CombineColumns(reinterpret_cast<const float4*>(ye), d / 4, s_sorted, s_n,
                   shared != nullptr ? reinterpret_cast<const float4*>(shared + t * d) : nullptr,
                   reinterpret_cast<float4*>(out + t * d));
  } else {
    CombineColumns(ye, d, s_sorted, s_n, shared != nullptr ? shared + t * d : nullptr, out + t * d);
  }
}

}  // namespace

size_t MoeAlignScratchBytes(int64_t num_slots, int64_t num_experts) {
  return 2 * static_cast<size_t>(num_experts) * sizeof(int32_t);
}

void MoeAlign(const int32_t* expert_ids, int64_t m, int64_t top_k, int64_t num_experts, int32_t* expert_offsets,
              int32_t* sorted_slots, int32_t* slot_rows, void* scratch, cudaStream_t stream) {
  if (top_k <= 0 || top_k > kMaxTopK || num_experts <= 0 || m * top_k > 0x7fffffff) {
    ThrowCudaError(__FILE__, __LINE__, "moe_align", "need 0 < top_k <= 32, experts > 0 and fewer than 2^31 slots");
  }
  int32_t* counts = static_cast<int32_t*>(scratch);
  const int64_t slots = m * top_k;
  if (slots >= kMoeAlignDeviceSlots) {
    DI_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(num_experts) * sizeof(int32_t), stream),
                  "moe_align: cudaMemsetAsync");
    const int64_t count_blocks = std::min<int64_t>(CeilDiv(slots, 256), 1024);
    MoeCountKernel<<<static_cast<unsigned>(count_blocks), 256, 0, stream>>>(
        expert_ids, static_cast<int>(slots), static_cast<int>(top_k), static_cast<int>(num_experts), counts,
        sorted_slots, slot_rows);
    DI_CUDA_LAUNCH_CHECK("moe_align count");
    const int64_t place_blocks = CeilDiv(num_experts * kWarpSize, kPlaceThreads);
    MoePlaceKernel<<<static_cast<unsigned>(place_blocks), kPlaceThreads, 0, stream>>>(
        expert_ids, static_cast<int>(slots), static_cast<int>(top_k), static_cast<int>(num_experts), counts,
        expert_offsets, sorted_slots, slot_rows);
    DI_CUDA_LAUNCH_CHECK("moe_align place");
    return;
  }
  MoeAlignKernel<<<1, kAlignThreads, 0, stream>>>(expert_ids, static_cast<int>(m), static_cast<int>(top_k),
                                                  static_cast<int>(num_experts), expert_offsets, sorted_slots,
                                                  slot_rows, counts, counts + num_experts);
  DI_CUDA_LAUNCH_CHECK("moe_align");
}

// DEEPINFER_ROUTE_ALIGN (read once; unset or 0: off, 1: on): RouteAndAlign of at most
// kRouteAlignMaxTokens tokens as one launch (RouteAlignKernel) instead of RouteKernel and
// MoeAlignKernel: the same outputs, one launch fewer a layer on a small decode step's longest path
// (both are one block at batch 1, 2026-12-07). Off until measured. Tests override it
// (SetRouteAlignForTesting).
std::atomic<int> g_route_align_for_testing{-1};

bool RouteAlignOn() {
  static const bool on = ParseOnOffSwitch("DEEPINFER_ROUTE_ALIGN", std::getenv("DEEPINFER_ROUTE_ALIGN"), false);
  return TestOrEnvironment(g_route_align_for_testing, on);
}

void SetRouteAlignForTesting(int mode) { g_route_align_for_testing.store(mode < 0 ? -1 : mode == 1 ? 1 : 0); }

bool RouteAndAlign(const float* logits, int64_t m, const int32_t* token_ids, const DeviceRouterParams& params,
                   int32_t* expert_ids, float* expert_weights, int32_t* expert_offsets, int32_t* sorted_slots,
                   int32_t* slot_rows, void* scratch, cudaStream_t stream) {
  if (m > 0) CheckRoute(params, m);
  const size_t route_bytes = static_cast<size_t>(m) * 2 * static_cast<size_t>(params.num_experts) * sizeof(float);
  const bool one_launch = RouteAlignOn() && m > 0 && m <= kRouteAlignMaxTokens && route_bytes <= 32 * 1024 &&
                          m * params.top_k < kMoeAlignDeviceSlots;
  if (!one_launch) {
    Route(logits, m, token_ids, params, expert_ids, expert_weights, stream);
    MoeAlign(expert_ids, m, params.top_k, params.num_experts, expert_offsets, sorted_slots, slot_rows, scratch,
             stream);
    return false;
  }
  int32_t* counts = static_cast<int32_t*>(scratch);
  RouteAlignKernel<<<1, kAlignThreads, route_bytes, stream>>>(
      logits, token_ids, params, static_cast<int>(m), expert_ids, expert_weights, expert_offsets, sorted_slots,
      slot_rows, counts, counts + params.num_experts);
  DI_CUDA_LAUNCH_CHECK("route and align");
  return true;
}

void MoeGather(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, int64_t max_rows, int64_t top_k,
               const float* expert_weights, float* xe, float* row_weights, cudaStream_t stream) {
  MoeGather(x, ldx, d, sorted_slots, max_rows, nullptr, top_k, expert_weights, xe, row_weights, stream);
}

void MoeGather(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, int64_t max_rows,
               const int32_t* row_count, int64_t top_k, const float* expert_weights, float* xe, float* row_weights,
               cudaStream_t stream) {
  if (max_rows == 0) return;
  if (max_rows > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "moe_gather", "too many rows");
  const bool vec = Aligned(x, ldx * 4, 16) && Aligned(xe, d * 4, 16);
  MoeGatherKernel<<<static_cast<unsigned>(max_rows), 256, 0, stream>>>(x, ldx, d, sorted_slots, row_count, top_k,
                                                                       expert_weights, xe, row_weights, vec);
  DI_CUDA_LAUNCH_CHECK("moe_gather");
}

void MoeCombine(const float* ye, const int32_t* slot_rows, const int32_t* expert_ids, int64_t m, int64_t top_k,
                int64_t d, const float* shared, float* out, cudaStream_t stream) {
  if (m == 0) return;
  if (top_k > kMaxTopK || m > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "moe_combine", "bad shape");
  const bool vec = Aligned(ye, d * 4, 16) && Aligned(out, d * 4, 16) && Aligned(shared, d * 4, 16);
  // Up to kCombineColumnBlocks blocks a token, so that a thread holds one element: at batch 1 one
  // block of a 4096-wide row took four rounds of loads (~6.6 us a layer, 2026-12-07 trace).
  const int64_t width = vec ? d / 4 : d;
  const dim3 grid(static_cast<unsigned>(m),
                  static_cast<unsigned>(std::clamp<int64_t>(CeilDiv(width, 256), 1, kCombineColumnBlocks)));
  MoeCombineKernel<<<grid, 256, 0, stream>>>(ye, slot_rows, expert_ids, top_k, d, shared, out, vec);
  DI_CUDA_LAUNCH_CHECK("moe_combine");
}

}  // namespace deepinfer::cuda
