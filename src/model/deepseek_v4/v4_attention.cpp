// DeepSeek-V4 attention sublayer: q/kv paths, compressors, lightning indexer, sparse attention
// with sinks over the raw window and the compressed rows, grouped output projection.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "model/deepseek_v4/v4_step.h"

namespace deepinfer::v4 {

namespace {

// Reshapes a contiguous [T, A·B] tensor as [T, A, B].
TensorView As3d(const TensorView& t, int64_t a, int64_t b) {
  return TensorView(t.raw(), t.dtype(), {t.size(0), a, b}, t.device());
}

}  // namespace

void V4Model::Attention(const StepContext& ctx, const BlockWeights& w, const TensorView& x,
                        const TensorView& out) const {
  const auto& c = config_;
  const AttentionWeights& aw = w.attn;
  const int64_t tokens = x.size(0), heads = c.num_attention_heads, hd = c.head_dim;
  const int64_t rope = c.qk_rope_head_dim, nope = hd - rope;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const ops::RopeTable& table = RopeFor(w.layer);
  const TensorView& pos = ctx.positions_view;

  // q: qr = q_norm(wq_a x); q = wq_b qr per head, unweighted RMS per head, RoPE on the tail.
  HostTensor qr(DType::kF32, {tokens, c.q_lora_rank});
  ops::Linear(ctx.op, x, aw.wq_a, qr.view());
  ops::RmsNorm(ctx.op, qr.view(), aw.q_norm, eps, qr.view());
  HostTensor q(DType::kF32, {tokens, heads, hd});
  ops::Linear(ctx.op, qr.view(), aw.wq_b, q.view().Reshape({tokens, heads * hd}));
  ops::RmsNorm(ctx.op, q.view().Reshape({tokens * heads, hd}), TensorView(), eps,
               q.view().Reshape({tokens * heads, hd}));
  ops::Rope(ctx.op, q.view(), pos, table, false);

  // kv: one shared head, K = V.
  HostTensor kv(DType::kF32, {tokens, hd});
  ops::Linear(ctx.op, x, aw.wkv, kv.view());
  ops::RmsNorm(ctx.op, kv.view(), aw.kv_norm, eps, kv.view());
  ops::Rope(ctx.op, As3d(kv.view(), 1, hd), pos, table, false);
  if (numerics_.kv_fp8) ops::Fp8RoundTripRows(ctx.op, kv.view(), 0, nope, 64);

  HostTensor ckv, cscore, index_q, index_w, ikv, iscore;
  if (aw.compressor) {
    const int64_t width = aw.compressor->wkv.out_features;
    ckv = HostTensor(DType::kF32, {tokens, width});
    cscore = HostTensor(DType::kF32, {tokens, width});
    ops::Linear(ctx.op, x, aw.compressor->wkv, ckv.view());
    ops::Linear(ctx.op, x, aw.compressor->wgate, cscore.view());
  }
  if (aw.indexer) {
    const IndexerWeights& iw = *aw.indexer;
    const int64_t ih = c.index_n_heads, id = c.index_head_dim;
    index_q = HostTensor(DType::kF32, {tokens, ih, id});
    ops::Linear(ctx.op, qr.view(), iw.wq_b, index_q.view().Reshape({tokens, ih * id}));
    ops::Rope(ctx.op, index_q.view(), pos, table, false);
    ops::HadamardRows(ctx.op, index_q.view().Reshape({tokens * ih, id}));
    if (numerics_.indexer_fp4) ops::Fp4RoundTripRows(ctx.op, index_q.view().Reshape({tokens * ih, id}), 32);
    index_w = HostTensor(DType::kF32, {tokens, ih});
    ops::Linear(ctx.op, x, iw.weights_proj, index_w.view());
    const float scale = 1.f / std::sqrt(static_cast<float>(id) * static_cast<float>(ih));
    for (int64_t i = 0; i < tokens * ih; ++i) index_w.data<float>()[i] *= scale;
    const int64_t width = iw.compressor.wkv.out_features;
    ikv = HostTensor(DType::kF32, {tokens, width});
    iscore = HostTensor(DType::kF32, {tokens, width});
    ops::Linear(ctx.op, x, iw.compressor.wkv, ikv.view());
    ops::Linear(ctx.op, x, iw.compressor.wgate, iscore.view());
  }

  HostTensor o(DType::kF32, {tokens, heads, hd});
  for (const SequenceChunk& seq : ctx.batch->seqs) {
    if (aw.compressor) Compress(ctx, w, seq, false, ckv.view(), cscore.view());
    if (aw.indexer) Compress(ctx, w, seq, true, ikv.view(), iscore.view());
  }
  AttendTokens(ctx, w, q.view(), kv.view(), index_q.view(), index_w.view(), o.view());
  for (const SequenceChunk& seq : ctx.batch->seqs) {
    // Only now may the chunk's rows enter the ring: its earlier queries read older rows there.
    float* ring = ctx.state->Window(seq.state_slot, w.layer);
    const int64_t window = c.sliding_window;
    for (int64_t j = std::max<int64_t>(0, seq.num_tokens - window); j < seq.num_tokens; ++j) {
      std::memcpy(ring + ((seq.start_pos + j) % window) * hd,
                  kv.data<float>() + (seq.token_offset + j) * hd, hd * sizeof(float));
    }
  }

  // Undo the rotation on the value's rope channels, then the grouped low-rank output.
  ops::Rope(ctx.op, o.view(), pos, table, true);
  const int64_t groups = c.o_groups;
  HostTensor z(DType::kF32, {tokens, groups, c.o_lora_rank});
  ops::GroupedLinear(ctx.op, o.view().Reshape({tokens, groups, heads * hd / groups}), aw.wo_a, groups,
                     z.view());
  ops::Linear(ctx.op, z.view().Reshape({tokens, groups * c.o_lora_rank}), aw.wo_b, out);
}

void V4Model::Compress(const StepContext& ctx, const BlockWeights& w, const SequenceChunk& seq,
                       bool indexer, const TensorView& kv_proj, const TensorView& score_proj) const {
  const auto& c = config_;
  const StateStorage& st = *ctx.state;
  const CompressorWeights& cw = indexer ? w.attn.indexer->compressor : *w.attn.compressor;
  const ops::CompressorShape shape{cw.ratio, cw.dim};
  const int64_t width = shape.width();
  float* kv_state = indexer ? st.IndexerKv(seq.state_slot, w.layer) : st.CompressorKv(seq.state_slot, w.layer);
  float* score_state =
      indexer ? st.IndexerScore(seq.state_slot, w.layer) : st.CompressorScore(seq.state_slot, w.layer);

  const int64_t max_rows = seq.num_tokens / cw.ratio + 1;
  HostTensor rows(DType::kF32, {max_rows, cw.dim});
  std::vector<int64_t> row_index(static_cast<size_t>(max_rows));
  const int64_t emitted = ops::CompressorAdvance(
      shape, cw.ape.data<float>(), kv_proj.data<float>() + seq.token_offset * width,
      score_proj.data<float>() + seq.token_offset * width, seq.num_tokens, seq.start_pos, kv_state,
      score_state, rows.data<float>(), row_index.data());
  if (emitted == 0) return;

  // A row is normalized, rotated at its window's first position, then rounded like the
  // reference: FP8 on the nope channels (main rows) or Hadamard + FP4 (index rows).
  const TensorView out = rows.view().Slice(0, emitted);
  ops::RmsNorm(ctx.op, out, cw.norm, static_cast<float>(c.rms_norm_eps), out);
  std::vector<int64_t> positions(static_cast<size_t>(emitted));
  for (int64_t j = 0; j < emitted; ++j) positions[j] = row_index[j] * cw.ratio;
  ops::Rope(ctx.op, TensorView(out.raw(), DType::kF32, {emitted, 1, cw.dim}),
            TensorView(positions.data(), DType::kI64, {emitted}),
            RopeFor(w.layer), false);
  if (indexer) {
    ops::HadamardRows(ctx.op, out);
    if (numerics_.indexer_fp4) ops::Fp4RoundTripRows(ctx.op, out, 32);
  } else if (numerics_.kv_fp8) {
    ops::Fp8RoundTripRows(ctx.op, out, 0, cw.dim - c.qk_rope_head_dim, 64);
  }
  const int64_t per_block = st.layout().rows_per_block(w.layer);
  for (int64_t j = 0; j < emitted; ++j) {
    const int64_t r = row_index[j];
    DI_CHECK(r / per_block < seq.num_blocks, "compressed row {} needs block {} of {}", r,
             r / per_block, seq.num_blocks);
    const int32_t block = seq.block_table[r / per_block];
    float* base = indexer ? st.IndexRows(block, w.layer) : st.MainRows(block, w.layer);
    std::memcpy(base + (r % per_block) * cw.dim, out.data<float>() + j * cw.dim,
                cw.dim * sizeof(float));
  }
}

void V4Model::AttendTokens(const StepContext& ctx, const BlockWeights& w, const TensorView& q,
                           const TensorView& kv, const TensorView& index_q, const TensorView& index_w,
                           const TensorView& out) const {
  const auto& c = config_;
  const StateStorage& st = *ctx.state;
  const std::vector<SequenceChunk>& seqs = ctx.batch->seqs;
  const int64_t heads = c.num_attention_heads, hd = c.head_dim, window = c.sliding_window;
  const int64_t ratio = w.compress_ratio;
  const int64_t per_block = ratio ? st.layout().rows_per_block(w.layer) : 1;
  const float* sinks = w.attn.attn_sink.data<float>();
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  int64_t max_keys = window, max_index_rows = 0;
  for (const SequenceChunk& seq : seqs) {
    const int64_t rows = ratio ? (seq.start_pos + seq.num_tokens) / ratio : 0;
    max_keys = std::max(max_keys, window + (ratio == 4 ? std::min<int64_t>(c.index_topk, rows) : rows));
    if (ratio == 4) max_index_rows = std::max(max_index_rows, rows);
  }

  // One task per token of the batch (token t belongs to chunk chunk_of[t]).
  std::vector<int32_t> chunk_of(static_cast<size_t>(ctx.batch->num_tokens));
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int64_t j = 0; j < seqs[i].num_tokens; ++j) chunk_of[seqs[i].token_offset + j] = static_cast<int32_t>(i);
  }
  ParallelFor(ctx.batch->num_tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> keys(static_cast<size_t>(max_keys * hd));
    std::vector<float> scores(static_cast<size_t>(heads * max_keys));
    std::vector<float> index_keys(static_cast<size_t>(max_index_rows * c.index_head_dim));
    std::vector<float> index_scratch(static_cast<size_t>(c.index_n_heads * max_index_rows));
    std::vector<int32_t> selected(static_cast<size_t>(ratio == 4 ? c.index_topk : 0));
    for (int64_t t = t0; t < t1; ++t) {
      const SequenceChunk& seq = seqs[chunk_of[t]];
      const int64_t p = seq.start_pos + (t - seq.token_offset);
      const float* ring = st.Window(seq.state_slot, w.layer);
      auto main_row = [&](int64_t r) {
        return st.MainRows(seq.block_table[r / per_block], w.layer) + (r % per_block) * hd;
      };
      // The raw window: this chunk's fresh rows, older ones from the ring.
      int64_t n = 0;
      for (int64_t kp = std::max<int64_t>(0, p - window + 1); kp <= p; ++kp, ++n) {
        const float* src = kp >= seq.start_pos ? kv.data<float>() + (seq.token_offset + kp - seq.start_pos) * hd
                                               : ring + (kp % window) * hd;
        std::memcpy(keys.data() + n * hd, src, hd * sizeof(float));
      }
      const int64_t visible = ratio ? (p + 1) / ratio : 0;
      if (ratio == 128) {
        for (int64_t r = 0; r < visible; ++r, ++n) std::memcpy(keys.data() + n * hd, main_row(r), hd * sizeof(float));
      } else if (ratio == 4 && visible > 0) {
        const int64_t id = c.index_head_dim;
        for (int64_t r = 0; r < visible; ++r) {
          const float* src = st.IndexRows(seq.block_table[r / per_block], w.layer) + (r % per_block) * id;
          std::memcpy(index_keys.data() + r * id, src, id * sizeof(float));
        }
        // Rows the indexer ranks (see SequenceChunk::prompt_end): those existing at the prompt
        // end for a prompt query, at its own position for a later one.
        const int64_t prompt_end = seq.prompt_end > 0 ? seq.prompt_end : seq.start_pos + seq.num_tokens;
        const int64_t candidates = (p < prompt_end ? prompt_end : p + 1) / 4;
        const int64_t k = ops::IndexerTopK(index_q.data<float>() + t * c.index_n_heads * id,
                                           index_w.data<float>() + t * c.index_n_heads, c.index_n_heads,
                                           id, index_keys.data(), visible, candidates,
                                           c.index_topk, index_scratch.data(), selected.data());
        // Rows in ascending order: the attention sum then does not depend on the order the
        // selection algorithm returns them in (only on the set).
        std::sort(selected.begin(), selected.begin() + k);
        for (int64_t i = 0; i < k; ++i, ++n) std::memcpy(keys.data() + n * hd, main_row(selected[i]), hd * sizeof(float));
      }
      ops::AttentionWithSink(q.data<float>() + t * heads * hd, heads, keys.data(), n, hd, sinks, scale,
                             scores.data(), out.data<float>() + t * heads * hd);
    }
  });
}

}  // namespace deepinfer::v4
