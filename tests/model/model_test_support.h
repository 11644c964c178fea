// Helpers for model tests: the reference goldens, and a single-sequence driver that feeds a
// model through ModelState the way the runner does (one slot, a block table covering the
// sequence).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/safetensors.h"

namespace deepinfer::testing {

struct Golden {
  std::string dir;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy;
  std::vector<float> step_margins;        // top-1 − top-2 logit per decode step
  std::vector<std::vector<int32_t>> step_top5;
  std::vector<int64_t> dump_positions;
  std::unique_ptr<SafetensorsFile> tensors;  // prefill.last_logits, layer{i}.hidden_streams
};

std::vector<std::string> GoldenNames();
Golden LoadGolden(const std::string& name);

// Drives one sequence through a model: Prefill(ids, chunk) then Decode(token) steps.
class SequenceDriver {
 public:
  explicit SequenceDriver(const Model& model, int64_t max_tokens = 4096, int64_t block_size = 128);

  // Feeds `ids` in chunks of `chunk` tokens (0 = all at once); returns the logits after the
  // last token. `hooks` (optional) observe every chunk.
  std::vector<float> Prefill(const std::vector<int32_t>& ids, int64_t chunk = 0,
                             const ForwardHooks* hooks = nullptr);
  std::vector<float> Step(int32_t token);
  int64_t position() const { return position_; }

 private:
  std::vector<float> Run(const int32_t* ids, int64_t n, const ForwardHooks* hooks);
  const Model& model_;
  std::unique_ptr<ModelState> state_;
  std::vector<int32_t> block_table_;
  int64_t position_ = 0;
  int64_t prompt_end_ = 0;  // set by Prefill; Step() tokens come after it
};

// `options` with every rounding of the reference on (Numerics: fp8_activations, kv_fp8,
// indexer_fp4, bf16_attention_output, bf16_attention_inputs, bf16_head_input, bf16_norm_outputs).
LoadOptions WithEveryReferenceRounding(LoadOptions options = {});

int32_t Argmax(const std::vector<float>& v);

struct Diff {
  float max_abs = 0.f;
  float max_scaled = 0.f;  // max |a − b| / (1 + |b|)
};
Diff Compare(const float* ours, const float* ref, int64_t n);
const TensorEntry* FindTensor(const SafetensorsFile& f, const std::string& name);

// Loads golden `name` with `options` (device, numerics) and checks, as gtest expectations, the
// per-layer residual streams at the dumped positions, the last-position prefill logits (both
// within |ours − ref| <= 1e-4·(1 + |ref|); see test_goldens.cpp for the reasoning) and the
// greedy continuation (a differing step must be a near-tie won by the runner-up), over its first
// max_greedy_steps steps (all when negative).
void ExpectMatchesGolden(const std::string& name, const LoadOptions& options, int64_t max_greedy_steps = -1);

// The forward with ForwardBatch::static_max_context = static_context set gives the logits of the
// forward without it, bit for bit, on `model` (which needs compressed layers): five sequences are
// prefilled to 1, 3, 4, 127 and 130 tokens on two states, then decoded in lockstep for
// `decode_steps` steps (the first completes a ratio-4 and a ratio-128 block; with 4 or more every
// sequence's decode completes a ratio-4 block) with and without static shapes, then one mixed
// step (a 9-token chunk beside decodes), then a decode step padded with a sixth sequence at
// position 0 on its own slot and block, whose logits are ignored. static_context must cover the
// longest sequence (132 + decode_steps positions) and the 3-block tables (384 positions). Adds a
// gtest failure per mismatch and returns the number of steps compared (decode_steps + 3).
// from_filled_state: no prefill of 265 tokens; both states start with the same hash-uniform
// values (ModelState::FillForBenchmark) and the sequences at positions 0, 2, 3, 126 and 125, and
// the first step is a chunk of 1, 1, 4, 1 and 7 tokens, so that ratio-4 and ratio-128 blocks
// complete inside that chunk and in the decode steps after it (the sanitizer's size: racecheck did
// not finish the prefill variant on tensor cores within a 575 s call).
int CheckStaticShapesMatchDynamic(const Model& model, int decode_steps = 9, int64_t static_context = 512,
                                  bool from_filled_state = false);

}  // namespace deepinfer::testing
