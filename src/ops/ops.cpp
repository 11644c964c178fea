#include "ops/ops.h"

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/linear.h"

namespace deepinfer::ops {

namespace {
// The CUDA backend (issue M2) adds its kernels here; until then every op runs on host memory.
void RequireHost(const TensorView& t, const char* op) {
  DI_CHECK(t.device().is_cpu(), "op {}: no kernel for device type {} in this build", op,
           static_cast<int>(t.device().type));
}
}  // namespace

void Embedding(const int32_t* ids, int64_t num_ids, const TensorView& table, const TensorView& y) {
  RequireHost(y, "embedding");
  cpu::Embedding(ids, num_ids, table, y);
}

void RmsNorm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y) {
  RequireHost(x, "rms_norm");
  cpu::RmsNorm(x, weight, eps, y);
}

void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  RequireHost(x, "linear");
  cpu::Linear(x, w, y);
}

void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y) {
  RequireHost(x, "grouped_linear");
  cpu::GroupedLinear(x, w, num_groups, y);
}

RopeTable MakeRopeTable(int64_t rope_dim, double base, int64_t original_max_positions,
                        double factor, double beta_fast, double beta_slow) {
  return RopeTable{cpu::RopeInverseFrequencies(rope_dim, base, original_max_positions, factor,
                                               beta_fast, beta_slow)};
}

void Rope(const TensorView& x, const int64_t* positions, const RopeTable& table, bool inverse) {
  RequireHost(x, "rope");
  cpu::Rope(x, positions, table.inv_freq, inverse);
}

void Fp8RoundTripRows(const TensorView& x, int64_t begin, int64_t end, int64_t block) {
  RequireHost(x, "fp8_round_trip");
  for (int64_t r = 0; r < x.size(0); ++r) {
    cpu::Fp8RoundTrip(x.data<float>() + r * x.stride(0) + begin, end - begin, block);
  }
}

void Fp4RoundTripRows(const TensorView& x, int64_t block) {
  RequireHost(x, "fp4_round_trip");
  for (int64_t r = 0; r < x.size(0); ++r) {
    cpu::Fp4RoundTrip(x.data<float>() + r * x.stride(0), x.size(1), block);
  }
}

void HadamardRows(const TensorView& x) {
  RequireHost(x, "hadamard");
  for (int64_t r = 0; r < x.size(0); ++r) cpu::Hadamard(x.data<float>() + r * x.stride(0), x.size(1));
}

void HcPre(const TensorView& x, const HcParams& p, const TensorView& a, const TensorView& post,
           const TensorView& comb) {
  RequireHost(x, "hc_pre");
  cpu::HcPre(x, p, a, post, comb);
}

void HcPost(const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out) {
  RequireHost(x, "hc_post");
  cpu::HcPost(o, x, post, comb, x_out);
}

void HcHead(const TensorView& x, const HcParams& p, const TensorView& y) {
  RequireHost(x, "hc_head");
  cpu::HcHead(x, p, y);
}

void Route(const TensorView& logits, const int32_t* token_ids, const RouterParams& params,
           int32_t* expert_ids, float* expert_weights) {
  RequireHost(logits, "route");
  cpu::Route(logits.data<float>(), logits.size(0), token_ids, params, expert_ids, expert_weights);
}

void ClampedSwiGlu(const TensorView& gate_inout, const TensorView& up, float limit,
                   const float* row_weights) {
  RequireHost(gate_inout, "swiglu");
  const int64_t n = gate_inout.size(1);
  for (int64_t r = 0; r < gate_inout.size(0); ++r) {
    cpu::ClampedSwiGlu(gate_inout.data<float>() + r * gate_inout.stride(0),
                       up.data<float>() + r * up.stride(0), n, limit,
                       row_weights != nullptr ? row_weights[r] : 1.f);
  }
}

void CompressorReset(const CompressorShape& shape, float* kv_state, float* score_state) {
  cpu::CompressorReset(shape, kv_state, score_state);
}

int64_t CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv,
                          const float* score, int64_t n, int64_t pos0, float* kv_state,
                          float* score_state, float* rows_out, int64_t* row_index_out) {
  return cpu::CompressorAdvance(shape, ape, kv, score, n, pos0, kv_state, score_state, rows_out,
                                row_index_out);
}

void AttentionWithSink(const float* q, int64_t num_heads, const float* kv, int64_t n, int64_t d,
                       const float* sinks, float scale, float* scores, float* out) {
  cpu::AttentionWithSink(q, num_heads, kv, n, d, sinks, scale, scores, out);
}

int64_t IndexerTopK(const float* q, const float* weights, int64_t num_heads, int64_t head_dim,
                    const float* keys, int64_t num_visible, int64_t num_candidates, int64_t top_k,
                    float* scratch, int32_t* selected) {
  return cpu::IndexerTopK(q, weights, num_heads, head_dim, keys, num_visible, num_candidates,
                          top_k, scratch, selected);
}

}  // namespace deepinfer::ops
