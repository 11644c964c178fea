// The GPU indexer with tie resolution against cpu::IndexerTopK on inputs whose top-k boundary
// falls inside a large group of exactly-zero scores (ReLU of negative products): the selected
// sets must be identical, for partial-sort and nth_element sized problems and for prompt queries
// ranking more candidates than they see.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/indexer_ties.h"

namespace deepinfer {
namespace {

using test::DeviceArray;

struct Case {
  int64_t visible, candidates, top_k;
  uint64_t positive_every;  // one key in this many scores above zero
};

TEST(CudaIndexerTies, TiedBoundaryFollowsTheCpuChoice) {
  DI_REQUIRE_GPU();
  const int64_t heads = 4, dk = 64;
  // Ties at the boundary for all but the last case; heap-select sized (k·64 <= candidates) and
  // nth_element sized problems, and prompt queries with more candidates than visible rows.
  const std::vector<Case> cases = {{75, 75, 16, 8},      {75, 150, 16, 8},      {300, 300, 4, 200},
                                   {5000, 5000, 64, 500}, {4000, 8000, 32, 400}, {200, 200, 150, 8},
                                   {640, 700, 10, 4}};
  const int64_t m = static_cast<int64_t>(cases.size());
  int64_t max_keys = 0, max_candidates = 0, max_topk = 0;
  for (const Case& c : cases) {
    max_keys = std::max(max_keys, c.visible);
    max_candidates = std::max(max_candidates, c.candidates);
    max_topk = std::max(max_topk, c.top_k);
  }
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> q(m * heads * dk), w(m * heads), keys(m * max_keys * dk);
  std::vector<int32_t> ids(m * max_keys), visible(m), candidates(m);
  for (int64_t i = 0; i < m; ++i) {
    // Every head of query i points along u; a few of its keys along +u (distinct positive
    // scores), the rest along −u (every product negative: score exactly 0).
    std::vector<float> u(dk);
    for (float& x : u) x = normal(rng);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t e = 0; e < dk; ++e) q[(i * heads + h) * dk + e] = u[e];
      w[i * heads + h] = 0.5f + static_cast<float>(rng() % 100) / 100.f;
    }
    const Case& c = cases[i];
    for (int64_t j = 0; j < c.visible; ++j) {
      const float sign = rng() % c.positive_every == 0 ? 1.f : -1.f;
      const float scale = 0.1f + static_cast<float>(rng() % 100000) / 1000.f;
      for (int64_t e = 0; e < dk; ++e) keys[(i * max_keys + j) * dk + e] = sign * scale * u[e];
      ids[i * max_keys + j] = static_cast<int32_t>(i * max_keys + j);
    }
    visible[i] = static_cast<int32_t>(c.visible);
    candidates[i] = static_cast<int32_t>(c.candidates);
  }
  DeviceArray<float> dq(q), dw(w), dkeys(keys), dscores(m * max_keys);
  DeviceArray<int32_t> dids(ids), dvis(visible), dcand(candidates), dsel(m * max_topk), dcount(m);
  DeviceArray<cpu::ScoredCandidate> dscratch(m * max_candidates);
  // One call per distinct top_k (the op's top_k is per call): run each case as a batch of one.
  for (int64_t i = 0; i < m; ++i) {
    const Case& c = cases[i];
    cuda::IndexerTopK(dq.get() + i * heads * dk, heads * dk, dw.get() + i * heads, heads, 1, heads, dk, dkeys.get(),
                      dk, dids.get() + i * max_keys, max_keys, dvis.get() + i, c.top_k, dscores.get() + i * max_keys,
                      dsel.get() + i * max_topk, dcount.get() + i, nullptr);
    cuda::IndexerTiesLikeTorch(dscores.get() + i * max_keys, max_keys, dvis.get() + i, dcand.get() + i, 1, c.top_k,
                               dsel.get() + i * max_topk, dcount.get() + i, dscratch.get() + i * max_candidates,
                               max_candidates, nullptr);
  }
  const std::vector<int32_t> sel = dsel.ToHost(), count = dcount.ToHost();
  for (int64_t i = 0; i < m; ++i) {
    const Case& c = cases[i];
    std::vector<float> scratch(heads * c.visible);
    std::vector<int32_t> want(c.top_k);
    const int64_t n = cpu::IndexerTopK(q.data() + i * heads * dk, w.data() + i * heads, heads, dk,
                                       keys.data() + i * max_keys * dk, c.visible, c.candidates, c.top_k,
                                       scratch.data(), want.data());
    want.resize(n);
    std::sort(want.begin(), want.end());
    std::vector<int32_t> got(sel.begin() + i * max_topk, sel.begin() + i * max_topk + count[i]);
    EXPECT_EQ(got, want) << "case " << i << ": visible " << c.visible << ", candidates " << c.candidates
                         << ", top_k " << c.top_k;
  }
}

}  // namespace
}  // namespace deepinfer
