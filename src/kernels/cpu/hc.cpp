#include "kernels/cpu/hc.h"

#include "base/thread_pool.h"
#include "kernels/cpu/linear.h"

#include <cmath>
#include <vector>

namespace deepinfer::cpu {

namespace {

float Sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

// mix[m, :] = (fn · X[m]) / sqrt(mean(X[m]²) + eps) for every token. mix: [M, R].
std::vector<float> Mixes(const TensorView& x, const HcParams& p, int64_t rows) {
  const int64_t m = x.size(0), width = x.size(1) * x.size(2);
  DI_CHECK(x.is_contiguous(), "hc: streams must be contiguous");
  DI_CHECK(p.fn.size(0) == rows && p.fn.size(1) == width && p.fn.dtype() == DType::kF32,
           "hc: fn is {}, expected [{}, {}] f32", p.fn.ShapeString(), rows, width);
  std::vector<float> mix(static_cast<size_t>(m * rows));
  const float* xp = x.data<float>();
  // Row by row with the fixed-order dot product: batch invariant, like Linear.
  ParallelFor(m, std::max<int64_t>(1, 32768 / (rows * width)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < rows; ++j) mix[r * rows + j] = DotF32(xp + r * width, p.fn.data<float>() + j * width, width);
    }
  });
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = xp + r * width;
    float ss = 0.f;
    for (int64_t i = 0; i < width; ++i) ss += xr[i] * xr[i];
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(width) + p.norm_eps);
    for (int64_t j = 0; j < rows; ++j) mix[r * rows + j] *= inv;
  }
  return mix;
}

// Sinkhorn-Knopp on an S×S matrix in place: row softmax + eps, column normalize, then
// (iters − 1) × (row normalize, column normalize), eps in every denominator.
void Sinkhorn(float* c, int64_t s, int64_t iters, float eps) {
  for (int64_t j = 0; j < s; ++j) {
    float* row = c + j * s;
    float mx = row[0];
    for (int64_t k = 1; k < s; ++k) mx = std::max(mx, row[k]);
    float sum = 0.f;
    for (int64_t k = 0; k < s; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int64_t k = 0; k < s; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int64_t k = 0; k < s; ++k) {
      float sum = 0.f;
      for (int64_t j = 0; j < s; ++j) sum += c[j * s + k];
      for (int64_t j = 0; j < s; ++j) c[j * s + k] /= (sum + eps);
    }
  };
  normalize_columns();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t j = 0; j < s; ++j) {
      float sum = 0.f;
      for (int64_t k = 0; k < s; ++k) sum += c[j * s + k];
      for (int64_t k = 0; k < s; ++k) c[j * s + k] /= (sum + eps);
    }
    normalize_columns();
  }
}

void WeightedStreamSum(const float* xr, const float* w, int64_t s, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) out[i] = 0.f;
  for (int64_t j = 0; j < s; ++j) {
    const float wj = w[j];
    const float* xs = xr + j * d;
    for (int64_t i = 0; i < d; ++i) out[i] += wj * xs[i];
  }
}

}  // namespace

void HcPre(const TensorView& x, const HcParams& p, const TensorView& a, const TensorView& post,
           const TensorView& comb) {
  const int64_t m = x.size(0), s = x.size(1), d = x.size(2);
  const int64_t rows = (2 + s) * s;
  const std::vector<float> mix = Mixes(x, p, rows);
  const float* base = p.base.data<float>();
  const float* scale = p.scale.data<float>();
  for (int64_t r = 0; r < m; ++r) {
    const float* mr = mix.data() + r * rows;
    float pre[16];
    DI_CHECK(s <= 16, "hc_mult {} too large", s);
    for (int64_t j = 0; j < s; ++j) pre[j] = Sigmoid(mr[j] * scale[0] + base[j]) + p.hc_eps;
    float* post_r = post.data<float>() + r * s;
    for (int64_t j = 0; j < s; ++j) post_r[j] = 2.f * Sigmoid(mr[s + j] * scale[1] + base[s + j]);
    float* c = comb.data<float>() + r * s * s;
    for (int64_t j = 0; j < s * s; ++j) c[j] = mr[2 * s + j] * scale[2] + base[2 * s + j];
    Sinkhorn(c, s, p.sinkhorn_iters, p.hc_eps);
    WeightedStreamSum(x.data<float>() + r * s * d, pre, s, d, a.data<float>() + r * a.stride(0));
  }
}

void HcPost(const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out) {
  const int64_t m = x.size(0), s = x.size(1), d = x.size(2);
  DI_CHECK(x_out.raw() != x.raw(), "hc_post output must not alias its input");
  ParallelFor(m, std::max<int64_t>(1, 8192 / (s * d)), [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* orow = o.data<float>() + r * o.stride(0);
    const float* xr = x.data<float>() + r * s * d;
    const float* pr = post.data<float>() + r * s;
    const float* c = comb.data<float>() + r * s * s;
    for (int64_t k = 0; k < s; ++k) {
      float* out = x_out.data<float>() + (r * s + k) * d;
      for (int64_t i = 0; i < d; ++i) out[i] = pr[k] * orow[i];
      for (int64_t j = 0; j < s; ++j) {
        const float cjk = c[j * s + k];
        const float* xs = xr + j * d;
        for (int64_t i = 0; i < d; ++i) out[i] += cjk * xs[i];
      }
    }
  }
  });
}

void HcHead(const TensorView& x, const HcParams& p, const TensorView& y) {
  const int64_t m = x.size(0), s = x.size(1), d = x.size(2);
  const std::vector<float> mix = Mixes(x, p, s);
  const float* base = p.base.data<float>();
  const float scale = p.scale.data<float>()[0];
  for (int64_t r = 0; r < m; ++r) {
    float w[16];
    for (int64_t j = 0; j < s; ++j) w[j] = Sigmoid(mix[r * s + j] * scale + base[j]) + p.hc_eps;
    WeightedStreamSum(x.data<float>() + r * s * d, w, s, d, y.data<float>() + r * y.stride(0));
  }
}

}  // namespace deepinfer::cpu
