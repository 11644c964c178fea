#include "model/model_test_support.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "base/error.h"
#include "base/math.h"
#include "device/buffer.h"

namespace deepinfer::testing {

std::vector<std::string> GoldenNames() {
  return {"v4-tiny-flashlike", "v4-tiny-fp8fp4", "v4-tiny-long"};
}

Golden LoadGolden(const std::string& name) {
  Golden g;
  g.dir = std::string(DEEPINFER_GOLDENS_DIR) + "/" + name;
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

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace deepinfer::testing
