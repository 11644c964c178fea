// bench/phases.h on the device: a short chain with phases of no bytes, small and large ones, every
// way checked against the plain read's word sum and step count (a phase skipped, run twice or
// overlapping its neighbour changes one of them), then timed.
#include <gtest/gtest.h>

#include "bench/phases.h"
#include "gpu_test_util.h"

namespace deepinfer::test {
namespace {

TEST(Phases, EveryWayReadsTheChainOncePhaseByPhase) {
  DI_REQUIRE_GPU();
  const std::vector<bench::Phase> chain = {
      {"a", 0}, {"b", 4096}, {"c", int64_t{3} << 20}, {"d", 0}, {"e", 256}, {"f", int64_t{9} << 20}};
  const bench::PhasesReport r = bench::TimePhases(0, chain, "test", 3);
  EXPECT_EQ(r.phases, 6);
  EXPECT_EQ(r.bytes, 4096 + (int64_t{3} << 20) + 256 + (int64_t{9} << 20));
  ASSERT_EQ(r.ways.size(), 4u);
  for (const bench::PhasesTiming& t : r.ways) {
    EXPECT_TRUE(t.sums_agree) << t.way;
    EXPECT_GT(t.seconds, 0.0) << t.way;
  }
  EXPECT_EQ(r.ways[0].way, "graph_pdl");
  EXPECT_GT(r.ways[2].grid, 0);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major >= 9) EXPECT_EQ(r.programmatic_edges, 5) << "a one-stream chain of 6 kernels: 5 chain links";
}

}  // namespace
}  // namespace deepinfer::test
