// The host side of bench/read_patterns.h (no device needed): the patterns' rules, the standard set
// at the Flash shapes, scaling down, the word sum, JSON, and the CPU-only build's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/read_patterns.h"
#include "device/cuda_memory.h"

namespace deepinfer::bench {
namespace {

// The error ValidateReadPattern raises for `p`, or "" where it accepts it.
std::string Rejection(const ReadPattern& p) {
  try {
    ValidateReadPattern(p);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

ReadPattern Head() { return StandardReadPatterns().front(); }

TEST(ReadPatterns, StandardSetIsValidAtTheFlashShapes) {
  const std::vector<ReadPattern> all = StandardReadPatterns();
  std::set<std::string> names;
  for (const ReadPattern& p : all) {
    EXPECT_EQ(Rejection(p), "") << p.name;
    EXPECT_FALSE(p.mimics.empty()) << p.name;
    names.insert(p.name);
  }
  EXPECT_EQ(names.size(), all.size()) << "names are unique";
  const ReadPattern head = Head();
  EXPECT_EQ(head.name, "head_rows");
  EXPECT_EQ(head.Bytes(), int64_t{129280} * 4096 * 2);  // the BF16 head, 1.06 GB
  EXPECT_EQ(head.Items(), 1010);
  EXPECT_EQ(head.Chunks(), 64);
  EXPECT_EQ(head.TileBytes(), 16384);
  // Each tiled pattern reads its row-major twin's bytes on the same geometry.
  auto named = [&](const std::string& name) -> const ReadPattern* {
    for (const ReadPattern& p : all) {
      if (p.name == name) return &p;
    }
    return nullptr;
  };
  const std::pair<const char*, const char*> twins[] = {
      {"head_tiled", "head_rows"}, {"experts_items_tiled", "experts_items"}, {"experts_runs_tiled", "experts_runs"}};
  for (const auto& [tiled_name, rows_name] : twins) {
    const ReadPattern* tiled = named(tiled_name);
    const ReadPattern* rows = named(rows_name);
    ASSERT_TRUE(tiled != nullptr && rows != nullptr) << tiled_name;
    EXPECT_TRUE(tiled->tiled && !rows->tiled) << tiled_name;
    EXPECT_EQ(rows->Bytes(), tiled->Bytes()) << tiled_name;
    EXPECT_EQ(rows->TileBytes(), tiled->TileBytes()) << tiled_name;
    EXPECT_EQ(rows->stages, tiled->stages) << tiled_name;
    EXPECT_EQ(rows->walk, tiled->walk) << tiled_name;
    EXPECT_EQ(rows->per_warp, tiled->per_warp) << tiled_name;
    EXPECT_EQ(rows->ring_restarts, tiled->ring_restarts) << tiled_name;
    EXPECT_EQ(rows->smem_bytes, tiled->smem_bytes) << tiled_name;
  }
}

TEST(ReadPatterns, EachBrokenRuleIsNamed) {
  struct Case {
    void (*bend)(ReadPattern&);
    const char* says;
  };
  const Case cases[] = {
      {[](ReadPattern& p) { p.rows = 1000; }, "multiple of block_rows"},
      {[](ReadPattern& p) { p.chunk_bytes = 24; }, "chunk_bytes (24) must be a multiple of 16"},
      {[](ReadPattern& p) { p.row_bytes = 8200; }, "multiple of chunk_bytes"},
      {[](ReadPattern& p) { p.stages = 9; }, "stages (9) must be 2-8"},
      {[](ReadPattern& p) { p.threads = 100; }, "threads (100) must be a multiple of 32"},
      {[](ReadPattern& p) { p.threads = 96; }, "split evenly over 96 threads"},
      {[](ReadPattern& p) { p.smem_bytes = 4 * 16384 - 1; }, "must hold the 4 stages of 16384 bytes"},
      {[](ReadPattern& p) { p.smem_bytes = 228 * 1024; }, "fit an SM"},
      {[](ReadPattern& p) {
         p.per_warp = true;
         p.block_rows = 120;
         p.rows = 120 * 100;
       },
       "equal share of block_rows (120)"},
  };
  for (const Case& c : cases) {
    ReadPattern p = Head();
    c.bend(p);
    const std::string why = Rejection(p);
    EXPECT_NE(why.find(c.says), std::string::npos) << why;
    EXPECT_NE(why.find("head_rows"), std::string::npos) << why;
  }
}

TEST(ReadPatterns, ScaledDownKeepsWholeItems) {
  const ReadPattern head = Head();
  const ReadPattern small = ScaledDown(head, int64_t{8} << 20);
  EXPECT_EQ(small.Items(), 8);  // 1 MiB items
  EXPECT_EQ(small.rows, 8 * 128);
  EXPECT_EQ(Rejection(small), "");
  EXPECT_EQ(ScaledDown(head, 1).Items(), 1);                   // at least one item
  EXPECT_EQ(ScaledDown(head, int64_t{1} << 40).rows, head.rows);  // never more than it had
}

TEST(ReadPatterns, SmallReadsRunFromOneMibToTheLargestLaunch) {
  const std::vector<int64_t> sizes = SmallReadSizes();
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes.front(), int64_t{1} << 20);
  EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
  for (const int64_t b : sizes) EXPECT_EQ(b % 256, 0) << b;
}

TEST(ReadPatterns, WordSumAddsLittleEndianWordsModuloTwoToThe64) {
  const std::vector<uint8_t> bytes = {1, 0, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(WordSum(bytes.data(), bytes.size()), uint64_t{1} + 256 + 0xffffffffull);
  EXPECT_EQ(WordSum(bytes.data(), 0), 0u);
  EXPECT_THROW(WordSum(bytes.data(), 6), Error);
}

TEST(ReadPatterns, JsonCarriesEachPatternAndItsRatios) {
  ReadPatternsReport r;
  r.device = "H200";
  r.copy.bytes = 1 << 30;
  r.copy.bytes_per_s = 4e12;
  r.plain_read_bytes_per_s = 4.4e12;
  ReadTiming t;
  t.pattern = Head();
  t.grid = 1010;
  t.blocks_per_sm = 2;
  t.seconds = 4e-4;
  t.bytes_per_s = 2.2e12;
  t.sums_agree = true;
  r.patterns.push_back(t);
  r.small_reads.push_back({int64_t{4} << 20, 4e-6, (4 << 20) / 4e-6});
  const nlohmann::json j = ToJson(r);
  ASSERT_EQ(j["small_reads"].size(), 1u);
  EXPECT_EQ(j["small_reads"][0]["bytes"].get<int64_t>(), int64_t{4} << 20);
  EXPECT_DOUBLE_EQ(j["small_reads"][0]["seconds"].get<double>(), 4e-6);
  ASSERT_EQ(j["patterns"].size(), 1u);
  const nlohmann::json& p = j["patterns"][0];
  EXPECT_EQ(p["name"], "head_rows");
  EXPECT_EQ(p["walk"], "block_per_item");
  EXPECT_EQ(p["bytes"].get<int64_t>(), t.pattern.Bytes());
  EXPECT_DOUBLE_EQ(p["of_plain_read"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(p["of_copy"].get<double>(), 0.55);
  EXPECT_TRUE(p["sums_agree"].get<bool>());
  EXPECT_DOUBLE_EQ(j["copy"]["bytes_per_s"].get<double>(), 4e12);
}

TEST(ReadPatterns, CpuOnlyBuildSaysWhatIsMissing) {
  if (CudaBackendCompiled()) GTEST_SKIP() << "CUDA build";
  try {
    TimeReadPatterns(0, StandardReadPatterns(), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read patterns need the CUDA build"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PlainReadSumForTesting(0, std::vector<uint8_t>(16)), Error);
}

}  // namespace
}  // namespace deepinfer::bench
