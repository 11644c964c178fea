#include "ops/ops.h"

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/linear.h"

#if DEEPINFER_HAS_CUDA
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/moe.h"
#endif

namespace deepinfer::ops {

namespace {

// Every tensor an op touches lives where the context runs.
void CheckDevice(const OpContext& ctx, const char* op, std::initializer_list<const TensorView*> tensors) {
  for (const TensorView* t : tensors) {
    if (t->empty()) continue;
    DI_CHECK(t->device() == ctx.device, "op {}: a tensor on device {}:{} given to a context on {}:{}", op,
             static_cast<int>(t->device().type), t->device().index, static_cast<int>(ctx.device.type),
             ctx.device.index);
  }
}

[[noreturn]] void NoKernel(const OpContext& ctx, const char* op) {
  DI_THROW("op {}: no kernel for device type {} in this build{}", op, static_cast<int>(ctx.device.type),
           DEEPINFER_HAS_CUDA ? "" : " (configure with the 'cuda' preset for the CUDA backend)");
}

// Dispatch helper: the CPU branch, or the CUDA branch when compiled in.
#if DEEPINFER_HAS_CUDA
#define DI_ON_CUDA(ctx, op, ...)   \
  if ((ctx).on_cuda()) {           \
    __VA_ARGS__;                   \
    return;                        \
  }
#else
#define DI_ON_CUDA(ctx, op, ...) \
  if ((ctx).on_cuda()) NoKernel(ctx, op);
#endif

void RequireHost(const OpContext& ctx, const char* op) {
  if (ctx.on_cuda()) NoKernel(ctx, op);
}

int64_t Rows(const TensorView& t) { return t.size(0); }

}  // namespace

void Embedding(const OpContext& ctx, const TensorView& ids, const TensorView& table, const TensorView& y) {
  CheckDevice(ctx, "embedding", {&ids, &table, &y});
  DI_CHECK(ids.dtype() == DType::kI32 && ids.ndim() == 1, "embedding: ids must be I32 [M]");
  DI_ON_CUDA(ctx, "embedding",
             cuda::Embedding(ids.data<int32_t>(), ids.size(0), table.raw(), table.dtype(), table.size(0),
                             table.size(1), table.stride(0), y.data<float>(), y.stride(0), ctx.stream));
  cpu::Embedding(ids.data<int32_t>(), ids.size(0), table, y);
}

void RmsNorm(const OpContext& ctx, const TensorView& x, const TensorView& weight, float eps, const TensorView& y) {
  CheckDevice(ctx, "rms_norm", {&x, &weight, &y});
  DI_ON_CUDA(ctx, "rms_norm",
             cuda::RmsNorm(x.data<float>(), x.stride(0), Rows(x), x.size(1), weight.empty() ? nullptr : weight.raw(),
                           weight.dtype(), eps, y.data<float>(), y.stride(0), ctx.stream));
  cpu::RmsNorm(x, weight, eps, y);
}

void Linear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y) {
  CheckDevice(ctx, "linear", {&x, &w.data, &y});
  RequireHost(ctx, "linear");
  cpu::Linear(x, w, y);
}

void GroupedLinear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y) {
  CheckDevice(ctx, "grouped_linear", {&x, &w.data, &y});
  RequireHost(ctx, "grouped_linear");
  cpu::GroupedLinear(x, w, num_groups, y);
}

RopeTable MakeRopeTable(int64_t rope_dim, double base, int64_t original_max_positions,
                        double factor, double beta_fast, double beta_slow) {
  return RopeTable{cpu::RopeInverseFrequencies(rope_dim, base, original_max_positions, factor,
                                               beta_fast, beta_slow),
                   TensorView()};
}

void Rope(const OpContext& ctx, const TensorView& x, const TensorView& positions, const RopeTable& table,
          bool inverse) {
  CheckDevice(ctx, "rope", {&x, &positions});
  DI_CHECK(x.ndim() == 3 && positions.dtype() == DType::kI64 && positions.numel() == x.size(0),
           "rope: x {} with {} positions", x.ShapeString(), positions.numel());
  DI_ON_CUDA(ctx, "rope",
             DI_CHECK(!table.device_inv_freq.empty(), "rope: the table has no device copy");
             cuda::Rope(x.data<float>(), x.size(0), x.size(1), x.size(2), x.stride(0), x.stride(1),
                        positions.data<int64_t>(), table.device_inv_freq.data<float>(),
                        static_cast<int64_t>(table.inv_freq.size()), inverse, ctx.stream));
  cpu::Rope(x, positions.data<int64_t>(), table.inv_freq, inverse);
}

void Fp8RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end, int64_t block) {
  CheckDevice(ctx, "fp8_round_trip", {&x});
  DI_ON_CUDA(ctx, "fp8_round_trip",
             cuda::Fp8RoundTripRows(x.data<float>(), x.stride(0), Rows(x), begin, end, block, ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) {
    cpu::Fp8RoundTrip(x.data<float>() + r * x.stride(0) + begin, end - begin, block);
  }
}

void Fp4RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t block) {
  CheckDevice(ctx, "fp4_round_trip", {&x});
  DI_ON_CUDA(ctx, "fp4_round_trip",
             cuda::Fp4RoundTripRows(x.data<float>(), x.stride(0), Rows(x), x.size(1), block, ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) {
    cpu::Fp4RoundTrip(x.data<float>() + r * x.stride(0), x.size(1), block);
  }
}

void HadamardRows(const OpContext& ctx, const TensorView& x) {
  CheckDevice(ctx, "hadamard", {&x});
  DI_ON_CUDA(ctx, "hadamard", cuda::HadamardRows(x.data<float>(), x.stride(0), Rows(x), x.size(1), ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) cpu::Hadamard(x.data<float>() + r * x.stride(0), x.size(1));
}

void HcPre(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& a,
           const TensorView& post, const TensorView& comb) {
  CheckDevice(ctx, "hc_pre", {&x, &p.fn, &a, &post, &comb});
  RequireHost(ctx, "hc_pre");
  cpu::HcPre(x, p, a, post, comb);
}

void HcPost(const OpContext& ctx, const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out) {
  CheckDevice(ctx, "hc_post", {&o, &x, &post, &comb, &x_out});
  RequireHost(ctx, "hc_post");
  cpu::HcPost(o, x, post, comb, x_out);
}

void HcHead(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& y) {
  CheckDevice(ctx, "hc_head", {&x, &p.fn, &y});
  RequireHost(ctx, "hc_head");
  cpu::HcHead(x, p, y);
}

void Route(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids, const RouterParams& params,
           const TensorView& expert_ids, const TensorView& expert_weights) {
  CheckDevice(ctx, "route", {&logits, &token_ids, &expert_ids, &expert_weights});
  DI_CHECK(logits.ndim() == 2 && logits.size(1) == params.num_experts && logits.is_contiguous(),
           "route: logits {} for {} experts", logits.ShapeString(), params.num_experts);
  DI_CHECK(expert_ids.numel() == logits.size(0) * params.top_k && expert_weights.numel() == expert_ids.numel(),
           "route: outputs must hold {} × {} entries", logits.size(0), params.top_k);
  DI_ON_CUDA(ctx, "route",
             cuda::DeviceRouterParams dp;
             dp.score = static_cast<cuda::RouterScoreFn>(params.score); dp.num_experts = params.num_experts;
             dp.top_k = params.top_k; dp.route_scale = params.route_scale; dp.normalize = params.normalize;
             dp.bias = params.bias; dp.tid2eid = params.tid2eid; dp.tid2eid_rows = params.tid2eid_rows;
             cuda::Route(logits.data<float>(), logits.size(0), token_ids.empty() ? nullptr : token_ids.data<int32_t>(),
                         dp, expert_ids.data<int32_t>(), expert_weights.data<float>(), ctx.stream));
  cpu::Route(logits.data<float>(), logits.size(0), token_ids.empty() ? nullptr : token_ids.data<int32_t>(), params,
             expert_ids.data<int32_t>(), expert_weights.data<float>());
}

void ClampedSwiGlu(const OpContext& ctx, const TensorView& gate_inout, const TensorView& up, float limit,
                   const TensorView& row_weights) {
  CheckDevice(ctx, "swiglu", {&gate_inout, &up, &row_weights});
  const int64_t n = gate_inout.size(1);
  const float* weights = row_weights.empty() ? nullptr : row_weights.data<float>();
  DI_ON_CUDA(ctx, "swiglu",
             cuda::ClampedSwiGlu(gate_inout.data<float>(), gate_inout.stride(0), up.data<float>(), up.stride(0),
                                 Rows(gate_inout), n, limit, weights, ctx.stream));
  for (int64_t r = 0; r < Rows(gate_inout); ++r) {
    cpu::ClampedSwiGlu(gate_inout.data<float>() + r * gate_inout.stride(0), up.data<float>() + r * up.stride(0), n,
                       limit, weights != nullptr ? weights[r] : 1.f);
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
