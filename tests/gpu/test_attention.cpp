// cuda::AttentionWithSink and its tensor-core twin cuda::AttentionWithSinkSplitBf16 against
// cpu::AttentionWithSink over the same gathered rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/state_row.h"
#include "kernels/cuda/attention.h"

namespace deepinfer::test {
namespace {

constexpr float kSentinel = 12345.f;                // padding between output rows: must survive
constexpr int32_t kUnusedId = 0x7fffffff;           // row ids past counts[m]: must not be read

struct AttentionCase {
  int64_t queries, heads, head_dim, pool_rows, max_rows;
  std::vector<int32_t> counts;  // one per query
  int64_t q_pad = 0, row_pad = 0, out_pad = 0;
  float q_range = 1.f;          // q uniform in [−q_range, q_range]: larger gives peakier softmax
  bool some_sinks_neg_inf = false;
  uint64_t seed = 1;
  // Rows as Numerics::kv_fp8 stores them (the split-BF16 kernel's contract): the first d − rope
  // channels through e4m3 in blocks of 64, the last rope = d/8 channels (64 of Flash's 512)
  // through BF16, values spread over several binades.
  bool kv_rows = false;
  int blocks_per_query = 0;  // split-BF16 kernel: 0 (the default), 1, 2, 4 or 8
  bool bf16_inputs = false;  // q and the probabilities rounded to BF16 (every kernel and the CPU)
  int heads_per_block = 0;   // split-BF16 kernel: 0 (the default), 32 or 64
};

struct AttentionInputs {
  int64_t q_stride, row_stride, out_stride;
  std::vector<float> q, rows, sinks;
  std::vector<int32_t> row_ids;
  float scale;
};

AttentionInputs MakeInputs(const AttentionCase& c) {
  AttentionInputs in;
  in.q_stride = c.heads * c.head_dim + c.q_pad;
  in.row_stride = c.head_dim + c.row_pad;
  in.out_stride = c.heads * c.head_dim + c.out_pad;
  in.q = RandomFloats(c.queries * in.q_stride, c.seed, -c.q_range, c.q_range);
  in.rows = RandomFloats(c.pool_rows * in.row_stride, c.seed + 1);
  if (c.kv_rows) {
    const int64_t rope = c.head_dim / 8, nope = c.head_dim - rope;
    for (int64_t r = 0; r < c.pool_rows; ++r) {
      float* row = in.rows.data() + r * in.row_stride;
      for (int64_t k = 0; k < c.head_dim; ++k) row[k] *= std::ldexp(1.f, static_cast<int>((r + k / 64) % 5) - 2);
      cpu::Fp8RoundTrip(row, nope, 64);
      cpu::Bf16Round(row + nope, rope);
    }
  }
  in.sinks = RandomFloats(c.heads, c.seed + 2, -2.f, 2.f);
  if (c.some_sinks_neg_inf) {
    for (int64_t h = 0; h < c.heads; h += 2) in.sinks[h] = -std::numeric_limits<float>::infinity();
  }
  std::mt19937_64 rng(c.seed + 3);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.pool_rows - 1));
  in.row_ids.assign(c.queries * c.max_rows, kUnusedId);
  for (int64_t m = 0; m < c.queries; ++m) {
    for (int64_t j = 0; j < c.counts[m]; ++j) in.row_ids[m * c.max_rows + j] = pick(rng);
  }
  in.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  return in;
}

std::vector<float> CpuAttention(const AttentionCase& c, const AttentionInputs& in) {
  const int64_t h = c.heads, d = c.head_dim;
  std::vector<float> want(c.queries * in.out_stride, kSentinel);
  for (int64_t m = 0; m < c.queries; ++m) {
    const int64_t n = c.counts[m];
    std::vector<float> kv(n * d), scores(h * n + 1);
    for (int64_t j = 0; j < n; ++j) {
      const float* src = in.rows.data() + in.row_ids[m * c.max_rows + j] * in.row_stride;
      std::copy(src, src + d, kv.data() + j * d);
    }
    cpu::AttentionWithSink(in.q.data() + m * in.q_stride, h, kv.data(), n, d, in.sinks.data(), in.scale,
                           scores.data(), want.data() + m * in.out_stride, c.bf16_inputs);
  }
  return want;
}

std::vector<float> GpuAttention(const AttentionCase& c, const AttentionInputs& in) {
  DeviceArray<float> q(in.q), rows(in.rows), sinks(in.sinks);
  DeviceArray<int32_t> ids(in.row_ids), counts(c.counts);
  DeviceArray<float> out(std::vector<float>(c.queries * in.out_stride, kSentinel));
  cuda::AttentionWithSink(q.get(), in.q_stride, rows.get(), in.row_stride, ids.get(), counts.get(), c.max_rows,
                          sinks.get(), c.queries, c.heads, c.head_dim, in.scale, out.get(), in.out_stride, nullptr,
                          c.bf16_inputs);
  return out.ToHost();
}

std::vector<float> GpuAttentionSplitBf16(const AttentionCase& c, const AttentionInputs& in) {
  DeviceArray<float> q(in.q), rows(in.rows), sinks(in.sinks);
  DeviceArray<int32_t> ids(in.row_ids), counts(c.counts);
  DeviceArray<float> out(std::vector<float>(c.queries * in.out_stride, kSentinel));
  EXPECT_TRUE(cuda::AttentionSplitBf16Usable(q.get(), in.q_stride, rows.get(), in.row_stride, c.heads, c.head_dim));
  cuda::AttentionWithSinkSplitBf16(q.get(), in.q_stride, rows.get(), in.row_stride, ids.get(), counts.get(),
                                   c.max_rows, sinks.get(), c.queries, c.heads, c.head_dim, in.scale, out.get(),
                                   in.out_stride, nullptr, c.blocks_per_query, c.bf16_inputs, c.heads_per_block);
  return out.ToHost();
}

// fp32 softmax and weighted sums over <= 640 rows (outputs of magnitude <= 1, rows in [−1, 1]),
// in a different order than the CPU (online rescaling, other dot-product order): expected
// differences ~1e-6, so 1e-5 absolute leaves margin; the relative term covers outputs near 1.
constexpr float kAtol = 1e-5f, kRtol = 1e-5f;

void ExpectMatchesCpu(const AttentionCase& c) {
  const AttentionInputs in = MakeInputs(c);
  EXPECT_TRUE(AllClose(GpuAttention(c, in), CpuAttention(c, in), kAtol, kRtol, "attention"));
}

TEST(CudaAttention, SmallShapes) {
  DI_REQUIRE_GPU();
  // H=2, d=32, one query, a count just past a tile.
  ExpectMatchesCpu({1, 2, 32, 50, 40, {37}, 0, 0, 0, 1.f, false, 11});
  // H=3 (a padded head group), counts 0, 1, 31, 32 (one full tile), 70 (= max_rows).
  ExpectMatchesCpu({5, 3, 64, 100, 70, {0, 1, 31, 32, 70}, 0, 0, 0, 1.f, false, 12});
  // H=8, d=100: not a multiple of 4 (scalar paths).
  ExpectMatchesCpu({3, 8, 100, 120, 64, {33, 5, 64}, 0, 0, 0, 1.f, false, 13});
  // H=1, d=33.
  ExpectMatchesCpu({2, 1, 33, 40, 20, {20, 7}, 0, 0, 0, 1.f, false, 14});
  // H=5, d=128 with odd padded strides (rows not float4-aligned).
  ExpectMatchesCpu({2, 5, 128, 90, 80, {65, 0}, 3, 3, 5, 1.f, false, 15});
  // H=4, d=96 with strides padded by 4 (float4 row copies), peakier softmax.
  ExpectMatchesCpu({3, 4, 96, 200, 100, {100, 64, 2}, 4, 4, 4, 4.f, false, 16});
}

TEST(CudaAttention, NegInfSinksAndEmptyQueries) {
  DI_REQUIRE_GPU();
  // Sinks of −inf (no sink; padded heads in FlashMLA's layout) on every other head.
  ExpectMatchesCpu({4, 6, 64, 80, 50, {50, 0, 1, 17}, 0, 0, 0, 2.f, true, 21});
}

TEST(CudaAttention, LargeHeadDim) {
  DI_REQUIRE_GPU();
  ExpectMatchesCpu({2, 3, 520, 64, 40, {40, 9}, 0, 0, 0, 1.f, false, 31});
  ExpectMatchesCpu({2, 9, 1024, 64, 40, {33, 40}, 0, 0, 0, 1.f, false, 32});
}

TEST(CudaAttention, FlashShapes) {
  DI_REQUIRE_GPU();
  // H = 64, d = 512, up to 128 window + 512 selected rows per query.
  ExpectMatchesCpu({4, 64, 512, 4096, 640, {640, 128, 1, 377}, 0, 0, 0, 1.f, false, 41});
  // Larger logits (q in [−4, 4]: score std ≈ 1.3), so the softmax is far from uniform.
  ExpectMatchesCpu({3, 64, 512, 2048, 640, {640, 600, 33}, 0, 0, 0, 4.f, false, 42});
}

using GpuKernel = std::vector<float> (*)(const AttentionCase&, const AttentionInputs&);

// Two runs give the same bits, and query 2 alone gives the bits it got in the batch.
void ExpectDeterministicAndBatchInvariant(const AttentionCase& c, GpuKernel kernel) {
  const AttentionInputs in = MakeInputs(c);
  const std::vector<float> first = kernel(c, in);
  EXPECT_TRUE(AllEqual(kernel(c, in), first, "second run"));
  AttentionCase one = c;
  one.queries = 1;
  one.counts = {c.counts[2]};
  AttentionInputs in_one = in;
  in_one.q.assign(in.q.begin() + 2 * in.q_stride, in.q.begin() + 3 * in.q_stride);
  in_one.row_ids.assign(in.row_ids.begin() + 2 * c.max_rows, in.row_ids.begin() + 3 * c.max_rows);
  const std::vector<float> alone = kernel(one, in_one);
  EXPECT_TRUE(AllEqual(alone, std::vector<float>(first.begin() + 2 * in.out_stride, first.begin() + 3 * in.out_stride),
                       "query alone vs in batch"));
}

TEST(CudaAttention, DeterministicAndBatchInvariant) {
  DI_REQUIRE_GPU();
  ExpectDeterministicAndBatchInvariant({3, 64, 512, 2048, 640, {640, 200, 513}, 0, 0, 0, 2.f, false, 51}, GpuAttention);
}

// Split-BF16 tensor cores: every product exact (q and p as three BF16 parts, rows exact in BF16),
// the f32 sums in MMA order. The scores' sums run over d products in 16-column MMA steps whose
// adder may truncate (up to ~2 roundings per add instead of 1), so a score of magnitude |s| moves
// by ~sqrt(d/16)·2^-22·|s| typically: ~7e-6 for the |s| ≈ 23 of q in [−4, 4] at d = 512, and a
// probability by as much relatively. Hence 3× the SIMT kernel's bounds; the worst difference is
// printed.
constexpr float kSplitAtol = 3e-5f, kSplitRtol = 3e-5f;

void ExpectSplitBf16MatchesCpu(AttentionCase c) {
  c.kv_rows = true;
  const AttentionInputs in = MakeInputs(c);
  const std::vector<float> got = GpuAttentionSplitBf16(c, in), want = CpuAttention(c, in);
  float worst = 0.f;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  std::printf("split-BF16 attention, %ld queries x %ld heads x %ld: max |gpu - cpu| %.3g\n",
              static_cast<long>(c.queries), static_cast<long>(c.heads), static_cast<long>(c.head_dim), worst);
  EXPECT_TRUE(AllClose(got, want, kSplitAtol, kSplitRtol, "split-BF16 attention"));
}

TEST(CudaAttentionSplitBf16, SmallShapes) {
  DI_REQUIRE_GPU();
  // One head group (H <= 16) at d = 64 and 128: counts 0, 1, 15, 16, 17, 63, 64, 65 (tile and
  // 16-row step edges), a padded head group (H = 3), strides padded by whole float4s.
  ExpectSplitBf16MatchesCpu({8, 3, 64, 200, 70, {0, 1, 15, 16, 17, 63, 64, 65}, 4, 8, 4, 1.f, false, 61});
  ExpectSplitBf16MatchesCpu({3, 8, 128, 300, 200, {200, 33, 129}, 0, 0, 0, 2.f, false, 62});
  // Two head groups (H = 20: the second padded) at d = 256, and sinks of −inf.
  ExpectSplitBf16MatchesCpu({4, 20, 256, 400, 300, {300, 0, 1, 257}, 0, 0, 0, 1.f, true, 63});
  // Four head groups over two head blocks (H = 70: 64 + 6), d = 128.
  ExpectSplitBf16MatchesCpu({2, 70, 128, 300, 150, {150, 97}, 0, 0, 0, 1.f, false, 64});
}

TEST(CudaAttentionSplitBf16, FlashShapes) {
  DI_REQUIRE_GPU();
  // H = 64, d = 512, up to 128 window + 512 selected rows (10 tiles: 5 ranks of 2).
  ExpectSplitBf16MatchesCpu({5, 64, 512, 4096, 640, {640, 128, 1, 377, 576}, 0, 0, 0, 1.f, false, 71});
  ExpectSplitBf16MatchesCpu({3, 64, 512, 2048, 640, {640, 600, 33}, 0, 0, 0, 4.f, false, 72});
}

TEST(CudaAttentionSplitBf16, DeterministicAndBatchInvariant) {
  DI_REQUIRE_GPU();
  AttentionCase c{3, 64, 512, 2048, 640, {640, 200, 513}, 0, 0, 0, 2.f, false, 81};
  c.kv_rows = true;
  ExpectDeterministicAndBatchInvariant(c, GpuAttentionSplitBf16);
}

// Each cluster size (DEEPINFER_ATTENTION_SPLIT) is its own order of sums, each within the bound of
// the CPU and batch invariant: 1 block (every tile in one run), 2, 4 (runs of 3, 3, 3 and 1
// tiles for 640 rows), and 8 explicitly.
TEST(CudaAttentionSplitBf16, EveryBlockCount) {
  DI_REQUIRE_GPU();
  for (int blocks : {1, 2, 4, 8}) {
    SCOPED_TRACE(testing::Message() << blocks << " blocks per query");
    AttentionCase c{4, 64, 512, 2048, 640, {640, 200, 513, 1}, 0, 0, 0, 2.f, false, 91};
    c.blocks_per_query = blocks;
    ExpectSplitBf16MatchesCpu(c);
    c.kv_rows = true;
    ExpectDeterministicAndBatchInvariant(c, GpuAttentionSplitBf16);
  }
  // The count is honoured: over 640 rows one run (1 block) and five runs merged (8 blocks) sum
  // in different orders, so some output differs in its last bits.
  AttentionCase c{1, 64, 512, 2048, 640, {640}, 0, 0, 0, 2.f, false, 93};
  c.kv_rows = true;
  const AttentionInputs in = MakeInputs(c);
  c.blocks_per_query = 1;
  const std::vector<float> one = GpuAttentionSplitBf16(c, in);
  c.blocks_per_query = 8;
  const std::vector<float> eight = GpuAttentionSplitBf16(c, in);
  size_t differ = 0;
  for (size_t i = 0; i < one.size(); ++i) differ += std::memcmp(&one[i], &eight[i], sizeof(float)) != 0;
  EXPECT_GT(differ, 0u) << "1 and 8 blocks per query gave the same bits on every output";
  AttentionCase small{3, 8, 128, 300, 200, {200, 33, 129}, 0, 0, 0, 1.f, false, 92};
  small.blocks_per_query = 1;
  ExpectSplitBf16MatchesCpu(small);
}

TEST(CudaAttentionSplitBf16, RejectsWhatItCannotRun) {
  DI_REQUIRE_GPU();
  DeviceArray<float> buf(std::vector<float>(4096, 0.f));
  EXPECT_FALSE(cuda::AttentionSplitBf16Usable(buf.get(), 96 * 2, buf.get(), 96, 2, 96)) << "d = 96";
  EXPECT_FALSE(cuda::AttentionSplitBf16Usable(buf.get(), 1024, buf.get(), 1024, 1, 1024)) << "d = 1024";
  EXPECT_FALSE(cuda::AttentionSplitBf16Usable(buf.get(), 130, buf.get(), 130, 1, 128)) << "rows of 130 floats";
  EXPECT_FALSE(cuda::AttentionSplitBf16Usable(buf.get() + 1, 128, buf.get(), 128, 1, 128)) << "q off 16 bytes";
  EXPECT_TRUE(cuda::AttentionSplitBf16Usable(buf.get(), 128, buf.get(), 132, 1, 128));
  EXPECT_THROW(cuda::AttentionWithSinkSplitBf16(buf.get(), 96, buf.get(), 96, nullptr, nullptr, 0, buf.get(), 1, 1,
                                                96, 1.f, buf.get(), 96, nullptr),
               std::exception);
  EXPECT_THROW(cuda::AttentionWithSinkSplitBf16(buf.get(), 128, buf.get(), 128, nullptr, nullptr, 0, buf.get(), 1, 1,
                                                128, 1.f, buf.get(), 128, nullptr, 3),
               std::exception)
      << "3 blocks per query";
}

// ---- bf16_inputs: q and the probabilities rounded to BF16 ---------------------------------------
//
// Both rounded values of a probability (the CPU's, e^{s − M} with the final maximum M, and a
// kernel's, e^{s − m} with its run's maximum m at that tile, later scaled by e^{m − M}) lie within
// 2^-8 of e^{s − M} relatively (half a unit of BF16's 8-bit significand), so they differ by at
// most 2^-7 of it, and an output column c by at most 2^-7 · A_c with A_c = Σ_j p_j·|row_j[c]| (p_j
// the normalized probabilities); the f32 sums' bounds above come on top. RoundingScale gives A_c
// per output (double, q rounded as the kernels round it), 0 on the padding.
std::vector<double> RoundingScale(const AttentionCase& c, const AttentionInputs& in) {
  const int64_t h = c.heads, d = c.head_dim;
  std::vector<double> scale(c.queries * in.out_stride, 0.0);
  for (int64_t m = 0; m < c.queries; ++m) {
    const int64_t n = c.counts[m];
    std::vector<float> q(in.q.begin() + m * in.q_stride, in.q.begin() + m * in.q_stride + h * d);
    cpu::Bf16Round(q.data(), h * d);
    for (int64_t hh = 0; hh < h; ++hh) {
      std::vector<double> s(n);
      double mx = in.sinks[hh];
      for (int64_t j = 0; j < n; ++j) {
        const float* row = in.rows.data() + in.row_ids[m * c.max_rows + j] * in.row_stride;
        double dot = 0;
        for (int64_t k = 0; k < d; ++k) dot += static_cast<double>(q[hh * d + k]) * row[k];
        s[j] = in.scale * dot;
        mx = std::max(mx, s[j]);
      }
      double denom = std::exp(in.sinks[hh] - mx);
      for (int64_t j = 0; j < n; ++j) denom += (s[j] = std::exp(s[j] - mx));
      double* out = scale.data() + m * in.out_stride + hh * d;
      for (int64_t j = 0; j < n; ++j) {
        const float* row = in.rows.data() + in.row_ids[m * c.max_rows + j] * in.row_stride;
        for (int64_t k = 0; k < d; ++k) out[k] += s[j] / denom * std::fabs(row[k]);
      }
    }
  }
  return scale;
}

// got within the CPU's bf16_inputs result by the rounding bound plus the f32 bounds (atol, rtol).
void ExpectWithinRoundingBound(const AttentionCase& c, GpuKernel kernel, float atol, float rtol) {
  ASSERT_TRUE(c.bf16_inputs);
  const AttentionInputs in = MakeInputs(c);
  const std::vector<float> got = kernel(c, in), want = CpuAttention(c, in);
  const std::vector<double> scale = RoundingScale(c, in);
  size_t bad = 0;
  double worst = 0;  // the largest |got − want| over its bound
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = std::ldexp(scale[i], -7) + atol + rtol * std::fabs(want[i]);
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, diff / bound);
    if (!(diff <= bound) && bad++ < 5) {
      ADD_FAILURE() << "output " << i << ": got " << got[i] << ", the CPU " << want[i] << ", bound " << bound;
    }
  }
  std::printf("BF16 q and p, %ld queries x %ld heads x %ld: worst |gpu - cpu| / bound %.3g\n",
              static_cast<long>(c.queries), static_cast<long>(c.heads), static_cast<long>(c.head_dim), worst);
  EXPECT_EQ(bad, 0u);
}

// The kernel rounds q itself: q rounded by the CPU first gives the same bits, the raw q's result
// differs from the f32 form's.
void ExpectRoundsQ(AttentionCase c, GpuKernel kernel) {
  c.bf16_inputs = true;
  const AttentionInputs in = MakeInputs(c);
  AttentionInputs rounded = in;
  cpu::Bf16Round(rounded.q.data(), static_cast<int64_t>(rounded.q.size()));
  const std::vector<float> got = kernel(c, in);
  EXPECT_TRUE(AllEqual(kernel(c, rounded), got, "q rounded by the CPU first"));
  c.bf16_inputs = false;
  EXPECT_FALSE(AllEqual(kernel(c, in), got, "f32 inputs")) << "bf16_inputs changed nothing";
}

// The kernel rounds the probabilities: with sinks above every score the running maximum is the
// sink from the first tile on, so a kernel rounds the very values the CPU rounds, and its result
// lies far closer to the CPU's with bf16_inputs than to the CPU's with only q rounded (measured
// by the mean absolute difference; the outputs are ~e^-8 of the rows).
void ExpectRoundsProbabilities(AttentionCase c, GpuKernel kernel) {
  c.bf16_inputs = true;
  AttentionInputs in = MakeInputs(c);
  std::fill(in.sinks.begin(), in.sinks.end(), 8.f);
  cpu::Bf16Round(in.q.data(), static_cast<int64_t>(in.q.size()));
  const std::vector<float> got = kernel(c, in), rounded = CpuAttention(c, in);
  c.bf16_inputs = false;
  const std::vector<float> unrounded = CpuAttention(c, in);
  double to_rounded = 0, to_unrounded = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    to_rounded += std::fabs(static_cast<double>(got[i]) - rounded[i]);
    to_unrounded += std::fabs(static_cast<double>(got[i]) - unrounded[i]);
  }
  std::printf("BF16 p under dominant sinks: mean |gpu - cpu| %.3g with the CPU's rounding, %.3g without\n",
              to_rounded / got.size(), to_unrounded / got.size());
  EXPECT_LT(to_rounded, 0.25 * to_unrounded);
}

TEST(CudaAttention, Bf16InputsWithinTheRoundingBound) {
  DI_REQUIRE_GPU();
  AttentionCase c{4, 64, 512, 4096, 640, {640, 128, 1, 377}, 0, 0, 0, 4.f, false, 101};
  c.bf16_inputs = true;
  ExpectWithinRoundingBound(c, GpuAttention, kAtol, kRtol);
  AttentionCase odd{3, 5, 100, 120, 64, {33, 5, 64}, 3, 3, 5, 1.f, true, 102};  // scalar paths, −inf sinks
  odd.bf16_inputs = true;
  ExpectWithinRoundingBound(odd, GpuAttention, kAtol, kRtol);
  ExpectRoundsQ({2, 64, 512, 2048, 640, {640, 300}, 0, 0, 0, 2.f, false, 103}, GpuAttention);
  ExpectRoundsProbabilities({2, 64, 512, 2048, 640, {640, 300}, 0, 0, 0, 1.f, false, 104}, GpuAttention);
}

TEST(CudaAttentionSplitBf16, Bf16InputsWithinTheRoundingBound) {
  DI_REQUIRE_GPU();
  for (int blocks : {1, 2, 8}) {
    SCOPED_TRACE(testing::Message() << blocks << " blocks per query");
    AttentionCase c{5, 64, 512, 4096, 640, {640, 128, 1, 377, 576}, 0, 0, 0, 4.f, false, 111};
    c.kv_rows = c.bf16_inputs = true;
    c.blocks_per_query = blocks;
    ExpectWithinRoundingBound(c, GpuAttentionSplitBf16, kSplitAtol, kSplitRtol);
    ExpectDeterministicAndBatchInvariant(c, GpuAttentionSplitBf16);
  }
  // One and two head groups, padded heads, the 16-row step edges, −inf sinks.
  AttentionCase small{8, 3, 64, 200, 70, {0, 1, 15, 16, 17, 63, 64, 65}, 4, 8, 4, 1.f, true, 112};
  small.kv_rows = small.bf16_inputs = true;
  ExpectWithinRoundingBound(small, GpuAttentionSplitBf16, kSplitAtol, kSplitRtol);
  AttentionCase two{4, 20, 256, 400, 300, {300, 0, 1, 257}, 0, 0, 0, 1.f, false, 113};
  two.kv_rows = two.bf16_inputs = true;
  ExpectWithinRoundingBound(two, GpuAttentionSplitBf16, kSplitAtol, kSplitRtol);
  AttentionCase q_case{2, 64, 512, 2048, 640, {640, 300}, 0, 0, 0, 2.f, false, 114};
  q_case.kv_rows = true;
  ExpectRoundsQ(q_case, GpuAttentionSplitBf16);
  AttentionCase p_case{2, 64, 512, 2048, 640, {640, 300}, 0, 0, 0, 1.f, false, 115};
  p_case.kv_rows = true;
  ExpectRoundsProbabilities(p_case, GpuAttentionSplitBf16);
}

// Blocks of 32 heads (two per SM with BF16 inputs) give each head the bits of blocks of 64, in
// both forms and for H = 64 and 70 (a padded last block either way).
TEST(CudaAttentionSplitBf16, HeadsPerBlockKeepTheBits) {
  DI_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    for (int64_t heads : {64, 70}) {
      SCOPED_TRACE(testing::Message() << heads << " heads, bf16_inputs " << bf16);
      AttentionCase c{3, heads, 512, 2048, 640, {640, 200, 1}, 0, 0, 0, 2.f, false, 121};
      c.kv_rows = true;
      c.bf16_inputs = bf16;
      const AttentionInputs in = MakeInputs(c);
      c.heads_per_block = 64;
      const std::vector<float> wide = GpuAttentionSplitBf16(c, in);
      c.heads_per_block = 32;
      EXPECT_TRUE(AllEqual(GpuAttentionSplitBf16(c, in), wide, "32 heads per block"));
    }
  }
  DeviceArray<float> buf(std::vector<float>(4096, 0.f));
  EXPECT_THROW(cuda::AttentionWithSinkSplitBf16(buf.get(), 128, buf.get(), 128, nullptr, nullptr, 0, buf.get(), 1, 1,
                                                128, 1.f, buf.get(), 128, nullptr, 0, false, 16),
               std::exception)
      << "16 heads per block";
}

// Packed rows (kernels/cpu/state_row.h, the state's rows under kv_fp8) decode to exactly the values
// of the f32 rows they encode, so each kernel gives the same bits from either pool: Flash's
// d = 512 (448 e4m3 channels in 7 blocks) and d = 128 with 112 e4m3 channels (a partial second
// block), q and the probabilities in f32 and in BF16.
TEST(CudaAttention, PackedRowsGiveTheBitsOfF32Rows) {
  DI_REQUIRE_GPU();
  for (AttentionCase c : {AttentionCase{5, 64, 512, 1024, 640, {640, 128, 1, 377, 0}, 0, 0, 0, 1.f, false, 91},
                          AttentionCase{4, 20, 128, 300, 200, {200, 33, 129, 64}, 0, 0, 0, 2.f, true, 92}}) {
    c.kv_rows = true;
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "d " << c.head_dim << (bf16 ? ", BF16 inputs" : ", f32 inputs"));
      c.bf16_inputs = bf16;
      const AttentionInputs in = MakeInputs(c);
      const cpu::PackedRowFormat f{c.head_dim, c.head_dim - c.head_dim / 8, 64};
      const int64_t pitch_floats = f.row_pitch() / 4;
      std::vector<float> pool(c.pool_rows * pitch_floats);
      cpu::PackRows(f, in.rows.data(), in.row_stride, c.pool_rows, pool.data(), nullptr, 0);
      DeviceArray<float> q(in.q), rows(pool), sinks(in.sinks);
      DeviceArray<int32_t> ids(in.row_ids), counts(c.counts);
      DeviceArray<float> simt(std::vector<float>(c.queries * in.out_stride, kSentinel));
      DeviceArray<float> split(std::vector<float>(c.queries * in.out_stride, kSentinel));
      cuda::AttentionWithSink(q.get(), in.q_stride, rows.get(), pitch_floats, ids.get(), counts.get(), c.max_rows,
                              sinks.get(), c.queries, c.heads, c.head_dim, in.scale, simt.get(), in.out_stride, nullptr,
                              c.bf16_inputs, &f);
      ASSERT_TRUE(cuda::AttentionSplitBf16Usable(q.get(), in.q_stride, rows.get(), pitch_floats, c.heads, c.head_dim,
                                                 &f));
      cuda::AttentionWithSinkSplitBf16(q.get(), in.q_stride, rows.get(), pitch_floats, ids.get(), counts.get(),
                                       c.max_rows, sinks.get(), c.queries, c.heads, c.head_dim, in.scale, split.get(),
                                       in.out_stride, nullptr, 0, c.bf16_inputs, 0, &f);
      EXPECT_TRUE(AllEqual(Bits(simt.ToHost()), Bits(GpuAttention(c, in)), "SIMT kernel, packed against f32 rows"));
      EXPECT_TRUE(AllEqual(Bits(split.ToHost()), Bits(GpuAttentionSplitBf16(c, in)),
                           "split-BF16 kernel, packed against f32 rows"));
    }
  }
  // What the kernels cannot decode is refused: fp8_end 100, not a multiple of 16.
  DeviceArray<float> buf(std::vector<float>(4096, 0.f));
  const cpu::PackedRowFormat odd{128, 100, 64};
  EXPECT_FALSE(cuda::AttentionSplitBf16Usable(buf.get(), 128, buf.get(), 64, 1, 128, &odd));
  EXPECT_THROW(cuda::AttentionWithSink(buf.get(), 128, buf.get(), 64, nullptr, nullptr, 0, buf.get(), 1, 1, 128, 1.f,
                                       buf.get(), 128, nullptr, false, &odd),
               std::exception);
}

TEST(CudaAttention, NoQueriesLaunchesNothing) {
  DI_REQUIRE_GPU();
  cuda::AttentionWithSink(nullptr, 64, nullptr, 32, nullptr, nullptr, 0, nullptr, 0, 2, 32, 1.f, nullptr, 64,
                          nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace deepinfer::test
