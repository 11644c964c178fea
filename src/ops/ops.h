// The op API the model is written against (ARCHITECTURE.md §2). Each op runs where its context
// says (OpContext: the device and, on CUDA, the stream) on tensors of that device, through the
// kernel of that backend with the same contract; the CPU kernels (src/kernels/cpu) are the
// reference. Contracts are documented on the kernels. Ops without a CUDA kernel yet throw when
// given a CUDA context.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/compressor.h"
#include "kernels/cpu/hc.h"
#include "kernels/cpu/moe.h"
#include "ops/op_context.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor_view.h"

namespace deepinfer::ops {

using cpu::CompressorShape;
using cpu::HcParams;
using cpu::RouterParams;
using cpu::RouterScore;

// ids: I32 [M]; table [V, D] BF16/F16/F32; y [M, D] f32.
void Embedding(const OpContext& ctx, const TensorView& ids, const TensorView& table, const TensorView& y);
void RmsNorm(const OpContext& ctx, const TensorView& x, const TensorView& weight, float eps, const TensorView& y);
void Linear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y);
void GroupedLinear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y);

struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  TensorView device_inv_freq;   // the same on the model's device (CUDA), when it runs there
};
RopeTable MakeRopeTable(int64_t rope_dim, double base, int64_t original_max_positions,
                        double factor, double beta_fast, double beta_slow);
// positions: I64 [M] on the context's device.
void Rope(const OpContext& ctx, const TensorView& x, const TensorView& positions, const RopeTable& table,
          bool inverse);

// In-place round trips over every row of x [M, N] restricted to channels [begin, end).
void Fp8RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end, int64_t block);
void Fp4RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t block);
void HadamardRows(const OpContext& ctx, const TensorView& x);

void HcPre(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& a,
           const TensorView& post, const TensorView& comb);
void HcPost(const OpContext& ctx, const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out);
void HcHead(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& y);

// logits [M, E] f32; token_ids I32 [M]; expert_ids I32 [M, top_k]; expert_weights F32 [M, top_k].
// params.bias / params.tid2eid point into the context's device memory.
void Route(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids, const RouterParams& params,
           const TensorView& expert_ids, const TensorView& expert_weights);
// row_weights: F32 [M] or empty (weight 1).
void ClampedSwiGlu(const OpContext& ctx, const TensorView& gate_inout, const TensorView& up, float limit,
                   const TensorView& row_weights);

// Host-only building blocks of the attention sublayer (their batched device forms are next).
void CompressorReset(const CompressorShape& shape, float* kv_state, float* score_state);
int64_t CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv,
                          const float* score, int64_t n, int64_t pos0, float* kv_state,
                          float* score_state, float* rows_out, int64_t* row_index_out);

void AttentionWithSink(const float* q, int64_t num_heads, const float* kv, int64_t n, int64_t d,
                       const float* sinks, float scale, float* scores, float* out);
int64_t IndexerTopK(const float* q, const float* weights, int64_t num_heads, int64_t head_dim,
                    const float* keys, int64_t num_visible, int64_t num_candidates, int64_t top_k,
                    float* scratch, int32_t* selected);

}  // namespace deepinfer::ops
