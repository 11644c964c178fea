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

constexpr float kRelTol = 1e-4f;

struct Diff {
  float max_abs = 0.f;
  float max_scaled = 0.f;  // max |a − b| / (1 + |b|)
};

Diff Compare(const float* ours, const float* ref, int64_t n) {
  Diff d;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::fabs(ours[i] - ref[i]);
    d.max_abs = std::max(d.max_abs, e);
    d.max_scaled = std::max(d.max_scaled, e / (1.f + std::fabs(ref[i])));
  }
  return d;
}

const TensorEntry* FindTensor(const SafetensorsFile& f, const std::string& name) {
  for (const auto& e : f.tensors()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, LayerStreamsLogitsAndGreedyMatchReference) {
  const Golden g = LoadGolden(GetParam());
  LoadedModel loaded = LoadModel(g.dir, LoadOptions{});
  const Model& model = *loaded.model;
  const int64_t s = model.config().hc_mult, d = model.config().hidden_size;

  // Capture every block's output streams at the dumped positions during a one-shot prefill.
  std::vector<std::vector<float>> captured(static_cast<size_t>(model.config().num_hidden_layers));
  ForwardHooks hooks;
  hooks.on_block_output = [&](int64_t layer, const TensorView& streams, const std::vector<int64_t>& pos) {
    for (int64_t want : g.dump_positions) {
      for (size_t t = 0; t < pos.size(); ++t) {
        if (pos[t] != want) continue;
        const float* row = streams.data<float>() + static_cast<int64_t>(t) * s * d;
        captured[layer].insert(captured[layer].end(), row, row + s * d);
      }
    }
  };
  SequenceDriver driver(model);
  const std::vector<float> logits = driver.Prefill(g.prompt_ids, 0, &hooks);

  int first_bad_layer = -1;
  for (size_t layer = 0; layer < captured.size(); ++layer) {
    const TensorEntry* ref = FindTensor(*g.tensors, "layer" + std::to_string(layer) + ".hidden_streams");
    ASSERT_NE(ref, nullptr) << "golden has no streams for layer " << layer;
    ASSERT_EQ(static_cast<int64_t>(captured[layer].size()), static_cast<int64_t>(ref->nbytes / 4));
    const Diff diff = Compare(captured[layer].data(), static_cast<const float*>(ref->data),
                              static_cast<int64_t>(captured[layer].size()));
    std::printf("[%s] layer %zu streams: max |diff| %.3g, max scaled %.3g\n", GetParam().c_str(),
                layer, diff.max_abs, diff.max_scaled);
    if (diff.max_scaled > kRelTol && first_bad_layer < 0) {
      first_bad_layer = static_cast<int>(layer);
      for (size_t i = 0; i < g.dump_positions.size(); ++i) {
        const Diff pd = Compare(captured[layer].data() + i * s * d,
                                static_cast<const float*>(ref->data) + i * s * d, s * d);
        std::printf("  position %ld: max |diff| %.3g\n", static_cast<long>(g.dump_positions[i]), pd.max_abs);
      }
    }
  }
  EXPECT_EQ(first_bad_layer, -1) << "first layer whose streams diverge from the reference: "
                                 << first_bad_layer;

  const TensorEntry* ref_logits = FindTensor(*g.tensors, "prefill.last_logits");
  ASSERT_NE(ref_logits, nullptr);
  const Diff ld = Compare(logits.data(), static_cast<const float*>(ref_logits->data),
                          static_cast<int64_t>(logits.size()));
  std::printf("[%s] last-position logits: max |diff| %.3g, max scaled %.3g\n", GetParam().c_str(),
              ld.max_abs, ld.max_scaled);
  EXPECT_LE(ld.max_scaled, kRelTol);

  // Greedy: our argmax at every step, feeding the reference's token so that one near-tie cannot
  // derail the rest of the comparison.
  int32_t next = Argmax(logits);
  std::vector<int> differing_steps;
  for (size_t step = 0; step < g.greedy.size(); ++step) {
    if (next != g.greedy[step]) {
      differing_steps.push_back(static_cast<int>(step));
      EXPECT_LT(g.step_margins[step], 0.1f) << "step " << step << ": ours " << next << ", reference "
                                            << g.greedy[step] << " with a clear margin";
      EXPECT_EQ(next, g.step_top5[step][1]) << "step " << step << ": ours is not the runner-up";
    }
    next = Argmax(driver.Step(g.greedy[step]));
  }
  std::printf("[%s] greedy: %zu steps, %zu differ\n", GetParam().c_str(), g.greedy.size(),
              differing_steps.size());
  for (int st : differing_steps) std::printf("  differing step %d (margin %.4f)\n", st, g.step_margins[st]);
}

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
