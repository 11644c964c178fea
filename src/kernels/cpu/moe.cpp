#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"

namespace deepinfer::cpu {

namespace {
float Softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
}  // namespace

void Route(const float* logits, int64_t m, const int32_t* token_ids, const RouterParams& params,
           int32_t* expert_ids, float* expert_weights) {
  const int64_t e = params.num_experts, k = params.top_k;
  std::vector<float> p(static_cast<size_t>(e)), biased(static_cast<size_t>(e));
  std::vector<int32_t> order(static_cast<size_t>(e));
  for (int64_t r = 0; r < m; ++r) {
    const float* lr = logits + r * e;
    switch (params.score) {
      case RouterScore::kSqrtSoftplus:
        for (int64_t i = 0; i < e; ++i) p[i] = std::sqrt(Softplus(lr[i]));
        break;
      case RouterScore::kSigmoid:
        for (int64_t i = 0; i < e; ++i) p[i] = 1.f / (1.f + std::exp(-lr[i]));
        break;
      case RouterScore::kSoftmax: {
        const float mx = *std::max_element(lr, lr + e);
        float sum = 0.f;
        for (int64_t i = 0; i < e; ++i) sum += (p[i] = std::exp(lr[i] - mx));
        for (int64_t i = 0; i < e; ++i) p[i] /= sum;
        break;
      }
    }
    int32_t* ids = expert_ids + r * k;
    if (params.tid2eid != nullptr) {
      const int32_t tok = token_ids[r];
      DI_CHECK(tok >= 0 && tok < params.tid2eid_rows, "token id {} outside tid2eid", tok);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t id = params.tid2eid[tok * k + j];
        DI_CHECK(id >= 0 && id < e, "tid2eid[{}] names expert {} of {}", tok, id, e);
        ids[j] = static_cast<int32_t>(id);
      }
    } else {
      for (int64_t i = 0; i < e; ++i) biased[i] = p[i] + (params.bias ? params.bias[i] : 0.f);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
      });
      std::copy(order.begin(), order.begin() + k, ids);
    }
    float* w = expert_weights + r * k;
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = p[ids[j]]);
    const bool normalize = params.normalize && params.score != RouterScore::kSoftmax;
    for (int64_t j = 0; j < k; ++j) {
      if (normalize) w[j] /= sum;
      w[j] *= params.route_scale;
    }
  }
}

void ClampedSwiGlu(float* g, const float* u, int64_t n, float limit, float weight) {
  for (int64_t i = 0; i < n; ++i) {
    float gate = g[i], up = u[i];
    if (limit > 0.f) {
      gate = std::min(gate, limit);
      up = std::clamp(up, -limit, limit);
    }
    const float silu = gate / (1.f + std::exp(-gate));
    g[i] = silu * up * weight;
  }
}

}  // namespace deepinfer::cpu
