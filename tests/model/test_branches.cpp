// A step's branches (V4Model::StepBranches: on a GPU with DEEPINFER_FORK_TOKENS they run on
// concurrent streams) are independent of one another: queued in reverse order, each of them before
// the branch it was after, the forward gives the same bits. A branch that read what another branch
// writes would read it unwritten in one of the two orders. What the CPU cannot show (its branches
// all run synchronously on one context): that each branch's work goes to its own stream and that
// the joins are where the later work needs them; GpuModel.ForkedStepsGiveTheSameLogits and
// GpuEngine.CudaGraphsOfForkedStepsEqualEagerOnOneStream check those on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/deepseek_v4/v4_model.h"
#include "model/model_test_support.h"

namespace deepinfer::testing {
namespace {

// The branches queued in reverse for the object's lifetime.
struct ScopedReversedBranches {
  ScopedReversedBranches() { v4::SetBranchOrderForTesting(true); }
  ~ScopedReversedBranches() { v4::SetBranchOrderForTesting(false); }
  ScopedReversedBranches(const ScopedReversedBranches&) = delete;
  ScopedReversedBranches& operator=(const ScopedReversedBranches&) = delete;
};

// The golden's prompt one-shot and in chunks of 7, then 6 steps of its greedy continuation: every
// logit, concatenated.
std::vector<float> Logits(const Model& model, const Golden& g) {
  std::vector<float> all;
  for (const int64_t chunk : {int64_t{0}, int64_t{7}}) {
    SequenceDriver driver(model);
    const std::vector<float> prefill = driver.Prefill(g.prompt_ids, chunk);
    all.insert(all.end(), prefill.begin(), prefill.end());
    for (size_t i = 0; i < 6 && i < g.greedy.size(); ++i) {
      const std::vector<float> step = driver.Step(g.greedy[i]);
      all.insert(all.end(), step.begin(), step.end());
    }
  }
  return all;
}

int64_t Differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] ? 1 : 0;
  return differ;
}

// In order and reversed, with the branches of a step that does not fork (one x-products branch) and
// of one that does (DEEPINFER_FORK_TOKENS covering every step: a CSA layer's x products spread
// over three branches; on the CPU the branches still run one after another): every logit the same.
void ExpectReversedBranchesGiveTheSameBits(const std::string& golden, const LoadOptions& options) {
  SCOPED_TRACE(golden);
  const Golden g = LoadGolden(golden);
  LoadedModel loaded = LoadModel(g.dir, options);
  const std::vector<float> in_order = Logits(*loaded.model, g);
  for (const int64_t fork_tokens : {int64_t{0}, int64_t{1} << 20}) {
    const v4::ScopedForkTokensForTesting forks(fork_tokens);
    if (fork_tokens > 0) EXPECT_EQ(Differ(Logits(*loaded.model, g), in_order), 0) << "spread, in order";
    const ScopedReversedBranches reversed;
    EXPECT_EQ(Differ(Logits(*loaded.model, g), in_order), 0) << (fork_tokens > 0 ? "spread, " : "") << "reversed";
  }
}

TEST(StepBranches, ReversedOrderGivesTheSameLogitsOnEveryGolden) {
  for (const std::string& name : GoldenNames()) ExpectReversedBranchesGiveTheSameBits(name, LoadOptions{});
}

TEST(StepBranches, ReversedOrderGivesTheSameLogitsWithTheReferenceQuantization) {
  const LoadOptions options = WithEveryReferenceRounding();
  ExpectReversedBranchesGiveTheSameBits("v4-tiny-fp8fp4", options);
}

// Static launch shapes (what a CUDA graph captures) give the dynamic forward's bits with the
// branches spread and reversed too: the two compressors' rows that close nowhere go to scratch rows
// of their own, and no branch reads them.
TEST(StepBranches, SpreadAndReversedStaticShapesEqualDynamicShapes) {
  LoadedModel demo = LoadModel(std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-v4-demo", LoadOptions{});
  const v4::ScopedForkTokensForTesting forks(int64_t{1} << 20);
  const ScopedReversedBranches reversed;
  EXPECT_EQ(CheckStaticShapesMatchDynamic(*demo.model), 12);
}

}  // namespace
}  // namespace deepinfer::testing
