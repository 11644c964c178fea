#include "kernels/cpu/indexer.h"

#include "kernels/cpu/blas.h"
#include "kernels/cpu/select_like_torch.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace deepinfer::cpu {

int64_t IndexerTopK(const float* q, const float* weights, int64_t num_heads, int64_t head_dim,
                    const float* keys, int64_t num_visible, int64_t num_candidates, int64_t top_k,
                    float* scratch, int32_t* selected) {
  if (num_visible == 0) return 0;
  EnsureBlasSingleThreaded();
  float* per_head = scratch;  // [H, num_visible]
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(num_heads),
              static_cast<int>(num_visible), static_cast<int>(head_dim), 1.f, q,
              static_cast<int>(head_dim), keys, static_cast<int>(head_dim), 0.f, per_head,
              static_cast<int>(num_visible));
  std::vector<ScoredCandidate> queue(static_cast<size_t>(num_candidates));
  for (int64_t j = 0; j < num_candidates; ++j) {
    queue[j] = {j < num_visible ? 0.f : -std::numeric_limits<float>::infinity(), static_cast<int32_t>(j)};
  }
  for (int64_t h = 0; h < num_heads; ++h) {
    const float* row = per_head + h * num_visible;
    for (int64_t j = 0; j < num_visible; ++j) queue[j].score += std::max(row[j], 0.f) * weights[h];
  }
  // torch's CPU top-k over the candidate queue (the GPU's tie resolution runs the same routine).
  const int64_t k = SelectLikeTorch(queue.data(), num_candidates, top_k);
  int64_t count = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (queue[i].index < num_visible) selected[count++] = queue[i].index;
  }
  return count;
}

}  // namespace deepinfer::cpu
