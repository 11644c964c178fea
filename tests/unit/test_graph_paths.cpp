// LongestKernelChain: the launches a captured graph runs one after another at least; and
// DEEPINFER_PDL_MAX_TOKENS's parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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

TEST(GraphPaths, ThePathListsTheKernelsOfTheLongestChainInOrder) {
  // 0 forks into 1-2-3 and 4, joined at 5, then 6; node 2 is a copy. Kernels on 0 1 3 5 6 (five)
  // outnumber those on 0 4 5 6 (four).
  const std::vector<bool> kinds = {true, true, false, true, true, true, true};
  const Edges edges = {{5, 6}, {0, 4}, {4, 5}, {0, 1}, {1, 2}, {2, 3}, {3, 5}};
  EXPECT_EQ(LongestKernelPath(kinds, edges), (std::vector<size_t>{0, 1, 3, 5, 6}));
  // With 1 and 3 copies too, the short branch's kernel wins: 0 4 5 6.
  const std::vector<bool> fewer = {true, false, false, false, true, true, true};
  EXPECT_EQ(LongestKernelPath(fewer, edges), (std::vector<size_t>{0, 4, 5, 6}));
  EXPECT_TRUE(LongestKernelPath({}, {}).empty());
  EXPECT_TRUE(LongestKernelPath({false, false}, {{0, 1}}).empty());
}

TEST(GraphPaths, RejectsCyclesAndNodesThatAreNotThere) {
  EXPECT_THROW(LongestKernelChain({true, true}, {{0, 1}, {1, 0}}), Error);
  EXPECT_THROW(LongestKernelChain({true, true}, {{0, 2}}), Error);
}

// DEEPINFER_PDL_MAX_TOKENS: the default when unset or empty, a token count otherwise (0: no graph
// gets programmatic edges); anything else is an error that names the variable and the value.
TEST(PdlSwitch, MaxTokensAreACountOrAnErrorNamingTheVariable) {
  EXPECT_EQ(ParsePdlMaxTokens(nullptr), kDefaultPdlMaxTokens);
  EXPECT_EQ(ParsePdlMaxTokens(""), kDefaultPdlMaxTokens);
  EXPECT_EQ(ParsePdlMaxTokens("0"), 0);
  EXPECT_EQ(ParsePdlMaxTokens("64"), 64);
  for (const char* bad : {"-1", "64k", " 8", "on", "9999999999"}) {
    try {
      ParsePdlMaxTokens(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DEEPINFER_PDL_MAX_TOKENS"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deepinfer
