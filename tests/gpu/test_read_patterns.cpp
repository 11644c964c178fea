// bench/read_patterns.h on the device: every standard pattern, scaled down to a few MiB of random
// bytes, reads each byte once (its word sum equals the host's), row-major and tiled, on its own
// grid and on grids capped at 1 and 7 blocks (the strided walks and the runs then cross many items,
// and the runs' ring many item boundaries). A wrong address, a skipped or doubled unit, or a stage
// reused before its copy landed changes the sum. Then the timing end to end at a small size, the
// small reads up to the largest pattern's bytes.
#include <gtest/gtest.h>

#include <vector>

#include "bench/read_patterns.h"
#include "gpu_test_util.h"

namespace deepinfer::test {
namespace {

TEST(ReadPatterns, EveryPatternReadsEveryByteOnce) {
  DI_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const bench::ReadPattern& full : bench::StandardReadPatterns()) {
    const bench::ReadPattern p = bench::ScaledDown(full, int64_t{6} << 20);
    ASSERT_GE(p.Items(), 3) << p.name;
    const std::vector<uint8_t> bytes = RandomBytes(static_cast<size_t>(p.Bytes()), seed++);
    const uint64_t want = bench::WordSum(bytes.data(), bytes.size());
    for (const int64_t max_blocks : {int64_t{0}, int64_t{1}, int64_t{7}}) {
      EXPECT_EQ(bench::ReadPatternSumForTesting(0, p, bytes, max_blocks), want)
          << p.name << " (" << p.Items() << " items) on at most " << max_blocks << " blocks";
    }
  }
}

TEST(ReadPatterns, PlainReadReadsEveryByteOnce) {
  DI_REQUIRE_GPU();
  for (const size_t n : {size_t{16}, size_t{4096} + 48, size_t{3} << 20}) {
    const std::vector<uint8_t> bytes = RandomBytes(n, n);
    EXPECT_EQ(bench::PlainReadSumForTesting(0, bytes), bench::WordSum(bytes.data(), bytes.size())) << n;
  }
}

TEST(ReadPatterns, TimingChecksEachPatternThenTimesIt) {
  DI_REQUIRE_GPU();
  std::vector<bench::ReadPattern> patterns;
  for (const bench::ReadPattern& p : bench::StandardReadPatterns()) patterns.push_back(bench::ScaledDown(p, 64 << 20));
  const bench::ReadPatternsReport r = bench::TimeReadPatterns(0, patterns, 2);
  ASSERT_EQ(r.patterns.size(), patterns.size());
  EXPECT_GT(r.plain_read_bytes_per_s, 0.0);
  EXPECT_GT(r.copy.bytes_per_s, 0.0);
  ASSERT_FALSE(r.small_reads.empty());
  for (const bench::SmallReadTiming& t : r.small_reads) {
    EXPECT_LE(t.bytes, int64_t{64} << 20);
    EXPECT_GT(t.bytes_per_s, 0.0) << t.bytes;
  }
  for (const bench::ReadTiming& t : r.patterns) {
    EXPECT_TRUE(t.sums_agree) << t.pattern.name;
    EXPECT_GT(t.bytes_per_s, 0.0) << t.pattern.name;
    EXPECT_GE(t.blocks_per_sm, 1) << t.pattern.name;
    EXPECT_GE(t.grid, 1) << t.pattern.name;
  }
}

}  // namespace
}  // namespace deepinfer::test
