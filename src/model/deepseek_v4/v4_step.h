// Internals shared by the V4 forward's translation units.
#pragma once

#include <vector>

#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::v4 {

struct V4Model::StepContext {
  ops::OpContext op;               // where the forward runs
  const ForwardBatch* batch = nullptr;
  const StateStorage* state = nullptr;
  std::vector<int64_t> positions;  // absolute position of every token of the batch
  TensorView positions_view;       // the same as I64 [num_tokens] on the forward's device
  TensorView token_ids;            // I32 [num_tokens] on the forward's device
};

inline ops::HcParams HcParamsFor(const HcWeights& w, const ModelConfig& c) {
  ops::HcParams p;
  p.fn = w.fn;
  p.base = w.base;
  p.scale = w.scale;
  p.sinkhorn_iters = c.hc_sinkhorn_iters;
  p.hc_eps = static_cast<float>(c.hc_eps);
  p.norm_eps = static_cast<float>(c.rms_norm_eps);
  return p;
}

}  // namespace deepinfer::v4
