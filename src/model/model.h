// The model interface the runner drives, and the registry that builds one from a model dir.
// Architecture-specific code (layer order, state layout) lives behind it in one folder per
// family (deepseek_v4/); nothing else switches on the architecture.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward_batch.h"
#include "model/weight_source.h"

namespace deepinfer {

// Numerics switches (dsv4-model.md §9, docs/numerics.md). The default is the exact fp32 math of
// the reference goldens; the round trips reproduce the reference's quantization: the first two
// are what the FP8 / FP4 state formats store, the third what its FP8 / FP4 GEMMs multiply.
enum class StateRows { kF32, kBf16, kFp8 };

struct Numerics {
  bool kv_fp8 = false;       // KV rows as the reference stores them: e4m3 nope channels (blocks of 64), BF16 rope
  bool indexer_fp4 = false;  // FP4 e2m1 round trip of indexer queries and keys (blocks of 32)
  // FP8 e4m3 round trip, per row in blocks of 128 with ue8m0 scales (the reference's act_quant),
  // of the inputs of the linears the reference runs as FP8/FP4 GEMMs: wq_a, wkv, wq_b, the
  // indexer's wq_b, wo_b, and w1/w3/w2 of the routed and shared experts.
  bool fp8_activations = false;
  // BF16 rounding of the attention output after the inverse rotation: the input of wo_a, which the
  // reference runs as a BF16 einsum on its BF16 attention output. With tensor_core_linears on CUDA,
  // wo_a then multiplies one BF16 part of it instead of three (docs/numerics.md).
  bool bf16_attention_output = false;
  // BF16 rounding of the attention's inputs as the reference's attention kernel takes them: q
  // (BF16 activations in the reference) as the attention reads it, and the probabilities
  // e^{s − max} ahead of their weighted sum of rows (the denominators sum them unrounded). With
  // kv_fp8 and tensor_core_linears on CUDA, the scores and the weighted sums then take one BF16
  // MMA per step instead of three (docs/numerics.md).
  bool bf16_attention_inputs = false;
  // BF16 rounding of the head's input (the final norm's output), as the reference's norm returns
  // BF16 ahead of its f32 head product. With tensor_core_linears on CUDA, the head then multiplies
  // one BF16 part of it instead of three (docs/numerics.md).
  bool bf16_head_input = false;
  // BF16 rounding of the blocks' two norm outputs (attn_norm's and ffn_norm's), as the reference's
  // RMSNorm returns BF16: every product of the attention's and the MoE's input reads the rounded
  // values (act_quant of them ahead of the FP8 / FP4 linears). With tensor_core_linears on CUDA, the
  // BF16 products of that input (the compressors', the indexer's weights_proj and the gate) then
  // multiply one BF16 part of it instead of three where the warp-specialized kernels run them
  // (docs/numerics.md).
  bool bf16_norm_outputs = false;
  // CUDA: BF16 / FP8 / FP4 linears on tensor cores, activations split into three BF16 parts
  // (exact products; only the rounding of the f32 sums changes); with kv_fp8 sparse attention
  // too (its rows are exact in BF16). No effect on the CPU.
  bool tensor_core_linears = false;
  // Not a numerics change (the same bits): CUDA with fp8_activations and tensor_core_linears on a
  // warpgroup-MMA device keeps the routed FP4 experts folded into e4m3 codes for the whole run
  // (about twice their bytes of device memory), so that no step converts their nibbles.
  bool fold_fp4_experts = false;
  // CUDA with fp8_activations and tensor_core_linears: the prefill's big products on the faster
  // kernels that sum in another order than decode's (docs/numerics.md, "Batch invariance"): FP8
  // linears of 512+ rows on cuBLASLt's block-scaled GEMM, wo_a's BF16 prefill products on cuBLASLt
  // (with bf16_attention_output), the routed FP4 experts of a prefill on BF16 MMAs with every
  // scale folded in. Each output stays within the order bound of the f32 sum, but a sequence's
  // bits then depend on how its prompt is batched and chunked.
  bool fast_prefill = false;
  // Not a numerics change (the same bits): with kv_fp8, how the state stores its attention rows
  // (raw windows, compressed main rows, fresh rows; v4_state.h): f32 (2,048 bytes a V4 row), BF16
  // (1,024) or dsv4-model.md §6.2's packed FP8 rows (584 bytes at a 592-byte pitch, the default:
  // the most context per GPU, decode steps as fast as with BF16 rows; docs/performance.md version
  // 50). Every value of such a row is exact in each. Without kv_fp8 the rows are f32 whatever this
  // says.
  StateRows state_rows = StateRows::kFp8;
};

// Per-sequence model state (windows, compressor state, paged rows), owned by the runner.
class ModelState {
 public:
  virtual ~ModelState() = default;
  virtual int64_t num_slots() const = 0;
  virtual int64_t num_blocks() const = 0;
  virtual int64_t block_size() const = 0;  // tokens per paged block
  virtual size_t bytes() const = 0;
  virtual size_t bytes_per_slot() const = 0;
  virtual size_t bytes_per_block() const = 0;
  virtual void ResetSlot(int32_t slot) = 0;
  virtual void CopySlot(int32_t from, int32_t to) = 0;
  virtual void CopyBlock(int32_t from, int32_t to) = 0;
  virtual void PoisonBlock(int32_t block) = 0;
  // CUDA: the stream the operations above are queued on (default: the legacy default stream).
  virtual void SetStream(cudaStream_t stream) { (void)stream; }
  // Benchmarks: every float of every slot and block set to a hash-uniform value in [-1, 1]
  // (a context's worth of state without running its prefill; queued like the operations above).
  virtual void FillForBenchmark(uint64_t seed) = 0;
};

// What one forward step touches, for benchmarks' floors (bytes over a bandwidth, FLOPs over a
// rate). The step: `num_seqs` sequences of `tokens_per_seq` tokens each, every sequence having
// `context` positions folded into its state before the step, logits for each sequence's last
// token.
struct StepCostQuery {
  int64_t num_seqs = 1;
  int64_t tokens_per_seq = 1;
  int64_t context = 0;
};

// One layer's share of a StepCost.
struct LayerCost {
  int64_t layer = 0;
  int64_t compress_ratio = 0;
  double weight_bytes = 0;
  double state_read_bytes = 0;
  double linear_flops = 0;
  double attention_flops = 0;
};

struct StepCost {
  // Bytes read from weights: every weight the step uses once (routed experts: the expected
  // number of distinct experts the step's tokens pick under uniform routing; embedding and
  // tid2eid: the rows read).
  double weight_bytes = 0;
  double routed_expert_bytes = 0;  // the routed experts' share of weight_bytes
  double expected_experts_per_layer = 0;
  // State in the layout the model keeps it: rows and compressor states read / written.
  double state_read_bytes = 0;
  double state_write_bytes = 0;
  // 2 FLOPs per multiply-add: every linear projection (experts included, each token times its
  // top-k), and attention (QK and PV over the attended rows) plus the indexer's scores.
  double linear_flops = 0;
  double attention_flops = 0;
  std::vector<LayerCost> layers;  // per layer; the rest (embedding, head) is the totals minus these
  double bytes() const { return weight_bytes + state_read_bytes; }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Where the weights, the state and the forward live.
  virtual DeviceId device() const { return {}; }
  // State for `num_slots` sequences and `num_blocks` paged blocks (block 0 = null) of
  // `block_size` tokens, for steps of up to `max_step_tokens` tokens, static-shape steps
  // (ForwardBatch::static_max_context) included (0: a small default; a larger step grows what the
  // state keeps per step).
  virtual std::unique_ptr<ModelState> CreateState(int64_t num_slots, int64_t num_blocks, int64_t block_size,
                                                  int64_t max_step_tokens = 0) const = 0;
  // Bytes of state one slot and one block take, for sizing pools before allocating.
  virtual size_t BytesPerSlot(int64_t block_size) const = 0;
  virtual size_t BytesPerBlock(int64_t block_size) const = 0;
  // One step. logits: [number of chunks with want_logits, vocab] f32, in chunk order.
  virtual void Forward(const ForwardBatch& batch, ModelState& state, const TensorView& logits,
                       const ForwardHooks* hooks = nullptr) const = 0;
  // The traffic and work of one step (StepCostQuery); for benchmarks, not for scheduling.
  virtual StepCost EstimateStepCost(const StepCostQuery& query) const = 0;
  // Bytes the last Forward uploaded, as graph staging needs them (ForwardBatch::graph_staging).
  virtual size_t LastStepStagedBytes() const { return 0; }
  // The most scratch memory the last Forward held at once (its workspace's peak), 0 if unknown.
  virtual size_t LastStepWorkspacePeakBytes() const { return 0; }
};

struct LoadOptions {
  std::string load_format = "auto";  // "auto" (safetensors) or "dummy"
  uint64_t dummy_seed = 0;
  Numerics numerics;
  DeviceId device{};  // where the weights, the state and the forward live (a CUDA device: the CUDA backend)
};

struct LoadedModel {
  std::unique_ptr<WeightSource> weights;  // owns the mapping / dummy buffers the model views
  std::unique_ptr<Model> model;
  std::vector<std::string> unused_tensors;
};

// Reads MODEL_DIR/config.json, picks the architecture's factory and loads the weights.
LoadedModel LoadModel(const std::string& model_dir, const LoadOptions& options);
// The same from an already-parsed config (dummy weights need no files).
LoadedModel LoadModel(const ModelConfig& config, const std::string& model_dir,
                      const LoadOptions& options);

}  // namespace deepinfer
