#include "kernels/cpu/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

namespace deepinfer::cpu {

namespace {

constexpr int64_t kGemvMaxRows = 4;       // M at or below this uses the dot-product path
constexpr int64_t kTileRows = 256;        // weight rows dequantized per sgemm call
constexpr int64_t kMinParallelMacs = 1 << 18;  // below this, threads cost more than they save

float Dot(const float* a, const float* b, int64_t n) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

bool IsDenseF32(const LinearWeight& w) {
  return w.format == WeightFormat::kDense && w.data.dtype() == DType::kF32;
}

void CheckShapes(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  DI_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "linear expects f32 activations");
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2, "linear expects 2-d x and y");
  DI_CHECK(x.size(1) == w.in_features, "linear: x has {} columns, weight expects {}", x.size(1),
           w.in_features);
  DI_CHECK(y.size(0) == x.size(0) && y.size(1) == w.out_features,
           "linear: y is {}, expected [{}, {}]", y.ShapeString(), x.size(0), w.out_features);
  DI_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "linear needs unit column stride");
}

}  // namespace

void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  CheckShapes(x, w, y);
  const int64_t m = x.size(0), k = w.in_features, n = w.out_features;
  if (m == 0) return;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t ldx = x.stride(0), ldy = y.stride(0);

  if (IsDenseF32(w)) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.f, xp, static_cast<int>(ldx), w.data.data<float>(),
                static_cast<int>(w.data.stride(0)), 0.f, yp, static_cast<int>(ldy));
    return;
  }
  if (m <= kGemvMaxRows) {
#pragma omp parallel if (n * k >= kMinParallelMacs)
    {
      std::vector<float> row(static_cast<size_t>(k));
#pragma omp for schedule(static)
      for (int64_t o = 0; o < n; ++o) {
        DequantizeRow(w, o, row.data());
        for (int64_t r = 0; r < m; ++r) yp[r * ldy + o] = Dot(xp + r * ldx, row.data(), k);
      }
    }
    return;
  }
  std::vector<float> tile(static_cast<size_t>(std::min(n, kTileRows) * k));
  for (int64_t o0 = 0; o0 < n; o0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, n - o0);
#pragma omp parallel for schedule(static) if (rows * k >= kMinParallelMacs)
    for (int64_t o = 0; o < rows; ++o) DequantizeRow(w, o0 + o, tile.data() + o * k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(rows), static_cast<int>(k), 1.f, xp, static_cast<int>(ldx),
                tile.data(), static_cast<int>(k), 0.f, yp + o0, static_cast<int>(ldy));
  }
}

void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y) {
  DI_CHECK(x.ndim() == 3 && y.ndim() == 3 && x.size(1) == num_groups && y.size(1) == num_groups,
           "grouped linear: x {} y {} groups {}", x.ShapeString(), y.ShapeString(), num_groups);
  DI_CHECK(w.out_features % num_groups == 0, "grouped linear: {} rows not divisible by {} groups",
           w.out_features, num_groups);
  DI_CHECK(x.is_contiguous() && y.is_contiguous(), "grouped linear needs contiguous x and y");
  const int64_t m = x.size(0), k = x.size(2), r = w.out_features / num_groups;
  DI_CHECK(k == w.in_features && y.size(2) == r, "grouped linear: shape mismatch");
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  // Dequantize one group's [R, K] block at a time, then y[:, g, :] = x[:, g, :] · Wgᵀ.
  std::vector<float> wg(static_cast<size_t>(r * k));
  for (int64_t g = 0; g < num_groups; ++g) {
#pragma omp parallel for schedule(static) if (r * k >= kMinParallelMacs)
    for (int64_t o = 0; o < r; ++o) DequantizeRow(w, g * r + o, wg.data() + o * k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(r),
                static_cast<int>(k), 1.f, xp + g * k, static_cast<int>(num_groups * k), wg.data(),
                static_cast<int>(k), 0.f, yp + g * r, static_cast<int>(num_groups * r));
  }
}

}  // namespace deepinfer::cpu
