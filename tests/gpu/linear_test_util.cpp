#include "gpu/linear_test_util.h"

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/elementwise.h"

namespace deepinfer::test {

WeightStorage StorageFor(const Spec& spec, int64_t out, int64_t in, int64_t pad) {
  WeightStorage s;
  s.cols = (spec.format == WeightFormat::kFp4 ? in / 2 : in) + pad;
  if (spec.format == WeightFormat::kFp8) {
    s.scale_rows = (out + kFp8BlockSize - 1) / kFp8BlockSize;
    s.scale_cols = (in + kFp8BlockSize - 1) / kFp8BlockSize;
  } else if (spec.format == WeightFormat::kFp4) {
    s.scale_rows = out;
    s.scale_cols = in / kFp4BlockSize;
  }
  return s;
}

std::vector<uint8_t> RandomWeightData(const Spec& spec, size_t n, uint64_t seed) {
  switch (spec.format) {
    case WeightFormat::kDense:
      if (spec.dtype == DType::kF32) return AsBytes(RandomFloats(n, seed));
      if (spec.dtype == DType::kBF16) return AsBytes(RandomBf16(n, seed));
      {
        const std::vector<float> f = RandomFloats(n, seed);
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = F32ToF16(f[i]);
        return AsBytes(h);
      }
    case WeightFormat::kFp8:
      return RandomE4m3(n, seed);
    case WeightFormat::kFp4:
      return RandomBytes(n, seed);
  }
  return {};
}

std::vector<uint8_t> RandomWeightScales(const Spec& spec, size_t n, uint64_t seed) {
  if (spec.format != WeightFormat::kDense && spec.scale_dtype == DType::kF32) {
    return AsBytes(RandomFloats(n, seed, 1e-3f, 2e-2f));
  }
  if (spec.format == WeightFormat::kFp8) return RandomE8m0(n, seed, 120, 130);
  if (spec.format == WeightFormat::kFp4) return RandomE8m0(n, seed, 119, 128);
  return {};
}

cuda::DeviceWeight::Format DeviceFormat(WeightFormat format) {
  return format == WeightFormat::kDense ? cuda::DeviceWeight::Format::kDense
         : format == WeightFormat::kFp8 ? cuda::DeviceWeight::Format::kFp8
                                        : cuda::DeviceWeight::Format::kFp4;
}

std::vector<float> AbsDense(const LinearWeight& w) {
  std::vector<float> d(static_cast<size_t>(w.out_features * w.in_features));
  for (int64_t o = 0; o < w.out_features; ++o) DequantizeRow(w, o, d.data() + o * w.in_features);
  for (float& v : d) v = std::fabs(v);
  return d;
}

namespace {
cuda::LinearMath g_test_math = cuda::LinearMath::kSimtF32;
}  // namespace

cuda::LinearMath TestLinearMath() { return g_test_math; }
ScopedLinearMath::ScopedLinearMath(cuda::LinearMath math) : previous_(g_test_math) { g_test_math = math; }
ScopedLinearMath::~ScopedLinearMath() { g_test_math = previous_; }

void RoundForFp8Act(std::vector<float>& x, int64_t rows, int64_t k, int64_t ld) {
  if (g_test_math != cuda::LinearMath::kFp8Act) return;
  for (int64_t r = 0; r < rows; ++r) cpu::Fp8RoundTrip(x.data() + r * ld, k, 128);
}

void HalvingScaleBlocks(std::vector<float>& x, int64_t rows, int64_t ld) {
  constexpr float kAmax = 228.f / 512.f;  // 228·2^-9
  for (int64_t r = 0; r < rows; ++r) {
    float* block = x.data() + r * ld;
    for (int i = 0; i < 128; ++i) block[i] = std::fmax(-0.4f, std::fmin(0.4f, block[i]));  // codes <= 208
    block[(r * 37) % 128] = (r % 2 == 0) ? kAmax : -kAmax;
  }
}

Fp8ActInputs MakeFp8ActInputs(int64_t rows, int64_t k, uint64_t seed) {
  Fp8ActInputs in;
  in.raw = RandomFloats(static_cast<size_t>(rows * k), seed);
  for (size_t i = 0; i < in.raw.size(); i += 7) in.raw[i] *= 300.f;
  HalvingScaleBlocks(in.raw, rows, k);
  in.rounded = in.raw;
  RoundForFp8Act(in.rounded, rows, k, k);
  return in;
}

double OrderBoundC(int64_t k) {
  const double cpu = static_cast<double>(k / 8 + 12);
  const double slices = static_cast<double>((k + 511) / 512);
  const double chunks_per_slice = static_cast<double>(std::min<int64_t>(4, (k + 127) / 128));
  const double gpu = g_test_math == cuda::LinearMath::kSplitBf16 ? 2.0 * 3.0 * 8.0 * chunks_per_slice + slices + 5.0
                     : g_test_math == cuda::LinearMath::kFp8Act
                         ? (cuda::Fp8ActOnWarpgroupMma() ? 32768.0 : 4096.0) + 4.0 * chunks_per_slice + slices + 5.0
                         : 8.0 * static_cast<double>((k + 255) / 256) + 5.0;
  return 1.01 * (cpu + gpu) * 0x1p-24;
}

double SplitChainBoundC(int64_t k) {
  const double cpu = static_cast<double>(k / 8 + 12);
  const double gpu = 3.0 * static_cast<double>(k) + 3.0 * static_cast<double>((k + 15) / 16) + 5.0;
  return 1.01 * (cpu + gpu) * 0x1p-24;
}

::testing::AssertionResult WithinOrderBound(const std::vector<float>& got, const std::vector<float>& want,
                                            const std::vector<float>& sabs, int64_t k, const std::string& what) {
  return WithinBoundC(got, want, sabs, OrderBoundC(k), what);
}

::testing::AssertionResult WithinBoundC(const std::vector<float>& got, const std::vector<float>& want,
                                        const std::vector<float>& sabs, double c, const std::string& what) {
  if (got.size() != want.size() || got.size() != sabs.size()) {
    return ::testing::AssertionFailure() << what << ": size mismatch";
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = 0, max_rel = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double allowed = c * sabs[i] + 1e-30;
    const double ratio = std::isnan(diff) ? INFINITY : diff / allowed;
    if (sabs[i] > 0) max_rel = std::max(max_rel, diff / sabs[i]);
    if (!(ratio <= 1.0)) {
      if (bad == 0 || ratio > worst_ratio) worst = i, worst_ratio = ratio;
      ++bad;
    }
  }
  ::testing::Test::RecordProperty(what + "_max_diff_over_sabs", std::to_string(max_rel));
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " outside the order bound; worst at " << worst << ": got " << got[worst]
                                       << ", want " << want[worst] << ", S " << sabs[worst] << ", bound "
                                       << c * sabs[worst];
}

}  // namespace deepinfer::test
