// The forward against DeepSeek's reference goldens (tests/data/goldens-v4, made by the reference
// inference/model.py in fp32): per-layer residual streams at the dumped positions, last-position
// prefill logits, and the greedy continuation (issue 2, acceptance 2).
//
// Tolerance. Both sides compute in fp32 and differ only in summation order (BLAS blocking vs
// torch, softmax/Sinkhorn association). A dot product of length K in fp32 carries a relative
// error of order sqrt(K)·6e-8 of the sum of |terms|; through the blocks' mHC mixing and RMS
// normalizations this stays near 1e-5 of the values' scale — what the reference reports for its
// own prefill-vs-decode agreement, and what we measure (max 1.2e-5 scaled, see the printout). We
// allow |ours − ref| <= 1e-4 · (1 + |ref|) per value: under 10x that noise floor, and 3–4 orders
// of magnitude below a real defect (a wrong sign, scale, index or tie-break moves values by
// 1e-2–1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model/model_test_support.h"

namespace deepinfer::testing {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, LayerStreamsLogitsAndGreedyMatchReference) { ExpectMatchesGolden(GetParam(), LoadOptions{}); }

// The reference's quantization simulation (FP8 round trip of the KV nope channels, FP4 round
// trip of the indexer's queries and keys) is an option; the goldens were made without it. This
// measures what it changes on them (reported in docs/numerics.md): the logits move by the
// rounding, and the greedy continuation may drift from the exact one.
TEST_P(GoldenTest, QuantizationSimulationEffect) {
  const Golden g = LoadGolden(GetParam());
  LoadOptions opts;
  opts.numerics.kv_fp8 = true;
  opts.numerics.indexer_fp4 = true;
  LoadedModel loaded = LoadModel(g.dir, opts);
  SequenceDriver driver(*loaded.model);
  const std::vector<float> logits = driver.Prefill(g.prompt_ids);
  const TensorEntry* ref_logits = FindTensor(*g.tensors, "prefill.last_logits");
  ASSERT_NE(ref_logits, nullptr);
  const Diff d = Compare(logits.data(), static_cast<const float*>(ref_logits->data), static_cast<int64_t>(logits.size()));
  int32_t next = Argmax(logits);
  int agree = 0;
  for (size_t step = 0; step < g.greedy.size(); ++step) {
    agree += next == g.greedy[step];
    next = Argmax(driver.Step(g.greedy[step]));
  }
  std::printf("[%s] with FP8 KV + FP4 indexer rounding: last logits max |diff| %.3g; greedy argmax agrees on %d of %zu steps\n",
              GetParam().c_str(), d.max_abs, agree, g.greedy.size());
  EXPECT_GT(d.max_abs, 1e-4f) << "the rounding must change something";
  EXPECT_LT(d.max_abs, 2.0f) << "but not wreck the model";
}

INSTANTIATE_TEST_SUITE_P(ReferenceGoldens, GoldenTest, ::testing::ValuesIn(GoldenNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace deepinfer::testing
