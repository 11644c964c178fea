// cuda::IndexerTopK against cpu::IndexerTopK (selected sets, on inputs whose k-th and (k+1)-th
// scores are well apart), and against a host model of the GPU tie rule (score descending, then
// position ascending) on inputs full of exactly tied scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cuda/indexer.h"

namespace deepinfer::test {
namespace {

constexpr int32_t kUnusedId = 0x7fffffff;  // key ids past num_visible[m]: must not be read
constexpr int32_t kUnwritten = 0x5a5a5a5a;  // initial `selected`: every slot must be rewritten

struct IndexerProblem {
  int64_t queries = 0, heads = 0, head_dim = 0, max_keys = 0, top_k = 0;
  int64_t q_stride = 0, w_stride = 0, key_stride = 0;
  std::vector<int64_t> visible, candidates;  // per query
  std::vector<float> q, w, keys;             // keys: a pool of queries·max_keys rows
  std::vector<int32_t> key_ids;              // [queries, max_keys]
};

// Random problem: q and keys uniform in [−1, 1], weights uniform in [w_lo, w_hi]. Query m ranks
// the pool rows m·max_keys … (m+1)·max_keys − 1 in a shuffled order (so the gather matters and
// queries do not share rows).
IndexerProblem MakeProblem(int64_t heads, int64_t head_dim, int64_t max_keys, int64_t top_k,
                           std::vector<int64_t> visible, std::vector<int64_t> candidates, uint64_t seed,
                           float w_lo, float w_hi, int64_t pad = 0) {
  IndexerProblem p;
  p.queries = static_cast<int64_t>(visible.size());
  p.heads = heads, p.head_dim = head_dim, p.max_keys = max_keys, p.top_k = top_k;
  p.q_stride = heads * head_dim + pad, p.w_stride = heads + pad, p.key_stride = head_dim + pad;
  p.visible = std::move(visible), p.candidates = std::move(candidates);
  p.q = RandomFloats(p.queries * p.q_stride, seed);
  p.w = RandomFloats(p.queries * p.w_stride, seed + 1, w_lo, w_hi);
  p.keys = RandomFloats(p.queries * max_keys * p.key_stride, seed + 2);
  p.key_ids.assign(p.queries * max_keys, kUnusedId);
  std::mt19937_64 rng(seed + 3);
  for (int64_t m = 0; m < p.queries; ++m) {
    std::vector<int32_t> perm(max_keys);
    std::iota(perm.begin(), perm.end(), static_cast<int32_t>(m * max_keys));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + p.visible[m], p.key_ids.begin() + m * max_keys);
  }
  return p;
}

const float* KeyRow(const IndexerProblem& p, int64_t m, int64_t j) {
  return p.keys.data() + static_cast<int64_t>(p.key_ids[m * p.max_keys + j]) * p.key_stride;
}

// Scores of query m's visible candidates in double.
std::vector<double> HostScores(const IndexerProblem& p, int64_t m) {
  std::vector<double> s(p.visible[m], 0.0);
  for (int64_t j = 0; j < p.visible[m]; ++j) {
    const float* key = KeyRow(p, m, j);
    for (int64_t h = 0; h < p.heads; ++h) {
      const float* qh = p.q.data() + m * p.q_stride + h * p.head_dim;
      double dot = 0;
      for (int64_t k = 0; k < p.head_dim; ++k) dot += double(qh[k]) * key[k];
      s[j] += std::max(dot, 0.0) * p.w[m * p.w_stride + h];
    }
  }
  return s;
}

// Candidate positions in the GPU's order: score descending, then position ascending.
std::vector<int32_t> RankOrder(const std::vector<double>& s) {
  std::vector<int32_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  return order;
}

// The GPU rule on host scores: the first min(top_k, visible) of RankOrder, ascending.
std::vector<int32_t> HostRuleSelect(const std::vector<double>& s, int64_t top_k) {
  std::vector<int32_t> order = RankOrder(s);
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(top_k)));
  std::sort(order.begin(), order.end());
  return order;
}

// Relative gap between the k-th and (k+1)-th largest scores; +inf when nothing is left out.
double BoundaryGap(const std::vector<double>& s, int64_t top_k) {
  const int64_t k = std::min<int64_t>(top_k, static_cast<int64_t>(s.size()));
  if (k == 0 || k == static_cast<int64_t>(s.size())) return std::numeric_limits<double>::infinity();
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const double scale = std::max(std::fabs(sorted[k - 1]), std::fabs(sorted[k]));
  return scale == 0 ? 0.0 : (sorted[k - 1] - sorted[k]) / scale;
}

// With positive weights a score is positively homogeneous in its key row, so scaling the rows
// ranked below the top k by 0.999 leaves the top k in place and opens a relative gap of >= 1e-3
// below the k-th score (when that score is positive).
void WidenBoundaryGap(IndexerProblem& p, int64_t m) {
  const std::vector<int32_t> order = RankOrder(HostScores(p, m));
  const int64_t k = std::min<int64_t>(p.top_k, p.visible[m]);
  for (size_t r = static_cast<size_t>(k); r < order.size(); ++r) {
    float* key = p.keys.data() + static_cast<int64_t>(p.key_ids[m * p.max_keys + order[r]]) * p.key_stride;
    for (int64_t i = 0; i < p.head_dim; ++i) key[i] *= 0.999f;
  }
}

// cpu::IndexerTopK on query m's gathered keys; ascending.
std::vector<int32_t> CpuSelect(const IndexerProblem& p, int64_t m) {
  const int64_t nv = p.visible[m], dk = p.head_dim;
  std::vector<float> keys(nv * dk), scratch(p.heads * nv + 1);
  for (int64_t j = 0; j < nv; ++j) std::copy(KeyRow(p, m, j), KeyRow(p, m, j) + dk, keys.data() + j * dk);
  std::vector<int32_t> selected(std::max<int64_t>(p.top_k, 1));
  const int64_t count = cpu::IndexerTopK(p.q.data() + m * p.q_stride, p.w.data() + m * p.w_stride, p.heads, dk,
                                         keys.data(), nv, p.candidates[m], p.top_k, scratch.data(), selected.data());
  selected.resize(count);
  std::sort(selected.begin(), selected.end());
  return selected;
}

struct GpuResult {
  std::vector<int32_t> selected;  // [queries, top_k]
  std::vector<int32_t> counts;
  std::vector<float> scores;      // [queries, max_keys]
  std::vector<int32_t> Row(const IndexerProblem& p, int64_t m) const {
    return std::vector<int32_t>(selected.begin() + m * p.top_k, selected.begin() + (m + 1) * p.top_k);
  }
};

GpuResult RunGpu(const IndexerProblem& p, bool bf16_exact = false) {
  std::vector<int32_t> visible(p.visible.begin(), p.visible.end());
  DeviceArray<float> q(p.q), w(p.w), keys(p.keys);
  DeviceArray<int32_t> ids(p.key_ids), nv(visible);
  DeviceArray<float> scores(cuda::IndexerScratchFloats(p.queries, p.max_keys));
  DeviceArray<int32_t> selected(std::vector<int32_t>(p.queries * p.top_k, kUnwritten));
  DeviceArray<int32_t> counts(std::vector<int32_t>(p.queries, kUnwritten));
  cuda::IndexerTopK(q.get(), p.q_stride, w.get(), p.w_stride, p.queries, p.heads, p.head_dim, keys.get(),
                    p.key_stride, ids.get(), p.max_keys, nv.get(), p.top_k, scores.get(), selected.get(),
                    counts.get(), nullptr, bf16_exact);
  return {selected.ToHost(), counts.ToHost(), scores.ToHost()};
}

// Checks the shape of a GPU row (count, ascending positions, −1 padding) and returns its picks.
std::vector<int32_t> CheckedPicks(const IndexerProblem& p, const GpuResult& got, int64_t m) {
  const int64_t k = std::min(p.top_k, p.visible[m]);
  EXPECT_EQ(got.counts[m], k) << "query " << m;
  const std::vector<int32_t> row = got.Row(p, m);
  for (int64_t i = 0; i < p.top_k; ++i) {
    if (i < k) {
      EXPECT_TRUE(row[i] >= 0 && row[i] < p.visible[m]) << "query " << m << " slot " << i << ": " << row[i];
      if (i > 0) EXPECT_LT(row[i - 1], row[i]) << "query " << m << ": not ascending at " << i;
    } else {
      EXPECT_EQ(row[i], -1) << "query " << m << " slot " << i;
    }
  }
  return std::vector<int32_t>(row.begin(), row.begin() + std::min<int64_t>(k, p.top_k));
}

// Scores: per candidate an ordered fp32 dot product over dk (<= 128 terms of magnitude <= 1) per
// head, then an ordered weighted sum over heads; vs the exact (double) value the error is a few
// ulps of the largest partial sums, so 1e-5 relative to the largest |score| bounds it.
void ExpectScoresClose(const IndexerProblem& p, const GpuResult& got, int64_t m, const std::vector<double>& want) {
  double scale = 1e-30;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  std::vector<float> g(got.scores.begin() + m * p.max_keys, got.scores.begin() + m * p.max_keys + p.visible[m]);
  std::vector<float> wf(want.begin(), want.end());
  EXPECT_TRUE(AllClose(g, wf, static_cast<float>(1e-5 * scale), 1e-5f, "scores of query " + std::to_string(m)));
}

// Every query: the boundary gap is clear, the GPU set equals the CPU's and the host rule's.
void ExpectSetsMatch(const IndexerProblem& p, const GpuResult& got) {
  for (int64_t m = 0; m < p.queries; ++m) {
    const std::vector<double> s = HostScores(p, m);
    // Distinct boundary scores: sets then agree despite different summation orders (score
    // rounding ~1e-6 relative).
    ASSERT_GT(BoundaryGap(s, p.top_k), 1e-4) << "query " << m << ": test input has a near tie at the boundary";
    ExpectScoresClose(p, got, m, s);
    const std::vector<int32_t> picks = CheckedPicks(p, got, m);
    EXPECT_TRUE(AllEqual(picks, CpuSelect(p, m), "vs CPU, query " + std::to_string(m)));
    EXPECT_TRUE(AllEqual(picks, HostRuleSelect(s, p.top_k), "vs host rule, query " + std::to_string(m)));
  }
}

TEST(CudaIndexer, SmallShapes) {
  DI_REQUIRE_GPU();
  // Hi=5, dk=33 (a partial k chunk), padded strides, visible counts around the 64-row tile.
  IndexerProblem p = MakeProblem(5, 33, 150, 16, {150, 63, 64, 65, 40}, {150, 63, 90, 65, 45}, 101, 0.1f, 1.f, 3);
  for (int64_t m = 0; m < p.queries; ++m) WidenBoundaryGap(p, m);
  ExpectSetsMatch(p, RunGpu(p));
  // Hi=64 (full head tile), dk=128, one query.
  IndexerProblem one = MakeProblem(64, 128, 300, 40, {300}, {300}, 102, 0.1f, 1.f);
  WidenBoundaryGap(one, 0);
  ExpectSetsMatch(one, RunGpu(one));
}

TEST(CudaIndexer, MixedSignWeights) {
  DI_REQUIRE_GPU();
  // Weights of both signs (as in the model); no homogeneity trick, so draw seeds until every
  // query's boundary gap is clear (deterministic: the first such seed).
  for (uint64_t seed = 200; seed < 260; ++seed) {
    IndexerProblem p = MakeProblem(8, 64, 400, 32, {400, 250, 100}, {400, 300, 100}, seed, -1.f, 1.f);
    bool clear = true;
    for (int64_t m = 0; m < p.queries; ++m) clear = clear && BoundaryGap(HostScores(p, m), p.top_k) > 1e-4;
    if (!clear) continue;
    ExpectSetsMatch(p, RunGpu(p));
    return;
  }
  FAIL() << "no seed gave clear boundaries";
}

TEST(CudaIndexer, InvisibleCandidatesAndLargeTopK) {
  DI_REQUIRE_GPU();
  // top_k below visible < candidates: invisible candidates never picked.
  IndexerProblem p = MakeProblem(16, 128, 1000, 64, {700, 1000, 65}, {1000, 1000, 900}, 301, 0.1f, 1.f);
  for (int64_t m = 0; m < p.queries; ++m) WidenBoundaryGap(p, m);
  ExpectSetsMatch(p, RunGpu(p));
  // top_k >= candidates (and > visible): every visible one; none visible gives count 0.
  IndexerProblem all = MakeProblem(16, 128, 200, 512, {100, 0, 37, 200}, {150, 10, 37, 200}, 302, -1.f, 1.f);
  const GpuResult got = RunGpu(all);
  for (int64_t m = 0; m < all.queries; ++m) {
    std::vector<int32_t> everything(all.visible[m]);
    std::iota(everything.begin(), everything.end(), 0);
    const std::vector<int32_t> picks = CheckedPicks(all, got, m);
    EXPECT_TRUE(AllEqual(picks, everything, "all visible, query " + std::to_string(m)));
    EXPECT_TRUE(AllEqual(CpuSelect(all, m), everything, "CPU all visible, query " + std::to_string(m)));
  }
}

TEST(CudaIndexer, ZeroTopK) {
  DI_REQUIRE_GPU();
  IndexerProblem p = MakeProblem(4, 16, 50, 0, {50, 0}, {50, 0}, 401, 0.1f, 1.f);
  const GpuResult got = RunGpu(p);
  EXPECT_EQ(got.counts, (std::vector<int32_t>{0, 0}));
}

// Many exactly equal scores. Dims 0…7 carry heads 0, 1 (weights > 0) and dims 8…15 heads 2, 3
// (weights < 0), all q entries positive there and zero elsewhere. A key's halves have fixed
// signs per class: (+, −) scores > 0; (−, −) scores exactly 0 (every ReLU is 0); (−, +) scores
// < 0. With fewer positive keys than top_k the boundary falls among the zeros: the GPU must take
// every positive key and the lowest-position zero keys.
TEST(CudaIndexer, ExactZeroTiesFollowTheGpuRule) {
  DI_REQUIRE_GPU();
  constexpr int64_t kHeads = 4, kDim = 16, kMaxKeys = 300, kTopK = 64;
  IndexerProblem p = MakeProblem(kHeads, kDim, kMaxKeys, kTopK, {300, 200, 150}, {300, 260, 150}, 501, 0.1f, 1.f);
  std::mt19937_64 rng(502);
  std::uniform_real_distribution<float> mag(0.1f, 1.f);
  std::uniform_int_distribution<int> cls(0, 9);
  for (int64_t m = 0; m < p.queries; ++m) {
    float* q = p.q.data() + m * p.q_stride;
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kDim; ++i) q[h * kDim + i] = ((h < 2) == (i < 8)) ? mag(rng) : 0.f;
    }
    for (int64_t h = 2; h < kHeads; ++h) p.w[m * p.w_stride + h] = -mag(rng);
    for (int64_t j = 0; j < p.visible[m]; ++j) {
      const int c = cls(rng);  // 10% positive, 50% zero, 40% negative
      const float lo_sign = c == 0 ? 1.f : -1.f, hi_sign = c >= 6 ? 1.f : -1.f;
      float* key = p.keys.data() + static_cast<int64_t>(p.key_ids[m * kMaxKeys + j]) * p.key_stride;
      for (int64_t i = 0; i < kDim; ++i) key[i] = (i < 8 ? lo_sign : hi_sign) * mag(rng);
    }
  }
  const GpuResult got = RunGpu(p);
  for (int64_t m = 0; m < p.queries; ++m) {
    const std::vector<double> s = HostScores(p, m);
    std::vector<int32_t> positive, zero;
    for (int64_t j = 0; j < p.visible[m]; ++j) {
      if (s[j] > 0) positive.push_back(static_cast<int32_t>(j));
      if (s[j] == 0) zero.push_back(static_cast<int32_t>(j));
    }
    const int64_t k = std::min(kTopK, p.visible[m]);
    ASSERT_LT(static_cast<int64_t>(positive.size()), k) << "query " << m;
    ASSERT_GE(static_cast<int64_t>(positive.size() + zero.size()), k) << "query " << m;
    // The rule: all strictly greater ones, then the lowest-position tied ones.
    std::vector<int32_t> want = positive;
    want.insert(want.end(), zero.begin(), zero.begin() + (k - static_cast<int64_t>(positive.size())));
    std::sort(want.begin(), want.end());
    const std::vector<int32_t> picks = CheckedPicks(p, got, m);
    EXPECT_TRUE(AllEqual(picks, want, "tie rule, query " + std::to_string(m)));
    EXPECT_TRUE(AllEqual(picks, HostRuleSelect(s, kTopK), "host rule, query " + std::to_string(m)));
    for (int64_t j = 0; j < p.visible[m]; ++j) {
      if (s[j] == 0) EXPECT_EQ(got.scores[m * kMaxKeys + j], 0.f) << "query " << m << " candidate " << j;
    }
    // The CPU breaks the tie its own way, but must agree on the positives and on how many zeros.
    const std::vector<int32_t> cpu = CpuSelect(p, m);
    ASSERT_EQ(static_cast<int64_t>(cpu.size()), k) << "query " << m;
    int64_t cpu_positive = 0, cpu_zero = 0;
    for (int32_t j : cpu) cpu_positive += s[j] > 0, cpu_zero += s[j] == 0;
    EXPECT_EQ(cpu_positive, static_cast<int64_t>(positive.size())) << "query " << m;
    EXPECT_EQ(cpu_zero, k - static_cast<int64_t>(positive.size())) << "query " << m;
  }
}

// Flash: Hi = 64, dk = 128, top_k = 512, up to 20000 candidates.
IndexerProblem FlashProblem() {
  IndexerProblem p =
      MakeProblem(64, 128, 20000, 512, {8192, 20000, 5000, 300}, {8192, 20000, 8000, 300}, 601, 0.1f, 1.f);
  for (int64_t m = 0; m < p.queries; ++m) WidenBoundaryGap(p, m);
  return p;
}

TEST(CudaIndexer, FlashShapes) {
  DI_REQUIRE_GPU();
  const IndexerProblem p = FlashProblem();
  ExpectSetsMatch(p, RunGpu(p));
}

TEST(CudaIndexer, Deterministic) {
  DI_REQUIRE_GPU();
  const IndexerProblem p = FlashProblem();
  const GpuResult a = RunGpu(p), b = RunGpu(p);
  EXPECT_TRUE(AllEqual(a.selected, b.selected, "selected"));
  EXPECT_TRUE(AllEqual(a.counts, b.counts, "counts"));
  for (int64_t m = 0; m < p.queries; ++m) {
    const auto first = a.scores.begin() + m * p.max_keys;
    EXPECT_TRUE(AllEqual(std::vector<float>(first, first + p.visible[m]),
                         std::vector<float>(b.scores.begin() + m * p.max_keys,
                                            b.scores.begin() + m * p.max_keys + p.visible[m]),
                         "scores"));
  }
}

// q's heads and the key rows as Numerics::indexer_fp4 leaves them: Hadamard-rotated, then e2m1
// codes times power-of-two scales per 32 (values exact in BF16).
void RoundLikeTheIndexer(IndexerProblem& p) {
  auto round_rows = [&](std::vector<float>& v, int64_t rows, int64_t stride) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < stride / p.head_dim; ++h) {
        float* x = v.data() + r * stride + h * p.head_dim;
        cpu::Hadamard(x, p.head_dim);
        cpu::Fp4RoundTrip(x, p.head_dim, 32);
      }
    }
  };
  round_rows(p.q, p.queries, p.q_stride);
  round_rows(p.keys, static_cast<int64_t>(p.keys.size()) / p.key_stride, p.key_stride);
}

// On such inputs the tensor-core scoring (bf16_exact) gives the SIMT kernel's scores bit for bit
// (every partial sum of a dot product is exact in f32: docs/performance.md, version 50), and so the
// same picks; d 128 with 64 heads (Flash) and d 64 with 20 heads; the tensor-core kernel ran.
TEST(CudaIndexer, TensorCoresGiveTheSimtBitsOnFp4Rows) {
  DI_REQUIRE_GPU();
  for (const auto& [heads, dk] : {std::pair<int64_t, int64_t>{64, 128}, std::pair<int64_t, int64_t>{20, 64}}) {
    SCOPED_TRACE(testing::Message() << heads << " heads, dk " << dk);
    IndexerProblem p = MakeProblem(heads, dk, 3000, 512, {3000, 1, 700, 64, 2999}, {3000, 1, 800, 64, 2999},
                                   71 + dk, 0.1f, 1.f);
    RoundLikeTheIndexer(p);
    const uint64_t launches = cuda::IndexerMmaLaunchesForTesting();
    const GpuResult mma = RunGpu(p, /*bf16_exact=*/true);
    EXPECT_GT(cuda::IndexerMmaLaunchesForTesting(), launches) << "the tensor-core scoring did not run";
    const GpuResult simt = RunGpu(p, /*bf16_exact=*/false);
    for (int64_t m = 0; m < p.queries; ++m) {
      const auto at = [&](const GpuResult& r) {
        return Bits(std::vector<float>(r.scores.begin() + m * p.max_keys,
                                       r.scores.begin() + m * p.max_keys + p.visible[m]));
      };
      EXPECT_TRUE(AllEqual(at(mma), at(simt), "scores of query " + std::to_string(m)));
    }
    EXPECT_TRUE(AllEqual(mma.selected, simt.selected, "selected"));
    EXPECT_TRUE(AllEqual(mma.counts, simt.counts, "counts"));
  }
  // Keys at a stride of 129 floats (not whole float4s) take the SIMT kernel.
  IndexerProblem odd = MakeProblem(8, 128, 100, 16, {100}, {100}, 81, 0.1f, 1.f, /*pad=*/1);
  RoundLikeTheIndexer(odd);
  const uint64_t launches = cuda::IndexerMmaLaunchesForTesting();
  const GpuResult r = RunGpu(odd, true);
  EXPECT_EQ(cuda::IndexerMmaLaunchesForTesting(), launches);
  EXPECT_EQ(r.counts[0], 16);
}

TEST(CudaIndexer, NoQueriesLaunchesNothing) {
  DI_REQUIRE_GPU();
  cuda::IndexerTopK(nullptr, 64, nullptr, 4, 0, 4, 16, nullptr, 16, nullptr, 100, nullptr, 8, nullptr, nullptr,
                    nullptr, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace deepinfer::test
