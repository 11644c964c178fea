// The engine with the model on the GPU (issue 7, acceptance 2): the randomized workload of the
// engine issue (200 requests: staggered arrivals, stop strings, client aborts, max_tokens, forced
// preemptions, poisoned released blocks, prefix hits) gives identical tokens and text in the
// overlapped and the synchronous loop. Every GPU kernel computes a token's values independently
// of the batch it is in, so the two loops' different batch compositions must not show.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/workload.h"
#include "gpu/gpu_test_util.h"

namespace deepinfer::testing {
namespace {

// DEEPINFER_SOURCE_DIR in the environment (scripts/gpu-run.sh) overrides the build's source dir.
std::string DemoDir() {
  const char* env = std::getenv("DEEPINFER_SOURCE_DIR");
  return std::string(env != nullptr ? env : DEEPINFER_SOURCE_DIR) + "/models/deepinfer-v4-demo";
}

std::vector<WorkResult> RunEngine(EngineOptions o, const std::vector<WorkItem>& items, const Tokenizer& tok,
                            EngineStats* stats) {
  EngineCore engine(o);
  std::vector<WorkResult> results = RunWorkload(engine, tok, items, 24);
  EXPECT_TRUE(engine.WaitIdle(std::chrono::seconds(60)));
  *stats = engine.Stats();
  EXPECT_EQ(engine.CheckIntegrity(), "");
  EXPECT_EQ(stats->num_blocks_used, 0);
  EXPECT_EQ(stats->num_slots_used, 0);
  return results;
}

TEST(GpuEngine, OverlappedEqualsSynchronousOnARandomizedWorkload) {
  DI_REQUIRE_GPU();
  auto tok = Tokenizer::FromFile(DemoDir() + "/tokenizer.json");
  const std::vector<WorkItem> items = MakeWorkload(2026, 200, tok->vocab_size());
  EngineOptions o;
  o.model_dir = DemoDir();
  o.load.device = DeviceId{DeviceType::kCuda, 0};
  o.max_num_seqs = 12;
  o.max_num_batched_tokens = 384;
  o.max_model_len = 512;
  o.block_size = 128;
  o.num_blocks = 40;
  o.num_packs = 8;
  o.cache_memory_mb = 0;
  o.poison_released_blocks = true;
  o.check_integrity_every_step = true;
  o.preempt_every_n_steps = 9;
  o.pack_interval_blocks = 1;
  o.sampleable_vocab = tok->vocab_size();
  EngineStats sync_stats, overlapped_stats;
  o.async_scheduling = false;
  const std::vector<WorkResult> sync = RunEngine(o, items, *tok, &sync_stats);
  o.async_scheduling = true;
  const std::vector<WorkResult> overlapped = RunEngine(o, items, *tok, &overlapped_stats);
  int mismatches = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (sync[i].tokens != overlapped[i].tokens || sync[i].text != overlapped[i].text) {
      ++mismatches;
      ADD_FAILURE() << "request " << i << " differs: sync '" << sync[i].text << "' vs overlapped '"
                    << overlapped[i].text << "'";
    }
  }
  std::printf("GPU, 200 requests: %d differ; preemptions sync=%ld overlapped=%ld; cached prompt tokens %ld / %ld\n",
              mismatches, static_cast<long>(sync_stats.num_preemptions),
              static_cast<long>(overlapped_stats.num_preemptions),
              static_cast<long>(overlapped_stats.prompt_tokens_cached),
              static_cast<long>(overlapped_stats.prompt_tokens_total));
  EXPECT_GT(sync_stats.num_preemptions, 5);
  EXPECT_GT(overlapped_stats.prompt_tokens_cached, 1000);
}

}  // namespace
}  // namespace deepinfer::testing
