// Internals shared by the V4 forward's translation units.
#pragma once

#include <vector>

#include "kernels/cpu/rows.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/workspace.h"

namespace deepinfer::v4 {

// Everything one forward step knows about its tokens, in host memory and on the model's device.
struct V4Model::StepContext {
  ops::OpContext op;               // where the forward runs
  Workspace* ws = nullptr;         // the step's scratch tensors
  const ForwardBatch* batch = nullptr;
  StateStorage* state = nullptr;
  std::vector<int64_t> positions;  // absolute position of every token of the batch (host)
  TensorView positions_view;       // I64 [num_tokens] on the device
  TensorView token_ids;            // I32 [num_tokens] on the device
  // Row plan: where every chunk's state and rows are (host copies, and the plan with device
  // pointers the row ops read).
  std::vector<cpu::SeqRowsInfo> seqs;
  std::vector<int32_t> token_seq;
  std::vector<int32_t> block_tables;
  cpu::StepRowsPlan host_plan;
  cpu::StepRowsPlan plan;
  TensorView fresh;                // [num_tokens, head_dim]: this step's KV rows, in the state buffer

  cpu::LayerRowGeometry Geometry(const StateLayout& layout, int64_t layer) const;
  int64_t num_tokens() const { return batch->num_tokens; }
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
