// CUDA row-wise kernels against their CPU twins (src/kernels/cpu/elementwise.h, moe.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/moe.h"
#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace deepinfer {
namespace {

using test::AllClose;
using test::AllEqual;
using test::DeviceArray;
using test::RandomFloats;

// Copies rows [M, n] into a buffer with row stride ld (padding filled with a sentinel).
std::vector<float> Pad(const std::vector<float>& x, int64_t m, int64_t n, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(m * ld), 12345.f);
  for (int64_t r = 0; r < m; ++r) std::memcpy(&out[r * ld], &x[r * n], n * sizeof(float));
  return out;
}
std::vector<float> Unpad(const std::vector<float>& x, int64_t m, int64_t n, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) std::memcpy(&out[r * n], &x[r * ld], n * sizeof(float));
  return out;
}

class RmsNormShapes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType>> {};

TEST_P(RmsNormShapes, MatchesCpu) {
  DI_REQUIRE_GPU();
  const auto [m, n, wdtype] = GetParam();
  const int64_t ld = n + 3;
  std::vector<float> x = RandomFloats(m * n, 1, -3.f, 3.f);
  std::vector<float> wf = RandomFloats(n, 2, 0.5f, 1.5f);
  std::vector<uint16_t> w16(n);
  for (int64_t i = 0; i < n; ++i) w16[i] = wdtype == DType::kBF16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
  void* wp = wdtype == DType::kF32 ? static_cast<void*>(wf.data()) : static_cast<void*>(w16.data());
  std::vector<float> want(m * n);
  cpu::RmsNorm(TensorView(x.data(), DType::kF32, {m, n}), TensorView(wp, wdtype, {n}), 1e-6f,
               TensorView(want.data(), DType::kF32, {m, n}));
  DeviceArray<float> dx(Pad(x, m, n, ld));
  DeviceArray<float> dwf(wf);
  DeviceArray<uint16_t> dw16(w16);
  const void* dwp = wdtype == DType::kF32 ? static_cast<const void*>(dwf.get()) : dw16.get();
  cuda::RmsNorm(dx.get(), ld, m, n, dwp, wdtype, 1e-6f, dx.get(), ld, nullptr);  // in place
  // The sum of squares is reduced in a different order: relative error ~ n·eps_f32 at worst on
  // the inverse RMS, in practice ~sqrt(n)·eps; 2e-6 relative covers n = 4096 with margin.
  EXPECT_TRUE(AllClose(Unpad(dx.ToHost(), m, n, ld), want, 1e-6f, 2e-6f, "rms_norm"));
}

INSTANTIATE_TEST_SUITE_P(Gpu, RmsNormShapes,
                         ::testing::Values(std::make_tuple(1, 7, DType::kF32), std::make_tuple(5, 512, DType::kBF16),
                                           std::make_tuple(64, 4096, DType::kBF16),
                                           std::make_tuple(3, 1024, DType::kF16),
                                           std::make_tuple(300, 128, DType::kF32)));

// Rows of 513-8192 values held in registers (RmsNormRowKernel) give the loop kernel's bits: the
// same products summed in the same order. Widths on both sides of 16 and 32 values a thread, each
// weight type, no weight, a weight that starts 2 bytes past 16-byte alignment (its L2 prefetch
// asks for the aligned interior only), and the launch counted each time.
TEST(CudaRmsNorm, RowsInRegistersGiveTheLoopsBits) {
  DI_REQUIRE_GPU();
  struct Case {
    int64_t m, n;
    DType weight;
    bool weighted;
    int64_t weight_offset;  // elements past the allocation's start
  };
  const Case cases[] = {{1, 4096, DType::kBF16, true, 0}, {5, 4096, DType::kBF16, true, 1},
                        {3, 513, DType::kF32, true, 0},   {2, 1024, DType::kF16, true, 0},
                        {1, 4097, DType::kF16, true, 1},  {4, 7168, DType::kF32, true, 3},
                        {1, 8192, DType::kBF16, true, 0}, {2, 4096, DType::kF32, false, 0}};
  struct Reset {
    ~Reset() { cuda::SetRmsNormRowsInRegistersForTesting(-1); }
  } reset;
  for (const Case& c : cases) {
    const std::string where = "m " + std::to_string(c.m) + " n " + std::to_string(c.n);
    const int64_t ld = c.n + 3;
    const std::vector<float> x = Pad(RandomFloats(c.m * c.n, 11, -3.f, 3.f), c.m, c.n, ld);
    std::vector<float> wf = RandomFloats(c.n + c.weight_offset, 12, 0.5f, 1.5f);
    std::vector<uint16_t> w16(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) w16[i] = c.weight == DType::kBF16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
    DeviceArray<float> dwf(wf);
    DeviceArray<uint16_t> dw16(w16);
    const void* w = nullptr;
    if (c.weighted) {
      w = c.weight == DType::kF32 ? static_cast<const void*>(dwf.get() + c.weight_offset)
                                  : static_cast<const void*>(dw16.get() + c.weight_offset);
    }
    std::vector<float> got[2];
    for (int mode = 0; mode < 2; ++mode) {
      cuda::SetRmsNormRowsInRegistersForTesting(mode);
      DeviceArray<float> dx(x), dy(c.m * ld);
      const uint64_t before = cuda::RmsNormRowsInRegistersLaunchesForTesting();
      cuda::RmsNorm(dx.get(), ld, c.m, c.n, w, c.weight, 1e-6f, dy.get(), ld, nullptr);
      got[mode] = Unpad(dy.ToHost(), c.m, c.n, ld);
      EXPECT_EQ(cuda::RmsNormRowsInRegistersLaunchesForTesting() - before, static_cast<uint64_t>(mode)) << where;
      // In place: every value of a thread is loaded before the block's sum, so no store overtakes a load.
      cuda::RmsNorm(dx.get(), ld, c.m, c.n, w, c.weight, 1e-6f, dx.get(), ld, nullptr);
      EXPECT_TRUE(AllEqual(Unpad(dx.ToHost(), c.m, c.n, ld), got[mode], "in place, " + where));
    }
    EXPECT_TRUE(AllEqual(got[1], got[0], "registers vs loop, " + where));
  }
}

// bf16_out (the blocks' norms under Numerics::bf16_norm_outputs): each kernel's own values rounded
// to BF16 as it stores them, the bits of the same norm followed by Bf16RoundRows: rows of a warp
// (512), in registers (4096) and of the loop kernel (9000, and 4096 with the registers off); and
// the rounding took place (some value differs from the unrounded norm's).
TEST(CudaRmsNorm, Bf16OutputsEqualTheNormRounded) {
  DI_REQUIRE_GPU();
  struct Reset {
    ~Reset() { cuda::SetRmsNormRowsInRegistersForTesting(-1); }
  } reset;
  const std::pair<int64_t, int> cases[] = {{512, -1}, {4096, 1}, {4096, 0}, {9000, -1}};  // n, registers mode
  for (const auto& [n, registers] : cases) {
    SCOPED_TRACE(testing::Message() << "n " << n << " registers " << registers);
    cuda::SetRmsNormRowsInRegistersForTesting(registers);
    const int64_t m = 6, ld = n + 5;
    const std::vector<float> x = Pad(RandomFloats(m * n, 21, -3.f, 3.f), m, n, ld);
    std::vector<uint16_t> w16(static_cast<size_t>(n));
    const std::vector<float> wf = RandomFloats(n, 22, 0.5f, 1.5f);
    for (int64_t i = 0; i < n; ++i) w16[i] = F32ToBf16(wf[i]);
    DeviceArray<uint16_t> dw(w16);
    DeviceArray<float> dx(x), plain(m * ld), rounded(m * ld);
    cuda::RmsNorm(dx.get(), ld, m, n, dw.get(), DType::kBF16, 1e-6f, plain.get(), ld, nullptr);
    const std::vector<float> unrounded = Unpad(plain.ToHost(), m, n, ld);
    cuda::Bf16RoundRows(plain.get(), ld, m, 0, n, nullptr);
    cuda::RmsNorm(dx.get(), ld, m, n, dw.get(), DType::kBF16, 1e-6f, rounded.get(), ld, nullptr, true);
    const std::vector<float> got = Unpad(rounded.ToHost(), m, n, ld);
    EXPECT_TRUE(AllEqual(got, Unpad(plain.ToHost(), m, n, ld), "the norm, then Bf16RoundRows"));
    EXPECT_FALSE(AllEqual(got, unrounded)) << "nothing was rounded";
  }
}

TEST(CudaRmsNorm, WithoutWeightMatchesCpu) {
  DI_REQUIRE_GPU();
  const int64_t m = 33, n = 512;  // the per-head q normalization: rows of head_dim, no weight
  std::vector<float> x = RandomFloats(m * n, 3, -2.f, 2.f), want(m * n);
  cpu::RmsNorm(TensorView(x.data(), DType::kF32, {m, n}), TensorView(), 1e-6f, TensorView(want.data(), DType::kF32, {m, n}));
  DeviceArray<float> dx(x), dy(m * n);
  cuda::RmsNorm(dx.get(), n, m, n, nullptr, DType::kF32, 1e-6f, dy.get(), n, nullptr);
  EXPECT_TRUE(AllClose(dy.ToHost(), want, 1e-6f, 2e-6f, "rms_norm_unweighted"));
  EXPECT_TRUE(AllEqual(dx.ToHost(), x, "input untouched"));
}

TEST(CudaEmbedding, GathersBitExact) {
  DI_REQUIRE_GPU();
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const int64_t vocab = 1000, dim = 4096, n = 70;
    std::vector<float> tf = RandomFloats(vocab * dim, 4);
    std::vector<uint16_t> tb(tf.size());
    for (size_t i = 0; i < tf.size(); ++i) tb[i] = F32ToBf16(tf[i]);
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    ids[5] = 0, ids[6] = static_cast<int32_t>(vocab - 1);
    void* tp = dt == DType::kF32 ? static_cast<void*>(tf.data()) : static_cast<void*>(tb.data());
    std::vector<float> want(n * dim);
    cpu::Embedding(ids.data(), n, TensorView(tp, dt, {vocab, dim}), TensorView(want.data(), DType::kF32, {n, dim}));
    DeviceArray<float> dtf(tf), dy(n * dim);
    DeviceArray<uint16_t> dtb(tb);
    DeviceArray<int32_t> did(ids);
    const void* dtp = dt == DType::kF32 ? static_cast<const void*>(dtf.get()) : dtb.get();
    cuda::Embedding(did.get(), n, dtp, dt, vocab, dim, dim, dy.get(), dim, nullptr);
    EXPECT_TRUE(AllEqual(dy.ToHost(), want, "embedding"));
  }
}

TEST(CudaRope, MatchesCpuWithYarnFrequencies) {
  DI_REQUIRE_GPU();
  // Flash: 64 heads × 512 with a 64-wide rope tail; positions up to 1M (YaRN layers).
  const int64_t m = 37, h = 64, d = 512, rope = 64;
  const std::vector<float> inv = cpu::RopeInverseFrequencies(rope, 160000.0, 65536, 16.0, 32.0, 1.0);
  std::vector<float> x = RandomFloats(m * h * d, 5);
  std::vector<int64_t> pos(m);
  for (int64_t i = 0; i < m; ++i) pos[i] = i * 27449 % 1000000;
  for (bool inverse : {false, true}) {
    std::vector<float> want = x;
    cpu::Rope(TensorView(want.data(), DType::kF32, {m, h, d}), pos.data(), inv, inverse);
    DeviceArray<float> dx(x), dinv(inv);
    DeviceArray<int64_t> dpos(pos);
    cuda::Rope(dx.get(), m, h, d, h * d, d, dpos.get(), dinv.get(), rope / 2, inverse, nullptr);
    // The angle pos·f is the same f32 product on both sides; cosf/sinf and the host's cos/sin
    // are each within ~1 ulp of the true value, so rotated values differ by ~2 ulp of |x| ≤ 1.
    EXPECT_TRUE(AllClose(dx.ToHost(), want, 5e-7f, 1e-6f, inverse ? "rope_inverse" : "rope"));
  }
}

// cuda::RowSteps (one launch) gives the bits of the kernels it stands for, launched one after
// another: the q heads (unweighted norm, rope), the fresh kv row (BF16-weighted norm, rope, e4m3
// nope channels in blocks of 64, BF16 rope channels), the index queries (rope, Hadamard, e2m1 in
// blocks of 32), a compressor's index row (all four), the inverse rope alone, and a row of 200
// values (not a multiple of 32; F32 weight; a partial last e4m3 block of 8).
TEST(CudaRowSteps, EqualsTheStepsKernelByKernel) {
  DI_REQUIRE_GPU();
  const std::vector<float> inv = cpu::RopeInverseFrequencies(64, 160000.0, 65536, 16.0, 32.0, 1.0);
  struct Case {
    const char* name;
    int64_t m, h, n;
    bool norm;
    DType weight;  // kI8: no weight
    bool rope, inverse, hadamard;
    int64_t fp8_end, fp8_block, fp4_block;
  };
  const Case cases[] = {{"q", 5, 64, 512, true, DType::kI8, true, false, false, 0, 0, 0},
                        {"kv", 37, 1, 512, true, DType::kBF16, true, false, false, 448, 64, 0},
                        {"index_q", 9, 64, 128, false, DType::kI8, true, false, true, 0, 0, 32},
                        {"index row", 7, 1, 128, true, DType::kBF16, true, false, true, 0, 0, 32},
                        {"inverse rope", 3, 16, 512, false, DType::kI8, true, true, false, 0, 0, 0},
                        {"200 wide", 11, 2, 200, true, DType::kF32, true, false, false, 136, 64, 0}};
  uint64_t seed = 90;
  for (const Case& c : cases) {
    const int64_t rows = c.m * c.h;
    std::vector<float> x = RandomFloats(rows * c.n, ++seed, -3.f, 3.f);
    for (size_t i = 0; i < x.size(); i += 17) x[i] *= 200.f;  // spread the rounding blocks' scales
    std::vector<float> wf = RandomFloats(c.n, ++seed, 0.5f, 1.5f);
    std::vector<uint16_t> w16(c.n);
    for (int64_t i = 0; i < c.n; ++i) w16[i] = F32ToBf16(wf[i]);
    std::vector<int64_t> pos(c.m);
    for (int64_t i = 0; i < c.m; ++i) pos[i] = (i * 27449 + 5) % 1000000;
    DeviceArray<float> dwf(wf), dinv(inv);
    DeviceArray<uint16_t> dw16(w16);
    DeviceArray<int64_t> dpos(pos);
    const void* weight = c.weight == DType::kF32 ? static_cast<const void*>(dwf.get())
                         : c.weight == DType::kBF16 ? static_cast<const void*>(dw16.get())
                                                    : nullptr;
    const int64_t half = static_cast<int64_t>(inv.size());

    DeviceArray<float> steps(x);
    if (c.norm) cuda::RmsNorm(steps.get(), c.n, rows, c.n, weight, c.weight, 1e-6f, steps.get(), c.n, nullptr);
    if (c.rope) {
      cuda::Rope(steps.get(), c.m, c.h, c.n, c.h * c.n, c.n, dpos.get(), dinv.get(), half, c.inverse, nullptr);
    }
    if (c.hadamard) cuda::HadamardRows(steps.get(), c.n, rows, c.n, nullptr);
    if (c.fp8_end > 0) {
      cuda::Fp8RoundTripRows(steps.get(), c.n, rows, 0, c.fp8_end, c.fp8_block, nullptr);
      cuda::Bf16RoundRows(steps.get(), c.n, rows, c.fp8_end, c.n, nullptr);
    }
    if (c.fp4_block > 0) cuda::Fp4RoundTripRows(steps.get(), c.n, rows, c.n, c.fp4_block, nullptr);

    cuda::RowStepsArgs a;
    a.norm = c.norm;
    a.norm_weight = weight;
    a.norm_weight_dtype = c.weight;
    a.eps = 1e-6f;
    if (c.rope) {
      a.positions = dpos.get();
      a.inv_freq = dinv.get();
      a.rope_half = half;
      a.rope_inverse = c.inverse;
    }
    a.hadamard = c.hadamard;
    a.fp8_end = c.fp8_end;
    a.fp8_block = c.fp8_block;
    a.fp4_block = c.fp4_block;
    DeviceArray<float> fused(x);
    const uint64_t launches = cuda::RowStepsLaunchesForTesting();
    cuda::RowSteps(fused.get(), c.m, c.h, c.n, c.h * c.n, c.n, a, nullptr);
    EXPECT_EQ(cuda::RowStepsLaunchesForTesting(), launches + 1) << c.name;
    EXPECT_TRUE(AllEqual(fused.ToHost(), steps.ToHost(), c.name));
  }
}

// RowSteps refuses what it cannot do, before launching anything.
TEST(CudaRowSteps, RejectsRowsItCannotTake) {
  DI_REQUIRE_GPU();
  DeviceArray<float> x(std::vector<float>(1024, 1.f));
  cuda::RowStepsArgs wide;
  EXPECT_THROW(cuda::RowSteps(x.get(), 1, 1, 1024, 1024, 1024, wide, nullptr), std::exception);
  cuda::RowStepsArgs hadamard;
  hadamard.hadamard = true;
  EXPECT_THROW(cuda::RowSteps(x.get(), 1, 1, 200, 200, 200, hadamard, nullptr), std::exception);
  cuda::RowStepsArgs blocks;
  blocks.fp8_end = 256;
  blocks.fp8_block = 256;
  EXPECT_THROW(cuda::RowSteps(x.get(), 1, 1, 512, 512, 512, blocks, nullptr), std::exception);
  cuda::RowStepsArgs rope;
  rope.inv_freq = x.get();
  rope.rope_half = 32;
  EXPECT_THROW(cuda::RowSteps(x.get(), 1, 1, 512, 512, 512, rope, nullptr), std::exception);  // no positions
}

TEST(CudaQuantRoundTrip, Fp8AndFp4BitExact) {
  DI_REQUIRE_GPU();
  // KV rows of Flash: 448 nope channels in blocks of 64 (rope tail untouched); indexer rows of
  // 128 in fp4 blocks of 32. Values span several binades, plus exact zeros, a negative zero and
  // a row of all zeros (the amax floor).
  const int64_t m = 20, n = 512;
  std::vector<float> x = RandomFloats(m * n, 6, -1.f, 1.f);
  for (int64_t i = 0; i < m * n; ++i) x[i] *= std::ldexp(1.f, static_cast<int>(i % 17) - 8);
  x[3] = 0.f, x[4] = -0.f;
  for (int64_t i = 0; i < n; ++i) x[7 * n + i] = 0.f;
  std::vector<float> want8 = x, want4 = x;
  for (int64_t r = 0; r < m; ++r) {
    cpu::Fp8RoundTrip(want8.data() + r * n, 448, 64);
    cpu::Fp4RoundTrip(want4.data() + r * n, n, 32);
  }
  DeviceArray<float> d8(x), d4(x);
  cuda::Fp8RoundTripRows(d8.get(), n, m, 0, 448, 64, nullptr);
  cuda::Fp4RoundTripRows(d4.get(), n, m, n, 32, nullptr);
  const std::vector<float> got8 = d8.ToHost(), got4 = d4.ToHost();
  EXPECT_TRUE(AllEqual(got8, want8, "fp8 round trip"));
  EXPECT_TRUE(AllEqual(got4, want4, "fp4 round trip"));
  EXPECT_TRUE(std::signbit(got8[4]) && std::signbit(got4[4])) << "negative zero keeps its sign";
  // A remainder block (n not a multiple of the block) as the small test configs have.
  std::vector<float> y = RandomFloats(3 * 100, 7, -5.f, 5.f), wanty = y;
  for (int r = 0; r < 3; ++r) cpu::Fp8RoundTrip(wanty.data() + r * 100 + 10, 80, 64);
  DeviceArray<float> dy(y);
  cuda::Fp8RoundTripRows(dy.get(), 100, 3, 10, 90, 64, nullptr);
  EXPECT_TRUE(AllEqual(dy.ToHost(), wanty, "fp8 remainder block"));
}

// The rope tail of a Flash KV row (channels 448..511) to BF16, bit for bit with the CPU, over
// many binades, ties (values with exactly the halfway bit pattern), zeros and a huge value.
TEST(CudaQuantRoundTrip, Bf16RopeChannelsBitExact) {
  DI_REQUIRE_GPU();
  const int64_t m = 70000, n = 512, begin = 448;  // past 65535 rows: the grid's stride
  std::vector<float> x = RandomFloats(m * n, 8, -1.f, 1.f);
  for (int64_t i = 0; i < m * n; ++i) x[i] *= std::ldexp(1.f, static_cast<int>(i % 29) - 14);
  for (int64_t i = 0; i < 64; ++i) {  // exact ties in row 1: low 16 bits 0x8000, both parities
    uint32_t bits = 0x3f800000u + (static_cast<uint32_t>(i) << 16) + 0x8000u;
    std::memcpy(&x[n + begin + i], &bits, sizeof(bits));
  }
  x[2 * n + begin] = 0.f, x[2 * n + begin + 1] = -0.f, x[2 * n + begin + 2] = 3.4e38f;
  std::vector<float> want = x;
  for (int64_t r = 0; r < m; ++r) cpu::Bf16Round(want.data() + r * n + begin, n - begin);
  DeviceArray<float> dx(x);
  cuda::Bf16RoundRows(dx.get(), n, m, begin, n, nullptr);
  EXPECT_TRUE(AllEqual(dx.ToHost(), want, "bf16 round"));
}

TEST(CudaQuantRoundTrip, ActQuantBitExact) {
  DI_REQUIRE_GPU();
  // The activation rounding ahead of an FP8 linear: rows of 4096 in blocks of 128 (plus a row of
  // 200, a remainder block). Every block's amax is set at or one ulp off 448·2^k, where the
  // ue8m0 scale changes, and some blocks hold values in e4m3's subnormal range of their scale.
  const int64_t m = 33, n = 4096, block = 128;
  std::vector<float> x = RandomFloats(m * n, 9, -1.f, 1.f);
  for (int64_t b = 0; b < m * n / block; ++b) {
    const float edge = std::ldexp(448.f, static_cast<int>(b % 23) - 16);
    const float amax = b % 3 == 0 ? edge : b % 3 == 1 ? std::nextafter(edge, 1e30f) : std::nextafter(edge, 0.f);
    for (int64_t i = 0; i < block; ++i) x[b * block + i] *= amax * (i % 5 == 0 ? 0x1p-12f : 1.f);
    x[b * block + b % block] = b % 2 ? amax : -amax;
  }
  std::vector<float> want = x;
  for (int64_t r = 0; r < m; ++r) cpu::Fp8RoundTrip(want.data() + r * n, n, block);
  DeviceArray<float> dx(x);
  cuda::Fp8RoundTripRows(dx.get(), n, m, 0, n, block, nullptr);
  EXPECT_TRUE(AllEqual(test::Bits(dx.ToHost()), test::Bits(want), "act_quant rows"));

  // Only rows below a device row count, the rest untouched; more rows than one grid's y extent.
  const int64_t rows = 70000, k = 200;
  std::vector<float> y = RandomFloats(rows * k, 10, -3.f, 3.f), wanty = y;
  const int32_t count = 66000;
  for (int64_t r = 0; r < count; ++r) cpu::Fp8RoundTrip(wanty.data() + r * k, k, block);
  DeviceArray<float> dy(y);
  DeviceArray<int32_t> dcount(std::vector<int32_t>{count});
  cuda::Fp8RoundTripRows(dy.get(), k, rows, 0, k, block, dcount.get(), nullptr);
  EXPECT_TRUE(AllEqual(test::Bits(dy.ToHost()), test::Bits(wanty), "act_quant rows below the count"));
}

TEST(CudaHadamard, BitExact) {
  DI_REQUIRE_GPU();
  for (int64_t n : {1, 2, 64, 128, 4096}) {
    const int64_t m = 9;
    std::vector<float> x = RandomFloats(m * n, 8), want = x;
    for (int64_t r = 0; r < m; ++r) cpu::Hadamard(want.data() + r * n, n);
    DeviceArray<float> dx(x);
    cuda::HadamardRows(dx.get(), n, m, n, nullptr);
    // Every butterfly adds the same two values in the same order: identical bits.
    EXPECT_TRUE(AllEqual(dx.ToHost(), want, "hadamard " + std::to_string(n)));
  }
}

TEST(CudaSwiGlu, MatchesCpu) {
  DI_REQUIRE_GPU();
  const int64_t m = 6, n = 2048;  // Flash moe_inter_dim
  std::vector<float> g = RandomFloats(m * n, 9, -12.f, 12.f), u = RandomFloats(m * n, 10, -12.f, 12.f);
  std::vector<float> w = RandomFloats(m, 11, 0.f, 1.f);
  for (float limit : {0.f, 10.f}) {
    std::vector<float> want = g;
    for (int64_t r = 0; r < m; ++r) cpu::ClampedSwiGlu(want.data() + r * n, u.data() + r * n, n, limit, w[r]);
    DeviceArray<float> dg(g), du(u), dw(w);
    cuda::ClampedSwiGlu(dg.get(), n, du.get(), n, m, n, limit, dw.get(), nullptr);
    // expf and the host's exp differ by ≤ 1–2 ulp; the products add a few more.
    EXPECT_TRUE(AllClose(dg.ToHost(), want, 1e-6f, 1e-6f, "swiglu"));
  }
}

// Aligned rows of a multiple of 4 columns take the four-column kernel: bit for bit the one-column
// kernel's values (taken here through rows of n + 1 floats), and with a device row count the rows
// from it on are left as they were.
TEST(CudaSwiGlu, FourColumnsEqualOne) {
  DI_REQUIRE_GPU();
  const int64_t m = 37, n = 2048, ld = n + 1;
  std::vector<float> g = RandomFloats(m * n, 14, -12.f, 12.f), u = RandomFloats(m * n, 15, -12.f, 12.f);
  std::vector<float> w = RandomFloats(m, 16, 0.f, 1.f);
  std::vector<float> g_wide(static_cast<size_t>(m * ld)), u_wide(static_cast<size_t>(m * ld));
  for (int64_t r = 0; r < m; ++r) {
    std::copy(g.begin() + r * n, g.begin() + (r + 1) * n, g_wide.begin() + r * ld);
    std::copy(u.begin() + r * n, u.begin() + (r + 1) * n, u_wide.begin() + r * ld);
  }
  const int32_t rows = 30;
  DeviceArray<int32_t> count(std::vector<int32_t>{rows});
  for (float limit : {0.f, 10.f}) {
    DeviceArray<float> dg(g), du(u), dw(w), dg_wide(g_wide), du_wide(u_wide);
    cuda::ClampedSwiGlu(dg.get(), n, du.get(), n, m, n, limit, dw.get(), count.get(), nullptr);
    cuda::ClampedSwiGlu(dg_wide.get(), ld, du_wide.get(), ld, m, n, limit, dw.get(), count.get(), nullptr);
    const std::vector<float> four = dg.ToHost(), wide = dg_wide.ToHost();
    std::vector<float> one(static_cast<size_t>(m * n));
    for (int64_t r = 0; r < m; ++r) std::copy(wide.begin() + r * ld, wide.begin() + r * ld + n, one.begin() + r * n);
    EXPECT_TRUE(AllEqual(four, one, "limit " + std::to_string(limit)));
    EXPECT_TRUE(AllEqual(std::vector<float>(four.begin() + rows * n, four.end()),
                         std::vector<float>(g.begin() + rows * n, g.end()), "rows past the count"));
    const std::vector<float> first(four.begin(), four.begin() + n), first_in(g.begin(), g.begin() + n);
    EXPECT_FALSE(AllEqual(first, first_in)) << "the first row was not written";
  }
}

class RouteCases : public ::testing::TestWithParam<std::tuple<cpu::RouterScore, bool, bool>> {};

TEST_P(RouteCases, MatchesCpu) {
  DI_REQUIRE_GPU();
  const auto [score, with_bias, hashed] = GetParam();
  const int64_t m = 77, e = 256, k = 6, vocab = 500;  // Flash: 256 experts, top-6
  std::vector<float> logits = RandomFloats(m * e, 12, -4.f, 4.f);
  std::vector<float> bias = RandomFloats(e, 13, -0.5f, 0.5f);
  std::vector<int32_t> tokens(m);
  for (int64_t i = 0; i < m; ++i) tokens[i] = static_cast<int32_t>((i * 131) % vocab);
  std::vector<int64_t> table(vocab * k);
  for (int64_t i = 0; i < vocab * k; ++i) table[i] = (i * 37 + i / k) % e;
  cpu::RouterParams cp;
  cp.score = score, cp.num_experts = e, cp.top_k = k, cp.route_scale = 2.5f;
  cp.bias = with_bias ? bias.data() : nullptr;
  cp.tid2eid = hashed ? table.data() : nullptr, cp.tid2eid_rows = vocab;
  std::vector<int32_t> want_ids(m * k);
  std::vector<float> want_w(m * k);
  cpu::Route(logits.data(), m, tokens.data(), cp, want_ids.data(), want_w.data());

  DeviceArray<float> dl(logits), db(bias);
  DeviceArray<int32_t> dt(tokens), dids(m * k);
  DeviceArray<int64_t> dtab(table);
  DeviceArray<float> dw(m * k);
  cuda::DeviceRouterParams gp;
  gp.score = static_cast<cuda::RouterScoreFn>(score), gp.num_experts = e, gp.top_k = k, gp.route_scale = 2.5f;
  gp.bias = with_bias ? db.get() : nullptr;
  gp.tid2eid = hashed ? dtab.get() : nullptr, gp.tid2eid_rows = vocab;
  cuda::Route(dl.get(), m, dt.get(), gp, dids.get(), dw.get(), nullptr);
  // Random logits leave no near-ties among the top 7, so the ids must be identical; weights are
  // ≤ 2 ulp apart (log1pf/expf/sqrtf vs the host's) before the same normalization.
  EXPECT_TRUE(AllEqual(dids.ToHost(), want_ids, "expert ids"));
  EXPECT_TRUE(AllClose(dw.ToHost(), want_w, 1e-6f, 2e-6f, "expert weights"));
}

INSTANTIATE_TEST_SUITE_P(Gpu, RouteCases,
                         ::testing::Values(std::make_tuple(cpu::RouterScore::kSqrtSoftplus, true, false),
                                           std::make_tuple(cpu::RouterScore::kSqrtSoftplus, false, false),
                                           std::make_tuple(cpu::RouterScore::kSqrtSoftplus, false, true),
                                           std::make_tuple(cpu::RouterScore::kSigmoid, true, false),
                                           std::make_tuple(cpu::RouterScore::kSoftmax, false, false)));

// DEEPINFER_ROUTE_ALIGN: the router and MoeAlign as one launch (cuda::RouteAndAlign, warp t routing
// token t) give the two kernels' outputs bit for bit: ids, weights, offsets, sorted slots, slot rows;
// every score, the bias, the hash table (whose rows name an expert twice: dropped repeats), all
// logits equal (ties to the lower id); 1, 3 and 8 tokens; Flash's 256 experts top-6 and 64 top-8.
// 9 tokens take the two kernels.
TEST(CudaRoute, RouteAndAlignInOneLaunchEqualsTheTwoKernels) {
  DI_REQUIRE_GPU();
  struct Case {
    cuda::RouterScoreFn score;
    bool bias, hashed, ties;
    int64_t e, k;
  };
  const std::vector<Case> cases = {{cuda::RouterScoreFn::kSqrtSoftplus, true, false, false, 256, 6},
                                   {cuda::RouterScoreFn::kSqrtSoftplus, false, true, false, 256, 6},
                                   {cuda::RouterScoreFn::kSigmoid, true, false, false, 64, 8},
                                   {cuda::RouterScoreFn::kSoftmax, false, false, false, 256, 6},
                                   {cuda::RouterScoreFn::kSqrtSoftplus, false, false, true, 64, 6}};
  uint64_t seed = 7000;
  for (const Case& c : cases) {
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}}) {
      SCOPED_TRACE(testing::Message() << "score " << static_cast<int>(c.score) << " bias " << c.bias << " hashed "
                                      << c.hashed << " ties " << c.ties << " E " << c.e << " k " << c.k << " M " << m);
      const int64_t vocab = 50;
      std::vector<float> logits = RandomFloats(m * c.e, ++seed, -4.f, 4.f);
      if (c.ties) std::fill(logits.begin(), logits.end(), 0.25f);
      std::vector<int32_t> tokens(m);
      for (int64_t i = 0; i < m; ++i) tokens[i] = static_cast<int32_t>((i * 7) % vocab);
      std::vector<int64_t> table(vocab * c.k);
      for (int64_t i = 0; i < vocab * c.k; ++i) table[i] = (i * 37 + i / c.k) % c.e;
      for (int64_t r = 0; r < vocab; r += 3) table[r * c.k + 1] = table[r * c.k];  // a repeat in every third row
      DeviceArray<float> dl(logits), db(RandomFloats(c.e, ++seed, -0.5f, 0.5f));
      DeviceArray<int32_t> dt(tokens);
      DeviceArray<int64_t> dtab(table);
      cuda::DeviceRouterParams gp;
      gp.score = c.score, gp.num_experts = c.e, gp.top_k = c.k, gp.route_scale = 2.5f;
      gp.bias = c.bias ? db.get() : nullptr;
      gp.tid2eid = c.hashed ? dtab.get() : nullptr, gp.tid2eid_rows = vocab;
      struct Outputs {
        std::vector<int32_t> ids, offsets, sorted, rows;
        std::vector<float> weights;
      };
      auto run = [&](int mode) {
        cuda::SetRouteAlignForTesting(mode);
        DeviceArray<int32_t> ids(m * c.k), offsets(c.e + 1), sorted(m * c.k), rows(m * c.k);
        DeviceArray<float> weights(m * c.k);
        for (DeviceArray<int32_t>* a : {&ids, &offsets, &sorted, &rows}) a->Fill(0x5a);
        DeviceArray<uint8_t> scratch(cuda::MoeAlignScratchBytes(m * c.k, c.e));
        const bool one = cuda::RouteAndAlign(dl.get(), m, dt.get(), gp, ids.get(), weights.get(), offsets.get(),
                                             sorted.get(), rows.get(), scratch.get(), nullptr);
        cuda::SetRouteAlignForTesting(-1);
        EXPECT_EQ(one, mode == 1 && m <= 8) << "mode " << mode;
        return Outputs{ids.ToHost(), offsets.ToHost(), sorted.ToHost(), rows.ToHost(), weights.ToHost()};
      };
      const Outputs two = run(0), one = run(1);
      EXPECT_TRUE(AllEqual(one.ids, two.ids, "expert ids"));
      EXPECT_TRUE(AllEqual(test::Bits(one.weights), test::Bits(two.weights), "expert weights"));
      EXPECT_TRUE(AllEqual(one.offsets, two.offsets, "offsets"));
      EXPECT_TRUE(AllEqual(one.sorted, two.sorted, "sorted slots"));
      EXPECT_TRUE(AllEqual(one.rows, two.rows, "slot rows"));
    }
  }
}

// The kernel's top-k runs in one warp, lane l holding experts l, l + 32, …: the best keys all in
// one lane (each round rescans it), and expert counts of 8 (lanes without experts) and 1024 (32 a
// lane), against the CPU's order.
TEST(CudaRoute, TopKFromOneLaneAndOddExpertCounts) {
  DI_REQUIRE_GPU();
  struct Case {
    int64_t e, k;
    bool one_lane;
  };
  for (const Case& c : {Case{256, 8, true}, Case{8, 6, false}, Case{1024, 32, false}, Case{1024, 16, true}}) {
    SCOPED_TRACE(testing::Message() << "E " << c.e << ", k " << c.k << (c.one_lane ? ", one lane" : ""));
    const int64_t m = 5;
    std::vector<float> logits = RandomFloats(m * c.e, 21, -4.f, 4.f);
    if (c.one_lane) {  // experts 3, 35, 67, … of every token above all others, rising with the id
      for (int64_t t = 0; t < m; ++t) {
        for (int64_t i = 3; i < c.e; i += 32) logits[t * c.e + i] = 5.f + 0.01f * static_cast<float>(i);
      }
    }
    cpu::RouterParams cp;
    cp.score = cpu::RouterScore::kSqrtSoftplus, cp.num_experts = c.e, cp.top_k = c.k, cp.route_scale = 1.5f;
    std::vector<int32_t> want_ids(m * c.k);
    std::vector<float> want_w(m * c.k);
    cpu::Route(logits.data(), m, nullptr, cp, want_ids.data(), want_w.data());
    DeviceArray<float> dl(logits), dw(m * c.k);
    DeviceArray<int32_t> dids(m * c.k);
    cuda::DeviceRouterParams gp;
    gp.num_experts = c.e, gp.top_k = c.k, gp.route_scale = 1.5f;
    cuda::Route(dl.get(), m, nullptr, gp, dids.get(), dw.get(), nullptr);
    const std::vector<int32_t> got = dids.ToHost();
    EXPECT_TRUE(AllEqual(got, want_ids, "expert ids"));
    if (c.one_lane) EXPECT_EQ(got[0], static_cast<int32_t>(c.e - 32 + 3)) << "the highest of lane 3's experts first";
    EXPECT_TRUE(AllClose(dw.ToHost(), want_w, 1e-6f, 2e-6f, "expert weights"));
  }
}

TEST(CudaRoute, TiesGoToTheLowerExpertId) {
  DI_REQUIRE_GPU();
  // Every logit equal: the CPU's partial_sort tie rule picks experts 0..k-1.
  const int64_t m = 2, e = 64, k = 6;
  std::vector<float> logits(m * e, 0.25f);
  DeviceArray<float> dl(logits), dw(m * k);
  DeviceArray<int32_t> dids(m * k);
  cuda::DeviceRouterParams gp;
  gp.num_experts = e, gp.top_k = k;
  cuda::Route(dl.get(), m, nullptr, gp, dids.get(), dw.get(), nullptr);
  std::vector<int32_t> want = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
  EXPECT_TRUE(AllEqual(dids.ToHost(), want, "tied ids"));
}

}  // namespace
}  // namespace deepinfer
