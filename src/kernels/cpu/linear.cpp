#include "kernels/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/blas.h"

namespace deepinfer::cpu {

namespace {

constexpr int64_t kGemvMaxRows = 4;      // M at or below this uses the dot-product path
constexpr int64_t kMinMacsPerTask = 1 << 16;  // below this a thread costs more than it saves

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

void CheckShapes(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  DI_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "linear expects f32 activations");
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2, "linear expects 2-d x and y");
  DI_CHECK(x.size(1) == w.in_features, "linear: x has {} columns, weight expects {}", x.size(1),
           w.in_features);
  DI_CHECK(y.size(0) == x.size(0) && y.size(1) == w.out_features,
           "linear: y is {}, expected [{}, {}]", y.ShapeString(), x.size(0), w.out_features);
  DI_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "linear needs unit column stride");
}

// y[:, o0:o1] = x · W[o0:o1]ᵀ for a slice of output rows: rows dequantized into `tile` (or read
// in place when W is f32), then one single-threaded sgemm.
void LinearSlice(const float* x, int64_t ldx, int64_t m, const LinearWeight& w, int64_t o0, int64_t o1,
                 float* y, int64_t ldy, std::vector<float>& tile) {
  const int64_t k = w.in_features, rows = o1 - o0;
  const float* wp;
  int64_t ldw;
  if (w.format == WeightFormat::kDense && w.data.dtype() == DType::kF32) {
    wp = w.data.data<float>() + o0 * w.data.stride(0);
    ldw = w.data.stride(0);
  } else {
    tile.resize(static_cast<size_t>(rows * k));
    for (int64_t o = 0; o < rows; ++o) DequantizeRow(w, o0 + o, tile.data() + o * k);
    wp = tile.data();
    ldw = k;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
              static_cast<int>(k), 1.f, x, static_cast<int>(ldx), wp, static_cast<int>(ldw), 0.f, y + o0,
              static_cast<int>(ldy));
}

}  // namespace

void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  CheckShapes(x, w, y);
  EnsureBlasSingleThreaded();
  const int64_t m = x.size(0), k = w.in_features, n = w.out_features;
  if (m == 0) return;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t ldx = x.stride(0), ldy = y.stride(0);
  if (m <= kGemvMaxRows) {
    ParallelFor(n, std::max<int64_t>(1, kMinMacsPerTask / (k * m)), [&](int64_t o0, int64_t o1) {
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t o = o0; o < o1; ++o) {
        DequantizeRow(w, o, row.data());
        for (int64_t r = 0; r < m; ++r) yp[r * ldy + o] = Dot(xp + r * ldx, row.data(), k);
      }
    });
    return;
  }
  // Output rows split across threads; each slice in tiles of at most 256 rows.
  ParallelFor(n, std::max<int64_t>(16, kMinMacsPerTask / (k * m)), [&](int64_t s0, int64_t s1) {
    std::vector<float> tile;
    for (int64_t o0 = s0; o0 < s1; o0 += 256) LinearSlice(xp, ldx, m, w, o0, std::min(s1, o0 + 256), yp, ldy, tile);
  });
}

void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y) {
  DI_CHECK(x.ndim() == 3 && y.ndim() == 3 && x.size(1) == num_groups && y.size(1) == num_groups,
           "grouped linear: x {} y {} groups {}", x.ShapeString(), y.ShapeString(), num_groups);
  DI_CHECK(w.out_features % num_groups == 0, "grouped linear: {} rows not divisible by {} groups",
           w.out_features, num_groups);
  DI_CHECK(x.is_contiguous() && y.is_contiguous(), "grouped linear needs contiguous x and y");
  EnsureBlasSingleThreaded();
  const int64_t m = x.size(0), k = x.size(2), r = w.out_features / num_groups;
  DI_CHECK(k == w.in_features && y.size(2) == r, "grouped linear: shape mismatch");
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  // Work items: (group, slice of that group's output rows). y[:, g, :] = x[:, g, :] · Wgᵀ.
  const int64_t slice = std::max<int64_t>(16, std::min<int64_t>(r, kMinMacsPerTask / std::max<int64_t>(k * m, 1)));
  const int64_t per_group = (r + slice - 1) / slice;
  ParallelFor(num_groups * per_group, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> tile;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / per_group, o0 = (i % per_group) * slice, o1 = std::min(r, o0 + slice);
      // The slice of W for group g starts at row g·R; y's columns for g start at g·R.
      LinearSlice(xp + g * k, num_groups * k, m, w, g * r + o0, g * r + o1, yp, num_groups * r, tile);
    }
  });
}

}  // namespace deepinfer::cpu
