#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/math.h"
#include "base/thread_pool.h"
#include "kernels/cpu/ue8m0.h"
#include "tensor/dtype.h"

namespace deepinfer::cpu {

namespace {
float LoadAsFloat(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kBF16: return Bf16ToF32(t.data<uint16_t>()[i]);
    case DType::kF16: return F16ToF32(t.data<uint16_t>()[i]);
    default: DI_THROW("unsupported dtype {} for a norm or embedding weight", DTypeName(t.dtype()));
  }
}
}  // namespace

void RmsNorm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y) {
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.size(0) == y.size(0) && x.size(1) == y.size(1),
           "rms_norm: x {} y {}", x.ShapeString(), y.ShapeString());
  const int64_t m = x.size(0), n = x.size(1);
  std::vector<float> w(static_cast<size_t>(n), 1.f);
  if (!weight.empty()) {
    DI_CHECK(weight.numel() == n, "rms_norm: weight has {} values, rows have {}", weight.numel(), n);
    for (int64_t i = 0; i < n; ++i) w[i] = LoadAsFloat(weight, i);
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  ParallelFor(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * x.stride(0);
      float* yr = yp + r * y.stride(0);
      float ss = 0.f;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * inv);
    }
  });
}

void Embedding(const int32_t* ids, int64_t num_ids, const TensorView& table, const TensorView& y) {
  const int64_t vocab = table.size(0), dim = table.size(1);
  DI_CHECK(y.size(0) == num_ids && y.size(1) == dim, "embedding: y {} for {} ids of dim {}",
           y.ShapeString(), num_ids, dim);
  for (int64_t r = 0; r < num_ids; ++r) {
    DI_CHECK(ids[r] >= 0 && ids[r] < vocab, "token id {} outside the vocabulary [0, {})", ids[r], vocab);
    float* yr = y.data<float>() + r * y.stride(0);
    const int64_t base = static_cast<int64_t>(ids[r]) * table.stride(0);
    for (int64_t i = 0; i < dim; ++i) yr[i] = LoadAsFloat(table, base + i);
  }
}

std::vector<float> RopeInverseFrequencies(int64_t rope_dim, double base, int64_t original_max_positions,
                                          double factor, double beta_fast, double beta_slow) {
  const int64_t half = rope_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    f[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  if (original_max_positions <= 0) return f;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(rope_dim) *
           std::log(static_cast<double>(original_max_positions) / (rotations * 2.0 * M_PI)) /
           (2.0 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const float flow = static_cast<float>(low), fhigh = static_cast<float>(high);
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - flow) / (fhigh - flow), 0.f, 1.f);
    const float smooth = 1.f - ramp;
    f[i] = f[i] / static_cast<float>(factor) * (1.f - smooth) + f[i] * smooth;
  }
  return f;
}

void Rope(const TensorView& x, const int64_t* positions, const std::vector<float>& inv_freq,
          bool inverse) {
  DI_CHECK(x.ndim() == 3, "rope expects [M, H, D], got {}", x.ShapeString());
  const int64_t m = x.size(0), h = x.size(1), d = x.size(2);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  const int64_t offset = d - 2 * half;
  DI_CHECK(offset >= 0 && x.stride(2) == 1, "rope: bad layout");
  float* xp = x.data<float>();
  for (int64_t r = 0; r < m; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float c = std::cos(angle);
      const float s = inverse ? -std::sin(angle) : std::sin(angle);
      for (int64_t hh = 0; hh < h; ++hh) {
        float* p = xp + r * x.stride(0) + hh * x.stride(1) + offset + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = a * s + b * c;
      }
    }
  }
}

float E4m3BlockScale(const float* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return Ue8m0BlockScale(amax, kE4m3AmaxFloor, kE4m3InvMax);
}

uint8_t E4m3CodeAtScale(float v, float scale) { return F32ToE4m3(std::clamp(v / scale, -kE4m3Max, kE4m3Max)); }

void Fp8RoundTrip(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const float scale = E4m3BlockScale(x + b0, b1 - b0);
    for (int64_t i = b0; i < b1; ++i) x[i] = E4m3ToF32(E4m3CodeAtScale(x[i], scale)) * scale;
  }
}

void Bf16Round(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) continue;  // NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
    std::memcpy(&x[i], &bits, sizeof(bits));
  }
}

float E2m1BlockScale(const float* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return Ue8m0BlockScale(amax, kE2m1AmaxFloor, kE2m1InvMax);
}

uint8_t E2m1CodeAtScale(float v, float scale) { return F32ToFp4(std::clamp(v / scale, -kE2m1Max, kE2m1Max)); }

void Fp4RoundTrip(float* x, int64_t n, int64_t block) {
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    const float scale = E2m1BlockScale(x + b0, b1 - b0);
    for (int64_t i = b0; i < b1; ++i) x[i] = Fp4ToF32(E2m1CodeAtScale(x[i], scale)) * scale;
  }
}

void Hadamard(float* x, int64_t n) {
  DI_CHECK(IsPowerOfTwo(static_cast<uint64_t>(n)), "hadamard length {} is not a power of two", n);
  for (int64_t len = 1; len < n; len <<= 1) {
    for (int64_t i = 0; i < n; i += 2 * len) {
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace deepinfer::cpu
