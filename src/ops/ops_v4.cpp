// The batched ops of the V4 attention and MoE sublayers, state rows and raw memory.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/indexer.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/state_row.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if DEEPINFER_HAS_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda_error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/compressor.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/indexer_ties.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/rows.h"
#endif

namespace deepinfer::ops {

#if DEEPINFER_HAS_CUDA
static_assert(sizeof(CompressorChunk) == sizeof(cuda::CompressorSeq) &&
                  offsetof(CompressorChunk, slot) == offsetof(cuda::CompressorSeq, slot) &&
                  offsetof(CompressorChunk, token_offset) == offsetof(cuda::CompressorSeq, token_offset) &&
                  offsetof(CompressorChunk, num_tokens) == offsetof(cuda::CompressorSeq, num_tokens) &&
                  offsetof(CompressorChunk, pos0) == offsetof(cuda::CompressorSeq, pos0) &&
                  offsetof(CompressorChunk, row_offset) == offsetof(cuda::CompressorSeq, row_offset),
              "CompressorChunk mirrors cuda::CompressorSeq");
#endif

namespace {
int32_t* I32(const TensorView& t) { return t.empty() ? nullptr : t.data<int32_t>(); }
int64_t* I64(const TensorView& t) { return t.empty() ? nullptr : t.data<int64_t>(); }
}  // namespace

// ---- memory ----------------------------------------------------------------------------------

void CopyBytes(const OpContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DI_ON_CUDA(ctx, "copy",
             DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream), "cudaMemcpyAsync");
             cudaPointerAttributes attr{};
             DI_CUDA_CHECK(cudaPointerGetAttributes(&attr, dst), "cudaPointerGetAttributes");
             if (attr.type != cudaMemoryTypeDevice) DI_CUDA_CHECK(cudaStreamSynchronize(ctx.stream), "copy to host"));
  std::memcpy(dst, src, bytes);
}

void CopyBytesAsync(const OpContext& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DI_ON_CUDA(ctx, "copy_async",
             DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream), "cudaMemcpyAsync"));
  std::memcpy(dst, src, bytes);
}

void Scale(const OpContext& ctx, const TensorView& x, float factor) {
  CheckDevice(ctx, "scale", {&x});
  DI_CHECK(x.is_contiguous() && x.dtype() == DType::kF32, "scale: contiguous f32 only");
  DI_ON_CUDA(ctx, "scale", cuda::ScaleF32(x.data<float>(), x.numel(), factor, ctx.stream));
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] *= factor;
}

void FillFloats(const OpContext& ctx, float* x, int64_t n, float value) {
  DI_ON_CUDA(ctx, "fill", cuda::FillF32(x, n, value, ctx.stream));
  std::fill(x, x + n, value);
}

void FillHashUniform(const OpContext& ctx, float* x, int64_t n, uint64_t seed, float lo, float hi) {
  DI_ON_CUDA(ctx, "fill_hash_uniform", cuda::FillHashUniformF32(x, n, seed, lo, hi, ctx.stream));
  for (int64_t i = 0; i < n; ++i) x[i] = cpu::HashUniform(seed, static_cast<uint64_t>(i), lo, hi);
}

void DeviceSpin(const OpContext& ctx, int64_t microseconds) {
  DI_ON_CUDA(ctx, "spin", cuda::SpinMicroseconds(microseconds, ctx.stream));
}

// ---- rows ------------------------------------------------------------------------------------

void GatherRows(const OpContext& ctx, const TensorView& base, const TensorView& src_offsets, const TensorView& dst) {
  CheckDevice(ctx, "gather_rows", {&base, &src_offsets, &dst});
  const int64_t n = src_offsets.numel(), width = dst.size(1);
  DI_CHECK(dst.size(0) == n && src_offsets.dtype() == DType::kI64, "gather_rows: {} offsets for {}", n,
           dst.ShapeString());
  DI_ON_CUDA(ctx, "gather_rows",
             cuda::GatherRows(base.data<float>(), I64(src_offsets), n, width, dst.data<float>(), dst.stride(0),
                              ctx.stream));
  cpu::GatherRows(base.data<float>(), I64(src_offsets), n, width, dst.data<float>(), dst.stride(0));
}

void ScatterRows(const OpContext& ctx, const TensorView& src, const TensorView& base, const TensorView& dst_offsets) {
  CheckDevice(ctx, "scatter_rows", {&src, &base, &dst_offsets});
  const int64_t n = dst_offsets.numel(), width = src.size(1);
  DI_CHECK(src.size(0) >= n && dst_offsets.dtype() == DType::kI64, "scatter_rows: {} offsets for {}", n,
           src.ShapeString());
  DI_ON_CUDA(ctx, "scatter_rows",
             cuda::ScatterRows(src.data<float>(), src.stride(0), n, width, base.data<float>(), I64(dst_offsets),
                               ctx.stream));
  cpu::ScatterRows(src.data<float>(), src.stride(0), n, width, base.data<float>(), I64(dst_offsets));
}

void PackRows(const OpContext& ctx, const cpu::PackedRowFormat& format, const TensorView& src, const TensorView& base,
              const TensorView& dst_offsets, int64_t first_offset) {
  CheckDevice(ctx, "pack_rows", {&src, &base, &dst_offsets});
  format.Validate();
  const int64_t n = src.size(0);
  DI_CHECK(src.dtype() == DType::kF32 && src.ndim() == 2 && src.size(1) == format.dim && src.stride(1) == 1,
           "pack_rows: src {} is not [n, {}] f32 with unit column stride", src.ShapeString(), format.dim);
  DI_CHECK(dst_offsets.empty() || (dst_offsets.dtype() == DType::kI64 && dst_offsets.numel() == n),
           "pack_rows: {} offsets for {} rows", dst_offsets.numel(), n);
  const int64_t* offsets = dst_offsets.empty() ? nullptr : I64(dst_offsets);
  DI_ON_CUDA(ctx, "pack_rows",
             cuda::PackRows(format, src.data<float>(), src.stride(0), n, base.data<float>(), offsets, first_offset,
                            ctx.stream));
  cpu::PackRows(format, src.data<float>(), src.stride(0), n, base.data<float>(), offsets, first_offset);
}

void FillHashPackedRows(const OpContext& ctx, const cpu::PackedRowFormat& format, const cpu::PackedRowRegions& regions,
                        uint64_t seed, float* base) {
  format.Validate();
  DI_ON_CUDA(ctx, "fill_hash_packed_rows", cuda::FillHashPackedRows(format, regions, seed, base, ctx.stream));
  cpu::FillHashPackedRows(format, regions, seed, base);
}

void BuildAttentionRows(const OpContext& ctx, const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry,
                        const TensorView& row_ids, const TensorView& counts, const TensorView& index_ids,
                        const TensorView& num_visible, const TensorView& num_candidates) {
  CheckDevice(ctx, "attention_rows", {&row_ids, &counts, &index_ids, &num_visible, &num_candidates});
  const int64_t max_index = index_ids.empty() ? 0 : index_ids.size(1);
  DI_ON_CUDA(ctx, "attention_rows",
             cuda::BuildAttentionRows(plan, geometry, I32(row_ids), I32(counts), row_ids.size(1), I32(index_ids),
                                      I32(num_visible), I32(num_candidates), max_index, ctx.stream));
  cpu::BuildAttentionRows(plan, geometry, I32(row_ids), I32(counts), row_ids.size(1), I32(index_ids),
                          I32(num_visible), I32(num_candidates), max_index);
}

void AppendSelectedRows(const OpContext& ctx, const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry,
                        const TensorView& selected, const TensorView& selected_counts, const TensorView& row_ids,
                        const TensorView& counts) {
  CheckDevice(ctx, "append_selected_rows", {&selected, &selected_counts, &row_ids, &counts});
  DI_ON_CUDA(ctx, "append_selected_rows",
             cuda::AppendSelectedRows(plan, geometry, I32(selected), I32(selected_counts), selected.size(1),
                                      I32(row_ids), I32(counts), row_ids.size(1), ctx.stream));
  cpu::AppendSelectedRows(plan, geometry, I32(selected), I32(selected_counts), selected.size(1), I32(row_ids),
                          I32(counts), row_ids.size(1));
}

// ---- attention -------------------------------------------------------------------------------

void SparseAttention(const OpContext& ctx, const TensorView& q, const TensorView& base, const TensorView& row_ids,
                     const TensorView& counts, const TensorView& sinks, float scale, const TensorView& out,
                     const AttentionRowFormat& rows_format, AttentionInputs inputs) {
  CheckDevice(ctx, "sparse_attention", {&q, &base, &row_ids, &counts, &sinks, &out});
  const int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2), max_rows = row_ids.size(1);
  DI_CHECK(q.is_contiguous() && out.is_contiguous() && out.numel() == q.numel(), "sparse_attention: layout");
  const bool packed = rows_format.kind == AttentionRows::kPacked;
  if (packed) {
    rows_format.packed.Validate();
    DI_CHECK(rows_format.packed.dim == d, "sparse_attention: packed rows of {} values for heads of {}",
             rows_format.packed.dim, d);
  }
  const int64_t row_floats = packed ? rows_format.packed.row_floats() : d;
  const bool bf16_inputs = inputs == AttentionInputs::kBf16;
  // The kernel depends on the numerics, the shapes and the buffers' alignment, never on the
  // batch, so every step of a run takes the same one.
  DI_ON_CUDA(ctx, "sparse_attention",
             const cpu::PackedRowFormat* packed_format = packed ? &rows_format.packed : nullptr;
             if (ctx.tensor_core_linears && rows_format.kind != AttentionRows::kF32 &&
                 cuda::AttentionSplitBf16Usable(q.data<float>(), heads * d, base.data<float>(), row_floats, heads, d,
                                                packed_format)) {
               cuda::AttentionWithSinkSplitBf16(q.data<float>(), heads * d, base.data<float>(), row_floats,
                                                I32(row_ids), I32(counts), max_rows, sinks.data<float>(), tokens,
                                                heads, d, scale, out.data<float>(), heads * d, ctx.stream,
                                                /*blocks_per_query=*/0, bf16_inputs, /*heads_per_block=*/0,
                                                packed_format);
             } else {
               cuda::AttentionWithSink(q.data<float>(), heads * d, base.data<float>(), row_floats, I32(row_ids),
                                       I32(counts), max_rows, sinks.data<float>(), tokens, heads, d, scale,
                                       out.data<float>(), heads * d, ctx.stream, bf16_inputs, packed_format);
             });
  const float* rows = base.data<float>();
  // One task per token: each token's result depends on its own rows only.
  ParallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> keys(static_cast<size_t>(max_rows * d)), scores(static_cast<size_t>(heads * max_rows));
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t n = I32(counts)[t];
      const int32_t* ids = I32(row_ids) + t * max_rows;
      for (int32_t j = 0; j < n; ++j) {
        const float* row = rows + static_cast<int64_t>(ids[j]) * row_floats;
        if (packed) {
          cpu::DecodePackedRow(rows_format.packed, reinterpret_cast<const uint8_t*>(row), keys.data() + j * d);
        } else {
          std::memcpy(keys.data() + j * d, row, d * sizeof(float));
        }
      }
      cpu::AttentionWithSink(q.data<float>() + t * heads * d, heads, keys.data(), n, d, sinks.data<float>(), scale,
                             scores.data(), out.data<float>() + t * heads * d, bf16_inputs);
    }
  });
}

void IndexerSelect(const OpContext& ctx, const TensorView& q, const TensorView& weights, const TensorView& base,
                   const TensorView& index_ids, const TensorView& num_visible, const TensorView& num_candidates,
                   int64_t top_k, const TensorView& scores, const TensorView& tie_scratch, const TensorView& selected,
                   const TensorView& selected_counts, IndexerInputs inputs) {
  CheckDevice(ctx, "indexer", {&q, &weights, &base, &index_ids, &num_visible, &num_candidates, &scores, &tie_scratch,
                               &selected, &selected_counts});
  const int64_t tokens = q.size(0), heads = q.size(1), dk = q.size(2), max_keys = index_ids.size(1);
  DI_CHECK(q.is_contiguous() && weights.is_contiguous() && selected.size(1) == top_k, "indexer: layout");
  DI_ON_CUDA(ctx, "indexer",
             cuda::IndexerTopK(q.data<float>(), heads * dk, weights.data<float>(), heads, tokens, heads, dk,
                               base.data<float>(), dk, I32(index_ids), max_keys, I32(num_visible), top_k,
                               scores.data<float>(), I32(selected), I32(selected_counts), ctx.stream,
                               ctx.tensor_core_linears && inputs == IndexerInputs::kExactInBf16);
             cuda::IndexerTiesLikeTorch(scores.data<float>(), max_keys, I32(num_visible), I32(num_candidates), tokens,
                                        top_k, I32(selected), I32(selected_counts),
                                        reinterpret_cast<cpu::ScoredCandidate*>(tie_scratch.raw()),
                                        tie_scratch.size(1), ctx.stream));
  const float* rows = base.data<float>();
  ParallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> keys(static_cast<size_t>(max_keys * dk)), scratch(static_cast<size_t>(heads * max_keys));
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t visible = I32(num_visible)[t];
      int32_t* sel = I32(selected) + t * top_k;
      if (visible == 0) {
        I32(selected_counts)[t] = 0;
        continue;
      }
      const int32_t* ids = I32(index_ids) + t * max_keys;
      for (int32_t j = 0; j < visible; ++j) {
        std::memcpy(keys.data() + j * dk, rows + static_cast<int64_t>(ids[j]) * dk, dk * sizeof(float));
      }
      const int64_t k = cpu::IndexerTopK(q.data<float>() + t * heads * dk, weights.data<float>() + t * heads, heads,
                                         dk, keys.data(), visible, I32(num_candidates)[t], top_k, scratch.data(), sel);
      // Ascending rows: the attention sum then depends only on the selected set.
      std::sort(sel, sel + k);
      I32(selected_counts)[t] = static_cast<int32_t>(k);
    }
  });
}

// ---- compressor ------------------------------------------------------------------------------

void CompressorAdvanceBatch(const OpContext& ctx, const CompressorShape& shape, const TensorView& ape,
                            const TensorView& kv, const TensorView& score, const TensorView& base,
                            int64_t state_offset, int64_t slot_floats, const std::vector<CompressorChunk>& chunks,
                            const TensorView& chunks_device, const TensorView& rows_out, const TensorView& row_index,
                            const TensorView& rows_emitted) {
  CheckDevice(ctx, "compressor", {&ape, &kv, &score, &base, &chunks_device, &rows_out, &row_index, &rows_emitted});
  DI_CHECK(kv.stride(0) == score.stride(0), "compressor: kv and score need one row stride");
  DI_ON_CUDA(ctx, "compressor",
             cuda::CompressorStatePool pool{base.data<float>() + state_offset,
                                            base.data<float>() + state_offset + shape.state_floats(), slot_floats};
             cuda::CompressorAdvance(shape, ape.data<float>(), kv.data<float>(), score.data<float>(), kv.stride(0), pool,
                                     reinterpret_cast<const cuda::CompressorSeq*>(chunks_device.raw()),
                                     static_cast<int64_t>(chunks.size()), rows_out.data<float>(), rows_out.stride(0),
                                     I64(row_index), I64(rows_emitted), rows_out.size(0), ctx.stream));
  const int64_t width = shape.width();
  DI_CHECK(rows_out.stride(0) == shape.dim, "compressor: rows_out must be contiguous on the CPU");
  std::vector<float> kv_rows, score_rows;
  for (size_t b = 0; b < chunks.size(); ++b) {
    const CompressorChunk& c = chunks[b];
    float* kv_state = base.data<float>() + state_offset + c.slot * slot_floats;
    // The CPU kernel takes contiguous [n, width] projections.
    const float* kvp = kv.data<float>() + c.token_offset * kv.stride(0);
    const float* scp = score.data<float>() + c.token_offset * score.stride(0);
    if (kv.stride(0) != width) {
      kv_rows.resize(static_cast<size_t>(c.num_tokens * width));
      score_rows.resize(kv_rows.size());
      for (int64_t j = 0; j < c.num_tokens; ++j) {
        std::memcpy(kv_rows.data() + j * width, kvp + j * kv.stride(0), width * sizeof(float));
        std::memcpy(score_rows.data() + j * width, scp + j * score.stride(0), width * sizeof(float));
      }
      kvp = kv_rows.data();
      scp = score_rows.data();
    }
    const int64_t emitted = cpu::CompressorAdvance(shape, ape.data<float>(), kvp, scp, c.num_tokens, c.pos0, kv_state,
                                                   kv_state + shape.state_floats(),
                                                   rows_out.data<float>() + c.row_offset * rows_out.stride(0),
                                                   I64(row_index) + c.row_offset);
    if (!rows_emitted.empty()) I64(rows_emitted)[b] = emitted;
  }
}

// ---- MoE ---------------------------------------------------------------------------------------

size_t MoeAlignScratchBytes(int64_t num_slots, int64_t num_experts) {
#if DEEPINFER_HAS_CUDA
  return cuda::MoeAlignScratchBytes(num_slots, num_experts);
#else
  return 0;
#endif
}

void MoeAlign(const OpContext& ctx, const TensorView& expert_ids, int64_t num_experts, const TensorView& offsets,
              const TensorView& sorted_slots, const TensorView& slot_rows, const TensorView& scratch) {
  CheckDevice(ctx, "moe_align", {&expert_ids, &offsets, &sorted_slots, &slot_rows, &scratch});
  const int64_t m = expert_ids.size(0), k = expert_ids.size(1);
  DI_ON_CUDA(ctx, "moe_align",
             cuda::MoeAlign(I32(expert_ids), m, k, num_experts, I32(offsets), I32(sorted_slots), I32(slot_rows),
                            scratch.raw(), ctx.stream));
  const int32_t* ids = I32(expert_ids);
  std::vector<int32_t> count(static_cast<size_t>(num_experts), 0);
  std::vector<bool> keep(static_cast<size_t>(m * k), false);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      bool kept = e >= 0 && e < num_experts;
      for (int64_t jj = 0; jj < j && kept; ++jj) kept = ids[t * k + jj] != e;
      keep[t * k + j] = kept;
      if (kept) ++count[e];
    }
  }
  int32_t* off = I32(offsets);
  std::vector<int32_t> cursor(static_cast<size_t>(num_experts));
  int32_t run = 0;
  for (int64_t e = 0; e < num_experts; ++e) off[e] = cursor[e] = run, run += count[e];
  off[num_experts] = run;
  std::fill(I32(sorted_slots), I32(sorted_slots) + m * k, -1);
  for (int64_t i = 0; i < m * k; ++i) {
    if (!keep[i]) {
      I32(slot_rows)[i] = -1;
      continue;
    }
    const int32_t row = cursor[ids[i]]++;
    I32(sorted_slots)[row] = static_cast<int32_t>(i);
    I32(slot_rows)[i] = row;
  }
}

void MoeGather(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots, const TensorView& offsets,
               int64_t top_k, const TensorView& expert_weights, const TensorView& xe, const TensorView& row_weights) {
  CheckDevice(ctx, "moe_gather", {&x, &sorted_slots, &offsets, &expert_weights, &xe, &row_weights});
  const int64_t d = x.size(1), bound = sorted_slots.numel(), num_experts = offsets.numel() - 1;
  DI_CHECK(xe.is_contiguous() && xe.size(1) == d && xe.size(0) >= bound && row_weights.numel() >= bound,
           "moe_gather: xe {} and {} row weights for {} slots", xe.ShapeString(), row_weights.numel(), bound);
  DI_CHECK(offsets.dtype() == DType::kI32 && num_experts >= 0, "moe_gather: offsets must be I32 [E+1]");
  DI_ON_CUDA(ctx, "moe_gather",
             cuda::MoeGather(x.data<float>(), x.stride(0), d, I32(sorted_slots), bound, I32(offsets) + num_experts,
                             top_k, expert_weights.data<float>(), xe.data<float>(), row_weights.data<float>(),
                             ctx.stream));
  const int64_t rows = std::clamp<int64_t>(I32(offsets)[num_experts], 0, bound);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t slot = I32(sorted_slots)[r];
    std::memcpy(xe.data<float>() + r * d, x.data<float>() + (slot / top_k) * x.stride(0), d * sizeof(float));
    row_weights.data<float>()[r] = expert_weights.data<float>()[slot];
  }
}

void MoeCombine(const OpContext& ctx, const TensorView& ye, const TensorView& slot_rows, const TensorView& expert_ids,
                int64_t top_k, const TensorView& shared, const TensorView& out) {
  CheckDevice(ctx, "moe_combine", {&ye, &slot_rows, &expert_ids, &shared, &out});
  const int64_t m = out.size(0), d = out.size(1);
  DI_CHECK(out.is_contiguous() && (shared.empty() || shared.is_contiguous()), "moe_combine: layout");
  DI_CHECK(top_k >= 1 && slot_rows.numel() == m * top_k && expert_ids.numel() == m * top_k,
           "moe_combine: slot_rows ({}) and expert_ids ({}) must hold {} tokens x top_k {} slots", slot_rows.numel(),
           expert_ids.numel(), m, top_k);
  // Both paths read expert row r at ye + r·d.
  DI_CHECK(ye.dtype() == DType::kF32 && ye.ndim() == 2 && ye.is_contiguous() && ye.size(1) == d,
           "moe_combine: ye {} must be contiguous F32 [rows, {}]", ye.ShapeString(), d);
  DI_ON_CUDA(ctx, "moe_combine",
             cuda::MoeCombine(ye.data<float>(), I32(slot_rows), I32(expert_ids), m, top_k, d,
                              shared.empty() ? nullptr : shared.data<float>(), out.data<float>(), ctx.stream));
  std::vector<std::pair<int32_t, int32_t>> order;  // (expert, row) of one token's kept slots
  for (int64_t t = 0; t < m; ++t) {
    order.clear();
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t row = I32(slot_rows)[t * top_k + j];
      DI_CHECK(row < ye.size(0), "moe_combine: slot row {} past ye's {} rows", row, ye.size(0));
      if (row >= 0) order.emplace_back(I32(expert_ids)[t * top_k + j], row);
    }
    std::sort(order.begin(), order.end());
    float* o = out.data<float>() + t * d;
    std::fill(o, o + d, 0.f);
    for (const auto& [e, row] : order) {
      const float* src = ye.data<float>() + static_cast<int64_t>(row) * d;
      for (int64_t i = 0; i < d; ++i) o[i] += src[i];
    }
    if (!shared.empty()) {
      const float* sh = shared.data<float>() + t * d;
      for (int64_t i = 0; i < d; ++i) o[i] += sh[i];
    }
  }
}

}  // namespace deepinfer::ops
