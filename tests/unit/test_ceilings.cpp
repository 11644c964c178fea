// The host side of bench/ceilings.h (no device needed): the block-scale layouts handed to cuBLASLt,
// operand accounting, the tolerance, JSON, and the CPU-only build's error.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/ceilings.h"
#include "device/cuda_memory.h"

namespace deepinfer::bench {
namespace {

TEST(CeilingsLayout, WeightScalesAreKMajorColumnsPaddedToFour) {
  // n = 256, k = 384: 2 row blocks × 3 column blocks, each column of 3 padded to 4.
  const std::vector<float> logical = {1, 2, 3, 4, 5, 6};  // [2, 3] row-major
  const std::vector<float> packed = PackWeightBlockScales(logical, 256, 384);
  EXPECT_EQ(WeightBlockScaleLd(384), 4);
  EXPECT_EQ(packed, (std::vector<float>{1, 2, 3, 0, 4, 5, 6, 0}));
  // k = 512: 4 blocks, no padding.
  EXPECT_EQ(PackWeightBlockScales({1, 2, 3, 4}, 128, 512), (std::vector<float>{1, 2, 3, 4}));
}

TEST(CeilingsLayout, ActScalesAreMMajorColumnsPaddedToFour) {
  // m = 3, k = 256: s[i, kb] = 10·i + kb lands at kb·4 + i.
  const std::vector<float> logical = {0, 1, 10, 11, 20, 21};  // [3, 2] row-major
  const std::vector<float> packed = PackActBlockScales(logical, 3, 256);
  EXPECT_EQ(ActBlockScaleLd(3), 4);
  EXPECT_EQ(packed, (std::vector<float>{0, 10, 20, 0, 1, 11, 21, 0}));
  EXPECT_EQ(ActBlockScaleLd(130), 132);
  EXPECT_EQ(ActBlockScaleLd(8), 8);
}

TEST(CeilingsLayout, RejectsPartialBlocksAndWrongSizes) {
  EXPECT_THROW(PackWeightBlockScales({1}, 100, 128), Error);
  EXPECT_THROW(PackWeightBlockScales({1}, 128, 200), Error);
  EXPECT_THROW(PackWeightBlockScales({1, 2}, 128, 128), Error);
  EXPECT_THROW(PackActBlockScales({1}, 2, 128), Error);
  EXPECT_THROW(PackActBlockScales({1}, 1, 100), Error);
}

TEST(CeilingsAccounting, FlopsAndOperandBytes) {
  const GemmShape s{8192, 8192, 8192};
  const double e = 8192.0 * 8192.0;  // elements of one 8192² matrix
  EXPECT_DOUBLE_EQ(GemmFlops(s), 2.0 * e * 8192.0);
  EXPECT_DOUBLE_EQ(GemmOperandBytes(GemmKind::kBf16, s), 2 * e + 2 * e + 2 * e);
  EXPECT_DOUBLE_EQ(GemmOperandBytes(GemmKind::kFp8PerTensor, s), e + e + 2 * e + 8);
  EXPECT_DOUBLE_EQ(GemmOperandBytes(GemmKind::kFp8BlockScaled, s), e + e + 2 * e + 4 * (e / 128 + e / (128 * 128)));
  // Decode-shaped: the weight dominates.
  EXPECT_DOUBLE_EQ(GemmOperandBytes(GemmKind::kFp8PerTensor, {1, 4096, 4096}), 4096.0 + 4096.0 * 4096 + 2 * 4096 + 8);
}

TEST(CeilingsAccounting, ToleranceTerms) {
  EXPECT_DOUBLE_EQ(GemmTolerance(256.0, 0.0), 1.0 + 1e-30);
  EXPECT_DOUBLE_EQ(GemmTolerance(-256.0, 512.0), 2.0 + 1e-30);
  EXPECT_GT(GemmTolerance(0.0, 0.0), 0.0);
}

TEST(CeilingsJson, TimingOrError) {
  GemmTiming ok;
  ok.kind = GemmKind::kFp8BlockScaled;
  ok.shape = {8192, 8192, 8192};
  ok.seconds_per_call = 1e-3;
  ok.flops_per_s = 1.1e15;
  ok.operand_bytes_per_s = 2e11;
  ok.available = true;
  ok.check_ratio = 0.25;
  ok.algo_note = "algo 66";
  const nlohmann::json j = ToJson(ok);
  EXPECT_EQ(j["kind"], "fp8_block_scaled");
  EXPECT_EQ(j["m"], 8192);
  EXPECT_DOUBLE_EQ(j["flops_per_s"].get<double>(), 1.1e15);
  EXPECT_DOUBLE_EQ(j["check_ratio"].get<double>(), 0.25);
  EXPECT_FALSE(j.contains("error"));

  GemmTiming missing;
  missing.kind = GemmKind::kFp8BlockScaled;
  missing.shape = {1, 4096, 4096};
  missing.error = "no algorithm";
  const nlohmann::json e = ToJson(missing);
  EXPECT_EQ(e["error"], "no algorithm");
  EXPECT_EQ(e["available"], false);
  EXPECT_FALSE(e.contains("flops_per_s"));

  Ceilings c;
  c.device = "H200";
  c.copy = {size_t{2} << 30, 1e-3, 4.2e12};
  const nlohmann::json all = ToJson(c);
  EXPECT_EQ(all["device"], "H200");
  EXPECT_DOUBLE_EQ(all["device_copy"]["bytes_per_s"].get<double>(), 4.2e12);
  EXPECT_TRUE(all.contains("gemm_fp8_block_scaled"));
}

TEST(CeilingsShapes, FlashPrefillProjectionsInWholeScaleBlocks) {
  const std::vector<NamedGemmShape> shapes = FlashPrefillGemmShapes(8192, 192);
  ASSERT_EQ(shapes.size(), 9u);
  EXPECT_EQ(shapes[0].name, "wq_a");
  EXPECT_EQ(shapes[1].shape.n, 32768);  // wq_b: 64 heads × 512
  EXPECT_EQ(shapes[3].shape.k, 8192);   // wo_b: 8 groups × o_lora 1024
  for (const NamedGemmShape& s : shapes) {
    EXPECT_EQ(s.shape.n % 128, 0) << s.name;  // kFp8BlockScaled's whole blocks
    EXPECT_EQ(s.shape.k % 128, 0) << s.name;
    EXPECT_EQ(s.shape.m, s.name.rfind("expert_", 0) == 0 ? 192 : 8192) << s.name;
  }
  EXPECT_THROW(FlashPrefillGemmShapes(0, 1), Error);
}

TEST(CeilingsBuild, CpuOnlyBuildSaysWhatIsMissing) {
  if (CudaBackendCompiled()) GTEST_SKIP() << "CUDA build";
  try {
    MeasureCeilings(0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ceilings need the CUDA build"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TimeGemm(0, GemmKind::kBf16, {8, 8, 8}, 1), Error);
  EXPECT_THROW(TimeOwnFp8Linear(0, {8, 8, 128}, 1), Error);
  EXPECT_THROW(TimeDeviceCopy(0, 1024, 1), Error);
  EXPECT_THROW(RunGemm(0, GemmKind::kBf16, {8, 8, 8}, {}), Error);
}

}  // namespace
}  // namespace deepinfer::bench
