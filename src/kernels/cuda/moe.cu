#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe.h"

namespace deepinfer::cuda {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 32;

__device__ float Softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// One block per token. p (unbiased scores) and the biased keys live in shared memory; the top-k
// is k rounds of a block arg-max over (key desc, id asc), which reproduces the CPU's
// partial_sort order exactly.
__global__ void RouteKernel(const float* logits, const int32_t* token_ids, DeviceRouterParams params,
                            int32_t* expert_ids, float* expert_weights) {
  extern __shared__ float shared[];
  const int e = static_cast<int>(params.num_experts);
  const int k = static_cast<int>(params.top_k);
  float* p = shared;       // [E]
  float* key = shared + e; // [E], −inf once taken
  __shared__ float red_val[32];
  __shared__ int red_id[32];
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
    for (int i = threadIdx.x; i < e; i += blockDim.x) {
      p[i] = params.score == RouterScoreFn::kSqrtSoftplus ? sqrtf(Softplus(lr[i])) : 1.f / (1.f + expf(-lr[i]));
    }
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
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    for (int round = 0; round < k; ++round) {
      float best = -INFINITY;
      int best_id = 0x7fffffff;
      for (int i = threadIdx.x; i < e; i += blockDim.x) {
        const float v = key[i];
        if (v > best || (v == best && i < best_id)) best = v, best_id = i;
      }
      for (int off = kWarpSize / 2; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, off);
        const int oi = __shfl_xor_sync(0xffffffffu, best_id, off);
        if (ov > best || (ov == best && oi < best_id)) best = ov, best_id = oi;
      }
      if (lane == 0) red_val[warp] = best, red_id[warp] = best_id;
      __syncthreads();
      if (threadIdx.x == 0) {
        const int warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
        float b = red_val[0];
        int bi = red_id[0];
        for (int w = 1; w < warps; ++w) {
          if (red_val[w] > b || (red_val[w] == b && red_id[w] < bi)) b = red_val[w], bi = red_id[w];
        }
        chosen[round] = bi;
        key[bi] = -INFINITY;
        // All keys −inf (E < k cannot happen: checked on the host), so bi is a real id.
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* ids = expert_ids + static_cast<int64_t>(blockIdx.x) * k;
    float* w = expert_weights + static_cast<int64_t>(blockIdx.x) * k;
    float sum = 0.f;
    for (int j = 0; j < k; ++j) {
      ids[j] = chosen[j];
      w[j] = chosen[j] >= 0 ? p[chosen[j]] : __int_as_float(0x7fc00000);
      sum += w[j];
    }
    const bool normalize = params.normalize && params.score != RouterScoreFn::kSoftmax;
    for (int j = 0; j < k; ++j) {
      if (normalize) w[j] /= sum;
      w[j] *= params.route_scale;
    }
  }
}

}  // namespace

void Route(const float* logits, int64_t m, const int32_t* token_ids, const DeviceRouterParams& params,
           int32_t* expert_ids, float* expert_weights, cudaStream_t stream) {
  if (m == 0) return;
  if (params.num_experts <= 0 || params.num_experts > 1024 || params.top_k <= 0 || params.top_k > kMaxTopK ||
      params.top_k > params.num_experts) {
    ThrowCudaError(__FILE__, __LINE__, "route", "need 0 < top_k <= min(32, num_experts) and num_experts <= 1024");
  }
  if (m > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "route", "more than 2^31 tokens");
  const size_t smem = 2 * static_cast<size_t>(params.num_experts) * sizeof(float);
  RouteKernel<<<static_cast<unsigned>(m), kRouteThreads, smem, stream>>>(logits, token_ids, params, expert_ids,
                                                                        expert_weights);
  DI_CUDA_LAUNCH_CHECK("route");
}

}  // namespace deepinfer::cuda
