#include "kernels/cpu/indexer.h"

#include "kernels/cpu/blas.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
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
  std::vector<std::pair<float, int32_t>> queue(static_cast<size_t>(num_candidates));
  for (int64_t j = 0; j < num_candidates; ++j) {
    queue[j] = {j < num_visible ? 0.f : -std::numeric_limits<float>::infinity(), static_cast<int32_t>(j)};
  }
  for (int64_t h = 0; h < num_heads; ++h) {
    const float* row = per_head + h * num_visible;
    for (int64_t j = 0; j < num_visible; ++j) queue[j].first += std::max(row[j], 0.f) * weights[h];
  }
  const int64_t k = std::min(top_k, num_candidates);
  auto greater = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  if (k * 64 <= num_candidates) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
  } else {
    std::nth_element(queue.begin(), queue.begin() + k - 1, queue.end(), greater);
  }
  int64_t count = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (queue[i].second < num_visible) selected[count++] = queue[i].second;
  }
  return count;
}

}  // namespace deepinfer::cpu
