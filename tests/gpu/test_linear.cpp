// cuda::Linear / cuda::GroupedLinear against cpu::Linear / cpu::GroupedLinear for every weight
// format, odd and Flash-sized shapes, strided activations; exact dequantization of every code; and
// batch invariance (a row's bits do not depend on M or on which kernel ran).
#include "kernels/cuda/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda_stream.h"
#include "gpu/gpu_test_util.h"
#include "gpu/linear_test_util.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"
#include "tensor/linear_weight.h"

namespace deepinfer::test {
namespace {

// A weight in host memory (data rows of `cols` stored elements, `cols` >= the row's elements), its
// LinearWeight view for the CPU and its device copy.
struct TestWeight {
  Spec spec;
  int64_t out = 0, in = 0, cols = 0;
  int64_t scale_rows = 0, scale_cols = 0;
  std::vector<uint8_t> data, scale;
  std::optional<DeviceArray<uint8_t>> d_data, d_scale;

  LinearWeight View() {
    LinearWeight w;
    w.format = spec.format;
    w.out_features = out;
    w.in_features = in;
    w.data = TensorView(data.data(), spec.dtype, {out, cols});
    if (spec.format != WeightFormat::kDense) {
      w.scale = TensorView(scale.data(), spec.scale_dtype, {scale_rows, scale_cols});
    }
    return w;
  }
  void Upload() {
    d_data.emplace(data);
    d_scale.emplace(scale);
  }
  cuda::DeviceWeight Device() const {
    cuda::DeviceWeight w;
    w.format = DeviceFormat(spec.format);
    w.dtype = spec.dtype;
    w.scale_dtype = spec.scale_dtype;
    w.out_features = out;
    w.in_features = in;
    w.data = d_data->get();
    w.data_row_stride = cols;
    w.scale = d_scale->get();
    w.scale_row_stride = scale_cols;
    return w;
  }
};

// Shapes the weight's storage; `pad` stored elements follow each row.
TestWeight Shape(const Spec& spec, int64_t out, int64_t in, int64_t pad) {
  TestWeight w;
  w.spec = spec;
  w.out = out;
  w.in = in;
  const WeightStorage storage = StorageFor(spec, out, in, pad);
  w.cols = storage.cols;
  w.scale_rows = storage.scale_rows;
  w.scale_cols = storage.scale_cols;
  return w;
}

// A random weight (value ranges in linear_test_util.h), uploaded.
TestWeight RandomWeight(const Spec& spec, int64_t out, int64_t in, uint64_t seed, int64_t pad = 0) {
  TestWeight w = Shape(spec, out, in, pad);
  w.data = RandomWeightData(spec, static_cast<size_t>(out * w.cols), seed);
  w.scale = RandomWeightScales(spec, static_cast<size_t>(w.scale_rows * w.scale_cols), seed + 1);
  w.Upload();
  return w;
}

LinearWeight DenseView(std::vector<float>& d, int64_t out, int64_t in) {
  LinearWeight w;
  w.format = WeightFormat::kDense;
  w.out_features = out;
  w.in_features = in;
  w.data = TensorView(d.data(), DType::kF32, {out, in});
  return w;
}

// Bit-for-bit equality where NaN equals NaN (for the exact-decode tests).
::testing::AssertionResult SameValues(const std::vector<float>& got, const std::vector<float>& want,
                                      const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure() << what << ": at " << i << " got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr uint32_t kSentinel = 0xffffffffu;  // y's unwritten padding must keep this bit pattern

// One Linear against the CPU: x [m, in] with row stride ldx, y with row stride ldy.
void CheckLinear(TestWeight& w, int64_t m, int64_t ldx, int64_t ldy, uint64_t seed) {
  const std::string what = std::string(w.spec.name) + " [" + std::to_string(w.in) + " -> " + std::to_string(w.out) +
                           "] M=" + std::to_string(m) + " ldx=" + std::to_string(ldx) + " ldy=" + std::to_string(ldy);
  SCOPED_TRACE(what);
  std::vector<float> xs = RandomFloats(static_cast<size_t>(std::max<int64_t>(m * ldx, 1)), seed);
  RoundForFp8Act(xs, m, w.in, ldx);
  std::vector<float> x(static_cast<size_t>(m * w.in)), xabs(x.size());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < w.in; ++i) x[r * w.in + i] = xs[r * ldx + i];
  }
  for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::fabs(x[i]);

  std::vector<float> want(static_cast<size_t>(m * w.out)), sabs(want.size());
  cpu::Linear(TensorView(x.data(), DType::kF32, {m, w.in}), w.View(),
              TensorView(want.data(), DType::kF32, {m, w.out}));
  std::vector<float> wabs = AbsDense(w.View());
  cpu::Linear(TensorView(xabs.data(), DType::kF32, {m, w.in}), DenseView(wabs, w.out, w.in),
              TensorView(sabs.data(), DType::kF32, {m, w.out}));

  DeviceArray<float> dx(xs);
  DeviceArray<float> dy(static_cast<size_t>(std::max<int64_t>(m * ldy, 1)));
  dy.Fill(0xff);
  const size_t scratch_bytes = cuda::LinearScratchBytes(m, w.Device(), TestLinearMath());
  DeviceArray<uint8_t> scratch(scratch_bytes);
  cuda::Linear(dx.get(), ldx, m, w.Device(), dy.get(), ldy, nullptr, TestLinearMath(), scratch.get(), scratch_bytes);
  const std::vector<float> ys = dy.ToHost();

  std::vector<float> got(want.size());
  bool pad_kept = true;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t o = 0; o < ldy; ++o) {
      const float v = ys[r * ldy + o];
      if (o < w.out) {
        got[r * w.out + o] = v;
      } else {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        pad_kept = pad_kept && bits == kSentinel;
      }
    }
  }
  EXPECT_TRUE(pad_kept) << "a column past out_features was written";
  EXPECT_TRUE(WithinOrderBound(got, want, sabs, w.in, what));
}

// One GroupedLinear against the CPU.
void CheckGrouped(TestWeight& w, int64_t groups, int64_t m, uint64_t seed) {
  const int64_t k = w.in, r = w.out / groups;
  const std::string what = std::string(w.spec.name) + " grouped G=" + std::to_string(groups) + " K=" +
                           std::to_string(k) + " R=" + std::to_string(r) + " M=" + std::to_string(m);
  SCOPED_TRACE(what);
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * groups * k), seed), xabs(x.size());
  for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::fabs(x[i]);
  std::vector<float> want(static_cast<size_t>(m * groups * r)), sabs(want.size());
  cpu::GroupedLinear(TensorView(x.data(), DType::kF32, {m, groups, k}), w.View(), groups,
                     TensorView(want.data(), DType::kF32, {m, groups, r}));
  std::vector<float> wabs = AbsDense(w.View());
  cpu::GroupedLinear(TensorView(xabs.data(), DType::kF32, {m, groups, k}), DenseView(wabs, w.out, k), groups,
                     TensorView(sabs.data(), DType::kF32, {m, groups, r}));

  DeviceArray<float> dx(x);
  DeviceArray<float> dy(want.size());
  dy.Fill(0xff);
  cuda::GroupedLinear(dx.get(), m, groups, w.Device(), dy.get(), nullptr, TestLinearMath());
  const bool chain = TestLinearMath() == cuda::LinearMath::kSplitBf16 && cuda::GroupedSplitOnWarpgroupMma(w.Device(), groups);
  EXPECT_TRUE(chain ? WithinBoundC(dy.ToHost(), want, sabs, SplitChainBoundC(k), what + " (wgmma chain)")
                    : WithinOrderBound(dy.ToHost(), want, sabs, k, what));
}

// A weight shape of the odd-shape tests: [in -> out], `pad` stored elements after each row.
struct OddShape {
  int64_t out, in, pad;
};

// For each shape a random weight of `spec`, then for each M three layouts of x and y: contiguous,
// strided with misaligned rows, strided with 16-byte aligned rows. Seeds: ++seed per weight and
// per check.
void CheckOddShapes(const Spec& spec, const std::vector<OddShape>& shapes, const std::vector<int64_t>& ms,
                    uint64_t& seed) {
  for (const OddShape& shape : shapes) {
    TestWeight w = RandomWeight(spec, shape.out, shape.in, ++seed, shape.pad);
    for (const int64_t m : ms) {
      CheckLinear(w, m, shape.in, shape.out, ++seed);
      CheckLinear(w, m, shape.in + 5, shape.out + 3, ++seed);
      CheckLinear(w, m, shape.in + 4, shape.out + 7, ++seed);
    }
  }
}

// A Flash-sized weight: `spec`, [in -> out].
struct FlashCase {
  Spec spec;
  int64_t in, out;
};

// Each case's random weight against the CPU at M = 1 and 64 (seeds: ++seed per weight and check).
void CheckFlashCases(const std::vector<FlashCase>& cases, uint64_t seed) {
  for (const FlashCase& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    for (const int64_t m : {1, 64}) CheckLinear(w, m, c.in, c.out, ++seed);
  }
}

TEST(CudaLinear, AllFormatsOddShapes) {
  DI_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Spec& spec : kAllSpecs) {
    // [320 -> 200]: rows and columns off the 128/256 grids, aligned rows (vector loads).
    // [96|100 -> 130]: K not a multiple of 8 (FP4 needs 32) and padded rows (scalar loads).
    const int64_t small_in = spec.format == WeightFormat::kFp4 ? 96 : 100;
    CheckOddShapes(spec, {{200, 320, 0}, {130, small_in, 3}}, {1, 3, 17, 100}, seed);
  }
}

TEST(CudaLinear, EveryRowCountUpTo40) {
  DI_REQUIRE_GPU();
  // Every GEMV instantiation (M = 1..16) and the tiled kernel's partial tiles.
  TestWeight w = RandomWeight(kFp8E8m0, 72, 600, 7);
  for (int64_t m = 1; m <= 40; ++m) CheckLinear(w, m, 600, 72, 1000 + m);
}

TEST(CudaLinear, ZeroRowsIsANoOp) {
  DI_REQUIRE_GPU();
  TestWeight w = RandomWeight(kBf16, 64, 96, 3);
  DeviceArray<float> dx(RandomFloats(96, 4));
  DeviceArray<float> dy(64);
  dy.Fill(0xff);
  cuda::Linear(dx.get(), 96, 0, w.Device(), dy.get(), 64, nullptr);
  cuda::GroupedLinear(dx.get(), 0, 2, w.Device(), dy.get(), nullptr);
  const std::vector<float> y = dy.ToHost();
  std::vector<uint32_t> bits(y.size());
  std::memcpy(bits.data(), y.data(), y.size() * 4);
  EXPECT_TRUE(AllEqual(bits, std::vector<uint32_t>(y.size(), kSentinel), "y untouched"));
}

TEST(CudaLinear, FlashShapes) {
  DI_REQUIRE_GPU();
  // wq_a, wq_b (64 heads × 512), routed expert w1/w3 and w2 (moe_inter_dim 2048), router gate.
  CheckFlashCases({{kFp8E8m0, 4096, 1024},
                   {kFp8E8m0, 1024, 64 * 512},
                   {kFp4, 4096, 2048},
                   {kFp4, 2048, 4096},
                   {kBf16, 4096, 256}},
                  500);
}

TEST(CudaLinear, GroupedOddShapes) {
  DI_REQUIRE_GPU();
  uint64_t seed = 700;
  // 3 groups of 50 rows: the FP8 scale row 0 spans groups 0-2, row 1 the rest of group 2.
  for (const Spec& spec : {kFp8E8m0, kFp8F32, kBf16, kFp4}) {
    const int64_t k = spec.format == WeightFormat::kFp4 ? 96 : 100;
    TestWeight w = RandomWeight(spec, 3 * 50, k, ++seed);
    for (const int64_t m : {1, 5, 33}) CheckGrouped(w, 3, m, ++seed);
  }
}

TEST(CudaLinear, GroupedFlashOutputProjection) {
  DI_REQUIRE_GPU();
  // wo_a: 8 groups, K = 8 heads × 512 per group, R = 1024, FP8.
  TestWeight w = RandomWeight(kFp8E8m0, 8 * 1024, 8 * 512, 800);
  for (const int64_t m : {1, 64}) CheckGrouped(w, 8, m, 801 + m);
}

// Runs Linear on rows [r0, r0 + n) of x [.., w.in] (row stride ldx, default w.in) and returns
// y [n, out]; with the scratch Linear can use unless without_scratch.
std::vector<float> RunRows(const TestWeight& w, const DeviceArray<float>& dx, int64_t r0, int64_t n,
                           bool without_scratch = false, int64_t ldx = 0) {
  if (ldx == 0) ldx = w.in;
  DeviceArray<float> dy(static_cast<size_t>(n * w.out));
  dy.Fill(0xff);  // NaN: an output a kernel skips does not pass for one a previous run left
  const size_t scratch_bytes = without_scratch ? 0 : cuda::LinearScratchBytes(n, w.Device(), TestLinearMath());
  DeviceArray<uint8_t> scratch(scratch_bytes);
  cuda::Linear(dx.get() + r0 * ldx, ldx, n, w.Device(), dy.get(), w.out, nullptr, TestLinearMath(), scratch.get(),
               scratch_bytes);
  return dy.ToHost();
}

std::vector<float> Rows(const std::vector<float>& y, int64_t width, int64_t r0, int64_t n) {
  return std::vector<float>(y.begin() + r0 * width, y.begin() + (r0 + n) * width);
}

// Runs cuda::LinearsOfOneInput on the first m rows of x [m, in] through the first `count` weights
// (all of them where count is 0), with the scratch LinearScratchBytes asks for, and returns each
// product's y [m, out] (NaN where nothing was written). x_is_bf16: LinearsOfOneInput's (x must hold
// BF16 values).
std::vector<std::vector<float>> RunLinearsOfOneInput(const std::vector<TestWeight>& weights,
                                                     const DeviceArray<float>& dx, int64_t in, int64_t m,
                                                     size_t count = 0, bool x_is_bf16 = false) {
  if (count == 0) count = weights.size();
  std::vector<DeviceArray<float>> ys;
  std::vector<cuda::DeviceWeight> device_weights;
  std::vector<cuda::LinearOutput> outputs;
  size_t scratch_bytes = 0;
  device_weights.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    ys.emplace_back(static_cast<size_t>(m * weights[i].out));
    ys.back().Fill(0xff);
    device_weights.push_back(weights[i].Device());
    scratch_bytes = std::max(scratch_bytes, cuda::LinearScratchBytes(m, device_weights.back(), TestLinearMath()));
  }
  for (size_t i = 0; i < count; ++i) outputs.push_back({&device_weights[i], ys[i].get(), weights[i].out});
  DeviceArray<uint8_t> scratch(scratch_bytes);
  cuda::LinearsOfOneInput(dx.get(), in, m, outputs.data(), static_cast<int>(count), nullptr, TestLinearMath(),
                          scratch.get(), scratch_bytes, x_is_bf16);
  std::vector<std::vector<float>> out;
  for (const auto& y : ys) out.push_back(y.ToHost());
  return out;
}

// For each case: a random weight and m rows of x; the m rows at once twice (deterministic), every
// `row_step`-th row alone and each span (first row, rows) must give the full batch's bits.
// Seeds: ++seed for the weight, then for x.
void CheckBatchInvariant(const std::vector<FlashCase>& cases, int64_t m, int64_t row_step,
                         const std::vector<std::pair<int64_t, int64_t>>& spans, uint64_t seed) {
  for (const FlashCase& c : cases) {
    SCOPED_TRACE(c.spec.name);
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.in), ++seed));
    const std::vector<float> all = RunRows(w, dx, 0, m);
    EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), all, "repeat"));
    for (int64_t r = 0; r < m; r += row_step) {
      EXPECT_TRUE(AllEqual(RunRows(w, dx, r, 1), Rows(all, c.out, r, 1), "row " + std::to_string(r)));
    }
    for (const auto& [r0, n] : spans) {
      EXPECT_TRUE(AllEqual(RunRows(w, dx, r0, n), Rows(all, c.out, r0, n),
                           "rows " + std::to_string(r0) + "+" + std::to_string(n)));
    }
  }
}

const std::vector<std::pair<int64_t, int64_t>> kSpansOf64 = {{5, 17}, {30, 3}, {40, 8}, {47, 16}, {1, 40}};

TEST(CudaLinear, BatchInvariantAndDeterministic) {
  DI_REQUIRE_GPU();
  // The GEMV (M <= 16) and the tiled kernel (M > 16) follow one summation order per output, so a
  // row's bits are the same alone, in any slice, and in the full batch.
  CheckBatchInvariant({{kF32, 320, 200},
                       {kBf16, 100, 130},
                       {kF16, 320, 200},
                       {kFp8F32, 320, 200},
                       {kFp8E8m0, 4096, 1024},
                       {kFp4, 4096, 2048}},
                      64, 1, kSpansOf64, 900);
}

TEST(CudaLinear, GroupedBatchInvariant) {
  DI_REQUIRE_GPU();
  constexpr int64_t kG = 8, kK = 512, kR = 64, kM = 40;
  TestWeight w = RandomWeight(kFp8E8m0, kG * kR, kK, 950);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(kM * kG * kK), 951));
  auto run = [&](int64_t r0, int64_t n) {
    DeviceArray<float> dy(static_cast<size_t>(n * kG * kR));
    cuda::GroupedLinear(dx.get() + r0 * kG * kK, n, kG, w.Device(), dy.get(), nullptr);
    return dy.ToHost();
  };
  const std::vector<float> all = run(0, kM);
  for (int64_t r = 0; r < kM; ++r) EXPECT_TRUE(AllEqual(run(r, 1), Rows(all, kG * kR, r, 1), "row " + std::to_string(r)));
  EXPECT_TRUE(AllEqual(run(3, 17), Rows(all, kG * kR, 3, 17), "rows 3+17"));
}

// Linear with x = ones [m, 1] or one-hot rows reproduces W exactly (a single nonzero product per
// output); every code of every format must decode bit for bit like the CPU's DequantizeRow.
void CheckExact(TestWeight& w, const std::vector<float>& x_row, const std::string& what) {
  for (const int64_t m : {1, 17}) {
    std::vector<float> x;
    for (int64_t r = 0; r < m; ++r) x.insert(x.end(), x_row.begin(), x_row.end());
    std::vector<float> want(static_cast<size_t>(m * w.out));
    cpu::Linear(TensorView(x.data(), DType::kF32, {m, w.in}), w.View(),
                TensorView(want.data(), DType::kF32, {m, w.out}));
    DeviceArray<float> dx(x);
    DeviceArray<float> dy(want.size());
    cuda::Linear(dx.get(), w.in, m, w.Device(), dy.get(), w.out, nullptr);
    EXPECT_TRUE(SameValues(dy.ToHost(), want, what + " M=" + std::to_string(m)));
  }
}

TEST(CudaLinear, DecodesEveryCodeExactly) {
  DI_REQUIRE_GPU();
  // Dense 16-bit: every bit pattern (NaN, ±inf, subnormals) as a [65536, 1] weight.
  for (const Spec& spec : {kBf16, kF16}) {
    TestWeight w = Shape(spec, 65536, 1, 0);
    std::vector<uint16_t> codes(65536);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
    w.data = AsBytes(codes);
    w.Upload();
    CheckExact(w, {1.f}, spec.name);
  }
  // FP8: every e4m3 code in each of 8 scale blocks of 128 rows ([1024, 1] weight).
  for (const Spec& spec : {kFp8E8m0, kFp8F32}) {
    TestWeight w = Shape(spec, 1024, 1, 0);
    w.data.resize(1024);
    for (size_t i = 0; i < w.data.size(); ++i) w.data[i] = static_cast<uint8_t>(i % 256);
    if (spec.scale_dtype == DType::kF8E8M0) {
      w.scale = {0, 1, 100, 120, 127, 130, 200, 254};
    } else {
      w.scale = AsBytes(std::vector<float>{1.f, 0.3f, 1e-3f, 7.5e-5f, 1e-40f, 3e30f, -2.f, 1.2345f});
    }
    w.Upload();
    CheckExact(w, {1.f}, spec.name);
  }
  // FP4: row o holds nibble o % 16 in all 32 columns, with e8m0 scale code kScales[o / 16];
  // x is one-hot on column 5 (an odd column: the high nibble).
  {
    const std::vector<uint8_t> scales = {0, 1, 2, 60, 100, 118, 126, 127, 128, 129, 140, 200, 250, 252, 253, 254};
    TestWeight w = Shape(kFp4, 16 * 16, 32, 0);
    w.data.resize(static_cast<size_t>(w.out * w.cols));
    w.scale.resize(static_cast<size_t>(w.out));
    for (int64_t o = 0; o < w.out; ++o) {
      const uint8_t code = static_cast<uint8_t>(o % 16);
      for (int64_t b = 0; b < w.cols; ++b) w.data[o * w.cols + b] = static_cast<uint8_t>(code | (code << 4));
      w.scale[o] = scales[o / 16];
    }
    w.Upload();
    std::vector<float> one_hot(32, 0.f);
    one_hot[5] = 1.f;
    CheckExact(w, one_hot, "fp4");
  }
}

// ---- the tensor-core path (LinearMath::kSplitBf16, linear_mma.cuh) ----

TEST(CudaLinearMma, AllFormatsOddShapes) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  uint64_t seed = 2100;
  // F32, F16 and f32-scaled FP8 keep the SIMT kernels; they are checked here too.
  for (const Spec& spec : kAllSpecs) {
    // [320 -> 200]: one slice; [1100|1088 -> 77]: three slices (four warps per row tile), a
    // partial last chunk for BF16/FP8, rows past 77 in the last row tile; [96|100 -> 130] padded
    // rows (the byte-wise loads).
    const int64_t small_in = spec.format == WeightFormat::kFp4 ? 96 : 100;
    const int64_t mid_in = spec.format == WeightFormat::kFp4 ? 1088 : 1100;
    CheckOddShapes(spec, {{200, 320, 0}, {77, mid_in, 0}, {130, small_in, 3}}, {1, 3, 9, 17, 100}, seed);
  }
}

TEST(CudaLinearMma, EveryRowCountUpTo40) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  // TM = 1 (1-8 rows), 2 (9-16) and 4 (17-32, then two token blocks).
  TestWeight w = RandomWeight(kFp8E8m0, 72, 600, 2207);
  for (int64_t m = 1; m <= 40; ++m) CheckLinear(w, m, 600, 72, 2300 + m);
}

TEST(CudaLinearMma, FlashShapes) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  // wq_a, wq_b, wo_b (K = 8192: 16 slices, the most this path takes), routed experts' w1/w3 and
  // w2, the compressor's BF16 wkv, and the head's shape at a tenth of its vocabulary.
  CheckFlashCases({{kFp8E8m0, 4096, 1024},
                   {kFp8E8m0, 1024, 64 * 512},
                   {kFp8E8m0, 8192, 4096},
                   {kFp4, 4096, 2048},
                   {kFp4, 2048, 4096},
                   {kBf16, 4096, 1024},
                   {kBf16, 4096, 12928}},
                  2500);
}

TEST(CudaLinearMma, GroupedShapes) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  uint64_t seed = 2600;
  for (const Spec& spec : {kFp8E8m0, kBf16, kFp4}) {
    const int64_t k = spec.format == WeightFormat::kFp4 ? 96 : 100;
    TestWeight w = RandomWeight(spec, 3 * 50, k, ++seed);
    for (const int64_t m : {1, 5, 33}) CheckGrouped(w, 3, m, ++seed);
  }
  TestWeight wo_a = RandomWeight(kFp8E8m0, 8 * 1024, 8 * 512, 2700);
  for (const int64_t m : {1, 64}) CheckGrouped(wo_a, 8, m, 2701 + m);
}

// Grouped split-BF16 products give a row the same bits at every M, on whichever kernels run them
// (the warpgroup-MMA one on an sm_90a device: R % 128 == 0, K % 64 == 0 here; else, or with
// DEEPINFER_WGMMA=0, the mma.sync ones).
TEST(CudaLinearMma, GroupedBatchInvariant) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  constexpr int64_t kG = 8, kK = 512, kR = 128, kM = 70;
  TestWeight w = RandomWeight(kFp8E8m0, kG * kR, kK, 2750);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(kM * kG * kK), 2751));
  auto run = [&](int64_t r0, int64_t n) {
    DeviceArray<float> dy(static_cast<size_t>(n * kG * kR));
    cuda::GroupedLinear(dx.get() + r0 * kG * kK, n, kG, w.Device(), dy.get(), nullptr, TestLinearMath());
    return dy.ToHost();
  };
  const std::vector<float> all = run(0, kM);
  for (int64_t r = 0; r < kM; r += 7) EXPECT_TRUE(AllEqual(run(r, 1), Rows(all, kG * kR, r, 1), "row " + std::to_string(r)));
  EXPECT_TRUE(AllEqual(run(3, 65), Rows(all, kG * kR, 3, 65), "rows 3+65"));
  EXPECT_TRUE(AllEqual(run(0, kM), all, "again"));
}

// GroupedLinear's split-BF16 products on the TMA-fed kernel (linear_wgmma_split.cuh) give the
// cp.async kernel's bits: the Flash output projection (8 groups of [4096 -> 1024]) at 1, 64 and
// 70 rows (a partial second token tile), 3 groups of [192 -> 128] (3 chunks: fewer than the ring's
// 4 stages) and 8 groups of [1152 -> 128] (3 slices, the last one short); and so do the TMA-fed
// kernel on blocks of 64 weight rows and its K slices over a cluster where they run, on the
// default layout, the lean one (DEEPINFER_GROUPED_SLICES_LEAN) and the lean one on 128-row blocks
// (DEEPINFER_GROUPED_SLICES_WIDE), and without a cluster, the slices' sums through scratch
// (DEEPINFER_GROUPED_SLICES_PARTIALS); three parts and x rounded.
TEST(CudaLinearMma, GroupedTmaKernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedGroupedSlicesUpTo32 eight_rows_only(0);  // GroupedSlicesOfUpTo32RowsEqualTheOther takes 9-32
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  struct Case {
    int64_t groups, r, k;
  };
  uint64_t seed = 2900;
  for (const Case& c : {Case{8, 1024, 4096}, Case{3, 128, 192}, Case{8, 128, 1152}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.groups * c.r, c.k, ++seed);
    ASSERT_TRUE(cuda::GroupedSplitOnWarpgroupMma(w.Device(), c.groups));
    for (const int64_t m : {int64_t{1}, int64_t{64}, int64_t{70}}) {
      const std::string what = "G=" + std::to_string(c.groups) + " [" + std::to_string(c.k) + " -> " +
                               std::to_string(c.r) + "] M=" + std::to_string(m);
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.groups * c.k), ++seed));
      auto run = [&](int mode, bool round = false) {
        ScopedTmaKernels scoped(mode);
        DeviceArray<float> dy(static_cast<size_t>(m * c.groups * c.r));
        dy.Fill(0xff);  // NaN: an output a kernel skips does not pass for one a previous run left
        const uint64_t launches = cuda::TmaLaunchesForTesting();
        cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), round);
        EXPECT_EQ(cuda::TmaLaunchesForTesting() > launches, mode == 1) << what << ": TMA " << mode;
        return dy.ToHost();
      };
      const std::vector<float> tma = run(1);
      const std::vector<float> other = run(0);
      EXPECT_TRUE(AllEqual(tma, other, what));
      // The TMA-fed kernel on blocks of 64 weight rows (one warpgroup), where twice the grid fits
      // one wave: the same bits.
      int device = 0, sms = 0;
      ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
      ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
      const int64_t blocks = c.r / 128 * ((m + 63) / 64) * c.groups;
      {
        ScopedGroupedHalfBlocks half(1);
        ScopedGroupedSlices no_slices(0);
        const uint64_t half_launches = cuda::GroupedHalfBlocksLaunchesForTesting();
        EXPECT_TRUE(AllEqual(run(1), other, what + ", 64-row blocks"));
        EXPECT_EQ(cuda::GroupedHalfBlocksLaunchesForTesting() > half_launches, 2 * blocks <= sms)
            << what << ": 64-row blocks where twice " << blocks << " blocks fit " << sms << " SMs";
      }
      // At most 8 rows: 8-token tiles of 64 weight rows with K's 512-column slices over a cluster
      // (2-8 slices), rank 0 adding them in order, on the default layout, the lean one (2 stages,
      // one tile set) and the lean one on blocks of 128 weight rows; with three parts and with x
      // rounded to BF16 (wo_a with --attn-out-bf16): the cp.async kernel's bits each time.
      const int64_t k_slices = (c.k + 511) / 512;
      const bool sliced = m <= 8 && k_slices > 1 && k_slices <= 8 && 2 * blocks <= sms;
      const std::vector<float> rounded = run(0, true);
      ScopedGroupedSlices slices(1);
      for (const int layout : {0, 1, 2}) {  // default, lean, lean on 128-row blocks
        const char* name = layout == 0 ? ", K slices" : layout == 1 ? ", lean K slices" : ", wide K slices";
        const std::string where = what + name;
        ScopedGroupedSlicesLean lean(layout >= 1 ? 1 : 0);
        ScopedGroupedSlicesWide wide(layout == 2 ? 1 : 0);
        const uint64_t before[3] = {cuda::GroupedSlicedLaunchesForTesting(),
                                    cuda::GroupedSlicesLeanLaunchesForTesting(),
                                    cuda::GroupedSlicesWideLaunchesForTesting()};
        EXPECT_TRUE(AllEqual(run(1), other, where));
        EXPECT_TRUE(AllEqual(run(1, true), rounded, where + ", rounded"));
        EXPECT_EQ(cuda::GroupedSlicedLaunchesForTesting() - before[0], sliced ? 2u : 0u) << where;
        EXPECT_EQ(cuda::GroupedSlicesLeanLaunchesForTesting() - before[1], sliced && layout >= 1 ? 2u : 0u) << where;
        EXPECT_EQ(cuda::GroupedSlicesWideLaunchesForTesting() - before[2], sliced && layout == 2 ? 2u : 0u) << where;
      }
      // Without a cluster: each slice's sum through the scratch GroupedLinearScratchBytes asks for
      // under the switch, added in order by SumSlicesKernel. Without the scratch, the cluster.
      ScopedGroupedSlicesPartials partials(1);
      for (const bool round : {false, true}) {
        const std::string where = what + ", K slices' partial sums" + (round ? ", rounded" : "");
        const size_t bytes = cuda::GroupedLinearScratchBytes(m, c.groups, w.Device(), TestLinearMath(), round);
        EXPECT_EQ(bytes, m <= 8 ? static_cast<size_t>(k_slices * m * c.groups * c.r * 4) : size_t{0}) << where;
        DeviceArray<uint8_t> scratch(std::max<size_t>(bytes, 1));
        DeviceArray<float> dy(static_cast<size_t>(m * c.groups * c.r));
        dy.Fill(0xff);
        const uint64_t launches = cuda::GroupedSlicesPartialsLaunchesForTesting();
        cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), round,
                            bytes == 0 ? nullptr : scratch.get(), bytes);
        EXPECT_TRUE(AllEqual(dy.ToHost(), round ? rounded : other, where));
        EXPECT_EQ(cuda::GroupedSlicesPartialsLaunchesForTesting() - launches, sliced ? 1u : 0u) << where;
        EXPECT_TRUE(AllEqual(run(1, round), round ? rounded : other, where + ", no scratch"));
        EXPECT_EQ(cuda::GroupedSlicesPartialsLaunchesForTesting() - launches, sliced ? 1u : 0u) << where;
      }
    }
  }
}

// GroupedLinear's products of 9-32 rows on the K slices (DEEPINFER_GROUPED_SLICES_UP_TO_32): tiles
// of 16 (9-16 rows) and 32 tokens (17-32) on the lean 128-row layout give the cp.async kernel's
// bits, with three parts and with x rounded (wo_a with --attn-out-bf16), at the Flash output
// projection (8 groups of [4096 -> 1024]) and at 8 groups of [1152 -> 128] (3 slices, the last one
// short). 8 rows keep the 8-token slices, and 33-65 rows the TMA-fed kernel over all of K.
TEST(CudaLinearMma, GroupedSlicesOfUpTo32RowsEqualTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  ScopedGroupedSlices slices(1);
  ScopedGroupedSlicesLean lean(1);
  ScopedGroupedSlicesWide wide(1);
  ScopedGroupedSlicesPartials partials(0);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  struct Case {
    int64_t groups, r, k;
  };
  uint64_t seed = 3100;
  for (const Case& c : {Case{8, 1024, 4096}, Case{8, 128, 1152}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.groups * c.r, c.k, ++seed);
    ASSERT_TRUE(cuda::GroupedSplitOnWarpgroupMma(w.Device(), c.groups));
    for (const int64_t m : {int64_t{8}, int64_t{9}, int64_t{16}, int64_t{17}, int64_t{32}, int64_t{33}, int64_t{64},
                            int64_t{65}}) {
      const std::string what = "G=" + std::to_string(c.groups) + " [" + std::to_string(c.k) + " -> " +
                               std::to_string(c.r) + "] M=" + std::to_string(m);
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.groups * c.k), ++seed));
      auto run = [&](int tma, int up_to_32, bool round) {
        ScopedTmaKernels scoped(tma);
        ScopedGroupedSlicesUpTo32 more_rows(up_to_32);
        DeviceArray<float> dy(static_cast<size_t>(m * c.groups * c.r));
        dy.Fill(0xff);  // NaN: an output a kernel skips does not pass for one a previous run left
        cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), round);
        return dy.ToHost();
      };
      const int64_t blocks = c.r / 128 * ((m + 63) / 64) * c.groups;
      const bool sliced = m > 8 && m <= 32 && 2 * blocks <= sms;
      for (const bool round : {false, true}) {
        const std::string where = what + (round ? ", rounded" : "");
        const std::vector<float> other = run(0, 1, round);  // the cp.async kernel: no TMA, no slices
        const uint64_t before = cuda::GroupedSlicesUpTo32LaunchesForTesting();
        EXPECT_TRUE(AllEqual(run(1, 1, round), other, where + ", K slices"));
        EXPECT_EQ(cuda::GroupedSlicesUpTo32LaunchesForTesting() - before, sliced ? 1u : 0u) << where;
        EXPECT_TRUE(AllEqual(run(1, 0, round), other, where + ", switch off"));
        EXPECT_EQ(cuda::GroupedSlicesUpTo32LaunchesForTesting() - before, sliced ? 1u : 0u) << where;
      }
    }
  }
}

// GroupedLinear's one-part BF16 products (x rounded to BF16: wo_a with --attn-out-bf16) on
// cuBLASLt's strided-batched BF16 GEMM (DEEPINFER_CUBLASLT_BF16, off by default): within the chain
// bound of the CPU's f32 sums of the same rounded x, at wo_a's shape (8 groups, K = 4096, R =
// 1024) and an odd one (3 groups of [192 -> 128]), 256 and 300 rows, in one piece and in pieces of
// 128 rows (a launch a piece).
TEST(CudaLinearMma, GroupedCublasLtWithinTheChainBound) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  ScopedCublasLtBf16 on(1);
  struct Case {
    int64_t groups, r, k;
  };
  uint64_t seed = 3990;
  for (const Case& c : {Case{8, 1024, 4096}, Case{3, 128, 192}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.groups * c.r, c.k, ++seed);
    for (const int64_t m : {int64_t{256}, int64_t{300}}) {
      std::vector<float> x = RandomFloats(static_cast<size_t>(m * c.groups * c.k), ++seed);
      cpu::Bf16Round(x.data(), static_cast<int64_t>(x.size()));
      std::vector<float> xabs(x.size());
      for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::fabs(x[i]);
      std::vector<float> want(static_cast<size_t>(m * c.groups * c.r)), sabs(want.size());
      cpu::GroupedLinear(TensorView(x.data(), DType::kF32, {m, c.groups, c.k}), w.View(), c.groups,
                         TensorView(want.data(), DType::kF32, {m, c.groups, c.r}));
      std::vector<float> wabs = AbsDense(w.View());
      cpu::GroupedLinear(TensorView(xabs.data(), DType::kF32, {m, c.groups, c.k}), DenseView(wabs, c.groups * c.r, c.k),
                         c.groups, TensorView(sabs.data(), DType::kF32, {m, c.groups, c.r}));
      DeviceArray<float> dx(x);
      for (const int64_t piece : {int64_t{0}, int64_t{128}}) {
        const std::string what = "G=" + std::to_string(c.groups) + " [" + std::to_string(c.k) + " -> " +
                                 std::to_string(c.r) + "] M=" + std::to_string(m) + " piece " + std::to_string(piece);
        ScopedGroupedBf16 grouped(1, piece);
        const size_t bytes = cuda::GroupedLinearScratchBytes(m, c.groups, w.Device(), TestLinearMath(), true);
        ASSERT_GT(bytes, 0u) << what;
        DeviceArray<uint8_t> scratch(bytes);
        DeviceArray<float> dy(want.size());
        dy.Fill(0xff);
        const uint64_t launches = cuda::CublasLtBf16LaunchesForTesting();
        cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), true, scratch.get(),
                            bytes);
        EXPECT_EQ(cuda::CublasLtBf16LaunchesForTesting() - launches,
                  static_cast<uint64_t>(piece == 0 ? 1 : (m + piece - 1) / piece))
            << what << ": a cuBLASLt launch a piece";
        EXPECT_TRUE(WithinBoundC(dy.ToHost(), want, sabs, SplitChainBoundC(c.k), what));
      }
    }
  }
}

// GroupedLinear given scratch at 256 rows or more converts the weight to BF16 once and splits x's
// parts once, then multiplies them on GroupedBf16WsKernel: the bits of the kernels it replaces (run
// without scratch), with x as is (three parts) and rounded to BF16 (one), on the Flash output
// projection (8 groups of [4096 -> 1024], 8 slices), 3 groups of [192 -> 128] (3 chunks: one short
// slice, fewer chunks than the ring's stages) and 8 groups of [1152 -> 128] (the last slice short),
// at 256 rows (two whole token tiles) and 300 (a partial third); and in pieces of 128 rows of x
// (one GEMM launch a piece); rounded x with its tiles sent by TMA stores and by each thread's
// stores. Too little scratch, or fewer rows, take the other kernels.
TEST(CudaLinearMma, GroupedBf16KernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  struct Case {
    int64_t groups, r, k;
  };
  uint64_t seed = 3950;
  for (const Case& c : {Case{8, 1024, 4096}, Case{3, 128, 192}, Case{8, 128, 1152}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.groups * c.r, c.k, ++seed);
    ASSERT_TRUE(cuda::GroupedSplitOnWarpgroupMma(w.Device(), c.groups));
    for (const int64_t m : {int64_t{256}, int64_t{300}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.groups * c.k), ++seed));
      for (const bool round : {false, true}) {
        const std::string what = "G=" + std::to_string(c.groups) + " [" + std::to_string(c.k) + " -> " +
                                 std::to_string(c.r) + "] M=" + std::to_string(m) + (round ? " rounded" : " as is");
        auto run = [&](int mode, int64_t piece_rows, size_t scratch_bytes) {
          ScopedGroupedBf16 scoped(mode, piece_rows);
          DeviceArray<uint8_t> scratch(std::max<size_t>(scratch_bytes, 1));
          DeviceArray<float> dy(static_cast<size_t>(m * c.groups * c.r));
          dy.Fill(0xff);  // NaN: an output a kernel skips does not pass for one a previous run left
          cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), round,
                              scratch_bytes == 0 ? nullptr : scratch.get(), scratch_bytes);
          return dy.ToHost();
        };
        const std::vector<float> other = run(0, 0, 0);
        size_t bytes = 0;
        {
          ScopedGroupedBf16 on(1);
          bytes = cuda::GroupedLinearScratchBytes(m, c.groups, w.Device(), TestLinearMath(), round);
        }
        const size_t weight_bytes = static_cast<size_t>(c.groups * c.r * c.k * 2);
        ASSERT_EQ(bytes, weight_bytes + static_cast<size_t>((round ? 1 : 3) * m * c.groups * c.k * 2)) << what;
        uint64_t launches = cuda::GroupedBf16LaunchesForTesting();
        const uint64_t store_launches = cuda::GroupedTmaStoreLaunchesForTesting();
        {
          ScopedTmaStore tma_store(1);
          EXPECT_TRUE(AllEqual(run(1, 0, bytes), other, what));
        }
        EXPECT_EQ(cuda::GroupedBf16LaunchesForTesting(), launches + 1) << what << ": one launch";
        // One part (x rounded) sends its tiles by TMA stores: the same bits as each thread's stores.
        EXPECT_EQ(cuda::GroupedTmaStoreLaunchesForTesting() - store_launches, round ? 1u : 0u)
            << what << ": TMA stores";
        {
          ScopedTmaStore thread_stores(0);
          EXPECT_TRUE(AllEqual(run(1, 0, bytes), other, what + ", each thread's stores"));
        }
        launches = cuda::GroupedBf16LaunchesForTesting();
        EXPECT_TRUE(AllEqual(run(1, 128, bytes), other, what + ", pieces of 128 rows"));
        EXPECT_EQ(cuda::GroupedBf16LaunchesForTesting(), launches + static_cast<uint64_t>((m + 127) / 128))
            << what << ": a launch a piece";
        launches = cuda::GroupedBf16LaunchesForTesting();
        EXPECT_TRUE(AllEqual(run(1, 0, bytes - 256), other, what + ", scratch short"));
        EXPECT_TRUE(AllEqual(run(0, 0, bytes), other, what + ", switched off"));
        EXPECT_EQ(cuda::GroupedBf16LaunchesForTesting(), launches) << what << ": short scratch or off takes the others";
      }
    }
  }
  // Below 256 rows the path asks for no scratch.
  TestWeight w = RandomWeight(kFp8E8m0, 8 * 128, 512, ++seed);
  ScopedGroupedBf16 on(1);
  EXPECT_EQ(cuda::GroupedLinearScratchBytes(255, 8, w.Device(), TestLinearMath(), true), 0u);
  EXPECT_GT(cuda::GroupedLinearScratchBytes(256, 8, w.Device(), TestLinearMath(), true), 0u);
}

// Split-BF16 products of 1-256 rows whose one-block staged grid would leave SMs idle take K's
// slices over a cluster (linear_mma.cuh's StagedSlicesBlock) with the one-block kernels' bits
// (the staged one past 32 rows, the register-fed one up to 32): weights of 2 (the last one
// short), 3, 4, 8 and 16 slices (clusters of 2, 4 and 8, 16 slices as two per rank), dense and
// quantized, one group and grouped. The first 32 rows alone give the same bits too.
TEST(CudaLinearMma, StagedSlicesEqualOneBlock) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit mma_sync_for_bf16(0);  // BF16 weights on the mma.sync kernels under test
  struct Case {
    Spec spec;
    int64_t out, in, groups;
  };
  const Case cases[] = {{kBf16, 256, 4096, 1}, {kBf16, 64, 8192, 1}, {kBf16, 130, 1000, 1},
                        {kFp8E8m0, 384, 2048, 1}, {kFp4, 128, 1536, 1}, {kBf16, 128, 1024, 3}};
  uint64_t seed = 5100;
  for (const Case& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.groups * c.out, c.in, ++seed);
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{33}, int64_t{64}, int64_t{256}}) {
      const std::string what = std::string(c.spec.name) + " [" + std::to_string(c.out) + ", " + std::to_string(c.in) +
                               "] x" + std::to_string(c.groups) + " M=" + std::to_string(m);
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.groups * c.in), ++seed));
      auto run = [&](int mode, int64_t rows) {
        ScopedStagedSlices scoped(mode);
        DeviceArray<float> dy(static_cast<size_t>(rows * c.groups * c.out));
        dy.Fill(0xff);  // NaN: an output a kernel skips does not pass
        if (c.groups == 1) {
          cuda::Linear(dx.get(), c.in, rows, w.Device(), dy.get(), c.out, nullptr, TestLinearMath());
        } else {
          cuda::GroupedLinear(dx.get(), rows, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath());
        }
        return dy.ToHost();
      };
      const uint64_t launches = cuda::StagedSlicesLaunchesForTesting();
      const std::vector<float> sliced = run(1, m);
      EXPECT_GT(cuda::StagedSlicesLaunchesForTesting(), launches) << what << ": the clustered kernel did not run";
      EXPECT_TRUE(AllEqual(sliced, run(0, m), what));
      const int64_t alone = std::min<int64_t>(m, 32);
      EXPECT_TRUE(AllEqual(run(0, alone), Rows(sliced, c.groups * c.out, 0, alone),
                           what + ", the first rows alone on the one-block kernels"));
    }
  }
}

// BF16 weights under split-BF16 on an sm_90a device take the warpgroup-MMA kernels at every M
// (linear_wgmma_split.cuh's DenseSplitKernel, and its clustered form where the grid leaves SMs
// idle): within the order bound of the CPU on odd shapes (rows past n in the last block, 1, 2, 3
// (an idle rank), 8 and 16 slices, K of one slice), and a row's bits the same at every M and in
// both grids (the clustered kernel at 1-8 rows, the one-block kernel on a grid past the SM count).
TEST(CudaLinearMma, DenseSplitOnWarpgroupMma) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  struct Case {
    int64_t out, in;
  };
  const Case cases[] = {{256, 4096}, {64, 4096}, {130, 1024}, {300, 1536}, {200, 512}, {96, 8192}};
  uint64_t seed = 5300;
  for (const Case& c : cases) {
    TestWeight w = RandomWeight(kBf16, c.out, c.in, ++seed);
    for (const int64_t m : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{65}, int64_t{200}}) {
      const uint64_t launches = cuda::DenseSplitLaunchesForTesting();
      CheckLinear(w, m, c.in, c.out, ++seed);
      EXPECT_GT(cuda::DenseSplitLaunchesForTesting(), launches)
          << "[" << c.in << " -> " << c.out << "] M=" << m << ": the warpgroup-MMA kernel did not run";
    }
  }
  // 18 row blocks: 64·ceil((sms + 1) / 18) rows fill more blocks than SMs (the one-block grid);
  // 1 and 8 rows take the cluster of 8.
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  const int64_t out = 18 * 128, in = 4096, m = 64 * ((sms + 1 + 17) / 18);
  ScopedDenseWs ws_off(0);  // the 64-token kernels at every M (DenseWsKernelEqualsTheOther compares the two)
  TestWeight w = RandomWeight(kBf16, out, in, ++seed);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * in), ++seed));
  const std::vector<float> all = RunRows(w, dx, 0, m);
  EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), all, "repeat"));
  {
    // With the scratch LinearScratchBytes asks for, x's parts are split once per call
    // (DensePartsKernel, which serves the overlapped kernels only: gpu-run.sh's switch rerun turns
    // them off by default); without it each block converts them: the same bits.
    ScopedDenseOverlap overlap(1);
    const uint64_t parts_launches = cuda::DensePartsLaunchesForTesting();
    EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), all, "overlapped, x's parts split once"));
    EXPECT_GT(cuda::DensePartsLaunchesForTesting(), parts_launches) << "the parts kernel did not run";
  }
  EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m, /*without_scratch=*/true), all, "x converted per block"));
  {
    ScopedDenseParts off(0);
    EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), all, "DEEPINFER_DENSE_PARTS=0"));
  }
  for (const auto& [r0, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {m - 1, 1}, {3, 8}, {70, 64}}) {
    EXPECT_TRUE(AllEqual(RunRows(w, dx, r0, n), Rows(all, out, r0, n),
                         "rows " + std::to_string(r0) + ".." + std::to_string(r0 + n - 1) + " of " + std::to_string(m)));
  }
  // Version 26's overlapped loop (each slice begun by an MMA that ignores d): the same bits on
  // these sums (none is an exact zero), in both grids and both tile sizes, and batch invariant.
  auto overlapped = [&](const TestWeight& wo, const DeviceArray<float>& x, int64_t r0, int64_t n) {
    ScopedDenseOverlap on(1);
    return RunRows(wo, x, r0, n);
  };
  EXPECT_TRUE(AllEqual(overlapped(w, dx, 0, m), all, "overlapped, all rows"));
  for (const auto& [r0, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {3, 8}, {70, 64}}) {
    EXPECT_TRUE(AllEqual(overlapped(w, dx, r0, n), Rows(all, out, r0, n),
                         "overlapped, rows " + std::to_string(r0) + ".." + std::to_string(r0 + n - 1)));
  }
  for (const Case& c : cases) {
    TestWeight wc = RandomWeight(kBf16, c.out, c.in, ++seed);
    DeviceArray<float> dxc(RandomFloats(static_cast<size_t>(200 * c.in), ++seed));
    for (const int64_t mc : {int64_t{1}, int64_t{65}, int64_t{200}}) {
      EXPECT_TRUE(AllEqual(overlapped(wc, dxc, 0, mc), RunRows(wc, dxc, 0, mc),
                           "overlapped [" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                               "] M=" + std::to_string(mc)));
    }
  }
  // The mma.sync kernels (the switch off) sum in another order: some outputs differ.
  std::vector<float> mma_sync;
  {
    ScopedDenseSplit off(0);
    mma_sync = RunRows(w, dx, 0, 8);
  }
  const std::vector<float> first = Rows(all, out, 0, 8);
  size_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i) differ += first[i] != mma_sync[i];
  EXPECT_GT(differ, 0u) << "the switch did not reach the kernels";
}

// Dense split-BF16 products of 256 rows or more whose grid fills the GPU take x's parts and the
// warp-specialized TMA kernel (GroupedBf16WsKernel over the BF16 weight): the bits of the 64-token
// kernels in both loop forms (zeroed slices, and the overlapped loop's slices begun by an MMA that
// ignores d), with rows past n in the last block (4300) and K of one slice (512); and a span of 8
// rows (the 8-token kernel) equals its rows of the whole batch.
TEST(CudaLinearMma, DenseWsKernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  struct Case {
    int64_t out, in;
    std::vector<int64_t> rows;
    int64_t min_rows;  // SetDenseWsMinRowsForTesting's (0: the environment's)
  };
  struct MinRowsBack {
    ~MinRowsBack() { cuda::SetDenseWsMinRowsForTesting(0); }
  } min_rows_back;
  uint64_t seed = 5900;
  const std::vector<int64_t> some = {256, 300, 520};
  // [1024 -> 20000] from 64 rows (DEEPINFER_DENSE_WS_MIN_ROWS=64): 157 row blocks fill the GPU from
  // one 64-token tile on, so 64 and 100 rows (the head's shape at decode batch 64) take it too.
  for (const Case& c : {Case{8192, 4096, some, 0}, Case{4300, 1536, some, 0}, Case{8192, 512, some, 0},
                        Case{20000, 1024, {64, 100}, 64}}) {
    cuda::SetDenseWsMinRowsForTesting(c.min_rows);
    TestWeight w = RandomWeight(kBf16, c.out, c.in, ++seed);
    for (const int64_t m : c.rows) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.in), ++seed));
      for (const int overlap : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "[" << c.in << " -> " << c.out << "] M=" << m << " overlap " << overlap);
        ScopedDenseOverlap loop(overlap);
        std::vector<float> other;
        {
          ScopedDenseWs off(0);
          other = RunRows(w, dx, 0, m);
        }
        const uint64_t launches = cuda::DenseWsLaunchesForTesting();
        const std::vector<float> ws = RunRows(w, dx, 0, m);
        EXPECT_EQ(cuda::DenseWsLaunchesForTesting() - launches, 1u) << "the warp-specialized kernel did not run";
        EXPECT_TRUE(AllEqual(ws, other, "warp-specialized against the 64-token kernel"));
        EXPECT_TRUE(AllEqual(RunRows(w, dx, 3, 8), Rows(ws, c.out, 3, 8), "rows 3..10 alone"));
      }
    }
  }
}

// Dense split-BF16 products of `rows` rows (1, 3 and 8 unless given) through each [in -> out] weight
// (as {out, in}), in both loop forms: Linear's bits with a kernel switch (Scoped: its test
// override) on equal those with it off, and `launches` (the switched kernel's count) rose by one
// where `takes(m, overlap)` says the switch applies (null: everywhere), else by none.
template <class Scoped>
void ExpectDenseSwitchKeepsTheBits(std::initializer_list<std::pair<int64_t, int64_t>> shapes, uint64_t seed,
                                   uint64_t (*launches)(), const std::string& what,
                                   std::initializer_list<int64_t> rows = {1, 3, 8},
                                   bool (*takes)(int64_t m, int overlap) = nullptr) {
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  for (const auto& [out, in] : shapes) {
    TestWeight w = RandomWeight(kBf16, out, in, ++seed);
    for (const int64_t m : rows) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * in), ++seed));
      for (const int overlap : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "[" << in << " -> " << out << "] M=" << m << " overlap " << overlap);
        ScopedDenseOverlap loop(overlap);
        std::vector<float> switched_off;
        {
          const Scoped off(0);
          switched_off = RunRows(w, dx, 0, m);
        }
        const Scoped switched_on(1);
        const uint64_t before = launches();
        EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), switched_off, what + " against the default kernel"));
        EXPECT_EQ(launches() - before, takes == nullptr || takes(m, overlap) ? 1u : 0u) << what;
      }
    }
  }
}

// Dense split-BF16 products of 1-8 rows whose one-block-a-row-block grid fills the GPU
// (DEEPINFER_DENSE_WS8: x's parts and the 8-token warp-specialized kernel) give the bits of
// DenseSplitKernel<8> in both loop forms: 266 row blocks (the last partial: rows past n) at K of
// three slices and of eight, 1, 3 and 8 rows.
TEST(CudaLinearMma, DenseWs8GivesTheBitsOfTheBlockKernel) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ExpectDenseSwitchKeepsTheBits<ScopedSwitch<cuda::SetDenseWs8ForTesting>>(
      {{34000, 1536}, {34000, 4096}}, 6100, cuda::DenseWs8LaunchesForTesting, "the 8-token warp-specialized kernel");
}

// Dense split-BF16 products of 1-8 rows whose K slices spread over a cluster (the router's gate:
// [4096 -> 256], 8 slices; 2 slices; 5 slices with ranks past the last idle; 8 row blocks, the last
// partial), on the deep ring (DEEPINFER_DENSE_SLICES_DEEP: a rank's whole slice copied at once)
// give the bits of the default ring, in both loop forms.
TEST(CudaLinearMma, DenseSlicesDeepRingGivesTheSameBits) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ExpectDenseSwitchKeepsTheBits<ScopedDenseSlicesDeep>({{256, 4096}, {256, 1024}, {128, 2560}, {1000, 4096}}, 6300,
                                                       cuda::DenseSlicesDeepLaunchesForTesting, "the deep ring");
}

// Dense split-BF16 products of 9-32 rows whose K slices spread over a cluster (the router's gate
// [4096 -> 256], 8 slices; 2 slices; 5 slices with ranks past the last idle; 8 row blocks, the last
// partial) on 16-token (9-16 rows) or 32-token tiles (17-32; DEEPINFER_DENSE_SLICES_NARROW) give
// the bits of the 64-token slices. Only the overlapped loop takes them; 33 rows keep 64 tokens.
TEST(CudaLinearMma, DenseSlicesNarrowTilesGiveTheSameBits) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ExpectDenseSwitchKeepsTheBits<ScopedDenseSlicesNarrow>(
      {{256, 4096}, {256, 1024}, {128, 2560}, {1000, 4096}}, 6500, cuda::DenseSlicesNarrowLaunchesForTesting,
      "16- or 32-token slices", {9, 16, 17, 32, 33}, [](int64_t m, int overlap) { return overlap == 1 && m <= 32; });
}

// Dense split-BF16 products of 9-255 rows (DEEPINFER_DENSE_WS64: x's parts and the 64-token
// warp-specialized kernel, its blocks walking the tiles) give the bits of the 64-token block kernels
// (DensePartsKernel, DenseSplitKernel<64> where the loop is not overlapped) in both loop forms:
// 266 row blocks (the last partial: rows past n) at K of three slices and of eight, 9, 64, 100
// and 255 rows (one to four token tiles, the last partial); and with the weight's tiles.
TEST(CudaLinearMma, DenseWs64GivesTheBitsOfTheBlockKernels) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  }
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  ScopedDenseTiles tiles_on(1);
  uint64_t seed = 6200;
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{34000, 1536}, {34000, 4096}}) {
    TestWeight w = RandomWeight(kBf16, out, in, ++seed);
    const cuda::DeviceWeight rows = w.Device();
    const size_t tile_bytes = cuda::DenseTilesBytes(rows, cuda::LinearMath::kSplitBf16);
    ASSERT_GT(tile_bytes, 0u);
    DeviceArray<uint8_t> tiles(tile_bytes);
    cuda::WriteDenseTiles(rows, tiles.get(), tile_bytes, nullptr);
    for (const int64_t m : {int64_t{9}, int64_t{64}, int64_t{100}, int64_t{255}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * in), ++seed));
      auto run = [&](const void* weight_tiles) {
        DeviceArray<float> dy(static_cast<size_t>(m * out));
        dy.Fill(0xff);  // NaN: an output the kernel skips does not pass
        const size_t scratch_bytes = cuda::LinearScratchBytes(m, rows, cuda::LinearMath::kSplitBf16);
        DeviceArray<uint8_t> scratch(scratch_bytes);
        cuda::Linear(dx.get(), in, m, rows, dy.get(), out, nullptr, cuda::LinearMath::kSplitBf16, scratch.get(),
                     scratch_bytes, weight_tiles);
        return dy.ToHost();
      };
      for (const int overlap : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "[" << in << " -> " << out << "] M=" << m << " overlap " << overlap);
        ScopedDenseOverlap loop(overlap);
        std::vector<float> block_kernel;
        {
          const ScopedSwitch<cuda::SetDenseWs64ForTesting> off(0);
          block_kernel = run(nullptr);
        }
        const ScopedSwitch<cuda::SetDenseWs64ForTesting> ws64(1);
        const uint64_t launches = cuda::DenseWs64LaunchesForTesting();
        EXPECT_TRUE(AllEqual(run(nullptr), block_kernel, "64-token warp-specialized against the block kernel"));
        EXPECT_TRUE(AllEqual(run(tiles.get()), block_kernel, "the same on the weight's tiles"));
        EXPECT_EQ(cuda::DenseWs64LaunchesForTesting() - launches, 2u) << "the 64-token kernel did not run";
      }
    }
  }
}

// GroupedBf16WsKernel in clusters of two blocks (DEEPINFER_BF16_WS_PAIRS: row blocks 2u and 2u + 1
// of a token tile, each loading half of x's tiles multicast into both) gives the bits of the kernel
// without pairs: dense products (Linear: the head's 3-part form at 256 and 300 rows; an even
// count of row blocks, an odd one whose last rank computes nothing (4200 rows: 33 blocks, the last
// partial; K of 23 chunks), two row blocks (K of one slice, so no clusters over K), K of two
// slices), the shared-parts products of LinearsOfOneInput (beside a [1024 -> 64] that runs alone), and
// GroupedLinear's (8 and 3 groups, x as is and rounded, TMA stores and each thread's; 3 row blocks
// a group, so rank 1 of the last unit of a group loads the next group's rows and stores nothing);
// and, the switch unset, pairs for dense products of 256 rows and not of 300, nor grouped ones.
TEST(CudaLinearMma, Bf16WsPairsGiveTheSameBits) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  }
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  ScopedDenseWs ws(1);
  uint64_t seed = 7300;
  struct Dense {
    int64_t out, in;
  };
  for (const Dense& c : {Dense{8192, 4096}, Dense{4200, 1472}, Dense{256, 512}, Dense{8192, 1024}}) {
    TestWeight w = RandomWeight(kBf16, c.out, c.in, ++seed);
    for (const int64_t m : {int64_t{256}, int64_t{300}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.in), ++seed));
      for (const int overlap : {0, 1}) {
        SCOPED_TRACE(testing::Message() << "[" << c.in << " -> " << c.out << "] M=" << m << " overlap " << overlap);
        ScopedDenseOverlap loop(overlap);
        std::vector<float> alone;
        {
          ScopedBf16WsPairs off(0);
          alone = RunRows(w, dx, 0, m);
        }
        ScopedBf16WsPairs pairs(1);
        const uint64_t launches = cuda::Bf16WsPairLaunchesForTesting();
        const uint64_t ws_launches = cuda::DenseWsLaunchesForTesting();
        EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), alone, "pairs against one block a tile"));
        EXPECT_EQ(cuda::DenseWsLaunchesForTesting() - ws_launches, 1u) << "the warp-specialized kernel did not run";
        EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 1u) << "the pairs did not run";
      }
    }
  }
  {
    // Unset, the switch pairs dense products of at most two token tiles (256 rows), not more.
    SCOPED_TRACE("the default");
    ScopedBf16WsPairs unset(-1);
    TestWeight w = RandomWeight(kBf16, 8192, 1024, ++seed);
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(300 * 1024), ++seed));
    uint64_t launches = cuda::Bf16WsPairLaunchesForTesting();
    RunRows(w, dx, 0, 256);
    EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 1u) << "256 rows";
    launches = cuda::Bf16WsPairLaunchesForTesting();
    RunRows(w, dx, 0, 300);
    EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 0u) << "300 rows";
  }
  {
    SCOPED_TRACE("LinearsOfOneInput");
    constexpr int64_t kIn = 1024, kRows = 1024;
    std::vector<TestWeight> weights;
    for (const int64_t out : {int64_t{4096}, int64_t{64}, int64_t{2048}}) {
      weights.push_back(RandomWeight(kBf16, out, kIn, ++seed));
    }
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(kRows * kIn), ++seed));
    auto run_all = [&](int mode) {
      ScopedBf16WsPairs pairs(mode);
      return RunLinearsOfOneInput(weights, dx, kIn, kRows);
    };
    const auto alone = run_all(0);
    const uint64_t launches = cuda::Bf16WsPairLaunchesForTesting();
    const auto paired = run_all(1);
    EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 2u) << "[1024 -> 4096] and [1024 -> 2048] in pairs";
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_TRUE(AllEqual(paired[i], alone[i], "product " + std::to_string(i)));
    }
  }
  struct Grouped {
    int64_t groups, r, k;
  };
  for (const Grouped& c : {Grouped{8, 1024, 4096}, Grouped{3, 384, 192}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.groups * c.r, c.k, ++seed);
    for (const int64_t m : {int64_t{256}, int64_t{300}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.groups * c.k), ++seed));
      for (const bool round : {false, true}) {
        for (const int tma_store : {0, 1}) {
          const std::string what = "G=" + std::to_string(c.groups) + " [" + std::to_string(c.k) + " -> " +
                                   std::to_string(c.r) + "] M=" + std::to_string(m) + (round ? " rounded" : " as is") +
                                   (tma_store == 1 ? ", TMA stores" : ", each thread's stores");
          ScopedTmaStore stores(tma_store);
          auto run = [&](int mode) {
            ScopedGroupedBf16 grouped(1);
            ScopedBf16WsPairs pairs(mode);
            const size_t bytes = cuda::GroupedLinearScratchBytes(m, c.groups, w.Device(), TestLinearMath(), round);
            DeviceArray<uint8_t> scratch(std::max<size_t>(bytes, 1));
            DeviceArray<float> dy(static_cast<size_t>(m * c.groups * c.r));
            dy.Fill(0xff);
            cuda::GroupedLinear(dx.get(), m, c.groups, w.Device(), dy.get(), nullptr, TestLinearMath(), round,
                                scratch.get(), bytes);
            return dy.ToHost();
          };
          const std::vector<float> alone = run(0);
          uint64_t launches = cuda::Bf16WsPairLaunchesForTesting();
          EXPECT_TRUE(AllEqual(run(1), alone, what));
          EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 1u) << what << ": the pairs did not run";
          launches = cuda::Bf16WsPairLaunchesForTesting();
          run(-1);
          EXPECT_EQ(cuda::Bf16WsPairLaunchesForTesting() - launches, 0u) << what << ": unset, grouped ones are alone";
        }
      }
    }
  }
}

// BF16 weights with tiles (DEEPINFER_DENSE_TILES: the weight again in 16 KiB tiles, written once):
// the tiles hold the weight's bytes where wgmma_split::DenseTileOffset says (zeros past its rows),
// and every kernel of the product reads them with the bits of the row-major weight: the 8-token
// kernel (1-8 rows), the 64-token ones (9, 64: x's parts split once) and the warp-specialized one
// (256 in pairs, 300 alone: two and three token tiles). Rows past n in the last block (1000,
// 300, 1100), rows padded past K, K of one slice (256), of 9 slices (4160) and of 16 (8192, the
// split-BF16 path's most): none takes the cluster kernel, whatever the SMs. A narrow weight whose
// 1-8 rows take the K slices over a cluster ([1024 -> 256]: 2 row blocks, 2 slices) and one past
// the split-BF16 path's K ([8256 -> 300]: the SIMT kernels) get no tiles.
TEST(CudaLinearMma, DenseTilesGiveTheBitsOfTheRows) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  uint64_t seed = 6100;
  {
    ScopedDenseTiles off(0);
    const TestWeight w = RandomWeight(kBf16, 256, 256, ++seed);
    EXPECT_EQ(cuda::DenseTilesBytes(w.Device(), cuda::LinearMath::kSplitBf16), 0u) << "switch off";
    EXPECT_THROW(cuda::WriteDenseTiles(w.Device(), nullptr, 0, nullptr), Error);
  }
  ScopedDenseTiles tiles_on(1);
  {
    const TestWeight narrow = RandomWeight(kBf16, 256, 1024, ++seed);
    EXPECT_EQ(cuda::DenseTilesBytes(narrow.Device(), cuda::LinearMath::kSplitBf16), 0u) << "the cluster kernel's";
    const TestWeight long_rows = RandomWeight(kBf16, 300, 8256, ++seed);
    EXPECT_EQ(cuda::DenseTilesBytes(long_rows.Device(), cuda::LinearMath::kSplitBf16), 0u) << "K past 8192";
  }
  struct Case {
    int64_t out, in, pad;
  };
  for (const Case& c : {Case{1000, 256, 0}, Case{300, 8192, 64}, Case{1100, 4160, 0}}) {
    SCOPED_TRACE(testing::Message() << "[" << c.in << " -> " << c.out << "] pad " << c.pad);
    const TestWeight w = RandomWeight(kBf16, c.out, c.in, ++seed, c.pad);
    const cuda::DeviceWeight rows = w.Device();
    EXPECT_EQ(cuda::DenseTilesBytes(rows, cuda::LinearMath::kSimtF32), 0u) << "no kernel reads them under f32 SIMT";
    const int64_t row_blocks = (c.out + 127) / 128, chunks = c.in / 64;
    const size_t bytes = cuda::DenseTilesBytes(rows, cuda::LinearMath::kSplitBf16);
    ASSERT_EQ(bytes, static_cast<size_t>(row_blocks * chunks * 16384));
    DeviceArray<uint8_t> tiles(bytes);
    tiles.Fill(0xa5);
    cuda::WriteDenseTiles(rows, tiles.get(), bytes, nullptr);
    const std::vector<uint8_t> got = tiles.ToHost();
    size_t wrong = 0;
    for (int64_t b = 0; b < row_blocks; ++b) {
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const uint8_t* tile = got.data() + (b * chunks + ch) * 16384;
        for (int64_t r = 0; r < 128; ++r) {
          const int64_t row = 128 * b + r;
          for (int64_t i = 0; i < 128; ++i) {
            const uint8_t want = row < c.out ? w.data[static_cast<size_t>(row * w.cols * 2 + ch * 128 + i)] : 0;
            wrong += tile[r * 128 + i] != want;
          }
        }
      }
    }
    EXPECT_EQ(wrong, 0u) << "tile bytes out of place";
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{64}, int64_t{256},
                            int64_t{300}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * c.in), ++seed));
      auto run = [&](const void* with_tiles) {
        DeviceArray<float> dy(static_cast<size_t>(m * c.out));
        dy.Fill(0xff);
        const size_t scratch_bytes = cuda::LinearScratchBytes(m, rows, cuda::LinearMath::kSplitBf16);
        DeviceArray<uint8_t> scratch(scratch_bytes);
        cuda::Linear(dx.get(), c.in, m, rows, dy.get(), c.out, nullptr, cuda::LinearMath::kSplitBf16, scratch.get(),
                     scratch_bytes, with_tiles);
        return dy.ToHost();
      };
      const std::vector<float> want = run(nullptr);
      const uint64_t launches = cuda::DenseTilesLaunchesForTesting();
      const std::vector<float> from_tiles = run(tiles.get());
      EXPECT_EQ(cuda::DenseTilesLaunchesForTesting() - launches, 1u) << "M=" << m;
      EXPECT_TRUE(AllEqual(from_tiles, want, "tiles against rows, M=" + std::to_string(m)));
    }
  }
}

// DEEPINFER_DENSE_TILES_IN_PLACE: a weight of a multiple of 128 rows without row padding is
// rewritten as its tiles in place (its bytes those WriteDenseTiles writes elsewhere), and Linear,
// given tiles == its data, gives the row-major weight's bits at 1, 8, 9, 64, 256 and 300 rows (every
// kernel that reads tiles); a kernel that reads rows (DEEPINFER_DENSE_WGMMA=0) is refused. Padded
// rows, the switch off or f32 math: not in place; DEEPINFER_DENSE_TILES (the second copy) off: still in
// place.
TEST(CudaLinearMma, DenseTilesInPlaceGiveTheBitsOfTheRows) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  constexpr cuda::LinearMath kSplit = cuda::LinearMath::kSplitBf16;
  ScopedLinearMath math(kSplit);
  ScopedDenseSplit on(1);
  uint64_t seed = 7600;
  {
    ScopedDenseTilesInPlace off(0);
    const TestWeight w = RandomWeight(kBf16, 1024, 512, ++seed);
    EXPECT_FALSE(cuda::DenseTilesInPlace(w.Device(), kSplit)) << "switch off";
  }
  ScopedDenseTilesInPlace in_place(1);
  {
    // In place needs no second copy: DEEPINFER_DENSE_TILES off (DenseTilesBytes 0) changes nothing.
    ScopedDenseTiles copy_off(0);
    const TestWeight w = RandomWeight(kBf16, 1280, 512, ++seed);  // the first case below
    EXPECT_EQ(cuda::DenseTilesBytes(w.Device(), kSplit), 0u);
    EXPECT_TRUE(cuda::DenseTilesInPlace(w.Device(), kSplit)) << "DEEPINFER_DENSE_TILES off";
    EXPECT_FALSE(cuda::DenseTilesInPlace(w.Device(), cuda::LinearMath::kSimtF32)) << "f32 math reads rows";
  }
  ScopedDenseTiles tiles_on(1);
  EXPECT_FALSE(cuda::DenseTilesInPlace(RandomWeight(kBf16, 1024, 512, ++seed, 64).Device(), kSplit)) << "padded rows";
  EXPECT_FALSE(cuda::DenseTilesInPlace(RandomWeight(kBf16, 1000, 512, ++seed).Device(), kSplit)) << "1000 rows";
  struct Case {
    int64_t out, in;  // K of one slice or of 16: no product of this weight takes the K slices' kernel
  };
  for (const Case& c : {Case{1280, 512}, Case{256, 8192}}) {
    const int64_t out = c.out, in = c.in;
    SCOPED_TRACE(testing::Message() << "[" << in << " -> " << out << "]");
    const TestWeight w = RandomWeight(kBf16, out, in, ++seed);
    const cuda::DeviceWeight rows = w.Device();
    ASSERT_TRUE(cuda::DenseTilesInPlace(rows, kSplit));
    const size_t bytes = cuda::DenseTilesBytes(rows, cuda::LinearMath::kSplitBf16);
    ASSERT_EQ(bytes, w.data.size());
    DeviceArray<uint8_t> copied(bytes);
    cuda::WriteDenseTiles(rows, copied.get(), bytes, nullptr);
    DeviceArray<uint8_t> rewritten(w.data);  // the rows again, to be rewritten in place
    cuda::DeviceWeight tiled = rows;
    tiled.data = rewritten.get();
    cuda::RewriteAsDenseTiles(tiled, nullptr);
    EXPECT_TRUE(rewritten.ToHost() == copied.ToHost()) << "the tiles WriteDenseTiles writes";
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{64}, int64_t{256}, int64_t{300}}) {
      DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * in), ++seed));
      auto run = [&](const cuda::DeviceWeight& weight, const void* tiles) {
        DeviceArray<float> dy(static_cast<size_t>(m * out));
        dy.Fill(0xff);
        const size_t scratch_bytes = cuda::LinearScratchBytes(m, weight, cuda::LinearMath::kSplitBf16);
        DeviceArray<uint8_t> scratch(scratch_bytes);
        cuda::Linear(dx.get(), in, m, weight, dy.get(), out, nullptr, cuda::LinearMath::kSplitBf16, scratch.get(),
                     scratch_bytes, tiles);
        return dy.ToHost();
      };
      const std::vector<float> want = run(rows, nullptr);
      const uint64_t launches = cuda::DenseTilesLaunchesForTesting();
      EXPECT_TRUE(AllEqual(run(tiled, tiled.data), want, "rewritten in place, M=" + std::to_string(m)));
      EXPECT_EQ(cuda::DenseTilesLaunchesForTesting() - launches, 1u) << "M=" << m;
    }
    ScopedDenseSplit rows_kernels(0);
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(in), ++seed));
    DeviceArray<float> dy(static_cast<size_t>(out));
    EXPECT_THROW(cuda::Linear(dx.get(), in, 1, tiled, dy.get(), out, nullptr, cuda::LinearMath::kSplitBf16, nullptr,
                              0, tiled.data),
                 Error)
        << "a kernel that reads rows";
  }
}

// Products of one x (the compressors' and the indexer's BF16 weights at a prefill) through
// LinearsOfOneInput: each with the bits Linear gives it alone; x's parts split once for the two
// whose grids fill the GPU ([4096 -> 1024] and [2048 -> 1024] at 1024 rows), while the narrow one
// (64 outputs: its K slices over clusters) reads x itself; and with one such product nothing is
// shared.
TEST(CudaLinearMma, LinearsOfOneInputEqualLinear) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  constexpr int64_t kIn = 1024, kRows = 1024;
  uint64_t seed = 6100;
  std::vector<TestWeight> weights;
  for (const int64_t out : {int64_t{4096}, int64_t{64}, int64_t{2048}}) {
    weights.push_back(RandomWeight(kBf16, out, kIn, ++seed));
  }
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(kRows * kIn), ++seed));
  for (const size_t count : {size_t{3}, size_t{2}}) {  // 2: [1024 -> 4096] and [1024 -> 64], one wide product
    SCOPED_TRACE(testing::Message() << count << " products");
    const uint64_t shared = cuda::SharedXPartsLaunchesForTesting();
    const std::vector<std::vector<float>> ys = RunLinearsOfOneInput(weights, dx, kIn, kRows, count);
    EXPECT_EQ(cuda::SharedXPartsLaunchesForTesting() - shared, count == 3 ? 2u : 0u);
    for (size_t i = 0; i < count; ++i) {
      EXPECT_TRUE(AllEqual(ys[i], RunRows(weights[i], dx, 0, kRows),
                           "product " + std::to_string(i) + " against Linear alone"));
    }
  }
}

// LinearsOfOneInput on BF16 values (a block's norm output under Numerics::bf16_norm_outputs): the
// products the dense warp-specialized kernels run multiply x as one part, shared (at 1024 rows the
// three wide ones: [1024 -> 4096], [1024 -> 2048], [1024 -> 20480]) or alone (at 100 rows the
// widest on the 64-token kernel; at 1 and 8 rows each where LinearRoundsXToBf16 says so), and every
// product has the bits it has on the same x taken as it is (three parts, two of them zeros), the
// narrow [1024 -> 64] (K slices over a cluster) included.
TEST(CudaLinearMma, LinearsOfOneInputOnBf16ValuesEqualThreeParts) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  }
  constexpr cuda::LinearMath kSplit = cuda::LinearMath::kSplitBf16;
  ScopedLinearMath math(kSplit);
  ScopedDenseSplit on(1);
  constexpr int64_t kIn = 1024;
  uint64_t seed = 8100;
  std::vector<TestWeight> weights;
  for (const int64_t out : {int64_t{4096}, int64_t{64}, int64_t{2048}, int64_t{20480}}) {
    weights.push_back(RandomWeight(kBf16, out, kIn, ++seed));
  }
  for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{100}, int64_t{1024}}) {
    SCOPED_TRACE(testing::Message() << "M=" << m);
    std::vector<float> x = RandomFloats(static_cast<size_t>(m * kIn), ++seed);
    cpu::Bf16Round(x.data(), static_cast<int64_t>(x.size()));
    const DeviceArray<float> dx(x);
    uint64_t alone_on_one_part = 0;  // products that Linear would run on one part
    for (const TestWeight& w : weights) {
      const size_t bytes = cuda::LinearScratchBytes(m, w.Device(), kSplit);
      DeviceArray<uint8_t> scratch(bytes);
      DeviceArray<float> dy(static_cast<size_t>(m * w.out));
      alone_on_one_part += cuda::LinearRoundsXToBf16(dx.get(), kIn, m, w.Device(), dy.get(), w.out, kSplit,
                                                     scratch.get(), bytes, nullptr);
    }
    const std::vector<std::vector<float>> three_parts = RunLinearsOfOneInput(weights, dx, kIn, m);
    const uint64_t shared = cuda::SharedXPartsLaunchesForTesting();
    const uint64_t one_part = cuda::DenseRoundedXLaunchesForTesting();
    const std::vector<std::vector<float>> ys = RunLinearsOfOneInput(weights, dx, kIn, m, 0, true);
    const uint64_t shared_launches = cuda::SharedXPartsLaunchesForTesting() - shared;
    EXPECT_EQ(shared_launches, m == 1024 ? 3u : 0u);
    EXPECT_EQ(cuda::DenseRoundedXLaunchesForTesting() - one_part, m == 1024 ? 3u : alone_on_one_part);
    if (m == 100) EXPECT_EQ(alone_on_one_part, 1u) << "the widest product on the 64-token kernel";
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_TRUE(AllEqual(ys[i], three_parts[i], "product " + std::to_string(i) + " on one part against three"));
    }
  }
}

// DEEPINFER_CUBLASLT_DENSE: dense split-BF16 products of 512+ rows on x's three parts run as three
// cuBLASLt BF16 GEMMs (y = W·x_0, += W·x_1, += W·x_2), alone (Linear) and on shared parts
// (LinearsOfOneInput): each output within the chain bound of the CPU's f32 sum, at the compressor's
// [4096 -> 1024] and [4096 -> 300] (n not a multiple of 8), 512 and 600 rows; 511 rows keep the
// kernels (no cuBLASLt launch; at that size neither grid fills the GPU, so x's parts are not shared).
TEST(CudaLinearMma, DenseCublasLtWithinTheChainBound) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  ScopedDenseSplit on(1);
  ScopedCublasLtDense dense(1);
  constexpr int64_t kIn = 4096;
  uint64_t seed = 6200;
  std::vector<TestWeight> weights;
  for (const int64_t out : {int64_t{1024}, int64_t{300}}) weights.push_back(RandomWeight(kBf16, out, kIn, ++seed));
  for (const int64_t m : {int64_t{512}, int64_t{600}, int64_t{511}}) {
    SCOPED_TRACE(testing::Message() << "M=" << m);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * kIn), ++seed);
    std::vector<float> xabs(x.size());
    for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::fabs(x[i]);
    DeviceArray<float> dx(x);
    std::vector<std::vector<float>> want, sabs;
    for (TestWeight& w : weights) {
      want.emplace_back(static_cast<size_t>(m * w.out));
      sabs.emplace_back(want.back().size());
      cpu::Linear(TensorView(const_cast<float*>(x.data()), DType::kF32, {m, kIn}), w.View(),
                  TensorView(want.back().data(), DType::kF32, {m, w.out}));
      std::vector<float> wabs = AbsDense(w.View());
      cpu::Linear(TensorView(xabs.data(), DType::kF32, {m, kIn}), DenseView(wabs, w.out, kIn),
                  TensorView(sabs.back().data(), DType::kF32, {m, w.out}));
    }
    const uint64_t expected = m >= 512 ? 1u : 0u;
    for (size_t i = 0; i < weights.size(); ++i) {
      const uint64_t launches = cuda::CublasLtDenseLaunchesForTesting();
      const std::vector<float> alone = RunRows(weights[i], dx, 0, m);
      EXPECT_EQ(cuda::CublasLtDenseLaunchesForTesting() - launches, expected) << "Linear, product " << i;
      EXPECT_TRUE(WithinBoundC(alone, want[i], sabs[i], SplitChainBoundC(kIn), "Linear " + std::to_string(i)));
    }
    const uint64_t launches = cuda::CublasLtDenseLaunchesForTesting();
    const uint64_t shared = cuda::SharedXPartsLaunchesForTesting();
    const std::vector<std::vector<float>> ys = RunLinearsOfOneInput(weights, dx, kIn, m);
    if (m >= 512) EXPECT_EQ(cuda::SharedXPartsLaunchesForTesting() - shared, 2u) << "both on x's shared parts";
    EXPECT_EQ(cuda::CublasLtDenseLaunchesForTesting() - launches, 2 * expected) << "LinearsOfOneInput";
    for (size_t i = 0; i < weights.size(); ++i) {
      EXPECT_TRUE(
          WithinBoundC(ys[i], want[i], sabs[i], SplitChainBoundC(kIn), "LinearsOfOneInput " + std::to_string(i)));
    }
  }
}

// round_x_to_bf16 (the attention output under Numerics::bf16_attention_output): the grouped
// kernels round x to BF16 as they read it and multiply that one part, on both the cp.async and the
// TMA-fed kernel. Their outputs must be the three-part kernels' on x rounded by the CPU's
// Bf16Round (round to nearest even) bit for bit, and differ from the three-part kernels' on the
// raw x (which shows that the flag reached the kernel).
TEST(CudaLinearMma, GroupedRoundedToBf16EqualsThreePartsOnRoundedX) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  uint64_t seed = 3300;
  TestWeight w = RandomWeight(kFp8E8m0, 8 * 1024, 4096, ++seed);
  EXPECT_FALSE(cuda::GroupedRoundsXToBf16(w.Device(), 8, cuda::LinearMath::kSimtF32));
  // Under DEEPINFER_WGMMA=0 (gpu-run.sh's rerun) or without sm_90a code the kernels do not run and
  // rounding is an error (the next test).
  if (!cuda::GroupedRoundsXToBf16(w.Device(), 8, cuda::LinearMath::kSplitBf16)) {
    ASSERT_FALSE(cuda::Fp8ActOnWarpgroupMma()) << "a warpgroup-MMA device that does not round grouped x";
    GTEST_SKIP() << "no grouped warpgroup-MMA kernels on this device or under DEEPINFER_WGMMA=0";
  }
  for (const int tma : {0, 1}) {
    if (tma == 1 && !cuda::TmaKernelsAvailable()) continue;
    ScopedTmaKernels scoped(tma);
    for (const int64_t m : {int64_t{1}, int64_t{64}, int64_t{300}}) {
      const std::string what = "TMA " + std::to_string(tma) + " M=" + std::to_string(m);
      const uint64_t launches = cuda::TmaLaunchesForTesting();
      std::vector<float> x = RandomFloats(static_cast<size_t>(m * 8 * 4096), ++seed);
      const DeviceArray<float> raw(x);
      cpu::Bf16Round(x.data(), static_cast<int64_t>(x.size()));
      const DeviceArray<float> rounded(x);
      auto run = [&](const DeviceArray<float>& dx, bool round) {
        DeviceArray<float> dy(static_cast<size_t>(m * 8 * 1024));
        dy.Fill(0xff);  // NaN: an output a kernel skips does not pass
        cuda::GroupedLinear(dx.get(), m, 8, w.Device(), dy.get(), nullptr, TestLinearMath(), round);
        return dy.ToHost();
      };
      const std::vector<float> one_part = run(raw, true);
      EXPECT_TRUE(AllEqual(one_part, run(rounded, false), what));
      EXPECT_TRUE(AllEqual(run(rounded, true), one_part, what + ", x already rounded"));
      EXPECT_FALSE(AllEqual(one_part, run(raw, false))) << what << ": the flag did not reach the kernel";
      EXPECT_EQ(cuda::TmaLaunchesForTesting() > launches, tma == 1) << what << ": which kernel ran";
    }
  }
}

// Where the warpgroup-MMA kernels do not run, asking them to round x is an error, not a silent
// product of the unrounded x: f32 math, an x that is not 16-byte aligned, one group.
TEST(CudaLinearMma, GroupedRoundingElsewhereIsAnError) {
  DI_REQUIRE_GPU();
  TestWeight w = RandomWeight(kFp8E8m0, 3 * 128, 192, 3400);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(2 * 3 * 192 + 1), 3401));
  DeviceArray<float> dy(static_cast<size_t>(2 * 3 * 128));
  auto fails = [&](const float* x, int64_t groups, cuda::LinearMath math) {
    try {
      cuda::GroupedLinear(x, 2, groups, w.Device(), dy.get(), nullptr, math, true);
    } catch (const std::exception& e) {
      return std::string(e.what()).find("rounded to BF16") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(fails(dx.get(), 3, cuda::LinearMath::kSimtF32));
  if (cuda::GroupedRoundsXToBf16(w.Device(), 3, cuda::LinearMath::kSplitBf16)) {
    EXPECT_TRUE(fails(dx.get() + 1, 3, cuda::LinearMath::kSplitBf16)) << "x not 16-byte aligned";
    EXPECT_TRUE(fails(dx.get(), 1, cuda::LinearMath::kSplitBf16)) << "one group";
  }
}

// The dense warp-specialized kernels' test setting: split-BF16 math, the dense split-BF16 kernels
// and the dense tiles switched on while it lives (first, so the tiles below are written), and a
// head-like BF16 weight [34000 -> 4096] (266 row blocks, the last partial, so no product of it
// takes the K slices) with its tiles (WriteDenseTiles; empty where the device has no tiles'
// kernels). Not copied: rows points into w.
struct HeadLikeWeight {
  static constexpr int64_t kOut = 34000, kIn = 4096;
  static constexpr cuda::LinearMath kMath = cuda::LinearMath::kSplitBf16;
  ScopedLinearMath math{kMath};
  ScopedDenseSplit dense_split{1};
  ScopedDenseTiles tiles_on{1};
  TestWeight w;
  cuda::DeviceWeight rows;
  DeviceArray<uint8_t> tiles;
  explicit HeadLikeWeight(uint64_t seed)
      : w(RandomWeight(kBf16, kOut, kIn, seed)), rows(w.Device()), tiles(cuda::DenseTilesBytes(rows, kMath)) {
    if (tiles.size() > 0) cuda::WriteDenseTiles(rows, tiles.get(), tiles.size(), nullptr);
  }
  HeadLikeWeight(const HeadLikeWeight&) = delete;
  HeadLikeWeight& operator=(const HeadLikeWeight&) = delete;
};

// Linear's round_x_to_bf16 (the head's input under Numerics::bf16_head_input): the dense
// warp-specialized kernels round x to BF16 as they split it and multiply that one part. On the
// head's K (4096, 8 slices) and 266 row blocks (the last partial, so no product takes the K
// slices), at 1 and 8 rows (the 8-token kernel), 9 and 100 (64-token), 256 (128-token tiles in
// pairs) and 300 (a partial third tile), from the weight's rows and from its tiles, in both loop
// forms: the bits of the three-part kernels on x rounded by the CPU's Bf16Round (nearest even),
// whatever x was rounded before, and not those of the three parts of the raw x (the flag reached the
// kernel).
TEST(CudaLinearMma, DenseRoundedToBf16EqualsThreePartsOnRoundedX) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  }
  constexpr cuda::LinearMath kSplit = HeadLikeWeight::kMath;
  constexpr int64_t kOut = HeadLikeWeight::kOut, kIn = HeadLikeWeight::kIn;
  uint64_t seed = 7900;
  const HeadLikeWeight head(++seed);
  const cuda::DeviceWeight& rows = head.rows;
  const DeviceArray<uint8_t>& tiles = head.tiles;
  ASSERT_GT(tiles.size(), 0u);
  for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{100}, int64_t{256}, int64_t{300}}) {
    std::vector<float> x = RandomFloats(static_cast<size_t>(m * kIn), ++seed);
    const DeviceArray<float> raw(x);
    cpu::Bf16Round(x.data(), static_cast<int64_t>(x.size()));
    const DeviceArray<float> rounded(x);
    const size_t scratch_bytes = cuda::LinearScratchBytes(m, rows, kSplit);
    DeviceArray<uint8_t> scratch(scratch_bytes);
    DeviceArray<float> dy(static_cast<size_t>(m * kOut));
    auto run = [&](const DeviceArray<float>& dx, const void* weight_tiles, bool round) {
      dy.Fill(0xff);  // NaN: an output the kernel skips does not pass
      cuda::Linear(dx.get(), kIn, m, rows, dy.get(), kOut, nullptr, kSplit, scratch.get(), scratch_bytes,
                   weight_tiles, round);
      return dy.ToHost();
    };
    for (const int overlap : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "M=" << m << " overlap " << overlap);
      ScopedDenseOverlap loop(overlap);
      ASSERT_TRUE(cuda::LinearRoundsXToBf16(raw.get(), kIn, m, rows, dy.get(), kOut, kSplit, scratch.get(),
                                            scratch_bytes, nullptr));
      ASSERT_TRUE(cuda::LinearRoundsXToBf16(raw.get(), kIn, m, rows, dy.get(), kOut, kSplit, scratch.get(),
                                            scratch_bytes, tiles.get()));
      const std::vector<float> three_parts = run(rounded, nullptr, false);
      const uint64_t launches = cuda::DenseRoundedXLaunchesForTesting();
      const std::vector<float> one_part = run(raw, nullptr, true);
      EXPECT_TRUE(AllEqual(one_part, three_parts, "one part of the raw x against three of the rounded x"));
      EXPECT_TRUE(AllEqual(run(rounded, nullptr, true), three_parts, "x already rounded"));
      EXPECT_TRUE(AllEqual(run(raw, tiles.get(), true), three_parts, "from the weight's tiles"));
      EXPECT_EQ(cuda::DenseRoundedXLaunchesForTesting() - launches, 3u) << "the rounding kernels did not run";
      EXPECT_FALSE(AllEqual(run(raw, nullptr, false), one_part)) << "the flag did not reach the kernel";
    }
  }
}

// Where no dense kernel rounds x, LinearRoundsXToBf16 says so and Linear's round_x_to_bf16 is an
// error, not a silent product of the raw x: f32 math, no scratch, the 8-token kernel switched off,
// a weight whose products take the K slices' cluster kernel ([4096 -> 256], the router's gate), an
// FP8 weight.
TEST(CudaLinearMma, DenseRoundingElsewhereIsAnError) {
  DI_REQUIRE_GPU();
  uint64_t seed = 8000;
  const TestWeight head_like = RandomWeight(kBf16, 34000, 1536, ++seed);
  const TestWeight gate_like = RandomWeight(kBf16, 256, 4096, ++seed);
  const TestWeight fp8 = RandomWeight(kFp8E8m0, 34000, 1536, ++seed);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(2 * 4096), ++seed));
  DeviceArray<float> dy(static_cast<size_t>(2 * 34000));
  auto check = [&](const TestWeight& w, cuda::LinearMath math, bool with_scratch, const std::string& what) {
    SCOPED_TRACE(what);
    const size_t bytes = with_scratch ? cuda::LinearScratchBytes(2, w.Device(), math) : 0;
    DeviceArray<uint8_t> scratch(bytes);
    EXPECT_FALSE(cuda::LinearRoundsXToBf16(dx.get(), w.in, 2, w.Device(), dy.get(), w.out, math, scratch.get(),
                                           bytes, nullptr));
    try {
      cuda::Linear(dx.get(), w.in, 2, w.Device(), dy.get(), w.out, nullptr, math, scratch.get(), bytes, nullptr,
                   true);
      ADD_FAILURE() << "rounding accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("round_x_to_bf16"), std::string::npos) << e.what();
    }
  };
  check(head_like, cuda::LinearMath::kSimtF32, true, "f32 math");
  check(fp8, cuda::LinearMath::kSplitBf16, true, "an FP8 weight");
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device: the cases that need it";
  }
  ScopedDenseSplit on(1);
  check(head_like, cuda::LinearMath::kSplitBf16, false, "no scratch");
  check(gate_like, cuda::LinearMath::kSplitBf16, true, "K slices over a cluster");
  {
    const ScopedSwitch<cuda::SetDenseWs8ForTesting> off(0);
    check(head_like, cuda::LinearMath::kSplitBf16, true, "DEEPINFER_DENSE_WS8=0");
  }
  const size_t bytes = cuda::LinearScratchBytes(2, head_like.Device(), cuda::LinearMath::kSplitBf16);
  DeviceArray<uint8_t> scratch(bytes);
  EXPECT_TRUE(cuda::LinearRoundsXToBf16(dx.get(), head_like.in, 2, head_like.Device(), dy.get(), head_like.out,
                                        cuda::LinearMath::kSplitBf16, scratch.get(), bytes, nullptr))
      << "the case the others depart from";
}

// DEEPINFER_DENSE_WS_TOKENS_FASTEST: the dense products of 2-4 128-token tiles without pairs, the
// walk taking token tiles fastest, give the bits of the default walk (pairs, row blocks fastest):
// on a head-like [34000 -> 4096] at 256, 300 and 512 rows, x as three parts and as one rounded part,
// from the weight's rows and its tiles; one launch each takes the order, and none at 128 rows (one
// token tile) or 600 (five); by default (the environment's unset) only the one-part products do.
TEST(CudaLinearMma, DenseTokensFastestGivesTheSameBits) {
  DI_REQUIRE_GPU();
  if (!cuda::Fp8ActOnWarpgroupMma() || !cuda::TmaKernelsAvailable()) {
    GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  }
  constexpr cuda::LinearMath kSplit = HeadLikeWeight::kMath;
  constexpr int64_t kOut = HeadLikeWeight::kOut, kIn = HeadLikeWeight::kIn;
  uint64_t seed = 8200;
  const HeadLikeWeight head(++seed);
  const cuda::DeviceWeight& rows = head.rows;
  const DeviceArray<uint8_t>& tiles = head.tiles;
  ASSERT_GT(tiles.size(), 0u);
  for (const int64_t m : {int64_t{128}, int64_t{256}, int64_t{300}, int64_t{512}, int64_t{600}}) {
    const DeviceArray<float> dx(RandomFloats(static_cast<size_t>(m * kIn), ++seed));
    const size_t scratch_bytes = cuda::LinearScratchBytes(m, rows, kSplit);
    DeviceArray<uint8_t> scratch(scratch_bytes);
    DeviceArray<float> dy(static_cast<size_t>(m * kOut));
    const uint64_t expected = m >= 129 && m <= 512 ? 1 : 0;
    for (const bool round : {false, true}) {
      for (const void* weight_tiles : {static_cast<const void*>(nullptr), static_cast<const void*>(tiles.get())}) {
        SCOPED_TRACE(testing::Message() << "M=" << m << (round ? " one part" : " three parts")
                                        << (weight_tiles != nullptr ? " tiles" : " rows"));
        auto run = [&](int mode) {
          const ScopedSwitch<cuda::SetDenseWsTokensFastestForTesting> order(mode);
          dy.Fill(0xff);  // NaN: an output the kernel skips does not pass
          const uint64_t before = cuda::DenseWsTokensFastestLaunchesForTesting();
          cuda::Linear(dx.get(), kIn, m, rows, dy.get(), kOut, nullptr, kSplit, scratch.get(), scratch_bytes,
                       weight_tiles, round);
          const uint64_t want = mode != 0 ? expected : 0u;  // the default (-1) is on
          EXPECT_EQ(cuda::DenseWsTokensFastestLaunchesForTesting() - before, want) << "mode " << mode;
          return dy.ToHost();
        };
        const std::vector<float> rows_fastest = run(0);
        EXPECT_TRUE(AllEqual(run(1), rows_fastest, "token tiles fastest against rows fastest"));
        EXPECT_TRUE(AllEqual(run(-1), rows_fastest, "the default against rows fastest"));
      }
    }
  }
}

TEST(CudaLinearMma, BatchInvariantAndDeterministic) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  CheckBatchInvariant({{kBf16, 100, 130}, {kFp8E8m0, 4096, 1024}, {kFp8E8m0, 1100, 77}, {kFp4, 4096, 2048}}, 64, 1,
                      kSpansOf64, 2800);
}

// The switch takes effect: on a long dot product the two maths round differently somewhere, and
// the SIMT kernels come back when it is reset.
TEST(CudaLinearMma, SwitchSelectsThePath) {
  DI_REQUIRE_GPU();
  TestWeight w = RandomWeight(kFp8E8m0, 256, 4096, 2900);
  DeviceArray<float> dx(RandomFloats(static_cast<size_t>(8 * 4096), 2901));
  const std::vector<float> simt = RunRows(w, dx, 0, 8);
  std::vector<float> mma;
  {
    ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
    mma = RunRows(w, dx, 0, 8);
  }
  EXPECT_EQ(TestLinearMath(), cuda::LinearMath::kSimtF32);
  EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, 8), simt, "SIMT again"));
  size_t differ = 0;
  for (size_t i = 0; i < simt.size(); ++i) differ += simt[i] != mma[i];
  EXPECT_GT(differ, 0u) << "the tensor-core path gave the SIMT kernels' bits on all " << simt.size() << " outputs";
  std::printf("mma vs simt, [4096 -> 256] fp8, 8 rows: %zu of %zu outputs differ in the last bits\n", differ,
              simt.size());
}

// ---- FP8 inputs on the tensor cores (LinearMath::kFp8Act, linear_mma.cuh's fp8 section) ----

TEST(CudaLinearFp8, FormatsAndShapes) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  uint64_t seed = 4100;
  // BF16 weights take the split-BF16 path under kFp8Act; they are checked with that path's bound
  // in CudaLinearMma.
  for (const Spec& spec : {kFp8E8m0, kFp8F32, kFp4}) {
    const int64_t small_in = spec.format == WeightFormat::kFp4 ? 96 : 100;
    const int64_t mid_in = spec.format == WeightFormat::kFp4 ? 1088 : 1100;
    CheckOddShapes(spec, {{200, 320, 0}, {77, mid_in, 0}, {130, small_in, 3}}, {1, 3, 9, 17, 100}, seed);
  }
}

TEST(CudaLinearFp8, FlashShapes) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  CheckFlashCases({{kFp8E8m0, 4096, 1024},
                   {kFp8E8m0, 1024, 64 * 512},
                   {kFp8E8m0, 8192, 4096},
                   {kFp4, 4096, 2048},
                   {kFp4, 2048, 4096}},
                  4200);
}

// The kernel quantizes x itself: an unrounded x gives the bits of the same x rounded by the CPU's
// act_quant. The model relies on it (V4Model::ActQuantInKernels skips its own rounding on tensor
// cores), so every path: 1, 21 and 300 rows, with scratch (warpgroup MMAs where K % 128 == 0) and
// without (mma.sync), and blocks whose second act_quant halves the scale (HalvingScaleBlocks:
// twice the codes at half the scale, the same values).
TEST(CudaLinearFp8, QuantizesInTheKernelLikeTheRoundTrip) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  uint64_t seed = 4300;
  for (const Spec& spec : {kFp8E8m0, kFp4}) {
    for (const int64_t in : {int64_t{1088}, int64_t{4096}}) {
      TestWeight w = RandomWeight(spec, 96, in, ++seed);
      constexpr int64_t kRows = 300;
      const Fp8ActInputs inputs = MakeFp8ActInputs(kRows, in, ++seed);
      DeviceArray<float> dx(inputs.raw), dr(inputs.rounded);
      for (const int64_t m : {int64_t{1}, int64_t{21}, kRows}) {
        for (const bool without_scratch : {false, true}) {
          EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m, without_scratch), RunRows(w, dr, 0, m, without_scratch),
                               std::string(spec.name) + " K=" + std::to_string(in) + " M=" + std::to_string(m) +
                                   (without_scratch ? " without scratch" : "")));
        }
      }
    }
  }
}

TEST(CudaLinearFp8, BatchInvariantAndDeterministic) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  // 150 rows: three 64-row blocks of the staged kernel (more than 32 rows); single rows and
  // short spans take the register-fed kernel, which must give the same bits. On an sm_90a device
  // with K % 128 == 0 every count runs on warpgroup MMAs instead (sliced over K for the short
  // ones, whole rows for 150): the same requirement.
  std::vector<std::pair<int64_t, int64_t>> spans = kSpansOf64;
  spans.insert(spans.end(), {{63, 70}, {100, 33}});
  CheckBatchInvariant({{kFp8E8m0, 4096, 1024}, {kFp4, 4096, 2048}, {kFp8F32, 1100, 77}}, 150, 7, spans, 4400);
}

// An FP8 / FP4 weight whose values are small integers (e4m3: -4..4; e2m1: 0, ±1, ±2, ±3, ±4, ±6)
// with every scale 1, uploaded: with x also of small integers every product and partial sum is an
// integer far below any accumulator's precision, so each output is exact on every path.
TestWeight IntegerWeight(const Spec& spec, int64_t out, int64_t in, uint64_t seed) {
  TestWeight w = Shape(spec, out, in, 0);
  std::mt19937_64 rng(seed);
  w.data.resize(static_cast<size_t>(out * w.cols));
  if (spec.format == WeightFormat::kFp4) {
    constexpr uint8_t kE2m1[] = {0x0, 0x2, 0x4, 0x5, 0x6, 0x7, 0xa, 0xc, 0xd, 0xe, 0xf};  // 0, ±1, ±2, ±3, ±4, ±6
    for (uint8_t& b : w.data) b = static_cast<uint8_t>(kE2m1[rng() % 11] | (kE2m1[rng() % 11] << 4));
  } else {
    constexpr uint8_t kE4m3[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0xb8, 0xc0, 0xc4, 0xc8};  // 0, ±1, ±2, ±3, ±4
    for (uint8_t& b : w.data) b = kE4m3[rng() % 9];
  }
  const size_t scales = static_cast<size_t>(w.scale_rows * w.scale_cols);
  if (spec.scale_dtype == DType::kF32) {
    w.scale = AsBytes(std::vector<float>(scales, 1.f));
  } else {
    w.scale.assign(scales, 127);  // e8m0 2^0
  }
  w.Upload();
  return w;
}

// FP8 inputs with scratch on an sm_90a device run warpgroup MMAs at every M (linear_wgmma.cuh),
// sliced over K where the blocks of whole rows would not fill the device. Their k32 sums round
// differently from mma.sync's, so they are checked (1) exactly, on integer data where no path may
// round, against the CPU, for FP8 (both scale dtypes) and FP4 weights, sliced over K and not
// (N = 8192: 64 weight-row blocks, so 130 rows take whole rows on the H200's 132 SMs and a row alone
// is sliced), padded token tiles (M = 33, 65, 130), partial 128-row weight tiles, one chunk
// (K = 128), a partial last slice (K = 384) and x rows that allow no float4 loads (ldx = K + 5);
// (2) on random data, against the CPU within the order bound and for batch invariance: a row alone
// gives the batch's bits. With the TMA kernel on (linear_tma.cuh: unsplit FP8 products of more
// than 64 rows, counted in 128-token tiles) the 65 and 130 rows of K <= 512 take it, and the 130
// rows of N = 8192 are split (64 × 2 tiles < 132 SMs); with DEEPINFER_TMA=0 (gpu-run.sh's rerun)
// those take the 64-token kernel unsplit. CudaLinearFp8.TmaKernelEqualsTheOther compares the two.
TEST(CudaLinearFp8, WarpgroupMmaPathExactAndBatchInvariant) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  uint64_t seed = 4500;
  struct Case {
    Spec spec;
    int64_t out, in;
  };
  for (const Case& c : {Case{kFp8E8m0, 200, 384}, Case{kFp8F32, 130, 128}, Case{kFp8E8m0, 1024, 4096},
                        Case{kFp8F32, 256, 1152}, Case{kFp4, 200, 384}, Case{kFp4, 4096, 1024},
                        Case{kFp8E8m0, 8192, 1024}, Case{kFp4, 8192, 1024}}) {
    TestWeight w = IntegerWeight(c.spec, c.out, c.in, ++seed);
    for (const int64_t ldx : {c.in, c.in + 5}) {
      constexpr int64_t kRows = 130;
      std::mt19937_64 rng(++seed);
      std::vector<float> x(static_cast<size_t>(kRows * ldx), 0.f);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t i = 0; i < c.in; ++i) {
          // -4..4, with ±4 at the start of every 128-column chunk: its scale is exactly 2^-6.
          x[r * ldx + i] = i % 128 == 0 ? (rng() % 2 ? 4.f : -4.f) : static_cast<float>(static_cast<int>(rng() % 9) - 4);
        }
      }
      DeviceArray<float> dx(x);
      for (const int64_t m : {int64_t{1}, int64_t{5}, int64_t{33}, int64_t{65}, kRows}) {
        const std::string what = std::string(c.spec.name) + " integers [" + std::to_string(c.in) + " -> " +
                                 std::to_string(c.out) + "] M=" + std::to_string(m) + " ldx=" + std::to_string(ldx);
        std::vector<float> xm(static_cast<size_t>(m * c.in));
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t i = 0; i < c.in; ++i) xm[r * c.in + i] = x[r * ldx + i];
        }
        std::vector<float> want(static_cast<size_t>(m * c.out));
        cpu::Linear(TensorView(xm.data(), DType::kF32, {m, c.in}), w.View(),
                    TensorView(want.data(), DType::kF32, {m, c.out}));
        EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m, false, ldx), want, what));
      }
    }
  }
  for (const Case& c : {Case{kFp8E8m0, 200, 384}, Case{kFp8E8m0, 1024, 4096}, Case{kFp8F32, 256, 1152},
                        Case{kFp4, 4096, 1024}, Case{kFp8E8m0, 8192, 1024}, Case{kFp4, 8192, 2048}}) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    for (const int64_t m : {int64_t{1}, int64_t{33}, int64_t{130}}) CheckLinear(w, m, c.in, c.out, ++seed);
    constexpr int64_t kRows = 130;
    std::vector<float> x = RandomFloats(static_cast<size_t>(kRows * c.in), ++seed);
    for (size_t i = 0; i < x.size(); i += 11) x[i] *= 500.f;  // spread the block scales
    DeviceArray<float> dx(x);
    const std::vector<float> all = RunRows(w, dx, 0, kRows);
    for (const int64_t r : {int64_t{0}, int64_t{64}, kRows - 1}) {
      EXPECT_TRUE(AllEqual(RunRows(w, dx, r, 1), Rows(all, c.out, r, 1),
                           std::string(c.spec.name) + " [" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                               "]: row " + std::to_string(r) + " alone"));
    }
  }
}

// Linear's FP8-input warpgroup-MMA products of 1-8 rows on 8-token tiles (m64n8k32) give the
// 64-token kernel's bits: FP8 weights of both scale dtypes and FP4 weights, sliced grids (fewer
// row blocks than SMs: [4096 -> 4096], [2048 -> 1024]) and an unsliced one (one slice, K = 256),
// a partial row block (N = 200) and a partial slice (K = 384).
TEST(CudaLinearFp8, SmallTileKernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  struct Case {
    Spec spec;
    int64_t out, in;
  };
  uint64_t seed = 4700;
  for (const Case& c : {Case{kFp8E8m0, 4096, 4096}, Case{kFp8F32, 200, 384}, Case{kFp8E8m0, 17000, 256},
                        Case{kFp4, 1024, 2048}}) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    std::vector<float> x = RandomFloats(static_cast<size_t>(8 * c.in), ++seed);
    for (size_t i = 0; i < x.size(); i += 13) x[i] *= 300.f;  // spread the block scales
    DeviceArray<float> dx(x);
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      const std::string what = std::string(c.spec.name) + " [" + std::to_string(c.in) + " -> " +
                               std::to_string(c.out) + "] M=" + std::to_string(m);
      std::vector<float> small;
      {
        ScopedLinearSmallTiles on(1);
        const uint64_t launches = cuda::LinearSmallTilesLaunchesForTesting();
        small = RunRows(w, dx, 0, m);
        EXPECT_GT(cuda::LinearSmallTilesLaunchesForTesting(), launches) << what << ": the 8-token kernel did not run";
      }
      ScopedLinearSmallTiles off(0);
      EXPECT_TRUE(AllEqual(small, RunRows(w, dx, 0, m), what));
    }
  }
}

// Linear's products as one launch (DEEPINFER_LINEAR_FUSED: wgmma::WgmmaLinearFusedKernel) give the
// bits of the launches they replace (act_quant, the GEMM, the slices' sum). At 1-8 rows the blocks
// quantize x themselves: sliced grids of 2, 3 (K = 1536), 5 with a partial last slice (K = 2304),
// 8 and 16 (K = 8192: a non-portable cluster size) blocks a cluster, an unsliced grid (N = 17000,
// K = 1024: 133 row blocks, 8 chunks a block), a partial row block (N = 200), FP8 weights of both
// scale dtypes and FP4 weights (sliced, unsliced, a partial last slice), and x with a row stride
// that is not a multiple of 4 floats (no vector loads). At 17-130 rows the sliced grids take the
// codes scratch and 64-token tiles.
TEST(CudaLinearFp8, FusedKernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  // The fused kernel takes 1-8 rows on the 8-token tiles only (gpu-run.sh's switch rerun turns them
  // off by default: DEEPINFER_LINEAR_SMALL_TILES=0), and larger products where they are split into
  // K slices: at every row count here (above 64 rows they are not by default).
  ScopedLinearSmallTiles small_tiles(1);
  ScopedLinearSliceMaxRows sliced(cuda::kUnboundedRowsForTesting);
  struct Case {
    Spec spec;
    int64_t out, in;
    std::vector<int64_t> ms;
    int64_t ldx_pad;  // floats past K between rows of x
  };
  uint64_t seed = 4800;
  const std::vector<Case> cases = {
      {kFp8E8m0, 4096, 4096, {1, 3, 8, 17, 130}, 0},  {kFp8E8m0, 1024, 8192, {1, 8, 64}, 0},
      {kFp8F32, 200, 1536, {1, 5, 33}, 0},            {kFp8E8m0, 1000, 2304, {2, 8, 100}, 3},
      {kFp8E8m0, 17000, 1024, {1, 8}, 0},             {kFp8E8m0, 512, 1024, {1, 7, 64}, 0},
      {kFp4, 1024, 2048, {1, 8, 40}, 0},              {kFp4, 17000, 1024, {1, 8}, 0},
      {kFp4, 1000, 2304, {3, 20}, 0}};
  for (const Case& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    const int64_t ldx = c.in + c.ldx_pad;
    constexpr int64_t kRows = 130;
    std::vector<float> x = RandomFloats(static_cast<size_t>(kRows * ldx), ++seed);
    for (size_t i = 0; i < x.size(); i += 13) x[i] *= 300.f;  // spread the block scales
    DeviceArray<float> dx(x);
    for (const int64_t m : c.ms) {
      const std::string what = std::string(c.spec.name) + " [" + std::to_string(c.in) + " -> " +
                               std::to_string(c.out) + "] M=" + std::to_string(m) + " ldx=" + std::to_string(ldx);
      std::vector<float> fused;
      {
        ScopedLinearFused on(1);
        const uint64_t launches = cuda::LinearFusedLaunchesForTesting();
        fused = RunRows(w, dx, 0, m, false, ldx);
        EXPECT_GT(cuda::LinearFusedLaunchesForTesting(), launches) << what << ": the fused kernel did not run";
      }
      ScopedLinearFused off(0);
      const uint64_t launches = cuda::LinearFusedLaunchesForTesting();
      EXPECT_TRUE(AllEqual(fused, RunRows(w, dx, 0, m, false, ldx), what));
      EXPECT_EQ(cuda::LinearFusedLaunchesForTesting(), launches) << what << ": the fused kernel ran while off";
    }
  }
}

// x of `rows` rows of `in` columns for the decode-shape equality tests: random, every 13th value
// times 300 (the block scales spread).
DeviceArray<float> SpreadScaleRows(int64_t rows, int64_t in, uint64_t seed) {
  std::vector<float> x = RandomFloats(static_cast<size_t>(rows * in), seed);
  for (size_t i = 0; i < x.size(); i += 13) x[i] *= 300.f;
  return DeviceArray<float>(x);
}

std::string CaseName(const FlashCase& c, int64_t m) {
  return std::string(c.spec.name) + " [" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
         "] M=" + std::to_string(m);
}

// DEEPINFER_LINEAR_SLICE_MAX_ROWS: a product split into K slices (its partial sums in the scratch,
// which is then larger) and the same product unsplit give the same bits, at Flash's decode shapes
// (wo_b, the shared expert's w13, wq_b) and an odd one, where the unsplit product runs on the TMA
// kernel (more than 64 rows) or the 64-token blocks.
TEST(CudaLinearFp8, SlicedAndUnsplitGiveTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  uint64_t seed = 4900;
  const std::vector<FlashCase> cases = {
      {kFp8E8m0, 8192, 4096}, {kFp8E8m0, 4096, 4096}, {kFp8E8m0, 1024, 8192}, {kFp8E8m0, 2304, 1000}};
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  for (const FlashCase& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    const DeviceArray<float> dx = SpreadScaleRows(256, c.in, ++seed);
    for (const int64_t m : {33, 64, 100, 256}) {
      const std::string what = CaseName(c, m);
      std::vector<float> sliced, unsplit;
      size_t sliced_bytes = 0, unsplit_bytes = 0;
      {
        ScopedLinearSliceMaxRows bound(cuda::kUnboundedRowsForTesting);
        sliced_bytes = cuda::LinearScratchBytes(m, w.Device(), TestLinearMath());
        sliced = RunRows(w, dx, 0, m);
      }
      {
        ScopedLinearSliceMaxRows bound(0);
        unsplit_bytes = cuda::LinearScratchBytes(m, w.Device(), TestLinearMath());
        unsplit = RunRows(w, dx, 0, m);
      }
      // Split where the blocks of whole rows (128 weight rows by 64 tokens, or 128 above 64 rows)
      // would not fill the device: every case here on a device of more than 128 SMs (H100, H200).
      if (sms > 128) EXPECT_GT(sliced_bytes, unsplit_bytes) << what << ": not split";
      EXPECT_TRUE(AllEqual(sliced, unsplit, what));
    }
  }
}

// DEEPINFER_LINEAR_SLICE_SUM_IN_BLOCK: a K-split product of 1-8 rows whose tiles' last blocks add
// the slices gives the bits of SumSlicesKernel's sum, on FP8 and FP4 weights, a partial last row
// block, and twice in a row on one scratch (the act_quant launch zeroes the arrival counts each
// time); products of more rows keep SumSlicesKernel.
TEST(CudaLinearFp8, SliceSumInBlockGivesTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearSmallTiles small_tiles(1);  // 1-8 rows on 8-token tiles (gpu-run.sh's rerun turns them off)
  ScopedLinearQuantizeInBlock not_in_one_launch(0);  // which would take those products instead
  uint64_t seed = 5000;
  const std::vector<FlashCase> cases = {
      {kFp8E8m0, 8192, 4096}, {kFp8E8m0, 4096, 1024}, {kFp4, 4096, 2048}, {kFp8E8m0, 2304, 1000}};
  for (const FlashCase& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    const DeviceArray<float> dx = SpreadScaleRows(64, c.in, ++seed);
    for (const int64_t m : {1, 3, 8, 17, 64}) {
      const std::string what = CaseName(c, m);
      std::vector<float> by_kernel;
      {
        ScopedLinearSliceSumInBlock off(0);
        by_kernel = RunRows(w, dx, 0, m);
      }
      ScopedLinearSliceSumInBlock on(1);
      const uint64_t launches = cuda::LinearSliceSumInBlockLaunchesForTesting();
      const size_t bytes = cuda::LinearScratchBytes(m, w.Device(), TestLinearMath());
      DeviceArray<uint8_t> scratch(bytes);
      for (int pass = 0; pass < 2; ++pass) {
        DeviceArray<float> dy(static_cast<size_t>(m * c.out));
        dy.Fill(0xff);
        cuda::Linear(dx.get(), c.in, m, w.Device(), dy.get(), c.out, nullptr, TestLinearMath(), scratch.get(), bytes);
        EXPECT_TRUE(AllEqual(dy.ToHost(), by_kernel, what + " pass " + std::to_string(pass)));
      }
      EXPECT_EQ(cuda::LinearSliceSumInBlockLaunchesForTesting(), launches + (m <= 8 ? 2 : 0))
          << what << (m <= 8 ? ": not summed in blocks" : ": summed in blocks past 8 rows");
    }
  }
}

// DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK: products of 1-8 rows as one launch (x quantized in each
// block; split products' slices added by each tile's last block, whose arrival counts reset
// themselves) give the bits of the act_quant path: split ones (wo_b, wq_a, the index wq_b, FP4, an
// odd shape with a partial last slice and row block) and an unsplit one (wq_b); three runs in a
// row and two replays of a CUDA graph, on one scratch and the same counts.
TEST(CudaLinearFp8, QuantizeInBlockGivesTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedLinearSmallTiles small_tiles(1);
  ScopedLinearFused fused(0);
  uint64_t seed = 5100;
  const std::vector<FlashCase> cases = {{kFp8E8m0, 8192, 4096}, {kFp8E8m0, 4096, 1024}, {kFp8E8m0, 1024, 8192},
                                        {kFp8E8m0, 1024, 32768}, {kFp4, 4096, 2048},   {kFp8E8m0, 2304, 1000}};
  CudaStream stream(0);
  for (const FlashCase& c : cases) {
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    const DeviceArray<float> dx = SpreadScaleRows(8, c.in, ++seed);
    for (const int64_t m : {1, 3, 8}) {
      const std::string what = CaseName(c, m);
      std::vector<float> quantized_before;
      {
        ScopedLinearQuantizeInBlock off(0);
        quantized_before = RunRows(w, dx, 0, m);
      }
      ScopedLinearQuantizeInBlock on(1);
      const size_t bytes = cuda::LinearScratchBytes(m, w.Device(), TestLinearMath());
      DeviceArray<uint8_t> scratch(bytes);
      DeviceArray<float> dy(static_cast<size_t>(m * c.out));
      auto run = [&](cudaStream_t s) {
        cuda::Linear(dx.get(), c.in, m, w.Device(), dy.get(), c.out, s, TestLinearMath(), scratch.get(), bytes);
      };
      const uint64_t launches = cuda::LinearQuantizeInBlockLaunchesForTesting();
      for (int pass = 0; pass < 3; ++pass) {
        dy.Fill(0xff);
        run(nullptr);
        EXPECT_TRUE(AllEqual(dy.ToHost(), quantized_before, what + " pass " + std::to_string(pass)));
      }
      EXPECT_EQ(cuda::LinearQuantizeInBlockLaunchesForTesting(), launches + 3) << what << ": not one launch";
      CudaGraph graph;
      CudaGraph::BeginCapture(stream.get());
      run(stream.get());
      graph.EndCapture(stream.get());
      for (int replay = 0; replay < 2; ++replay) {
        dy.Fill(0xff);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the fill (legacy stream) before the replay
        graph.Launch(stream.get());
        stream.Synchronize();
        EXPECT_TRUE(AllEqual(dy.ToHost(), quantized_before, what + " replay " + std::to_string(replay)));
      }
    }
  }
}

// Linear's FP8 products on cuBLASLt's block-scaled GEMM (DEEPINFER_CUBLASLT_FP8, off by default;
// here from 64 rows): (1) on integer data, where no path may round, equal to the CPU bit for bit;
// (2) on random data with spread block scales, within the FP8 path's bound of the CPU, at shapes
// of the Flash prefill's kinds scaled down (K = 1024, 4096, 8192; N = 512, 1024, 4096), row counts
// that are not a multiple of 4 (cuBLASLt takes the first multiple of 4, the wgmma path the 1-3
// rows after) or of 64, x and y with row strides past their widths (the columns past N must stay
// unwritten). Each call must take cuBLASLt once, and a product below the row threshold must not.
TEST(CudaLinearFp8, CublasLtBlockScaledWithinTheOrderBound) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device or DEEPINFER_WGMMA=0";
  ScopedCublasLtFp8 on(1, 64);
  uint64_t seed = 4900;
  {
    TestWeight w = IntegerWeight(kFp8E8m0, 512, 1024, ++seed);
    constexpr int64_t kRows = 131;
    std::mt19937_64 rng(++seed);
    std::vector<float> x(static_cast<size_t>(kRows * w.in));
    for (size_t i = 0; i < x.size(); ++i) {
      // -4..4, with ±4 at the start of every 128-column chunk: its scale is exactly 2^-6.
      x[i] = i % 128 == 0 ? (rng() % 2 ? 4.f : -4.f) : static_cast<float>(static_cast<int>(rng() % 9) - 4);
    }
    std::vector<float> want(static_cast<size_t>(kRows * w.out));
    cpu::Linear(TensorView(x.data(), DType::kF32, {kRows, w.in}), w.View(),
                TensorView(want.data(), DType::kF32, {kRows, w.out}));
    DeviceArray<float> dx(x);
    const uint64_t launches = cuda::CublasLtFp8LaunchesForTesting();
    EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, kRows), want, "integers [1024 -> 512] M=131"));
    EXPECT_EQ(cuda::CublasLtFp8LaunchesForTesting(), launches + 1) << "cuBLASLt did not take the product";
    const uint64_t below = cuda::CublasLtFp8LaunchesForTesting();
    RunRows(w, dx, 0, 63);
    EXPECT_EQ(cuda::CublasLtFp8LaunchesForTesting(), below) << "cuBLASLt took 63 rows, below its 64";
  }
  struct Case {
    int64_t out, in, m, ldx_pad, ldy_pad;
  };
  for (const Case& c : {Case{512, 4096, 64, 0, 0}, Case{1024, 4096, 301, 4, 0}, Case{4096, 8192, 130, 0, 8},
                        Case{4096, 1024, 515, 4, 4}}) {
    TestWeight w = RandomWeight(kFp8E8m0, c.out, c.in, ++seed);
    const uint64_t launches = cuda::CublasLtFp8LaunchesForTesting();
    CheckLinear(w, c.m, c.in + c.ldx_pad, c.out + c.ldy_pad, ++seed);
    EXPECT_EQ(cuda::CublasLtFp8LaunchesForTesting(), launches + 1)
        << "[" << c.in << " -> " << c.out << "] M=" << c.m << ": cuBLASLt did not take the product";
  }
}

// Linear's unsplit FP8 products of more than 64 rows on the TMA-fed kernel (linear_tma.cuh,
// 128-token tiles) give the 64-token kernel's bits: one chunk (K = 128) and a partial slice (K =
// 384, whose every M is unsplit), partial weight blocks (N = 200, 1100; N = 201: an odd output
// pitch, which the warp-specialized kernel stores a float at a time) and token tiles (M = 65, 70, 130,
// 2200), both scale dtypes, and [4096 -> 8192] at 330 rows: 32 chunks through the 6-stage ring
// (each stage's barriers wrap 5 times), 3 token tiles.
TEST(CudaLinearFp8, TmaKernelEqualsTheOther) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  struct Case {
    Spec spec;
    int64_t out, in, m;
  };
  uint64_t seed = 4600;
  for (const Case& c : {Case{kFp8E8m0, 200, 128, 65}, Case{kFp8F32, 200, 384, 130},
                        Case{kFp8E8m0, 1100, 1024, 2200}, Case{kFp8E8m0, 8192, 4096, 330},
                        Case{kFp8E8m0, 201, 256, 70}}) {
    const std::string what = std::string(c.spec.name) + " [" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                             "] M=" + std::to_string(c.m);
    TestWeight w = RandomWeight(c.spec, c.out, c.in, ++seed);
    std::vector<float> x = RandomFloats(static_cast<size_t>(c.m * c.in), ++seed);
    for (size_t i = 0; i < x.size(); i += 13) x[i] *= 300.f;  // spread the block scales
    DeviceArray<float> dx(x);
    std::vector<float> tma, tma_ws, tma_ws_thread_stores, other;
    {
      ScopedTmaKernels on(1);
      ScopedTmaWarpSpecialized plain(0);
      const uint64_t launches = cuda::TmaLaunchesForTesting();
      tma = RunRows(w, dx, 0, c.m);
      EXPECT_GT(cuda::TmaLaunchesForTesting(), launches) << what << ": the TMA kernel did not run";
    }
    {
      // The persistent, warp-specialized kernel: blocks walk up to two tiles where the grid holds more
      // tiles than SMs (the last two cases: 162 and 192 tiles), one where it does not.
      // With its output tiles by TMA stores where y's pitch allows them (N % 4 == 0;
      // partial boxes at N = 200, 1100 and at M = 65, 70, 130, 330), each thread's stores otherwise.
      ScopedTmaKernels on(1);
      ScopedTmaWarpSpecialized ws(1);
      ScopedTmaStore tma_store(1);
      const uint64_t launches = cuda::TmaWarpSpecializedLaunchesForTesting();
      const uint64_t store_launches = cuda::TmaStoreLaunchesForTesting();
      tma_ws = RunRows(w, dx, 0, c.m);
      EXPECT_GT(cuda::TmaWarpSpecializedLaunchesForTesting(), launches) << what << ": the TMA kernel did not run";
      EXPECT_EQ(cuda::TmaStoreLaunchesForTesting() - store_launches, c.out % 4 == 0 ? 1u : 0u)
          << what << ": TMA stores";
    }
    {
      ScopedTmaKernels on(1);
      ScopedTmaWarpSpecialized ws(1);
      ScopedTmaStore thread_stores(0);
      const uint64_t store_launches = cuda::TmaStoreLaunchesForTesting();
      tma_ws_thread_stores = RunRows(w, dx, 0, c.m);
      EXPECT_EQ(cuda::TmaStoreLaunchesForTesting(), store_launches) << what << ": TMA stores while off";
    }
    {
      ScopedTmaKernels off(0);
      other = RunRows(w, dx, 0, c.m);
    }
    EXPECT_TRUE(AllEqual(tma, other, what));
    EXPECT_TRUE(AllEqual(tma_ws, other, what + ": warp-specialized"));
    EXPECT_TRUE(AllEqual(tma_ws_thread_stores, other, what + ": warp-specialized, each thread's stores"));
    EXPECT_TRUE(AllEqual(RunRows(w, dx, c.m - 1, 1), Rows(tma, c.out, c.m - 1, 1), what + ": the last row alone"));
  }
}

// FP4 weights whose group scales within a 128-column chunk span 12 binades (2^0 on two groups,
// 2^-12 on the other two, which two varying by chunk). On warpgroup MMAs every chunk takes two
// passes of folded codes (linear_wgmma.cuh, FoldPass). (1) Exact: even rows hold nonzero values
// in the 2^0 groups only, odd rows in the 2^-12 groups only, so every partial sum is exact on
// either path and equals the CPU's; (2) random values and scales over 18 binades (up to three
// passes): within the order bound of the CPU, and a row alone gives the batch's bits.
// The FP4 kernels' eight-nibble conversion (prmt's sign-replicating selectors) gives the codes of
// the four-nibble one for every nibble pattern and folded table.
TEST(CudaLinearFp8, Fp4EightNibbleConversionEqualsFourNibble) {
  DI_REQUIRE_GPU();
  EXPECT_EQ(cuda::Fp4CodeMismatchesForTesting(), 0u);
}

TEST(CudaLinearFp8, Fp4GroupScalesAcrossManyBinades) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  constexpr uint8_t kE2m1[] = {0x2, 0x4, 0x5, 0x6, 0x7, 0xa, 0xc, 0xd, 0xe, 0xf};  // ±1, ±2, ±3, ±4, ±6
  uint64_t seed = 4700;
  for (const int64_t in : {int64_t{1024}, int64_t{384}}) {
    constexpr int64_t kOut = 256, kRows = 130;
    TestWeight w = Shape(kFp4, kOut, in, 0);
    std::mt19937_64 rng(++seed);
    w.data.assign(static_cast<size_t>(kOut * w.cols), 0);
    w.scale.assign(static_cast<size_t>(w.scale_rows * w.scale_cols), 0);
    for (int64_t o = 0; o < kOut; ++o) {
      for (int64_t g = 0; g < in / 32; ++g) {
        const int64_t chunk = g / 4, in_chunk = g % 4;
        const bool high = in_chunk == chunk % 4 || in_chunk == (chunk + 1) % 4;
        w.scale[static_cast<size_t>(o * w.scale_cols + g)] = high ? 127 : 115;
        if (high != (o % 2 == 0)) continue;  // even rows: the 2^0 groups; odd rows: the 2^-12 ones
        for (int64_t i = 32 * g; i < 32 * g + 32; i += 2) {
          w.data[static_cast<size_t>(o * w.cols + i / 2)] =
              static_cast<uint8_t>(kE2m1[rng() % 10] | (kE2m1[rng() % 10] << 4));
        }
      }
    }
    w.Upload();
    std::vector<float> x(static_cast<size_t>(kRows * in));
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t i = 0; i < in; ++i) {
        x[r * in + i] = i % 128 == 0 ? (rng() % 2 ? 4.f : -4.f) : static_cast<float>(static_cast<int>(rng() % 9) - 4);
      }
    }
    DeviceArray<float> dx(x);
    for (const int64_t m : {int64_t{1}, int64_t{65}, kRows}) {
      std::vector<float> want(static_cast<size_t>(m * kOut));
      cpu::Linear(TensorView(x.data(), DType::kF32, {m, in}), w.View(),
                  TensorView(want.data(), DType::kF32, {m, kOut}));
      EXPECT_TRUE(AllEqual(RunRows(w, dx, 0, m), want,
                           "12 binades, K=" + std::to_string(in) + " M=" + std::to_string(m)));
    }
    // The same weight with scale rows one byte longer: the exponents reach the stages by byte loads
    // instead of cp.async words (linear_wgmma.cuh's LoadStage), with the same bits.
    const int64_t stride = w.scale_cols + 1;
    std::vector<uint8_t> padded(static_cast<size_t>(kOut * stride), 0);
    for (int64_t o = 0; o < kOut; ++o) {
      std::copy_n(w.scale.begin() + o * w.scale_cols, w.scale_cols, padded.begin() + o * stride);
    }
    DeviceArray<uint8_t> d_padded(padded);
    cuda::DeviceWeight unaligned = w.Device();
    unaligned.scale = d_padded.get();
    unaligned.scale_row_stride = stride;
    for (const int64_t m : {int64_t{1}, kRows}) {
      DeviceArray<float> dy(static_cast<size_t>(m * kOut));
      dy.Fill(0xff);
      const size_t scratch_bytes = cuda::LinearScratchBytes(m, unaligned, TestLinearMath());
      DeviceArray<uint8_t> scratch(scratch_bytes);
      cuda::Linear(dx.get(), in, m, unaligned, dy.get(), kOut, nullptr, TestLinearMath(), scratch.get(), scratch_bytes);
      EXPECT_TRUE(AllEqual(dy.ToHost(), RunRows(w, dx, 0, m),
                           "scale rows of " + std::to_string(stride) + " bytes, K=" + std::to_string(in) +
                               " M=" + std::to_string(m)));
    }
  }
  for (const int64_t in : {int64_t{1024}, int64_t{2048}}) {
    constexpr int64_t kOut = 4096, kRows = 130;
    TestWeight w = Shape(kFp4, kOut, in, 0);
    w.data = RandomWeightData(kFp4, static_cast<size_t>(kOut * w.cols), ++seed);
    w.scale = RandomE8m0(static_cast<size_t>(w.scale_rows * w.scale_cols), ++seed, 110, 128);
    w.Upload();
    for (const int64_t m : {int64_t{1}, int64_t{33}, kRows}) CheckLinear(w, m, in, kOut, ++seed);
    std::vector<float> x = RandomFloats(static_cast<size_t>(kRows * in), ++seed);
    DeviceArray<float> dx(x);
    const std::vector<float> all = RunRows(w, dx, 0, kRows);
    for (const int64_t r : {int64_t{0}, int64_t{64}, kRows - 1}) {
      EXPECT_TRUE(AllEqual(RunRows(w, dx, r, 1), Rows(all, kOut, r, 1),
                           "18 binades, K=" + std::to_string(in) + ": row " + std::to_string(r) + " alone"));
    }
  }
}

TEST(CudaLinear, RejectsBadArguments) {
  DI_REQUIRE_GPU();
  DeviceArray<float> dx(RandomFloats(64, 1));
  DeviceArray<float> dy(64);
  TestWeight fp4 = RandomWeight(kFp4, 8, 64, 2);
  cuda::DeviceWeight bad = fp4.Device();
  bad.in_features = 48;  // not a multiple of 32
  bad.data_row_stride = 24;
  EXPECT_ANY_THROW(cuda::Linear(dx.get(), 48, 1, bad, dy.get(), 8, nullptr));
  TestWeight dense = RandomWeight(kF32, 8, 16, 3);
  EXPECT_ANY_THROW(cuda::Linear(dx.get(), 15, 2, dense.Device(), dy.get(), 8, nullptr));  // ldx < in
  EXPECT_ANY_THROW(cuda::GroupedLinear(dx.get(), 1, 3, dense.Device(), dy.get(), nullptr));  // 8 % 3
  cuda::DeviceWeight i32 = dense.Device();
  i32.dtype = DType::kI32;
  EXPECT_ANY_THROW(cuda::Linear(dx.get(), 16, 1, i32, dy.get(), 8, nullptr));
}

}  // namespace
}  // namespace deepinfer::test
