#include "gpu/gpu_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "tensor/dtype.h"

namespace deepinfer::test {

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, float lo, float hi) {
  const std::vector<float> f = RandomFloats(n, seed, lo, hi);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = F32ToBf16(f[i]);
  return v;
}

std::vector<uint8_t> RandomE4m3(size_t n, uint64_t seed) {
  std::vector<uint8_t> v = RandomBytes(n, seed);
  for (uint8_t& b : v) {
    if ((b & 0x7f) == 0x7f) b ^= 0x01;
  }
  return v;
}

std::vector<uint8_t> RandomE8m0(size_t n, uint64_t seed, uint8_t lo, uint8_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want, float atol,
                                    float rtol, const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  }
  double max_abs = 0;
  size_t worst = 0;
  double worst_excess = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (got[i] == want[i]) continue;  // equal values, equal infinities included
    const double diff = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : std::fabs(double(got[i]) - want[i]);
    if (diff > max_abs) max_abs = diff;
    const double allowed = atol + rtol * std::fabs(double(want[i]));
    if (!(diff <= allowed)) {
      ++bad;
      if (diff - allowed > worst_excess || bad == 1) worst = i, worst_excess = diff - allowed;
    }
  }
  std::ostringstream max_text;
  max_text << std::setprecision(3) << max_abs;
  ::testing::Test::RecordProperty(what.empty() ? "max_abs_diff" : what + "_max_abs_diff", max_text.str());
  if (bad == 0) return ::testing::AssertionSuccess() << what << ": max |diff| " << max_abs;
  std::ostringstream os;
  os << what << ": " << bad << " of " << got.size() << " elements off (atol " << atol << ", rtol " << rtol
     << "); worst at " << worst << ": got " << got[worst] << ", want " << want[worst] << "; max |diff| "
     << max_abs;
  return ::testing::AssertionFailure() << os.str();
}

bool SanitizerSizes() {
  const char* env = std::getenv("DEEPINFER_SANITIZER_SIZES");
  return env != nullptr && std::string(env) == "1";
}

std::vector<uint32_t> Bits(const std::vector<float>& x) {
  std::vector<uint32_t> out(x.size());
  if (!x.empty()) std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  return out;
}

}  // namespace deepinfer::test
