#include "kernels/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"

namespace deepinfer::cpu {

namespace {

constexpr int64_t kTileRows = 32;             // weight rows dequantized together
constexpr int64_t kMinMacsPerTask = 1 << 15;  // below this a thread costs more than it saves

void CheckShapes(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  DI_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "linear expects f32 activations");
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2, "linear expects 2-d x and y");
  DI_CHECK(x.size(1) == w.in_features, "linear: x has {} columns, weight expects {}", x.size(1),
           w.in_features);
  DI_CHECK(y.size(0) == x.size(0) && y.size(1) == w.out_features,
           "linear: y is {}, expected [{}, {}]", y.ShapeString(), x.size(0), w.out_features);
  DI_CHECK(x.stride(1) == 1 && y.stride(1) == 1, "linear needs unit column stride");
}

// y[m, y_col + o − o0] = x[m] · W[o] for o in [o0, o1): rows dequantized into `tile` (or read in
// place when W is f32).
void LinearRows(const float* x, int64_t ldx, int64_t m, const LinearWeight& w, int64_t o0, int64_t o1,
                float* y, int64_t ldy, int64_t y_col, std::vector<float>& tile) {
  const int64_t k = w.in_features;
  for (int64_t t0 = o0; t0 < o1; t0 += kTileRows) {
    const int64_t t1 = std::min(o1, t0 + kTileRows);
    const float* wp;
    int64_t ldw;
    if (w.format == WeightFormat::kDense && w.data.dtype() == DType::kF32) {
      wp = w.data.data<float>() + t0 * w.data.stride(0);
      ldw = w.data.stride(0);
    } else {
      tile.resize(static_cast<size_t>((t1 - t0) * k));
      for (int64_t o = t0; o < t1; ++o) DequantizeRow(w, o, tile.data() + (o - t0) * k);
      wp = tile.data();
      ldw = k;
    }
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * ldx;
      float* yr = y + r * ldy + y_col + (t0 - o0);
      for (int64_t o = 0; o < t1 - t0; ++o) yr[o] = DotF32(xr, wp + o * ldw, k);
    }
  }
}

}  // namespace

float DotF32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  CheckShapes(x, w, y);
  const int64_t m = x.size(0), k = w.in_features, n = w.out_features;
  if (m == 0) return;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(k * m, 1));
  ParallelFor(n, grain, [&](int64_t o0, int64_t o1) {
    std::vector<float> tile;
    LinearRows(xp, x.stride(0), m, w, o0, o1, yp, y.stride(0), o0, tile);
  });
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
  // Items are weight rows: row o belongs to group o / R and writes y[:, g, o % R].
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(k * m, 1));
  ParallelFor(w.out_features, grain, [&](int64_t o0, int64_t o1) {
    std::vector<float> tile;
    while (o0 < o1) {
      const int64_t g = o0 / r, end = std::min(o1, (g + 1) * r);
      LinearRows(xp + g * k, num_groups * k, m, w, o0, end, yp, num_groups * r, o0, tile);
      o0 = end;
    }
  });
}

}  // namespace deepinfer::cpu
