// The op API the model is written against (ARCHITECTURE.md §2). Each op checks the tensors'
// device and dispatches to the kernel of that backend with the same contract; the CPU kernels
// (src/kernels/cpu) are the reference. Contracts are documented on the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/compressor.h"
#include "kernels/cpu/hc.h"
#include "kernels/cpu/moe.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor_view.h"

namespace deepinfer::ops {

using cpu::CompressorShape;
using cpu::HcParams;
using cpu::RouterParams;
using cpu::RouterScore;

void Embedding(const int32_t* ids, int64_t num_ids, const TensorView& table, const TensorView& y);
void RmsNorm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y);
void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y);
void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y);

struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
};
RopeTable MakeRopeTable(int64_t rope_dim, double base, int64_t original_max_positions,
                        double factor, double beta_fast, double beta_slow);
void Rope(const TensorView& x, const int64_t* positions, const RopeTable& table, bool inverse);

// In-place round trips over every row of x [M, N] restricted to channels [begin, end).
void Fp8RoundTripRows(const TensorView& x, int64_t begin, int64_t end, int64_t block);
void Fp4RoundTripRows(const TensorView& x, int64_t block);
void HadamardRows(const TensorView& x);

void HcPre(const TensorView& x, const HcParams& p, const TensorView& a, const TensorView& post,
           const TensorView& comb);
void HcPost(const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out);
void HcHead(const TensorView& x, const HcParams& p, const TensorView& y);

void Route(const TensorView& logits, const int32_t* token_ids, const RouterParams& params,
           int32_t* expert_ids, float* expert_weights);
void ClampedSwiGlu(const TensorView& gate_inout, const TensorView& up, float limit,
                   const float* row_weights);

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
