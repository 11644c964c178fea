#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/indexer_ties.h"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void IndexerTiesKernel(const float* scores, int64_t max_keys, const int32_t* num_visible,
                                  const int32_t* num_candidates, int64_t top_k, int32_t* selected, int32_t* counts,
                                  cpu::ScoredCandidate* scratch, int64_t max_candidates) {
  PdlPrologue();
  __shared__ float reduce[32];
  __shared__ int redo;
  const int64_t m = blockIdx.x;
  const int64_t visible = num_visible[m];
  if (visible <= top_k) return;  // every visible row is selected either way
  const float* s = scores + m * max_keys;
  int32_t* sel = selected + m * top_k;
  const int64_t chosen = counts[m];

  // v: the smallest selected score; then how many visible scores are above it / equal to it.
  float low = INFINITY;
  for (int64_t i = threadIdx.x; i < chosen; i += blockDim.x) low = fminf(low, s[sel[i]]);
  low = -BlockMax(-low, reduce);
  float above = 0.f, equal = 0.f;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
    above += s[j] > low ? 1.f : 0.f;
    equal += s[j] == low ? 1.f : 0.f;
  }
  above = BlockSum(above, reduce);
  equal = BlockSum(equal, reduce);
  if (threadIdx.x == 0) redo = static_cast<int64_t>(above + equal) > chosen;
  __syncthreads();
  if (!redo || threadIdx.x != 0) return;

  const int64_t n = num_candidates[m] > visible ? num_candidates[m] : visible;
  cpu::ScoredCandidate* queue = scratch + m * max_candidates;
  for (int64_t j = 0; j < n; ++j) queue[j] = {j < visible ? s[j] : -INFINITY, static_cast<int32_t>(j)};
  const int64_t k = cpu::SelectLikeTorch(queue, n, top_k);
  int64_t count = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (queue[i].index < visible) queue[count++].index = queue[i].index;
  }
  // Ascending positions (insertion sort: this path is rare and k is at most top_k).
  for (int64_t i = 1; i < count; ++i) {
    const int32_t v = queue[i].index;
    int64_t p = i;
    while (p > 0 && queue[p - 1].index > v) {
      queue[p].index = queue[p - 1].index;
      --p;
    }
    queue[p].index = v;
  }
  for (int64_t i = 0; i < top_k; ++i) sel[i] = i < count ? queue[i].index : -1;
  counts[m] = static_cast<int32_t>(count);
}

}  // namespace

void IndexerTiesLikeTorch(const float* scores, int64_t max_keys, const int32_t* num_visible,
                          const int32_t* num_candidates, int64_t num_queries, int64_t top_k, int32_t* selected,
                          int32_t* counts, cpu::ScoredCandidate* scratch, int64_t max_candidates,
                          cudaStream_t stream) {
  if (num_queries == 0 || top_k == 0) return;
  if (num_queries > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "indexer_ties", "too many queries");
  IndexerTiesKernel<<<static_cast<unsigned>(num_queries), kThreads, 0, stream>>>(
      scores, max_keys, num_visible, num_candidates, top_k, selected, counts, scratch, max_candidates);
  DI_CUDA_LAUNCH_CHECK("indexer_ties");
}

}  // namespace deepinfer::cuda
