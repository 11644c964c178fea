// DeepSeek-V4 attention sublayer: q/kv paths, compressors, lightning indexer, sparse attention
// with sinks over the raw window and the compressed rows, grouped output projection.
//
// Every row the attention reads is addressed in the state buffer (v4_state.h): the slots' window
// rings, the paged compressed and index rows, and this step's fresh KV rows, which the kv path
// writes straight into their place there (f32 rows) or encodes there (packed rows).
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/deepseek_v4/v4_step.h"

namespace deepinfer::v4 {

namespace {

// Reshapes a contiguous [T, A·B] tensor as [T, A, B].
TensorView As3d(const TensorView& t, int64_t a, int64_t b) {
  return TensorView(t.raw(), t.dtype(), {t.size(0), a, b}, t.device());
}

}  // namespace

TensorView V4Model::Attention(const StepContext& ctx, const BlockWeights& w, const TensorView& x) const {
  const auto& c = config_;
  const AttentionWeights& aw = w.attn;
  const int64_t tokens = x.size(0), heads = c.num_attention_heads, hd = c.head_dim;
  const int64_t rope = c.qk_rope_head_dim, nope = hd - rope;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const ops::RopeTable& table = RopeFor(w.layer);
  const TensorView& pos = ctx.positions_view;
  Workspace& ws = *ctx.ws;

  // wq_a and wkv read x through the activation rounding (fp8_activations); the compressors and
  // the indexer's weights_proj read it as it is (BF16 values under bf16_norm_outputs).
  const TensorView xq = QuantizedCopy(ctx, x);
  // The norm and rope of this layer's head rows (q's heads unweighted, kv by kv_norm).
  auto norm_rope = [&](const TensorView& weight) {
    ops::RowSteps steps;
    steps.norm = true;
    steps.norm_weight = weight;
    steps.eps = eps;
    steps.rope = &table;
    steps.positions = pos;
    return steps;
  };
  // Branches until the attention: q and the index queries (0); the kv row and the row lists (1);
  // x's dense products with the compressors (2; a sliding-window layer has none). A CSA layer's
  // x products in a step that forks (ForksAt) spread over three branches: the index weights beside
  // the kv row (1), the compressor's (2) and the indexer's compressor's (3), each with its own
  // compression, so that no branch holds five products and two compressions in a row. Elsewhere
  // they are one call (x's BF16 parts split once for all of them at large batches); either way
  // every product has the same bits.
  const bool x_products_exist = aw.compressor || aw.indexer;
  const bool spread = aw.compressor && aw.indexer && ForksAt(tokens);
  StepBranches branches(ctx, ForkStreams(ctx), spread ? 3 : x_products_exist ? 2 : 1);
  AttendedRows rows;
  TensorView q, index_q, index_w, ckv, cscore, ikv, iscore;
  auto compressor_products = [&](std::vector<ops::LinearProduct>& list) {
    const int64_t width = aw.compressor->wkv.out_features;
    ckv = ws.Alloc(DType::kF32, {tokens, width});
    cscore = ws.Alloc(DType::kF32, {tokens, width});
    list.push_back({&aw.compressor->wkv, ckv});
    list.push_back({&aw.compressor->wgate, cscore});
  };
  auto index_weight_product = [&](std::vector<ops::LinearProduct>& list) {
    index_w = ws.Alloc(DType::kF32, {tokens, c.index_n_heads});
    list.push_back({&aw.indexer->weights_proj, index_w});
  };
  auto indexer_products = [&](std::vector<ops::LinearProduct>& list) {
    const int64_t width = aw.indexer->compressor.wkv.out_features;
    ikv = ws.Alloc(DType::kF32, {tokens, width});
    iscore = ws.Alloc(DType::kF32, {tokens, width});
    list.push_back({&aw.indexer->compressor.wkv, ikv});
    list.push_back({&aw.indexer->compressor.wgate, iscore});
  };
  auto scale_index_weights = [&](const StepContext& b) {
    const float heads_dims = static_cast<float>(c.index_head_dim) * static_cast<float>(c.index_n_heads);
    ops::Scale(b.op, index_w, 1.f / std::sqrt(heads_dims));
  };

  // kv: one shared head, K = V, computed in place as this step's fresh rows (f32 rows), or in the
  // workspace and then encoded into them (packed rows: the encoding of an already rounded row is
  // exact, state_row.h).
  const StateLayout& layout = ctx.state->layout();
  branches.Add(1, [&](const StepContext& kv_ctx) {
    const TensorView kv = layout.packed_rows() ? ws.Alloc(DType::kF32, {tokens, hd}) : ctx.fresh;
    QuantizedLinear(kv_ctx, xq, aw.wkv, kv);
    ops::RowSteps kv_steps = norm_rope(aw.kv_norm);
    if (numerics_.kv_fp8) {  // the reference's stored row: e4m3 nope channels, BF16 rope channels
      kv_steps.fp8_end = nope;
      kv_steps.fp8_block = 64;
    }
    ops::ApplyRowSteps(kv_ctx.op, As3d(kv, 1, hd), kv_steps);
    if (layout.packed_rows()) {
      ops::PackRows(kv_ctx.op, layout.row_format, kv, ctx.state->base(), TensorView(), ctx.state->fresh_base());
    }
    rows = PlanAttendedRows(kv_ctx, w);
    if (spread) {
      std::vector<ops::LinearProduct> list;
      index_weight_product(list);
      DenseLinearsOfOneInput(kv_ctx, x, list, NormOutputInput());
      scale_index_weights(kv_ctx);
    }
  });

  if (spread) {
    branches.Add(2, [&](const StepContext& b) {
      std::vector<ops::LinearProduct> list;
      compressor_products(list);
      DenseLinearsOfOneInput(b, x, list, NormOutputInput());
      Compress(b, w, false, ckv, cscore);
    });
    branches.Add(3, [&](const StepContext& b) {
      std::vector<ops::LinearProduct> list;
      indexer_products(list);
      DenseLinearsOfOneInput(b, x, list, NormOutputInput());
      Compress(b, w, true, ikv, iscore);
    });
  } else if (x_products_exist) {
    // x's products in one call, so that the GPU splits x into its BF16 parts once for all of them;
    // then the compressors.
    branches.Add(2, [&](const StepContext& b) {
      std::vector<ops::LinearProduct> list;
      if (aw.compressor) compressor_products(list);
      if (aw.indexer) {
        index_weight_product(list);
        indexer_products(list);
      }
      DenseLinearsOfOneInput(b, x, list, NormOutputInput());
      if (aw.compressor) Compress(b, w, false, ckv, cscore);
      if (aw.indexer) {
        scale_index_weights(b);
        Compress(b, w, true, ikv, iscore);
      }
    });
  }

  // q: qr = q_norm(wq_a x); q = wq_b qr per head, unweighted RMS per head, RoPE on the tail.
  // qr feeds only FP8 linears (wq_b, the indexer's wq_b), so it is rounded in place.
  // On CSA layers the heads' queries (0) and the index queries (1) both read qr and nothing else
  // of each other's: with DEEPINFER_INDEX_QUERY_BRANCH in a step that forks, they run on two
  // streams (the index queries on side stream 3), else one after the other.
  branches.Add(0, [&](const StepContext& q_ctx) {
    const TensorView qr = ws.Alloc(DType::kF32, {tokens, c.q_lora_rank});
    QuantizedLinear(q_ctx, xq, aw.wq_a, qr);
    ops::RmsNorm(q_ctx.op, qr, aw.q_norm, eps, qr);
    QuantizeLinearInput(q_ctx, qr);
    StepBranches queries(q_ctx, aw.indexer && IndexQueryBranch() ? ForkStreams(q_ctx) : nullptr, aw.indexer ? 1 : 0,
                         kIndexQueryStream);
    queries.Add(0, [&](const StepContext& b) {
      q = ws.Alloc(DType::kF32, {tokens, heads, hd});
      QuantizedLinear(b, qr, aw.wq_b, q.Reshape({tokens, heads * hd}));
      ops::ApplyRowSteps(b.op, q, norm_rope(TensorView()));
    });
    if (aw.indexer) {
      queries.Add(1, [&](const StepContext& b) {
        const IndexerWeights& iw = *aw.indexer;
        const int64_t ih = c.index_n_heads, id = c.index_head_dim;
        index_q = ws.Alloc(DType::kF32, {tokens, ih, id});
        QuantizedLinear(b, qr, iw.wq_b, index_q.Reshape({tokens, ih * id}));
        ops::RowSteps index_steps;
        index_steps.rope = &table;
        index_steps.positions = pos;
        index_steps.hadamard = true;
        index_steps.fp4_block = numerics_.indexer_fp4 ? 32 : 0;
        ops::ApplyRowSteps(b.op, index_q, index_steps);
      });
    }
    queries.Run();
  });
  branches.Run();

  const TensorView o = ws.Alloc(DType::kF32, {tokens, heads, hd});
  AttendTokens(ctx, w, rows, q, index_q, index_w, o);
  return o;
}

void V4Model::AttentionOutput(const StepContext& ctx, const BlockWeights& w, const TensorView& o,
                              const TensorView& out) const {
  const auto& c = config_;
  const AttentionWeights& aw = w.attn;
  const int64_t tokens = o.size(0), heads = c.num_attention_heads, hd = c.head_dim;
  Workspace& ws = *ctx.ws;
  // Undo the rotation on the value's rope channels, then the grouped low-rank output: wo_a exact
  // (the reference runs it as a BF16 einsum: with bf16_attention_output on o rounded to BF16, as
  // the reference holds it; the op rounds it, consuming o), wo_b's input rounded like every FP8
  // linear's.
  ops::Rope(ctx.op, o, ctx.positions_view, RopeFor(w.layer), true);
  const int64_t groups = c.o_groups;
  const TensorView z = ws.Alloc(DType::kF32, {tokens, groups, c.o_lora_rank});
  const ops::LinearInput o_input = numerics_.bf16_attention_output ? ops::LinearInput::kBf16 : ops::LinearInput::kAsIs;
  const size_t wo_a_bytes = ops::GroupedLinearScratchBytes(ctx.op, tokens, aw.wo_a, groups, o_input);
  const TensorView wo_a_scratch =
      wo_a_bytes == 0 ? TensorView() : ws.Alloc(DType::kI8, {static_cast<int64_t>(wo_a_bytes)});
  ops::GroupedLinear(ctx.op, o.Reshape({tokens, groups, heads * hd / groups}), aw.wo_a, groups, z, o_input,
                     wo_a_scratch);
  const TensorView z2 = z.Reshape({tokens, groups * c.o_lora_rank});
  QuantizeLinearInput(ctx, z2);
  QuantizedLinear(ctx, z2, aw.wo_b, out);
}

void V4Model::Compress(const StepContext& ctx, const BlockWeights& w, bool indexer, const TensorView& kv_proj,
                       const TensorView& score_proj) const {
  const auto& c = config_;
  const StateLayout& layout = ctx.state->layout();
  const CompressorWeights& cw = indexer ? w.attn.indexer->compressor : *w.attn.compressor;
  const ops::CompressorShape shape{cw.ratio, cw.dim};
  const cpu::LayerRowGeometry g = ctx.Geometry(layout, w.layer);
  Workspace& ws = *ctx.ws;

  // Which rows close in this step is known from the positions alone: chunk b emits rows
  // start/ratio … (start+n)/ratio − 1, consecutively from its row offset.
  std::vector<ops::CompressorChunk> chunks;
  std::vector<int64_t> positions, destinations;
  int64_t total = 0;
  for (size_t b = 0; b < ctx.seqs.size(); ++b) {
    const cpu::SeqRowsInfo& sq = ctx.seqs[b];
    const int64_t first = sq.start_pos / cw.ratio, end = (sq.start_pos + sq.num_tokens) / cw.ratio;
    chunks.push_back({sq.slot, sq.token_offset, sq.num_tokens, sq.start_pos, total});
    const SequenceChunk& chunk = ctx.batch->seqs[b];
    for (int64_t r = first; r < end; ++r) {
      DI_CHECK(r / g.rows_per_block < chunk.num_blocks, "compressed row {} needs block {} of {}", r,
               r / g.rows_per_block, chunk.num_blocks);
      // A row is rotated at its window's first position.
      positions.push_back(r * cw.ratio);
      destinations.push_back(indexer ? cpu::IndexRowOffset(ctx.host_plan, g, static_cast<int64_t>(b), r)
                                     : cpu::MainRowOffset(ctx.host_plan, g, static_cast<int64_t>(b), r));
    }
    total += end - first;
  }
  // Static shapes: one row per token (a chunk of n tokens closes at most n rows), the rows past
  // `total` normalized and rotated like the others and scattered into a scratch row after the
  // step's fresh rows, apart for each compressor (StaticShapeScratchRows), so that the two, which a
  // forked step runs side by side, never write the same memory.
  const bool static_shapes = ctx.batch->static_max_context > 0;
  const int64_t launch_rows = static_shapes ? ctx.num_tokens() : total;
  DI_CHECK(total <= launch_rows, "{} compressed rows close in a step of {} tokens", total, launch_rows);
  const bool packed = !indexer && layout.packed_rows();
  if (static_shapes) {
    // The main scratch row is one attention row; the indexer's f32 rows have the ones after it.
    const int64_t room = indexer ? (StaticShapeScratchRows(layout) - 1) * g.row_floats : g.row_floats;
    DI_CHECK(packed || cw.dim <= room, "compressed rows of {} floats do not fit the scratch rows of {}", cw.dim, room);
    positions.resize(static_cast<size_t>(launch_rows), 0);
    const int64_t scratch_row = ctx.num_tokens() + (indexer ? 1 : 0);
    destinations.resize(static_cast<size_t>(launch_rows), g.fresh_base + scratch_row * g.row_floats);
  }
  const TensorView rows = ws.Alloc(DType::kF32, {std::max<int64_t>(launch_rows, 1), cw.dim});
  const TensorView row_index = ws.Alloc(DType::kI64, {std::max<int64_t>(launch_rows, 1)});
  const TensorView emitted = ws.Alloc(DType::kI64, {static_cast<int64_t>(chunks.size())});
  const TensorView chunks_device =
      ws.Upload(ctx.op, chunks.data(), DType::kI64, {static_cast<int64_t>(chunks.size() * sizeof(ops::CompressorChunk) / 8)});
  const int64_t state_offset =
      ctx.state->slots_base() + (indexer ? layout.indexer_offset[w.layer] : layout.compressor_offset[w.layer]);
  ops::CompressorAdvanceBatch(ctx.op, shape, cw.ape, kv_proj, score_proj, ctx.state->base(), state_offset,
                              layout.slot_floats, chunks, chunks_device, rows, row_index, emitted);
  if (launch_rows == 0) return;

  // A row is normalized, rotated, then rounded like the reference: FP8 on the nope channels
  // (main rows) or Hadamard + FP4 (index rows).
  const TensorView out = rows.Slice(0, launch_rows);
  const TensorView row_positions = ws.Upload(ctx.op, positions.data(), DType::kI64, {launch_rows});
  ops::RowSteps steps;
  steps.norm = true;
  steps.norm_weight = cw.norm;
  steps.eps = static_cast<float>(c.rms_norm_eps);
  steps.rope = &RopeFor(w.layer);
  steps.positions = row_positions;
  if (indexer) {
    steps.hadamard = true;
    steps.fp4_block = numerics_.indexer_fp4 ? 32 : 0;
  } else if (numerics_.kv_fp8) {
    steps.fp8_end = cw.dim - c.qk_rope_head_dim;
    steps.fp8_block = 64;
  }
  ops::ApplyRowSteps(ctx.op, TensorView(out.raw(), DType::kF32, {launch_rows, 1, cw.dim}, out.device()), steps);
  const TensorView dst = ws.Upload(ctx.op, destinations.data(), DType::kI64, {launch_rows});
  if (packed) {
    ops::PackRows(ctx.op, layout.row_format, out, ctx.state->base(), dst, 0);
  } else {
    ops::ScatterRows(ctx.op, out, ctx.state->base(), dst);
  }
}

void V4Model::WriteRing(const StepContext& ctx, const BlockWeights& w) const {
  const cpu::LayerRowGeometry g = ctx.Geometry(ctx.state->layout(), w.layer);
  std::vector<int64_t> from, to;
  for (const cpu::SeqRowsInfo& sq : ctx.seqs) {
    for (int64_t j = std::max<int64_t>(0, sq.num_tokens - g.window); j < sq.num_tokens; ++j) {
      from.push_back(g.fresh_base + (sq.token_offset + j) * g.row_floats);
      to.push_back(cpu::RingRowOffset(g, sq.slot, sq.start_pos + j));
    }
  }
  const int64_t n = static_cast<int64_t>(from.size());
  Workspace& ws = *ctx.ws;
  // Attention rows of either format move as row_floats floats of bits.
  const TensorView staged = ws.Alloc(DType::kF32, {n, g.row_floats});
  ops::GatherRows(ctx.op, ctx.state->base(), ws.Upload(ctx.op, from.data(), DType::kI64, {n}), staged);
  ops::ScatterRows(ctx.op, staged, ctx.state->base(), ws.Upload(ctx.op, to.data(), DType::kI64, {n}));
}

V4Model::AttendedRows V4Model::PlanAttendedRows(const StepContext& ctx, const BlockWeights& w) const {
  const auto& c = config_;
  const int64_t tokens = ctx.num_tokens(), ratio = w.compress_ratio;
  const cpu::LayerRowGeometry g = ctx.Geometry(ctx.state->layout(), w.layer);
  Workspace& ws = *ctx.ws;
  int64_t max_visible = 0;
  for (const cpu::SeqRowsInfo& sq : ctx.seqs) {
    if (ratio) max_visible = std::max(max_visible, (sq.start_pos + sq.num_tokens) / ratio);
  }
  const int64_t static_context = ctx.batch->static_max_context;
  if (static_context > 0 && ratio) {
    DI_CHECK(max_visible <= static_context / ratio, "a sequence reaches {} compressed rows, past the static bound {}",
             max_visible, static_context / ratio);
    max_visible = static_context / ratio;
  }
  const int64_t max_rows = g.window + (ratio == 4 ? c.index_topk : ratio == 128 ? max_visible : 0);
  AttendedRows r;
  r.row_ids = ws.Alloc(DType::kI32, {tokens, max_rows});
  r.counts = ws.Alloc(DType::kI32, {tokens});
  if (ratio == 4) {
    r.index_ids = ws.Alloc(DType::kI32, {tokens, std::max<int64_t>(max_visible, 1)});
    r.num_visible = ws.Alloc(DType::kI32, {tokens});
    r.num_candidates = ws.Alloc(DType::kI32, {tokens});
  }
  ops::BuildAttentionRows(ctx.op, ctx.plan, g, r.row_ids, r.counts, r.index_ids, r.num_visible, r.num_candidates);
  return r;
}

void V4Model::AttendTokens(const StepContext& ctx, const BlockWeights& w, const AttendedRows& rows,
                           const TensorView& q, const TensorView& index_q, const TensorView& index_w,
                           const TensorView& out) const {
  const auto& c = config_;
  const int64_t tokens = ctx.num_tokens(), ratio = w.compress_ratio;
  const cpu::LayerRowGeometry g = ctx.Geometry(ctx.state->layout(), w.layer);
  Workspace& ws = *ctx.ws;
  const int64_t static_context = ctx.batch->static_max_context;
  const TensorView &row_ids = rows.row_ids, &counts = rows.counts, &index_ids = rows.index_ids;
  if (ratio == 4) {
    const TensorView selected = ws.Alloc(DType::kI32, {tokens, c.index_topk});
    const TensorView selected_counts = ws.Alloc(DType::kI32, {tokens});
    TensorView scores, tie_scratch;
    if (ctx.op.on_cuda()) {
      int64_t max_candidates = 1;
      for (const cpu::SeqRowsInfo& sq : ctx.seqs) {
        const int64_t end = sq.start_pos + sq.num_tokens;
        max_candidates = std::max(max_candidates, std::max(sq.prompt_end, end) / 4);
      }
      if (static_context > 0) {
        DI_CHECK(max_candidates <= std::max<int64_t>(static_context / 4, 1),
                 "a sequence reaches {} index candidates, past the static bound {}", max_candidates, static_context / 4);
        max_candidates = std::max<int64_t>(static_context / 4, 1);
      }
      scores = ws.Alloc(DType::kF32, {tokens, index_ids.size(1)});
      tie_scratch = ws.Alloc(DType::kI64, {tokens, max_candidates});
    }
    // With indexer_fp4 the queries and the index rows are e2m1 codes times powers of two: exact in BF16.
    ops::IndexerSelect(ctx.op, index_q, index_w, ctx.state->base(), index_ids, rows.num_visible,
                       rows.num_candidates, c.index_topk, scores, tie_scratch, selected, selected_counts,
                       numerics_.indexer_fp4 ? ops::IndexerInputs::kExactInBf16 : ops::IndexerInputs::kF32);
    ops::AppendSelectedRows(ctx.op, ctx.plan, g, selected, selected_counts, row_ids, counts);
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  // With kv_fp8 every row value (fresh, ring and compressed) is an e4m3 code times a power of two or
  // a BF16 value: exact in BF16, whether the rows hold it as f32 or packed.
  const StateLayout& layout = ctx.state->layout();
  ops::AttentionRowFormat rows_format;
  rows_format.kind = layout.packed_rows() ? ops::AttentionRows::kPacked
                     : numerics_.kv_fp8   ? ops::AttentionRows::kExactInBf16
                                          : ops::AttentionRows::kF32;
  rows_format.packed = layout.row_format;
  ops::SparseAttention(ctx.op, q, ctx.state->base(), row_ids, counts, w.attn.attn_sink, scale, out, rows_format,
                       numerics_.bf16_attention_inputs ? ops::AttentionInputs::kBf16 : ops::AttentionInputs::kF32);
}

}  // namespace deepinfer::v4
