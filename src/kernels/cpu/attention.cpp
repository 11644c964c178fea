#include "kernels/cpu/attention.h"

#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deepinfer::cpu {

void AttentionWithSink(const float* q, int64_t num_heads, const float* kv, int64_t n, int64_t d,
                       const float* sinks, float scale, float* scores, float* out, bool bf16_inputs) {
  if (n == 0) {
    std::fill(out, out + num_heads * d, 0.f);
    return;
  }
  EnsureBlasSingleThreaded();
  const int h = static_cast<int>(num_heads), ni = static_cast<int>(n), di = static_cast<int>(d);
  std::vector<float> q_bf16;
  if (bf16_inputs) {
    q_bf16.assign(q, q + num_heads * d);
    Bf16Round(q_bf16.data(), num_heads * d);
    q = q_bf16.data();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, h, ni, di, scale, q, di, kv, di, 0.f,
              scores, ni);
  for (int64_t hh = 0; hh < num_heads; ++hh) {
    float* s = scores + hh * n;
    float mx = sinks[hh];
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
    const float denom = sum + std::exp(sinks[hh] - mx);
    if (bf16_inputs) Bf16Round(s, n);
    for (int64_t j = 0; j < n; ++j) s[j] /= denom;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h, di, ni, 1.f, scores, ni, kv, di, 0.f,
              out, di);
}

}  // namespace deepinfer::cpu
