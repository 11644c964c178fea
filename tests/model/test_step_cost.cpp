// Model::EstimateStepCost on the demo model (issue 8's floors rest on it): the weight bytes of a
// step that touches every expert equal the bytes of every trunk tensor enumerated independently
// (v4::ForEachTensor), with the embedding and tid2eid counted by the rows read; a one-token
// decode touches exactly top-k experts per layer; the state and attention terms follow the
// window and compressed-row counts. Plus the hash-uniform fill the benchmarks put into state, and
// the scratch memory a step holds (one layer's temporaries at a time, whatever the depth).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "base/error.h"
#include "kernels/cpu/hash_uniform.h"
#include "model/config.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/model.h"
#include "model/model_test_support.h"

namespace deepinfer::testing {
namespace {

std::string DemoDir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-v4-demo"; }

double SumBytes(v4::ModelWeights& w) {
  double total = 0;
  v4::ForEachTensor(w, [&](TensorView& t) { total += t.empty() ? 0.0 : static_cast<double>(t.nbytes()); });
  return total;
}

// The forward releases each layer's temporaries after it (Workspace::Rewind), so a step's
// scratch peak is set by the largest kind of layer, not by the depth: the demo model cut to its
// first 5 layers (compress ratios 0, 0, 4, 128, 4: every kind, hash-routed and not) and whole (7:
// two more of the same kinds) hold the same peak to the byte, for a prefill and a decode step.
TEST(StepCost, AStepsScratchPeakDoesNotGrowWithDepth) {
  const ModelConfig whole = LoadModelConfig(DemoDir() + "/config.json");
  ASSERT_EQ(whole.num_hidden_layers, 7);
  ModelConfig cut = whole;
  cut.num_hidden_layers = 5;
  LoadOptions dummy;
  dummy.load_format = "dummy";
  std::vector<int32_t> prompt(96);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % whole.vocab_size);
  size_t prefill_peak[2], decode_peak[2];
  int i = 0;
  for (const ModelConfig* c : std::vector<const ModelConfig*>{&cut, &whole}) {
    LoadedModel loaded = LoadModel(*c, DemoDir(), dummy);
    SequenceDriver driver(*loaded.model);
    driver.Prefill(prompt);
    prefill_peak[i] = loaded.model->LastStepWorkspacePeakBytes();
    driver.Step(7);
    decode_peak[i] = loaded.model->LastStepWorkspacePeakBytes();
    ++i;
  }
  EXPECT_GT(prefill_peak[0], decode_peak[0]);
  EXPECT_GT(decode_peak[0], 0u);
  EXPECT_EQ(prefill_peak[1], prefill_peak[0]);
  EXPECT_EQ(decode_peak[1], decode_peak[0]);
}

TEST(StepCost, WeightBytesOfAStepTouchingEveryExpertEqualEveryTrunkTensor) {
  LoadedModel loaded = LoadModel(DemoDir(), LoadOptions{});
  const auto& model = dynamic_cast<const v4::V4Model&>(*loaded.model);
  const ModelConfig& c = model.config();
  v4::ModelWeights trunk = model.weights();
  trunk.mtp.clear();  // the forward does not run the MTP blocks
  double expected = SumBytes(trunk);
  // One sequence of `tokens` tokens: the embedding and tid2eid are read by rows.
  const int64_t tokens = 100000;
  expected -= static_cast<double>(trunk.embed.nbytes());
  expected += static_cast<double>(std::min<int64_t>(tokens, c.vocab_size)) * static_cast<double>(trunk.embed.nbytes()) /
              static_cast<double>(c.vocab_size);
  int64_t hash_layers = 0;
  for (const v4::BlockWeights& b : trunk.layers) {
    if (b.ffn.tid2eid.empty()) continue;
    ++hash_layers;
    expected -= static_cast<double>(b.ffn.tid2eid.nbytes());
    expected += static_cast<double>(tokens * c.num_experts_per_tok * DTypeSize(b.ffn.tid2eid.dtype()));
  }
  EXPECT_EQ(hash_layers, c.num_hash_layers);
  const StepCost cost = model.EstimateStepCost({1, tokens, 0});
  EXPECT_NEAR(cost.expected_experts_per_layer, static_cast<double>(c.n_routed_experts), 1e-9);
  EXPECT_NEAR(cost.weight_bytes / expected, 1.0, 1e-12) << cost.weight_bytes << " vs " << expected;
  // The layers' shares plus the head and embedding make the total.
  double layers = 0;
  for (const LayerCost& l : cost.layers) layers += l.weight_bytes;
  const double head = static_cast<double>(trunk.head.nbytes() + trunk.norm.nbytes() + trunk.hc_head.fn.nbytes() +
                                          trunk.hc_head.base.nbytes() + trunk.hc_head.scale.nbytes());
  const double embed_rows = static_cast<double>(trunk.embed.nbytes());  // every row read (tokens > vocab)
  EXPECT_NEAR((layers + head + embed_rows) / cost.weight_bytes, 1.0, 1e-12);
}

TEST(StepCost, OneTokenDecodeTouchesTopKExpertsPerLayer) {
  LoadedModel loaded = LoadModel(DemoDir(), LoadOptions{});
  const auto& model = dynamic_cast<const v4::V4Model&>(*loaded.model);
  const ModelConfig& c = model.config();
  const StepCost one = model.EstimateStepCost({1, 1, 500});
  EXPECT_NEAR(one.expected_experts_per_layer, static_cast<double>(c.num_experts_per_tok), 1e-9);
  const v4::ExpertWeights& e = model.weights().layers.front().ffn.experts.front();
  const double expert_bytes = static_cast<double>(e.w1.nbytes() + e.w2.nbytes() + e.w3.nbytes());
  EXPECT_NEAR(one.routed_expert_bytes,
              static_cast<double>(c.num_hidden_layers * c.num_experts_per_tok) * expert_bytes, 1e-6);
  // Two sequences pick more distinct experts than one, fewer than twice as many.
  const StepCost two = model.EstimateStepCost({2, 1, 500});
  EXPECT_GT(two.expected_experts_per_layer, one.expected_experts_per_layer);
  EXPECT_LT(two.expected_experts_per_layer, 2 * one.expected_experts_per_layer);
  // Linear work is per token: two sequences do twice the projections (the head too).
  EXPECT_NEAR(two.linear_flops / one.linear_flops, 2.0, 1e-12);
}

TEST(StepCost, StateAndAttentionFollowTheWindowAndTheCompressedRows) {
  LoadedModel loaded = LoadModel(DemoDir(), LoadOptions{});
  const auto& model = dynamic_cast<const v4::V4Model&>(*loaded.model);
  const ModelConfig& c = model.config();
  const int64_t window = c.sliding_window;
  // A decode query at position p attends min(p + 1, window) window rows plus its compressed
  // rows; at context 0 only the window row of the token itself.
  const StepCost first = model.EstimateStepCost({1, 1, 0});
  double attention = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) attention += 4.0 * c.num_attention_heads * c.head_dim;
  EXPECT_DOUBLE_EQ(first.attention_flops, attention);
  // Deep in a long context: per layer the ring (window rows), the compressor states, and the
  // compressed rows: HCA attends all of them, CSA scores every index row and attends top-k.
  const int64_t ctx = 8 * window + 3;
  const StepCost deep = model.EstimateStepCost({1, 1, ctx});
  ASSERT_EQ(deep.layers.size(), static_cast<size_t>(c.num_hidden_layers));
  const double row = c.head_dim * 4.0, index_row = c.index_head_dim * 4.0;
  for (const LayerCost& l : deep.layers) {
    const int64_t ratio = l.compress_ratio;
    double read = window * row;
    double flops_rows = static_cast<double>(window);
    double indexer = 0;
    if (ratio > 0) {
      const int64_t coff = ratio == 4 ? 2 : 1;
      read += 2.0 * coff * ratio * coff * c.head_dim * 4.0;
      const int64_t visible = (ctx + 1) / ratio;
      if (ratio == 4) {
        read += 2.0 * 8 * 2 * c.index_head_dim * 4.0;
        const int64_t selected = std::min(visible, c.index_topk);
        read += visible * index_row + selected * row;
        flops_rows += selected;
        indexer = 2.0 * c.index_n_heads * visible * c.index_head_dim;
      } else {
        read += visible * row;
        flops_rows += visible;
      }
    }
    EXPECT_DOUBLE_EQ(l.state_read_bytes, read) << "layer " << l.layer;
    EXPECT_DOUBLE_EQ(l.attention_flops, 4.0 * c.num_attention_heads * flops_rows * c.head_dim + indexer)
        << "layer " << l.layer;
  }
}

TEST(HashUniform, DeterministicInRangeAndSpread) {
  std::set<float> seen;
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float v = cpu::HashUniform(3, static_cast<uint64_t>(i), -1.f, 1.f);
    ASSERT_GE(v, -1.f);
    ASSERT_LT(v, 1.f);
    ASSERT_EQ(v, cpu::HashUniform(3, static_cast<uint64_t>(i), -1.f, 1.f));
    seen.insert(v);
    sum += v;
  }
  EXPECT_GT(seen.size(), static_cast<size_t>(n * 99 / 100)) << "values repeat: ties in selections";
  EXPECT_LT(std::fabs(sum / n), 0.01) << "mean of uniform [-1, 1) values";
  EXPECT_NE(cpu::HashUniform(3, 0, -1.f, 1.f), cpu::HashUniform(4, 0, -1.f, 1.f));
}

// DEEPINFER_FORK_TOKENS: the default when unset or empty, off at 0, a token count otherwise;
// anything else is an error that names the variable and the value.
TEST(V4Switches, ForkTokensAreACountOrAnErrorNamingTheVariable) {
  EXPECT_EQ(v4::ParseForkTokens(nullptr), v4::kDefaultForkTokens);
  EXPECT_EQ(v4::ParseForkTokens(""), v4::kDefaultForkTokens);
  EXPECT_EQ(v4::ParseForkTokens("0"), 0);
  EXPECT_EQ(v4::ParseForkTokens("1"), 1);
  EXPECT_EQ(v4::ParseForkTokens("256"), 256);
  for (const char* bad : {"-1", "8k", " 8", "1.5", "on", "9999999999"}) {
    try {
      v4::ParseForkTokens(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DEEPINFER_FORK_TOKENS"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(v4::SetForkTokensForTesting(-2), Error);
  {  // scoped settings nest, each restoring the one before it
    const v4::ScopedForkTokensForTesting outer(64);
    {
      const v4::ScopedForkTokensForTesting inner(0);
      EXPECT_EQ(v4::SetForkTokensForTesting(0), 0);
    }
    EXPECT_EQ(v4::SetForkTokensForTesting(64), 64);
  }
  EXPECT_EQ(v4::SetForkTokensForTesting(-1), -1);
}

}  // namespace
}  // namespace deepinfer::testing
