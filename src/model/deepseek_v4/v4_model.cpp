// DeepSeek-V4: top-level forward, blocks with mHC, and the MoE sublayer.
#include "model/deepseek_v4/v4_model.h"

#include <cmath>
#include <cstring>

#include "base/math.h"
#include "model/deepseek_v4/v4_step.h"

namespace deepinfer::v4 {

V4Model::V4Model(ModelConfig config, ModelWeights weights, Numerics numerics)
    : config_(std::move(config)), weights_(std::move(weights)), numerics_(numerics) {
  const auto& c = config_;
  rope_plain_ = ops::MakeRopeTable(c.qk_rope_head_dim, c.rope_theta, 0, 1.0, 0, 0);
  const auto& rs = c.rope_scaling;
  const bool yarn = rs.type == "yarn";
  rope_compressed_ = ops::MakeRopeTable(c.qk_rope_head_dim, c.compress_rope_theta,
                                        yarn ? rs.original_max_position_embeddings : 0,
                                        yarn ? rs.factor : 1.0, rs.beta_fast, rs.beta_slow);
}

const ops::RopeTable& V4Model::RopeFor(int64_t layer) const {
  return config_.compress_ratio(layer) != 0 ? rope_compressed_ : rope_plain_;
}

std::unique_ptr<ModelState> V4Model::CreateState(int64_t num_slots, int64_t num_blocks,
                                                 int64_t block_size) const {
  return std::make_unique<V4State>(StateLayout::ForConfig(config_, block_size), num_slots,
                                   num_blocks);
}

size_t V4Model::BytesPerSlot(int64_t block_size) const {
  return StateLayout::ForConfig(config_, block_size).slot_floats * sizeof(float);
}

size_t V4Model::BytesPerBlock(int64_t block_size) const {
  return StateLayout::ForConfig(config_, block_size).block_floats * sizeof(float);
}

namespace {

void ValidateBatch(const ForwardBatch& batch, const StateStorage& state, bool has_paged_rows) {
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SequenceChunk& s = batch.seqs[i];
    DI_CHECK(s.num_tokens > 0 && s.token_offset >= 0 &&
                 s.token_offset + s.num_tokens <= batch.num_tokens,
             "chunk {}: tokens [{}, {}) outside the batch of {}", i, s.token_offset,
             s.token_offset + s.num_tokens, batch.num_tokens);
    DI_CHECK(s.start_pos >= 0, "chunk {}: negative start position", i);
    DI_CHECK(s.state_slot >= 0 && s.state_slot < state.num_slots(), "chunk {}: state slot {} invalid", i,
             s.state_slot);
    if (has_paged_rows) {
      const int64_t needed = DivCeil(s.start_pos + s.num_tokens, state.layout().block_size);
      DI_CHECK(s.num_blocks >= needed && s.block_table != nullptr,
               "chunk {}: {} blocks given, {} tokens need {}", i, s.num_blocks,
               s.start_pos + s.num_tokens, needed);
    }
  }
}

}  // namespace

void V4Model::Forward(const ForwardBatch& batch, ModelState& state_base, const TensorView& logits,
                      const ForwardHooks* hooks) const {
  const auto& state = dynamic_cast<V4State&>(state_base).storage();
  const auto& c = config_;
  bool has_paged_rows = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) has_paged_rows |= c.compress_ratio(l) != 0;
  ValidateBatch(batch, state, has_paged_rows);

  StepContext ctx;
  ctx.batch = &batch;
  ctx.state = &state;
  ctx.op = ops::HostContext();
  ctx.positions.assign(static_cast<size_t>(batch.num_tokens), -1);
  for (const SequenceChunk& s : batch.seqs) {
    for (int64_t j = 0; j < s.num_tokens; ++j) ctx.positions[s.token_offset + j] = s.start_pos + j;
  }
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    DI_CHECK(ctx.positions[t] >= 0, "token {} of the batch belongs to no chunk", t);
  }

  ctx.positions_view = TensorView(ctx.positions.data(), DType::kI64, {batch.num_tokens});
  ctx.token_ids = TensorView(const_cast<int32_t*>(batch.token_ids), DType::kI32, {batch.num_tokens});

  const int64_t tokens = batch.num_tokens, d = c.hidden_size, s = c.hc_mult;
  HostTensor h(DType::kF32, {tokens, d});
  ops::Embedding(ctx.op, ctx.token_ids, weights_.embed, h.view());
  HostTensor streams(DType::kF32, {tokens, s, d});
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < s; ++k) {
      std::memcpy(streams.data<float>() + (t * s + k) * d, h.data<float>() + t * d, d * sizeof(float));
    }
  }
  for (const BlockWeights& w : weights_.layers) {
    Block(ctx, w, streams);
    if (hooks != nullptr && hooks->on_block_output) {
      hooks->on_block_output(w.layer, streams.view(), ctx.positions);
    }
  }

  std::vector<int64_t> rows;
  for (const SequenceChunk& sq : batch.seqs) {
    if (sq.want_logits) rows.push_back(sq.token_offset + sq.num_tokens - 1);
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  DI_CHECK(logits.ndim() == 2 && logits.size(0) == n && logits.size(1) == c.vocab_size,
           "logits buffer is {}, expected [{}, {}]", logits.ShapeString(), n, c.vocab_size);
  if (n == 0) return;
  HostTensor last(DType::kF32, {n, s, d});
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(last.data<float>() + i * s * d, streams.data<float>() + rows[i] * s * d,
                s * d * sizeof(float));
  }
  HostTensor y(DType::kF32, {n, d});
  ops::HcHead(ctx.op, last.view(), HcParamsFor(weights_.hc_head, c), y.view());
  ops::RmsNorm(ctx.op, y.view(), weights_.norm, static_cast<float>(c.rms_norm_eps), y.view());
  ops::Linear(ctx.op, y.view(), weights_.head, logits);
}

void V4Model::Block(const StepContext& ctx, const BlockWeights& w, HostTensor& streams) const {
  const auto& c = config_;
  const int64_t tokens = ctx.batch->num_tokens, d = c.hidden_size, s = c.hc_mult;
  const float eps = static_cast<float>(c.rms_norm_eps);
  HostTensor a(DType::kF32, {tokens, d}), post(DType::kF32, {tokens, s}),
      comb(DType::kF32, {tokens, s, s}), o(DType::kF32, {tokens, d}),
      mid(DType::kF32, {tokens, s, d});

  ops::HcPre(ctx.op, streams.view(), HcParamsFor(w.hc_attn, c), a.view(), post.view(), comb.view());
  ops::RmsNorm(ctx.op, a.view(), w.attn_norm, eps, a.view());
  Attention(ctx, w, a.view(), o.view());
  ops::HcPost(ctx.op, o.view(), streams.view(), post.view(), comb.view(), mid.view());

  ops::HcPre(ctx.op, mid.view(), HcParamsFor(w.hc_ffn, c), a.view(), post.view(), comb.view());
  ops::RmsNorm(ctx.op, a.view(), w.ffn_norm, eps, a.view());
  Moe(ctx, w, a.view(), o.view());
  ops::HcPost(ctx.op, o.view(), mid.view(), post.view(), comb.view(), streams.view());
}

void V4Model::Moe(const StepContext& ctx, const BlockWeights& w, const TensorView& x,
                  const TensorView& out) const {
  const auto& c = config_;
  const MoeWeights& m = w.ffn;
  const int64_t tokens = x.size(0), d = c.hidden_size, k = c.num_experts_per_tok;
  const int64_t inter = c.moe_intermediate_size, num_experts = c.n_routed_experts;
  const float limit = static_cast<float>(c.swiglu_limit);

  HostTensor gate_logits(DType::kF32, {tokens, num_experts});
  ops::Linear(ctx.op, x, m.gate, gate_logits.view());
  ops::RouterParams rp;
  rp.score = c.scoring_func == ScoringFunc::kSqrtSoftplus ? ops::RouterScore::kSqrtSoftplus
             : c.scoring_func == ScoringFunc::kSigmoid    ? ops::RouterScore::kSigmoid
                                                          : ops::RouterScore::kSoftmax;
  rp.num_experts = num_experts;
  rp.top_k = k;
  rp.route_scale = static_cast<float>(c.routed_scaling_factor);
  rp.normalize = c.norm_topk_prob;
  if (w.hash_routed) {
    rp.tid2eid = m.tid2eid.data<int64_t>();
    rp.tid2eid_rows = m.tid2eid.size(0);
  } else {
    rp.bias = m.gate_bias.data<float>();
  }
  std::vector<int32_t> expert_ids(static_cast<size_t>(tokens * k));
  std::vector<float> expert_weights(static_cast<size_t>(tokens * k));
  ops::Route(ctx.op, gate_logits.view(), ctx.token_ids, rp, TensorView(expert_ids.data(), DType::kI32, {tokens, k}),
             TensorView(expert_weights.data(), DType::kF32, {tokens, k}));

  // routed[e] lists (token·k + j) for every token sending slot j to expert e. A token whose
  // hash table names the same expert twice gets that expert's output once, with the weight of
  // one slot (the normalization still counts both): the reference adds with an index-put that
  // keeps one write per token, and its goldens depend on that.
  std::vector<std::vector<int64_t>> routed(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = expert_ids[t * k + j];
      bool repeated = false;
      for (int64_t jj = 0; jj < j; ++jj) repeated |= expert_ids[t * k + jj] == e;
      if (!repeated) routed[e].push_back(t * k + j);
    }
  }

  float* op = out.data<float>();
  std::memset(op, 0, static_cast<size_t>(tokens * d) * sizeof(float));
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& items = routed[e];
    if (items.empty()) continue;
    const int64_t n = static_cast<int64_t>(items.size());
    HostTensor xe(DType::kF32, {n, d}), g(DType::kF32, {n, inter}), u(DType::kF32, {n, inter}),
        ye(DType::kF32, {n, d});
    std::vector<float> row_weights(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t token = items[r] / k;
      std::memcpy(xe.data<float>() + r * d, x.data<float>() + token * x.stride(0), d * sizeof(float));
      row_weights[r] = expert_weights[items[r]];
    }
    const ExpertWeights& ew = m.experts[e];
    ops::Linear(ctx.op, xe.view(), ew.w1, g.view());
    ops::Linear(ctx.op, xe.view(), ew.w3, u.view());
    ops::ClampedSwiGlu(ctx.op, g.view(), u.view(), limit, TensorView(row_weights.data(), DType::kF32, {n}));
    ops::Linear(ctx.op, g.view(), ew.w2, ye.view());
    for (int64_t r = 0; r < n; ++r) {
      float* dst = op + (items[r] / k) * d;
      const float* src = ye.data<float>() + r * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += src[i];
    }
  }
  HostTensor g(DType::kF32, {tokens, inter}), u(DType::kF32, {tokens, inter}),
      ys(DType::kF32, {tokens, d});
  ops::Linear(ctx.op, x, m.shared.w1, g.view());
  ops::Linear(ctx.op, x, m.shared.w3, u.view());
  ops::ClampedSwiGlu(ctx.op, g.view(), u.view(), limit, TensorView());
  ops::Linear(ctx.op, g.view(), m.shared.w2, ys.view());
  for (int64_t i = 0; i < tokens * d; ++i) op[i] += ys.data<float>()[i];
}

}  // namespace deepinfer::v4
