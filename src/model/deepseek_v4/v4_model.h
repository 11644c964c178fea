// DeepSeek-V4 forward (dsv4-model.md §3–§8) written against ops/. The only code that knows the
// V4 layer order.
#pragma once

#include <memory>
#include <vector>

#include "device/cuda_stream.h"
#include "model/deepseek_v4/v4_state.h"
#include "model/deepseek_v4/v4_weights.h"
#include "model/model.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace deepinfer::v4 {

class V4State : public ModelState {
 public:
  V4State(StateLayout layout, int64_t num_slots, int64_t num_blocks, DeviceId device, int64_t fresh_rows)
      : storage_(std::move(layout), num_slots, num_blocks, device, fresh_rows) {}
  int64_t num_slots() const override { return storage_.num_slots(); }
  int64_t num_blocks() const override { return storage_.num_blocks(); }
  int64_t block_size() const override { return storage_.layout().block_size; }
  size_t bytes() const override { return storage_.bytes(); }
  size_t bytes_per_slot() const override { return storage_.layout().slot_floats * sizeof(float); }
  size_t bytes_per_block() const override { return storage_.layout().block_floats * sizeof(float); }
  void ResetSlot(int32_t slot) override { storage_.ResetSlot(slot); }
  void CopySlot(int32_t from, int32_t to) override { storage_.CopySlot(from, to); }
  void CopyBlock(int32_t from, int32_t to) override { storage_.CopyBlock(from, to); }
  void PoisonBlock(int32_t block) override { storage_.PoisonBlock(block); }
  void SetStream(cudaStream_t stream) override { storage_.SetStream(stream); }
  void FillForBenchmark(uint64_t seed) override { storage_.FillForBenchmark(seed); }
  const StateStorage& storage() const { return storage_; }
  StateStorage& storage() { return storage_; }

 private:
  StateStorage storage_;
};

// Tests: DEEPINFER_JOIN_W13's choice for the models built after the call (1: join, 0: not, -1:
// the environment's).
void SetJoinW13ForTesting(int mode);

// DEEPINFER_FORK_TOKENS's value: unset or empty gives kDefaultForkTokens; 0 gives 0 (no step
// forks); a positive token count gives itself. Anything else is an error naming the variable.
inline constexpr int64_t kDefaultForkTokens = 256;
int64_t ParseForkTokens(const char* value);
// Tests: the fork bound for the steps after the call (>= 0: that bound, -1: the environment's);
// returns the setting it replaces.
int64_t SetForkTokensForTesting(int64_t tokens);
// Tests: SetForkTokensForTesting(tokens) for the object's lifetime, then the setting before it.
class ScopedForkTokensForTesting {
 public:
  explicit ScopedForkTokensForTesting(int64_t tokens) : previous_(SetForkTokensForTesting(tokens)) {}
  ~ScopedForkTokensForTesting() { SetForkTokensForTesting(previous_); }
  ScopedForkTokensForTesting(const ScopedForkTokensForTesting&) = delete;
  ScopedForkTokensForTesting& operator=(const ScopedForkTokensForTesting&) = delete;

 private:
  int64_t previous_;
};
// Tests: how many times the steps of any V4Model have forked onto side streams.
uint64_t ForksForTesting();
// Tests: DEEPINFER_INDEX_QUERY_BRANCH's choice for the steps after the call (1: on, 0: off, -1: the
// environment's).
void SetIndexQueryBranchForTesting(int mode);
// Tests: whether the host queues a step's independent branches in reverse order (the CPU runs them
// in that order then: a dependence between two branches changes the results). The order also
// orders the step's uploads: do not change it between a CUDA graph's capture and its replays.
void SetBranchOrderForTesting(bool reversed);

class V4Model : public Model {
 public:
  // With a CUDA `device` the weights are copied there and the forward runs there.
  V4Model(ModelConfig config, ModelWeights weights, Numerics numerics, DeviceId device = {});
  ~V4Model() override;

  const ModelConfig& config() const override { return config_; }
  DeviceId device() const override { return device_; }
  std::unique_ptr<ModelState> CreateState(int64_t num_slots, int64_t num_blocks, int64_t block_size,
                                          int64_t max_step_tokens = 0) const override;
  size_t BytesPerSlot(int64_t block_size) const override;
  size_t BytesPerBlock(int64_t block_size) const override;
  size_t LastStepStagedBytes() const override { return workspace_->staged_bytes(); }
  size_t LastStepWorkspacePeakBytes() const override { return workspace_->peak_bytes_in_use(); }
  StepCost EstimateStepCost(const StepCostQuery& query) const override;  // v4_cost.cpp
  void Forward(const ForwardBatch& batch, ModelState& state, const TensorView& logits,
               const ForwardHooks* hooks) const override;

  const ModelWeights& weights() const { return weights_; }
  // Blocks (MTP blocks included) whose routed experts take w1 and w3 as one weight
  // (ExpertWeights::w13, DEEPINFER_JOIN_W13).
  int64_t JoinedW13Blocks() const;

 private:
  struct StepContext;  // per-step token metadata and scratch (v4_step.h)
  class StepBranches;  // a step's concurrent branches (v4_step.h)

  struct AttendedRows;  // each token's row lists before the index selection (v4_step.h)

  void Block(const StepContext& ctx, const BlockWeights& w, const TensorView& streams) const;
  // The attention sublayer up to its output projection: o [tokens, heads, head_dim], the values'
  // rope channels still rotated.
  TensorView Attention(const StepContext& ctx, const BlockWeights& w, const TensorView& x) const;
  // The rotation undone on o's rope channels (in place), then wo_a and wo_b into out [tokens, D].
  void AttentionOutput(const StepContext& ctx, const BlockWeights& w, const TensorView& o,
                       const TensorView& out) const;
  void Moe(const StepContext& ctx, const BlockWeights& w, const TensorView& x,
           const TensorView& out) const;
  // The MoE's routed part: the router, the rows grouped by expert, the experts' products into ye
  // [max(tokens·k, 1), D]; expert_ids [tokens, k] and slot_rows [tokens·k] are set for the combine.
  // xq: x through the activation rounding (QuantizedCopy).
  void RoutedExperts(const StepContext& ctx, const BlockWeights& w, const TensorView& x, const TensorView& xq,
                     const TensorView& ye, TensorView& slot_rows, TensorView& expert_ids) const;
  // Every token's rows before the index selection (ops::BuildAttentionRows): its window (the ring
  // and this step's fresh rows), on HCA layers every compressed row it sees, on CSA layers its
  // index candidates. Reads only the step's plan, not the state.
  AttendedRows PlanAttendedRows(const StepContext& ctx, const BlockWeights& w) const;
  // Attention of every token of the batch over those rows, on CSA layers with the indexer's
  // selection appended.
  void AttendTokens(const StepContext& ctx, const BlockWeights& w, const AttendedRows& rows, const TensorView& q,
                    const TensorView& index_q, const TensorView& index_w, const TensorView& out) const;
  // Streams every chunk through a compressor and stores the emitted rows (normalized, rotated,
  // rounded) into the sequences' paged rows.
  void Compress(const StepContext& ctx, const BlockWeights& w, bool indexer, const TensorView& kv_proj,
                const TensorView& score_proj) const;
  // Writes the last `window` fresh rows of every chunk into its slot's ring.
  void WriteRing(const StepContext& ctx, const BlockWeights& w) const;
  // The reference's act_quant ahead of its FP8/FP4 GEMMs, when numerics_.fp8_activations is on
  // (a no-op otherwise, and where act_quant_in_kernels_: the GEMMs round x themselves): every row
  // of x [M, K] rounded in place through e4m3 in blocks of 128 with ue8m0 scales; with row_count
  // (one I32 on the device) only rows r < row_count.
  void QuantizeLinearInput(const StepContext& ctx, const TensorView& x, const TensorView& row_count = {}) const;
  // For an input that unquantized consumers read too: x itself when the switch is off or
  // act_quant_in_kernels_, else a rounded copy of x (contiguous) in the step's workspace.
  TensorView QuantizedCopy(const StepContext& ctx, const TensorView& x) const;
  // Whether every linear the reference quantizes the input of (wq_a, wkv, wq_b, the indexer's
  // wq_b, wo_b, the routed and shared experts) rounds it in its kernels (ops::
  // QuantizesFp8InputInKernel), so the two functions above need not: fp8_activations on a CUDA
  // device with tensor_core_linears and FP8 / FP4 weights. The same values reach the MMAs.
  bool ActQuantInKernels() const;
  // How the inputs rounded by the two functions above reach their linears (ops::LinearInput):
  // kFp8Blocks when fp8_activations is on (then, with tensor_core_linears, FP8 MMAs on the codes).
  ops::LinearInput QuantizedInput() const {
    return numerics_.fp8_activations ? ops::LinearInput::kFp8Blocks : ops::LinearInput::kAsIs;
  }
  // ops::Linear of an input rounded as above (QuantizedInput), with the scratch the GPU's FP8 GEMM
  // quantizes it into, from the step's workspace.
  void QuantizedLinear(const StepContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y) const;
  // How a block's norm outputs (attn_norm's, ffn_norm's) reach their unquantized linears:
  // kBf16Values when bf16_norm_outputs rounds them (then, with tensor_core_linears, one BF16 part
  // where the warp-specialized kernels run the product), else kAsIs.
  ops::LinearInput NormOutputInput() const {
    return numerics_.bf16_norm_outputs ? ops::LinearInput::kBf16Values : ops::LinearInput::kAsIs;
  }
  // ops::Linear of an unquantized input (kAsIs, or kBf16Values: NormOutputInput) on a BF16 weight
  // (the compressors', the indexer's, the gate's), with the scratch a GPU kernel uses where it
  // wants one (x's BF16 parts, split once per call for the warp-specialized GEMM: the same bits as
  // without), from the step's workspace.
  void DenseLinear(const StepContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y,
                   ops::LinearInput input) const;
  // DenseLinear of one x for several weights (ops::LinearsOfOneInput: x's parts split once for the
  // products that use them).
  void DenseLinearsOfOneInput(const StepContext& ctx, const TensorView& x,
                              const std::vector<ops::LinearProduct>& products, ops::LinearInput input) const;
  void UploadWeights();
  // The routed experts of every block as ops::ExpertsWeight, pointing at the weights where they
  // live (after UploadWeights on a CUDA device).
  void BuildExpertTables();

  const ops::RopeTable& RopeFor(int64_t layer) const;
  // Whether a step of `tokens` tokens is one that forks: at most DEEPINFER_FORK_TOKENS tokens
  // (unset or 0: none). It also shapes the branches (a CSA layer's x products spread), on every
  // device and pass alike, so a graph's capture and its record-only passes queue the same uploads.
  bool ForksAt(int64_t tokens) const;
  // The side streams a step's independent work forks onto (StepBranches), or null for one stream:
  // on the CPU, for a record-only or profiled step, and where !ForksAt.
  StreamBranches* ForkStreams(const StepContext& ctx) const;

  // The state's attention rows (StateLayout::ForConfig): Numerics::state_rows under kv_fp8, else f32
  // (dim 0).
  cpu::PackedRowFormat StateRowFormat() const;

  ModelConfig config_;
  ModelWeights weights_;
  Numerics numerics_;
  DeviceId device_;
  bool act_quant_in_kernels_ = false;  // ActQuantInKernels(), fixed at construction
  std::vector<Buffer> device_weights_;        // the weights' copies on a CUDA device
  Buffer device_rope_;                        // both rope tables' inverse frequencies there
  Buffer head_tiles_;                         // the head's tiles (ops::WriteDenseTiles) where asked for
  struct ExpertTables {
    ops::ExpertsWeight w1, w3, w2;
    ops::ExpertsWeight w13;  // every expert's ExpertWeights::w13 where all have one (w1, w3 then empty)
  };
  std::vector<ExpertTables> expert_tables_;   // by BlockWeights::layer (MTP blocks after the layers)
  mutable std::unique_ptr<Workspace> workspace_;
  std::unique_ptr<StreamBranches> side_streams_;  // CUDA: kSideStreams side streams for StepBranches
  ops::RopeTable rope_plain_;       // base rope_theta, no YaRN (ratio-0 layers)
  ops::RopeTable rope_compressed_;  // compress_rope_theta with YaRN (CSA / HCA layers)
};

}  // namespace deepinfer::v4
