// The ceilings' GEMMs (bench/ceilings.h) against a host reference in double, at small odd shapes,
// through RunGemm: TimeGemm's descriptors, layouts, scale packing and algorithm choice on
// uploaded operands. Then TimeGemm and TimeDeviceCopy end to end at small sizes.
//
// Tolerance: bench::GemmTolerance, 2^-8·|want| (the BF16 output's rounding) + 2^-9·Σ|terms| (f32
// accumulation and Hopper's FP8 tensor-core sums between promotions). Scales are log-uniform in
// [1/4, 4], so a scale read from the wrong block moves an output by a 128-term block sum times a
// factor far from 1: well above 2^-9·Σ|terms| at these k.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/ceilings.h"
#include "gpu_test_util.h"
#include "tensor/dtype.h"

namespace deepinfer::test {
namespace {

using bench::GemmKind;
using bench::GemmOperands;
using bench::GemmShape;

constexpr int64_t kBlock = 128;

// m = 3 and 130 are not multiples of 4 (the act scales' padding), k = 384 gives 3 scale blocks
// (the W scales' padding), n = 384 three W row blocks.
const GemmShape kShapes[] = {{3, 256, 384}, {130, 384, 256}, {64, 128, 512}};
// cuBLASLt 13.1 on the H200 has no block-scaled FP8 algorithm for m = 1 or m = 3
// (CUBLAS_STATUS_NOT_SUPPORTED from the heuristic, measured 2026-11-30); m = 64 and 256 have one.
// The ceiling runs at 8192^3, so the check uses row counts a prefill chunk has; odd row counts are
// reported by BlockScaledOddRowCountsAreCheckedWhenAvailable.
const GemmShape kBlockScaledShapes[] = {{64, 256, 384}, {128, 384, 256}, {256, 128, 512}};

size_t Count(int64_t a, int64_t b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

std::vector<float> RandomScales(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> log2_scale(-2.f, 2.f);
  std::vector<float> s(n);
  for (float& x : s) x = std::exp2(log2_scale(rng));
  return s;
}

GemmOperands RandomOperands(GemmKind kind, GemmShape s, uint64_t seed) {
  GemmOperands h;
  if (kind == GemmKind::kBf16) {
    h.act_bf16 = RandomBf16(Count(s.m, s.k), seed);
    h.weight_bf16 = RandomBf16(Count(s.n, s.k), seed + 1);
    return h;
  }
  h.act_e4m3 = RandomE4m3(Count(s.m, s.k), seed);
  h.weight_e4m3 = RandomE4m3(Count(s.n, s.k), seed + 1);
  if (kind == GemmKind::kFp8PerTensor) {
    const std::vector<float> scales = RandomScales(2, seed + 2);
    h.act_scale = scales[0];
    h.weight_scale = scales[1];
  } else {
    h.act_block_scale = RandomScales(Count(s.m, s.k / kBlock), seed + 2);
    h.weight_block_scale = RandomScales(Count(s.n / kBlock, s.k / kBlock), seed + 3);
  }
  return h;
}

// The scale of act row i (or of W row block i/128) for input block kb.
using ScaleFn = std::function<double(int64_t row, int64_t kb)>;

ScaleFn LogicalActScales(const GemmOperands& h, GemmShape s) {
  return [&h, s](int64_t i, int64_t kb) { return h.act_block_scale[Count(i, s.k / kBlock) + kb]; };
}
ScaleFn LogicalWeightScales(const GemmOperands& h, GemmShape s) {
  return [&h, s](int64_t j, int64_t kb) { return h.weight_block_scale[Count(j / kBlock, s.k / kBlock) + kb]; };
}

// Element t of act row i / W row j, decoded exactly, scales applied.
double ActValue(GemmKind kind, const GemmOperands& h, GemmShape s, const ScaleFn& scale, int64_t i, int64_t t) {
  const size_t at = Count(i, s.k) + static_cast<size_t>(t);
  switch (kind) {
    case GemmKind::kBf16:
      return Bf16ToF32(h.act_bf16[at]);
    case GemmKind::kFp8PerTensor:
      return static_cast<double>(E4m3ToF32(h.act_e4m3[at])) * h.act_scale;
    case GemmKind::kFp8BlockScaled:
      return static_cast<double>(E4m3ToF32(h.act_e4m3[at])) * scale(i, t / kBlock);
  }
  return NAN;
}
double WeightValue(GemmKind kind, const GemmOperands& h, GemmShape s, const ScaleFn& scale, int64_t j, int64_t t) {
  const size_t at = Count(j, s.k) + static_cast<size_t>(t);
  switch (kind) {
    case GemmKind::kBf16:
      return Bf16ToF32(h.weight_bf16[at]);
    case GemmKind::kFp8PerTensor:
      return static_cast<double>(E4m3ToF32(h.weight_e4m3[at])) * h.weight_scale;
    case GemmKind::kFp8BlockScaled:
      return static_cast<double>(E4m3ToF32(h.weight_e4m3[at])) * scale(j, t / kBlock);
  }
  return NAN;
}

// Every output against Σ_t act[i, t]·W[j, t] in double, within bench::GemmTolerance.
::testing::AssertionResult MatchesReference(GemmKind kind, GemmShape s, const GemmOperands& h,
                                            const std::vector<float>& got, const ScaleFn& act_scale,
                                            const ScaleFn& weight_scale) {
  if (got.size() != Count(s.m, s.n)) return ::testing::AssertionFailure() << "output has " << got.size() << " values";
  double worst = 0;
  int64_t worst_i = 0, worst_j = 0;
  double worst_got = 0, worst_want = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double want = 0, abs_sum = 0;
      for (int64_t t = 0; t < s.k; ++t) {
        const double term = ActValue(kind, h, s, act_scale, i, t) * WeightValue(kind, h, s, weight_scale, j, t);
        want += term;
        abs_sum += std::fabs(term);
      }
      const double g = got[Count(i, s.n) + static_cast<size_t>(j)];
      const double ratio = std::isfinite(g) ? std::fabs(g - want) / bench::GemmTolerance(want, abs_sum) : INFINITY;
      if (!(ratio <= worst)) {
        worst = ratio;
        worst_i = i, worst_j = j, worst_got = g, worst_want = want;
      }
    }
  }
  ::testing::Test::RecordProperty(std::string(bench::GemmKindName(kind)) + "_worst_error_over_tolerance",
                                  std::to_string(worst));
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bench::GemmKindName(kind) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                                       << ": out[" << worst_i << ", " << worst_j << "] = " << worst_got
                                       << ", reference " << worst_want << ", error " << worst << "x the tolerance";
}

std::string ShapeName(GemmShape s) {
  return "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
}

TEST(Ceilings, Bf16GemmMatchesHostReference) {
  DI_REQUIRE_GPU();
  for (const GemmShape& s : kShapes) {
    const GemmOperands h = RandomOperands(GemmKind::kBf16, s, 11);
    const std::vector<float> out = bench::RunGemm(0, GemmKind::kBf16, s, h);
    EXPECT_TRUE(MatchesReference(GemmKind::kBf16, s, h, out, nullptr, nullptr)) << ShapeName(s);
  }
}

TEST(Ceilings, Fp8PerTensorGemmMatchesHostReference) {
  DI_REQUIRE_GPU();
  for (const GemmShape& s : kShapes) {
    const GemmOperands h = RandomOperands(GemmKind::kFp8PerTensor, s, 21);
    const std::vector<float> out = bench::RunGemm(0, GemmKind::kFp8PerTensor, s, h);
    EXPECT_TRUE(MatchesReference(GemmKind::kFp8PerTensor, s, h, out, nullptr, nullptr)) << ShapeName(s);
  }
}

// Alternative readings of the packed scale buffers, to name the layout cuBLASLt actually used
// when the documented one (bench::Pack*BlockScales) does not match.
struct Reading {
  std::string name;
  ScaleFn fn;
};

std::vector<Reading> ActReadings(const std::vector<float>& packed, GemmShape s) {
  const int64_t kb = s.k / kBlock, ld = bench::ActBlockScaleLd(s.m);
  const auto at = [&packed](int64_t index) {
    return index < static_cast<int64_t>(packed.size()) ? static_cast<double>(packed[static_cast<size_t>(index)]) : 0.0;
  };
  return {{"act m-major ld Round4(m) (documented)", [=](int64_t i, int64_t b) { return at(b * ld + i); }},
          {"act m-major ld m", [=](int64_t i, int64_t b) { return at(b * s.m + i); }},
          {"act k-major ld k/128", [=](int64_t i, int64_t b) { return at(i * kb + b); }},
          {"act k-major ld Round4(k/128)", [=](int64_t i, int64_t b) { return at(i * ((kb + 3) / 4 * 4) + b); }}};
}

std::vector<Reading> WeightReadings(const std::vector<float>& packed, GemmShape s) {
  const int64_t kb = s.k / kBlock, nb = s.n / kBlock, ld = bench::WeightBlockScaleLd(s.k);
  const auto at = [&packed](int64_t index) {
    return index < static_cast<int64_t>(packed.size()) ? static_cast<double>(packed[static_cast<size_t>(index)]) : 0.0;
  };
  return {
      {"W k-major ld Round4(k/128) (documented)", [=](int64_t j, int64_t b) { return at(j / kBlock * ld + b); }},
      {"W k-major ld k/128", [=](int64_t j, int64_t b) { return at(j / kBlock * kb + b); }},
      {"W n-major ld n/128", [=](int64_t j, int64_t b) { return at(b * nb + j / kBlock); }},
      {"W n-major ld Round4(n/128)", [=](int64_t j, int64_t b) { return at(b * ((nb + 3) / 4 * 4) + j / kBlock); }}};
}

TEST(Ceilings, Fp8BlockScaledGemmMatchesHostReference) {
  DI_REQUIRE_GPU();
  const GemmKind kind = GemmKind::kFp8BlockScaled;
  for (const GemmShape& s : kBlockScaledShapes) {
    const GemmOperands h = RandomOperands(kind, s, 31);
    const std::vector<float> out = bench::RunGemm(0, kind, s, h);
    const ::testing::AssertionResult ok =
        MatchesReference(kind, s, h, out, LogicalActScales(h, s), LogicalWeightScales(h, s));
    EXPECT_TRUE(ok) << ShapeName(s);
    if (ok) continue;
    // Which reading of the uploaded buffers explains the output?
    const std::vector<float> act_packed = bench::PackActBlockScales(h.act_block_scale, s.m, s.k);
    const std::vector<float> weight_packed = bench::PackWeightBlockScales(h.weight_block_scale, s.n, s.k);
    for (const Reading& a : ActReadings(act_packed, s)) {
      for (const Reading& w : WeightReadings(weight_packed, s)) {
        if (MatchesReference(kind, s, h, out, a.fn, w.fn)) {
          ADD_FAILURE() << ShapeName(s) << ": the output matches the reading [" << a.name << "; " << w.name << "]";
        }
      }
    }
  }
}

TEST(Ceilings, BlockScaledOddRowCountsAreCheckedWhenAvailable) {
  DI_REQUIRE_GPU();
  const GemmKind kind = GemmKind::kFp8BlockScaled;
  for (const GemmShape& s : kShapes) {
    const bench::GemmTiming t = bench::TimeGemm(0, kind, s, 2);
    std::printf("fp8_block_scaled %s: available=%d %s\n", ShapeName(s).c_str(), t.available ? 1 : 0,
                t.available ? t.algo_note.c_str() : t.error.c_str());
    if (!t.available) {
      EXPECT_NE(t.error, "");
      continue;
    }
    const GemmOperands h = RandomOperands(kind, s, 41);
    const std::vector<float> out = bench::RunGemm(0, kind, s, h);
    EXPECT_TRUE(MatchesReference(kind, s, h, out, LogicalActScales(h, s), LogicalWeightScales(h, s))) << ShapeName(s);
  }
}

TEST(Ceilings, TimeGemmChecksThenTimes) {
  DI_REQUIRE_GPU();
  for (GemmKind kind : {GemmKind::kBf16, GemmKind::kFp8PerTensor, GemmKind::kFp8BlockScaled}) {
    const GemmShape s{256, 512, 384};
    const bench::GemmTiming t = bench::TimeGemm(0, kind, s, 5);
    EXPECT_TRUE(t.available) << bench::GemmKindName(kind) << ": " << t.error;
    EXPECT_EQ(t.error, "") << bench::GemmKindName(kind) << ": " << t.algo_note;
    EXPECT_LE(t.check_ratio, 1.0);
    EXPECT_GT(t.seconds_per_call, 0.0);
    EXPECT_NE(t.algo_note.find("algo"), std::string::npos) << t.algo_note;
    std::printf("%s %s: %.3f us/call, %.2f TFLOP/s, check %.3f; %s\n", std::string(bench::GemmKindName(kind)).c_str(),
                ShapeName(s).c_str(), 1e6 * t.seconds_per_call, 1e-12 * t.flops_per_s, t.check_ratio,
                t.algo_note.c_str());
  }
}

// DeepInfer's own FP8 linear beside cuBLASLt's: its first call within GemmTolerance of the double
// sums at sampled outputs, then timed, on the TMA kernel (300 rows; N = 200: a partial weight
// block) and the GEMV (8 rows); k not a multiple of 128 is refused.
TEST(Ceilings, TimeOwnFp8LinearChecksThenTimes) {
  DI_REQUIRE_GPU();
  for (const GemmShape s : {GemmShape{300, 200, 512}, GemmShape{8, 256, 384}}) {
    const bench::GemmTiming t = bench::TimeOwnFp8Linear(0, s, 3);
    EXPECT_TRUE(t.available) << ShapeName(s);
    EXPECT_EQ(t.error, "") << ShapeName(s);
    EXPECT_LE(t.check_ratio, 1.0) << ShapeName(s);
    EXPECT_GT(t.seconds_per_call, 0.0) << ShapeName(s);
    EXPECT_GT(t.flops_per_s, 0.0) << ShapeName(s);
    std::printf("deepinfer fp8 %s: %.3f us/call, %.2f TFLOP/s, check %.3f\n", ShapeName(s).c_str(),
                1e6 * t.seconds_per_call, 1e-12 * t.flops_per_s, t.check_ratio);
  }
  EXPECT_THROW(bench::TimeOwnFp8Linear(0, {8, 256, 200}, 1), Error);
}

// A decode-sized block-scaled GEMM (m = 1) may have no cuBLASLt algorithm on Hopper: TimeGemm
// reports that instead of throwing.
TEST(Ceilings, TimeGemmReportsAMissingAlgorithm) {
  DI_REQUIRE_GPU();
  const bench::GemmTiming t = bench::TimeGemm(0, GemmKind::kFp8BlockScaled, {1, 256, 256}, 3);
  if (t.available) {
    EXPECT_EQ(t.error, "");
    EXPECT_LE(t.check_ratio, 1.0);
  } else {
    EXPECT_NE(t.error, "");
  }
  std::printf("fp8_block_scaled m=1 n=256 k=256: available=%d error='%s'\n", t.available ? 1 : 0, t.error.c_str());
}

TEST(Ceilings, DeviceCopyIsCheckedAndTimed) {
  DI_REQUIRE_GPU();
  const bench::CopyTiming c = bench::TimeDeviceCopy(0, size_t{64} << 20, 3);
  EXPECT_EQ(c.bytes, size_t{64} << 20);
  EXPECT_GT(c.seconds, 0.0);
  EXPECT_GT(c.bytes_per_s, 0.0);
}

}  // namespace
}  // namespace deepinfer::test
