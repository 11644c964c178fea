// The host side of bench/phases.h (no device needed): the batch-1 layer chain, the chain rules,
// JSON, and the CPU-only build's error.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/phases.h"
#include "device/cuda_memory.h"

namespace deepinfer::bench {
namespace {

TEST(Phases, BatchOneLayerChainIsAValidChainOfFlashSizes) {
  const std::vector<Phase> chain = BatchOneLayerChain();
  EXPECT_NO_THROW(ValidateChain(chain));
  EXPECT_EQ(chain.size(), 24u);
  std::set<std::string> names;
  int64_t without_bytes = 0;
  for (const Phase& p : chain) {
    names.insert(p.name);
    without_bytes += p.bytes == 0 ? 1 : 0;
  }
  EXPECT_EQ(names.size(), chain.size()) << "names are unique";
  EXPECT_EQ(without_bytes, 12) << "norms, ropes, top-k, routing, SwiGLU and the posts read no weight";
  auto bytes_of = [&](const std::string& name) {
    for (const Phase& p : chain) {
      if (p.name == name) return p.bytes;
    }
    return int64_t{-1};
  };
  // wq_b [32768, 1024], wo_a 8 × [1024, 4096] and wo_b [4096, 8192] in FP8: 32 MiB each; six experts'
  // w1/w3 twice their w2; a chain of ~191 MiB, 45 µs at 4.25 TB/s.
  for (const char* name : {"wq_b", "wo_a", "wo_b"}) EXPECT_EQ(bytes_of(name), int64_t{32} << 20) << name;
  EXPECT_EQ(bytes_of("experts_w13"), 2 * bytes_of("experts_w2"));
  EXPECT_GT(ChainBytes(chain), int64_t{185} << 20);
  EXPECT_LT(ChainBytes(chain), int64_t{200} << 20);
}

TEST(Phases, ChainRulesNameThePhase) {
  EXPECT_THROW(ValidateChain({}), Error);
  try {
    ValidateChain({{"ok", 256}, {"odd", 100}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("phase odd: 100 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ValidateChain({{"negative", -256}}), Error);
  EXPECT_NO_THROW(ValidateChain({{"none", 0}}));
}

TEST(Phases, JsonCarriesEveryWay) {
  PhasesReport r;
  r.device = "H200";
  r.chain = "c";
  r.phases = 2;
  r.bytes = 512;
  r.floor_seconds = 1e-6;
  r.programmatic_edges = 1;
  r.ways.push_back({"graph_pdl", 5e-6, 2e-6, true, 0});
  r.ways.push_back({"persistent", 3e-6, 1e-6, true, 264});
  const nlohmann::json j = ToJson(r);
  ASSERT_EQ(j["ways"].size(), 2u);
  EXPECT_EQ(j["ways"][0]["way"], "graph_pdl");
  EXPECT_EQ(j["ways"][1]["grid"].get<int64_t>(), 264);
  EXPECT_DOUBLE_EQ(j["ways"][1]["overhead_per_phase"].get<double>(), 1e-6);
  EXPECT_EQ(j["programmatic_edges"].get<int64_t>(), 1);
}

TEST(Phases, CpuOnlyBuildSaysWhatIsMissing) {
  if (CudaBackendCompiled()) GTEST_SKIP() << "CUDA build";
  try {
    TimePhases(0, BatchOneLayerChain(), "c", 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("phases need the CUDA build"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer::bench
