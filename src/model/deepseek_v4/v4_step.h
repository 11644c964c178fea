// Internals shared by the V4 forward's translation units.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/rows.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/workspace.h"

namespace deepinfer::v4 {

// Fresh rows after a static-shape step's own (ForwardBatch::static_max_context) into which each
// compressor scatters the rows that close nowhere: the main one into the first, the indexer's into
// those after it (an f32 index row may be wider than a packed attention row: 128 floats against
// 148 for V4, but against 52 for a head_dim 128 config with 64 rope dims).
inline int64_t StaticShapeScratchRows(const StateLayout& layout) {
  return 1 + (layout.index_dim + layout.row_floats - 1) / layout.row_floats;
}

// Everything one forward step knows about its tokens, in host memory and on the model's device.
// Cheap to copy: the host arrays it points into live in Forward's frame.
struct V4Model::StepContext {
  ops::OpContext op;               // where the forward runs
  Workspace* ws = nullptr;         // the step's scratch tensors
  const ForwardBatch* batch = nullptr;
  StateStorage* state = nullptr;
  TensorView positions_view;       // I64 [num_tokens] on the device: every token's absolute position
  TensorView token_ids;            // I32 [num_tokens] on the device
  // Row plan: where every chunk's state and rows are (host copies, and the plan with device
  // pointers the row ops read).
  std::span<const cpu::SeqRowsInfo> seqs;
  cpu::StepRowsPlan host_plan;
  cpu::StepRowsPlan plan;
  // [num_tokens, head_dim]: this step's KV rows as f32 rows in the state buffer; empty when the
  // state's rows are packed (the kv path then encodes them there from a workspace tensor).
  TensorView fresh;

  cpu::LayerRowGeometry Geometry(const StateLayout& layout, int64_t layer) const;
  int64_t num_tokens() const { return batch->num_tokens; }
  // This context with its work queued on `stream` instead.
  StepContext OnStream(cudaStream_t stream) const {
    StepContext c = *this;
    c.op.stream = stream;
    return c;
  }
};

// ops::BuildAttentionRows' outputs for one layer: I32 row ids [tokens, max rows] and counts
// [tokens]; on CSA layers also the index candidates [tokens, max visible] with their visible and
// candidate counts [tokens] (empty elsewhere).
struct V4Model::AttendedRows {
  TensorView row_ids, counts;
  TensorView index_ids, num_visible, num_candidates;
};

// Independent parts of a step, run as concurrent branches (V4Model::ForkStreams). Branch 0 is the
// step's own context; branch i, 1 <= i <= side, the same context on side stream
// first_stream + i - 1. Run() forks (every side branch's work starts after everything queued on
// the step's stream so far), queues each added work on its branch, then joins (the step's later
// work waits for every branch), also when the work throws, so no branch outlives it: the layer may
// then rewind the workspace. Without side streams every branch is the step's own context, one
// stream. The host queues the work in the order added, or reversed under
// SetBranchOrderForTesting: a branch that read what another writes gets other values then, which
// the CPU tests catch.
class V4Model::StepBranches {
 public:
  StepBranches(const StepContext& ctx, StreamBranches* streams, int side, int first_stream = 0);
  StepBranches(const StepBranches&) = delete;
  StepBranches& operator=(const StepBranches&) = delete;
  void Add(int branch, std::function<void(const StepContext&)> work);
  void Run();

 private:
  const StepContext& ctx_;
  StreamBranches* streams_ = nullptr;  // null: not forked
  int side_ = 0, first_stream_ = 0;
  std::vector<std::pair<int, std::function<void(const StepContext&)>>> work_;
  bool ran_ = false;
};

// The side stream of a CSA layer's index queries (V4Model::Attention), after the three that the
// attention's own branches take.
inline constexpr int kIndexQueryStream = 3;
inline constexpr int kSideStreams = kIndexQueryStream + 1;

// DEEPINFER_INDEX_QUERY_BRANCH (read once; unset or 0: off, 1: on): a CSA layer's index queries
// (the indexer's wq_b and row steps) on their own stream beside the heads' queries, in a step that
// forks (V4Model::ForksAt). Off until measured.
bool IndexQueryBranch();

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
