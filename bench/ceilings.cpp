// The host-only parts of the ceilings, common to the CUDA and the CPU-only build: names, operand
// accounting, the block-scale layouts and JSON.
#include "bench/ceilings.h"

#include <cmath>

#include "base/error.h"

namespace deepinfer::bench {
namespace {

constexpr int64_t kBlock = 128;

int64_t Round4(int64_t x) { return (x + 3) / 4 * 4; }

}  // namespace

std::vector<NamedGemmShape> FlashPrefillGemmShapes(int64_t tokens, int64_t expert_rows) {
  DI_CHECK(tokens > 0 && expert_rows > 0, "prefill shapes of {} tokens and {} expert rows", tokens, expert_rows);
  constexpr int64_t kHidden = 4096, kQLora = 1024, kHeads = 64, kHeadDim = 512, kOGroups = 8, kOLora = 1024;
  constexpr int64_t kMoe = 2048, kIndexHeads = 64, kIndexDim = 128;
  return {
      {"wq_a", {tokens, kQLora, kHidden}},
      {"wq_b", {tokens, kHeads * kHeadDim, kQLora}},
      {"wkv", {tokens, kHeadDim, kHidden}},
      {"wo_b", {tokens, kHidden, kOGroups * kOLora}},
      {"shared_w13", {tokens, 2 * kMoe, kHidden}},
      {"shared_w2", {tokens, kHidden, kMoe}},
      {"indexer_wq_b", {tokens, kIndexHeads * kIndexDim, kQLora}},
      {"expert_w13", {expert_rows, 2 * kMoe, kHidden}},
      {"expert_w2", {expert_rows, kHidden, kMoe}},
  };
}

std::string_view GemmKindName(GemmKind kind) {
  switch (kind) {
    case GemmKind::kBf16:
      return "bf16";
    case GemmKind::kFp8PerTensor:
      return "fp8_per_tensor";
    case GemmKind::kFp8BlockScaled:
      return "fp8_block_scaled";
  }
  return "?";
}

double GemmFlops(GemmShape s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

double GemmOperandBytes(GemmKind kind, GemmShape s) {
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
  const double element = kind == GemmKind::kBf16 ? 2.0 : 1.0;
  double bytes = element * (m * k + n * k) + 2.0 * m * n;
  if (kind == GemmKind::kFp8PerTensor) bytes += 2.0 * 4.0;
  if (kind == GemmKind::kFp8BlockScaled) bytes += 4.0 * (m * k / kBlock + n * k / (kBlock * kBlock));
  return bytes;
}

double GemmTolerance(double want, double abs_sum) { return 0x1p-8 * std::fabs(want) + 0x1p-9 * abs_sum + 1e-30; }

int64_t ActBlockScaleLd(int64_t m) { return Round4(m); }

int64_t WeightBlockScaleLd(int64_t k) { return Round4(k / kBlock); }

std::vector<float> PackWeightBlockScales(const std::vector<float>& logical, int64_t n, int64_t k) {
  DI_CHECK(n % kBlock == 0 && k % kBlock == 0, "block scales need n and k multiples of 128, got n={} k={}", n, k);
  const int64_t nb = n / kBlock, kb = k / kBlock, ld = WeightBlockScaleLd(k);
  DI_CHECK(static_cast<int64_t>(logical.size()) == nb * kb, "W scales: {} floats for [{}, {}]", logical.size(), nb, kb);
  std::vector<float> packed(static_cast<size_t>(nb * ld), 0.f);
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t j = 0; j < kb; ++j) packed[static_cast<size_t>(b * ld + j)] = logical[static_cast<size_t>(b * kb + j)];
  }
  return packed;
}

std::vector<float> PackActBlockScales(const std::vector<float>& logical, int64_t m, int64_t k) {
  DI_CHECK(m > 0 && k % kBlock == 0, "act block scales need m > 0 and k a multiple of 128, got m={} k={}", m, k);
  const int64_t kb = k / kBlock, ld = ActBlockScaleLd(m);
  DI_CHECK(static_cast<int64_t>(logical.size()) == m * kb, "act scales: {} floats for [{}, {}]", logical.size(), m, kb);
  std::vector<float> packed(static_cast<size_t>(kb * ld), 0.f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < kb; ++j) packed[static_cast<size_t>(j * ld + i)] = logical[static_cast<size_t>(i * kb + j)];
  }
  return packed;
}

nlohmann::json ToJson(const GemmTiming& t) {
  nlohmann::json j;
  j["kind"] = GemmKindName(t.kind);
  j["m"] = t.shape.m;
  j["n"] = t.shape.n;
  j["k"] = t.shape.k;
  j["available"] = t.available;
  j["algo"] = t.algo_note;
  if (!t.error.empty()) {
    j["error"] = t.error;
  } else {
    j["seconds_per_call"] = t.seconds_per_call;
    j["flops_per_s"] = t.flops_per_s;
    j["operand_bytes_per_s"] = t.operand_bytes_per_s;
  }
  if (t.available) j["check_ratio"] = t.check_ratio;
  return j;
}

nlohmann::json ToJson(const CopyTiming& t) {
  return {{"bytes", t.bytes}, {"seconds", t.seconds}, {"bytes_per_s", t.bytes_per_s}};
}

nlohmann::json ToJson(const Ceilings& c) {
  return {{"device", c.device},
          {"device_copy", ToJson(c.copy)},
          {"gemm_bf16", ToJson(c.bf16)},
          {"gemm_fp8_per_tensor", ToJson(c.fp8)},
          {"gemm_fp8_block_scaled", ToJson(c.fp8_block)}};
}

}  // namespace deepinfer::bench
