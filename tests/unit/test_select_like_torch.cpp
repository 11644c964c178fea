// SelectLikeTorch keeps exactly the candidates std::partial_sort / std::nth_element keep (the
// algorithms torch's CPU top-k runs), including among equal scores, NaN and −inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/select_like_torch.h"

namespace deepinfer::cpu {
namespace {

TEST(SelectLikeTorch, KeepsWhatTheStandardAlgorithmsKeep) {
  std::mt19937_64 rng(7);
  int64_t heap_cases = 0, introselect_cases = 0;
  for (int it = 0; it < 40000; ++it) {
    const int n = 1 + static_cast<int>(rng() % (it % 3 == 0 ? 3000 : 200));
    int k = 1 + static_cast<int>(rng() % n);
    if (it % 4 == 0) k = 1 + static_cast<int>(rng() % std::max(1, n / 64));
    const int distinct = 1 + static_cast<int>(rng() % 6);
    std::vector<std::pair<float, int32_t>> want(n);
    std::vector<ScoredCandidate> got(n);
    for (int j = 0; j < n; ++j) {
      float s = rng() % 3 == 0 ? std::uniform_real_distribution<float>(-1, 1)(rng)
                               : static_cast<float>(rng() % distinct) * 0.5f;  // many exact ties
      if (rng() % 97 == 0) s = -INFINITY;
      if (rng() % 211 == 0) s = NAN;
      want[j] = {s, j};
      got[j] = {s, j};
    }
    auto greater = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
    };
    if (static_cast<int64_t>(k) * 64 <= n) {
      std::partial_sort(want.begin(), want.begin() + k, want.end(), greater);
      ++heap_cases;
    } else {
      std::nth_element(want.begin(), want.begin() + k - 1, want.end(), greater);
      ++introselect_cases;
    }
    ASSERT_EQ(SelectLikeTorch(got.data(), n, k), k);
    std::vector<int32_t> a, b;
    for (int i = 0; i < k; ++i) a.push_back(want[i].second), b.push_back(got[i].index);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << "case " << it << ": n " << n << ", k " << k;
  }
  EXPECT_GT(heap_cases, 5000);
  EXPECT_GT(introselect_cases, 20000);
}

TEST(SelectLikeTorch, KLargerThanNKeepsEverything) {
  std::vector<ScoredCandidate> c = {{1.f, 0}, {1.f, 1}, {0.f, 2}};
  EXPECT_EQ(SelectLikeTorch(c.data(), 3, 10), 3);
  EXPECT_EQ(SelectLikeTorch(c.data(), 3, 0), 0);
}

}  // namespace
}  // namespace deepinfer::cpu
