// LongestKernelChain: the launches a captured graph runs one after another at least.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/error.h"
#include "device/graph_paths.h"

namespace deepinfer {
namespace {

using Edges = std::vector<std::pair<size_t, size_t>>;

TEST(GraphPaths, AChainCountsItsKernelsNotItsCopies) {
  // copy -> k -> k -> copy -> k, as a one-stream capture with an upload in it.
  const std::vector<bool> kinds = {false, true, true, false, true};
  EXPECT_EQ(LongestKernelChain(kinds, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}), 3u);
  EXPECT_EQ(LongestKernelChain({}, {}), 0u);
  EXPECT_EQ(LongestKernelChain({false, false}, {{0, 1}}), 0u);
  EXPECT_EQ(LongestKernelChain({true, true, true}, {}), 1u);  // three roots, no edges
}

TEST(GraphPaths, AForkAndJoinCountsTheLongerBranchOnce) {
  // 0 forks into 1-2-3 and 4, joined at 5, then 6: the longest chain is 0 1 2 3 5 6, whatever
  // the order of the edges.
  const std::vector<bool> kinds(7, true);
  Edges edges = {{0, 1}, {1, 2}, {2, 3}, {3, 5}, {0, 4}, {4, 5}, {5, 6}};
  EXPECT_EQ(LongestKernelChain(kinds, edges), 6u);
  std::reverse(edges.begin(), edges.end());
  EXPECT_EQ(LongestKernelChain(kinds, edges), 6u);
  // The redundant edge a capture may add from the fork point to the join changes nothing.
  edges.push_back({0, 5});
  EXPECT_EQ(LongestKernelChain(kinds, edges), 6u);
  // Copies on the long branch: the short branch of kernels is then the longer chain of kernels.
  const std::vector<bool> copies_on_the_long_branch = {true, false, false, false, true, true, true};
  EXPECT_EQ(LongestKernelChain(copies_on_the_long_branch, edges), 4u);
}

TEST(GraphPaths, RejectsCyclesAndNodesThatAreNotThere) {
  EXPECT_THROW(LongestKernelChain({true, true}, {{0, 1}, {1, 0}}), Error);
  EXPECT_THROW(LongestKernelChain({true, true}, {{0, 2}}), Error);
}

}  // namespace
}  // namespace deepinfer
