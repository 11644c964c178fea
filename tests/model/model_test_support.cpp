#include "model/model_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "base/error.h"
#include "base/math.h"
#include "device/buffer.h"

#include <gtest/gtest.h>

namespace deepinfer::testing {

std::vector<std::string> GoldenNames() {
  return {"v4-tiny-flashlike", "v4-tiny-fp8fp4", "v4-tiny-long"};
}

Golden LoadGolden(const std::string& name) {
  Golden g;
  // DEEPINFER_GOLDENS_DIR in the environment overrides the build tree's copy (the GPU machine
  // runs the tests from a carried binary; scripts/gpu-run.sh extracts the archives there).
  const char* env = std::getenv("DEEPINFER_GOLDENS_DIR");
  g.dir = std::string(env != nullptr ? env : DEEPINFER_GOLDENS_DIR) + "/" + name;
  std::ifstream in(g.dir + "/golden.json");
  DI_CHECK(in.good(), "cannot read {}/golden.json", g.dir);
  const auto j = nlohmann::json::parse(in);
  g.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  g.greedy = j.at("greedy_continuation").get<std::vector<int32_t>>();
  g.dump_positions = j.at("dump_positions").get<std::vector<int64_t>>();
  for (const auto& step : j.at("steps")) {
    g.step_margins.push_back(step.at("margin").get<float>());
    g.step_top5.push_back(step.at("top5_ids").get<std::vector<int32_t>>());
  }
  g.tensors = SafetensorsFile::Open(g.dir + "/golden_tensors.safetensors");
  return g;
}

SequenceDriver::SequenceDriver(const Model& model, int64_t max_tokens, int64_t block_size)
    : model_(model) {
  const int64_t blocks = DivCeil(max_tokens, block_size);
  state_ = model.CreateState(1, blocks + 1, block_size);
  block_table_.resize(static_cast<size_t>(blocks));
  std::iota(block_table_.begin(), block_table_.end(), 1);
}

std::vector<float> SequenceDriver::Run(const int32_t* ids, int64_t n, const ForwardHooks* hooks) {
  ForwardBatch batch;
  batch.token_ids = ids;
  batch.num_tokens = n;
  SequenceChunk chunk;
  chunk.token_offset = 0;
  chunk.num_tokens = n;
  chunk.start_pos = position_;
  chunk.state_slot = 0;
  chunk.block_table = block_table_.data();
  chunk.num_blocks = static_cast<int64_t>(block_table_.size());
  chunk.prompt_end = prompt_end_;
  batch.seqs.push_back(chunk);
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  model_.Forward(batch, *state_, TensorView(logits.data(), DType::kF32, {1, vocab}), hooks);
  position_ += n;
  return logits;
}

std::vector<float> SequenceDriver::Prefill(const std::vector<int32_t>& ids, int64_t chunk,
                                           const ForwardHooks* hooks) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (chunk <= 0) chunk = n;
  prompt_end_ = position_ + n;
  std::vector<float> logits;
  for (int64_t b = 0; b < n; b += chunk) {
    logits = Run(ids.data() + b, std::min(chunk, n - b), hooks);
  }
  return logits;
}

std::vector<float> SequenceDriver::Step(int32_t token) { return Run(&token, 1, nullptr); }

LoadOptions WithEveryReferenceRounding(LoadOptions options) {
  options.numerics.fp8_activations = true;
  options.numerics.kv_fp8 = true;
  options.numerics.indexer_fp4 = true;
  options.numerics.bf16_attention_output = true;
  options.numerics.bf16_attention_inputs = true;
  options.numerics.bf16_head_input = true;
  options.numerics.bf16_norm_outputs = true;
  return options;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

namespace {
constexpr float kRelTol = 1e-4f;
}  // namespace

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

void ExpectMatchesGolden(const std::string& name, const LoadOptions& options, int64_t max_greedy_steps) {
  const Golden g = LoadGolden(name);
  LoadedModel loaded = LoadModel(g.dir, options);
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
    std::printf("[%s] layer %zu streams: max |diff| %.3g, max scaled %.3g\n", name.c_str(),
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
  std::printf("[%s] last-position logits: max |diff| %.3g, max scaled %.3g\n", name.c_str(),
              ld.max_abs, ld.max_scaled);
  EXPECT_LE(ld.max_scaled, kRelTol);

  // Greedy: our argmax at every step, feeding the reference's token so that one near-tie cannot
  // derail the rest of the comparison.
  int32_t next = Argmax(logits);
  std::vector<int> differing_steps;
  const size_t greedy_steps = max_greedy_steps < 0 ? g.greedy.size()
                                                   : std::min(g.greedy.size(), static_cast<size_t>(max_greedy_steps));
  for (size_t step = 0; step < greedy_steps; ++step) {
    if (next != g.greedy[step]) {
      differing_steps.push_back(static_cast<int>(step));
      EXPECT_LT(g.step_margins[step], 0.1f) << "step " << step << ": ours " << next << ", reference "
                                            << g.greedy[step] << " with a clear margin";
      EXPECT_EQ(next, g.step_top5[step][1]) << "step " << step << ": ours is not the runner-up";
    }
    next = Argmax(driver.Step(g.greedy[step]));
  }
  std::printf("[%s] greedy: %zu steps, %zu differ\n", name.c_str(), greedy_steps,
              differing_steps.size());
  for (int st : differing_steps) std::printf("  differing step %d (margin %.4f)\n", st, g.step_margins[st]);
}

int CheckStaticShapesMatchDynamic(const Model& model, int decode_steps, int64_t static_context,
                                  bool from_filled_state) {
  const int64_t vocab = model.config().vocab_size, block = 128;
  // The longest sequence ends at 130 + decode_steps + 2 positions; every sequence's block table
  // holds 3 blocks, which the static bound must cover too.
  if (static_context < std::max<int64_t>(130 + decode_steps + 2, 3 * block)) {
    ADD_FAILURE() << "static_context " << static_context << " is shorter than the sequences or their 3-block tables";
    return 0;
  }
  constexpr int kSeqs = 5;
  const int64_t lengths[kSeqs] = {1, 3, 4, 127, 130};
  // Sequence i: slot i, blocks {1 + 3i, 2 + 3i, 3 + 3i}; the padding sequence: slot 5, block 16.
  std::unique_ptr<ModelState> with = model.CreateState(kSeqs + 1, 3 * kSeqs + 2, block, 64);
  std::unique_ptr<ModelState> without = model.CreateState(kSeqs + 1, 3 * kSeqs + 2, block, 64);
  std::vector<std::vector<int32_t>> tables(kSeqs + 1);
  for (int i = 0; i < kSeqs; ++i) tables[i] = {1 + 3 * i, 2 + 3 * i, 3 + 3 * i};
  tables[kSeqs] = {3 * kSeqs + 1};
  std::mt19937 rng(4242);
  auto token = [&] { return static_cast<int32_t>(2 + rng() % static_cast<uint32_t>(vocab - 2)); };
  std::vector<int64_t> pos(kSeqs, 0);
  // From a filled state: the sequences start at these positions on states holding the same
  // hash-uniform values (ModelState::FillForBenchmark), and the first step is a short chunk each.
  const int64_t filled_start[kSeqs] = {0, 2, 3, 126, 125};
  if (from_filled_state) {
    with->FillForBenchmark(777);
    without->FillForBenchmark(777);
    for (int i = 0; i < kSeqs; ++i) pos[i] = filled_start[i];
  }

  struct Part {
    int seq;
    int64_t num_tokens;
  };
  // Runs one step of `parts` on both states (static shapes on `with` only) and compares.
  int steps = 0;
  auto step = [&](const std::vector<Part>& parts, bool pad) {
    ForwardBatch batch;
    std::vector<int32_t> ids;
    for (const Part& p : parts) {
      SequenceChunk c;
      c.token_offset = static_cast<int64_t>(ids.size());
      c.num_tokens = p.num_tokens;
      c.start_pos = pos[p.seq];
      c.state_slot = p.seq;
      c.block_table = tables[p.seq].data();
      c.num_blocks = static_cast<int64_t>(tables[p.seq].size());
      c.prompt_end = std::max<int64_t>(lengths[p.seq], pos[p.seq] + p.num_tokens);
      for (int64_t j = 0; j < p.num_tokens; ++j) ids.push_back(token());
      batch.seqs.push_back(c);
    }
    batch.token_ids = ids.data();
    batch.num_tokens = static_cast<int64_t>(ids.size());
    const int64_t n = static_cast<int64_t>(parts.size());
    std::vector<float> dynamic_logits(static_cast<size_t>(n * vocab));
    model.Forward(batch, *without, TensorView(dynamic_logits.data(), DType::kF32, {n, vocab}));
    ForwardBatch fixed = batch;
    fixed.static_max_context = static_context;
    std::vector<int32_t> fixed_ids = ids;
    if (pad) {  // a sequence that is only there to fill the batch: position 0, logits unused
      SequenceChunk c;
      c.token_offset = static_cast<int64_t>(fixed_ids.size());
      c.num_tokens = 1;
      c.state_slot = kSeqs;
      c.block_table = tables[kSeqs].data();
      c.num_blocks = 1;
      c.want_logits = false;
      fixed_ids.push_back(token());
      fixed.seqs.push_back(c);
    }
    fixed.token_ids = fixed_ids.data();
    fixed.num_tokens = static_cast<int64_t>(fixed_ids.size());
    std::vector<float> static_logits(static_cast<size_t>(n * vocab));
    model.Forward(fixed, *with, TensorView(static_logits.data(), DType::kF32, {n, vocab}));
    // Equal NaNs would compare equal bit for bit and prove nothing.
    const auto finite = std::find_if_not(dynamic_logits.begin(), dynamic_logits.end(),
                                         [](float v) { return std::isfinite(v); });
    if (finite != dynamic_logits.end()) {
      ADD_FAILURE() << "step " << steps << ": logit " << (finite - dynamic_logits.begin()) << " is not finite";
    }
    for (int64_t i = 0; i < n * vocab; ++i) {
      if (std::memcmp(&static_logits[i], &dynamic_logits[i], sizeof(float)) != 0) {
        ADD_FAILURE() << "step " << steps << ": logit " << i % vocab << " of row " << i / vocab << " is "
                      << static_logits[i] << " with static shapes, " << dynamic_logits[i] << " without";
        break;
      }
    }
    for (const Part& p : parts) pos[p.seq] += p.num_tokens;
    ++steps;
  };

  std::vector<Part> prefill;
  for (int i = 0; i < kSeqs; ++i) prefill.push_back({i, lengths[i]});
  // From the filled state: 0, 2 -> 3, 3 -> 7 (completes the ratio-4 block at 3), 126, 125 -> 132
  // (completes the ratio-128 block at 127 inside a chunk, and ratio-4 blocks at 127 and 131); the
  // decode step then completes ratio-4 blocks at 3, 7 and 127 and the ratio-128 block at 127.
  if (from_filled_state) prefill = {{0, 1}, {1, 1}, {2, 4}, {3, 1}, {4, 7}};
  step(prefill, false);
  std::vector<Part> decode;
  for (int i = 0; i < kSeqs; ++i) decode.push_back({i, 1});
  for (int s = 0; s < decode_steps; ++s) step(decode, false);
  step({{0, 1}, {1, 9}, {2, 1}, {3, 1}, {4, 1}}, false);
  step(decode, true);
  return steps;
}

}  // namespace deepinfer::testing
