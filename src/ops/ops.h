// The op API the model is written against (ARCHITECTURE.md §2). Each op runs where its context
// says (OpContext: the device and, on CUDA, the stream) on tensors of that device, through the
// kernel of that backend with the same contract; the CPU kernels (src/kernels/cpu) are the
// reference. Contracts are documented on the kernels. Ops without a CUDA kernel yet throw when
// given a CUDA context.
#pragma once

#include <cstdint>
#include <vector>

#include "device/buffer.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cpu/hc.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/rows_plan.h"
#include "kernels/cpu/sampler_row.h"
#include "kernels/cpu/state_row.h"
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
// bf16_out: y's values rounded to BF16 (nearest even, as Bf16RoundRows) as they are stored.
void RmsNorm(const OpContext& ctx, const TensorView& x, const TensorView& weight, float eps, const TensorView& y,
             bool bf16_out = false);
// What a linear's input went through: kAsIs, or kFp8Blocks (the reference's act_quant: e4m3 per
// row and 128 columns, power-of-two scales; Fp8RoundTripRows). With ctx.tensor_core_linears, a
// kFp8Blocks input of an FP8 / FP4 weight runs e4m3 MMAs on the codes (cuda::LinearMath::kFp8Act),
// whose kernels round x through act_quant themselves (QuantizesFp8InputInKernel: the caller may
// then skip the rounding); the CPU and the SIMT kernels compute the same f32 math either way.
// kBf16 (Linear and GroupedLinear): the op rounds x to BF16 (nearest even, as Bf16RoundRows) before
// multiplying, and x is consumed; see there.
// kBf16Values (Linear and LinearsOfOneInput): x's values are BF16 already (a norm's bf16_out), so
// y = W · x as kAsIs computes it; the GPU's dense warp-specialized kernels then multiply x as one
// BF16 part instead of three (the other two are zeros: the same products), and x is not written.
enum class LinearInput : uint8_t { kAsIs, kFp8Blocks, kBf16, kBf16Values };
// Whether Linear and ExpertsLinear round a kFp8Blocks input of `w` through act_quant in their
// kernels, with the bits of an input rounded first (Fp8RoundTripRows): on CUDA with
// ctx.tensor_core_linears, FP8 / FP4 weights (cuda::QuantizesFp8Input). False on the CPU.
bool QuantizesFp8InputInKernel(const OpContext& ctx, const LinearWeight& w);

// scratch: device bytes (LinearScratchBytes; may be empty, and is unused on the CPU) where the GPU
// quantizes a kFp8Blocks input once for its warpgroup-MMA GEMM; without it the mma.sync kernels
// run, whose sums round differently, so pass it at every row count or at none
// (kernels/cuda/linear.h).
// With input kBf16, y = W · bf16(x): a BF16 weight's product on the GPU's dense warp-specialized
// kernels rounds x as it reads it and multiplies one BF16 part instead of three
// (cuda::LinearRoundsXToBf16, given the scratch); elsewhere x is rounded in place first. So x is
// consumed: afterwards it holds either its values or their rounding.
void Linear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y,
            LinearInput input = LinearInput::kAsIs, const TensorView& scratch = TensorView());
// Scratch bytes Linear can use for `rows` rows of x (0 on the CPU and where no kernel uses any).
size_t LinearScratchBytes(const OpContext& ctx, int64_t rows, const LinearWeight& w, LinearInput input);
// Bytes of a dense weight's tiles (LinearWeight::tiles) for Linear with a kAsIs input on ctx: 0 on
// the CPU and where no kernel reads them (cuda::DenseTilesBytes: BF16 weights under
// ctx.tensor_core_linears, DEEPINFER_DENSE_TILES=1).
size_t DenseTilesBytes(const OpContext& ctx, const LinearWeight& w);
// Writes them for `w` into `out` (on ctx's device, 256-byte aligned, DenseTilesBytes bytes) on
// ctx.stream and waits for them (load time); the caller then sets w.tiles to `out`.
void WriteDenseTiles(const OpContext& ctx, const LinearWeight& w, const TensorView& out);
// Whether w's tiles go in place of its rows under ctx's math (cuda::DenseTilesInPlace: unless
// DEEPINFER_DENSE_TILES_IN_PLACE=0; false on the CPU).
bool DenseTilesInPlace(const OpContext& ctx, const LinearWeight& w);
// Rewrites w's rows as its tiles in place (load time; DenseTilesInPlace must hold) and sets w.tiles
// to w.data: from then on only the GPU's kernels that read tiles take w.
void RewriteAsDenseTiles(const OpContext& ctx, LinearWeight& w);
// Linear (input kAsIs) of one x for each product, with the bits Linear gives each with the same
// scratch (LinearsOfOneInputScratchBytes; may be empty): where two or more products run the GPU's
// dense warp-specialized GEMM, x's BF16 parts are split into it once for all of them
// (cuda::LinearsOfOneInput; the products then run in another order than the list's).
struct LinearProduct {
  const LinearWeight* w;
  TensorView y;
};
// input: kAsIs or kBf16Values (as Linear takes it).
void LinearsOfOneInput(const OpContext& ctx, const TensorView& x, const std::vector<LinearProduct>& products,
                       const TensorView& scratch = TensorView(), LinearInput input = LinearInput::kAsIs);
size_t LinearsOfOneInputScratchBytes(const OpContext& ctx, int64_t rows, const std::vector<LinearProduct>& products);
// y[r, g, :] = W_g · x[r, g, :]. With input kBf16, y = W · bf16(x): the CUDA warpgroup-MMA kernels
// round x as they read it, on one BF16 part instead of three (cuda::GroupedRoundsXToBf16); elsewhere
// x is rounded in place first. So x is consumed: afterwards it holds either its values or their
// rounding.
// scratch: device bytes (GroupedLinearScratchBytes; may be empty, unused on the CPU) where the GPU
// converts the weight to BF16 and splits x once for a prefill's product (the same bits as without).
void GroupedLinear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y, LinearInput input = LinearInput::kAsIs,
                   const TensorView& scratch = TensorView());
// Scratch bytes GroupedLinear can use for `rows` rows of x (0 on the CPU and where no kernel uses any).
size_t GroupedLinearScratchBytes(const OpContext& ctx, int64_t rows, const LinearWeight& w, int64_t num_groups,
                                 LinearInput input);

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
// row_count: empty (all M rows) or one I32 on the context's device (e.g. MoeAlign's offsets[E]):
// only rows r < min(M, row_count) are rounded, the rest are untouched (on CUDA the count is read
// on the device; M is the launch bound).
void Fp8RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end, int64_t block,
                      const TensorView& row_count = TensorView());
void Fp4RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t block);
// Channels [begin, end) of every row of x rounded to the nearest BF16 (cpu::Bf16Round).
void Bf16RoundRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end);
void HadamardRows(const OpContext& ctx, const TensorView& x);

// The per-row steps V4 takes on a head row (q's heads, the fresh kv row, the index queries, the
// compressors' closed rows), in this order, each where asked: RmsNorm (norm_weight empty:
// unweighted), Rope at positions (rope null: none), HadamardRows, then either the state row's
// rounding (fp8_end > 0: Fp8RoundTripRows of channels [0, fp8_end) in blocks of fp8_block, then
// Bf16RoundRows of [fp8_end, n)) or Fp4RoundTripRows in blocks of fp4_block (> 0).
struct RowSteps {
  bool norm = false;
  TensorView norm_weight;
  float eps = 0.f;
  const RopeTable* rope = nullptr;
  TensorView positions;  // I64 [M]
  bool rope_inverse = false;
  bool hadamard = false;
  int64_t fp8_end = 0, fp8_block = 0;
  int64_t fp4_block = 0;
};
// Applies `steps` in place to every row of x [M, H, n] (contiguous): the same results as those ops
// one after another, which is how it runs on the CPU; on CUDA one launch (cuda::RowSteps) where
// cuda::RowStepsOn() and the rows fit it (n <= 512, blocks of at most 128), else those ops.
void ApplyRowSteps(const OpContext& ctx, const TensorView& x, const RowSteps& steps);

void HcPre(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& a,
           const TensorView& post, const TensorView& comb);
void HcPost(const OpContext& ctx, const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out);
void HcHead(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& y);

// logits [M, E] f32; token_ids I32 [M]; expert_ids I32 [M, top_k]; expert_weights F32 [M, top_k].
// params.bias / params.tid2eid point into the context's device memory.
void Route(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids, const RouterParams& params,
           const TensorView& expert_ids, const TensorView& expert_weights);
// row_weights: F32 [M] or empty (weight 1). row_count: empty (all M rows) or one I32 on the
// context's device (e.g. MoeAlign's offsets[E]): only rows r < min(M, row_count) are computed, the
// rest are untouched, and on CUDA the count is read on the device (M is the launch bound).
void ClampedSwiGlu(const OpContext& ctx, const TensorView& gate_inout, const TensorView& up, float limit,
                   const TensorView& row_weights, const TensorView& row_count = TensorView());
// ClampedSwiGlu's values act_quant'ed as BF16 into `codes` as w2's ExpertsLinear call reads them with
// x_in_codes (cuda::SwiGluQuantizeRowsBf16; ExpertsLinearTakesBf16X for w2 must hold); gate is not
// written. CUDA only.
void ClampedSwiGluBf16(const OpContext& ctx, const TensorView& gate, const TensorView& up, float limit,
                       const TensorView& row_weights, const TensorView& row_count, const TensorView& codes);
// Whether the model should take ClampedSwiGluBf16 where w2 takes its x in the codes
// (cuda::SwiGluQuantizeRowsBf16On: unless DEEPINFER_SWIGLU_BF16=0). False on the CPU.
bool SwiGluWritesBf16Codes(const OpContext& ctx);

// ---- memory --------------------------------------------------------------------------------
// Copies `bytes` between any two of host and the context's device (queued on the stream; a
// copy to host memory has landed when the op returns).
void CopyBytes(const OpContext& ctx, void* dst, const void* src, size_t bytes);
// The same without ever waiting: on CUDA the copy is only queued, so `src` must stay valid and
// unchanged, and `dst` unread on the host, until the stream reaches it (use page-locked host
// memory for truly asynchronous copies). On the CPU it copies at once.
void CopyBytesAsync(const OpContext& ctx, void* dst, const void* src, size_t bytes);
// x[i] *= factor for every element of a contiguous F32 tensor.
void Scale(const OpContext& ctx, const TensorView& x, float factor);
// x[i] = value for the n floats at x (memory of the context's device).
void FillFloats(const OpContext& ctx, float* x, int64_t n, float value);
// x[i] = cpu::HashUniform(seed, i, lo, hi): the same values on every device.
void FillHashUniform(const OpContext& ctx, float* x, int64_t n, uint64_t seed, float lo, float hi);
// CUDA: the stream waits `microseconds` of device time (a spinning kernel); no-op on the host.
void DeviceSpin(const OpContext& ctx, int64_t microseconds);

// ---- rows of the V4 state (kernels/cpu/rows.h) -------------------------------------------
// `base` is the F32 state buffer every offset and row id refers to.
// src_offsets / dst_offsets: I64 [n]; rows: [n, width] f32.
void GatherRows(const OpContext& ctx, const TensorView& base, const TensorView& src_offsets, const TensorView& dst);
void ScatterRows(const OpContext& ctx, const TensorView& src, const TensorView& base, const TensorView& dst_offsets);
// Rows src [n, format.dim] f32 encoded as packed rows (cpu::PackRows) into base at the float
// offsets dst_offsets (I64 [n]), or, with dst_offsets empty, at first_offset + i·row_pitch()/4.
void PackRows(const OpContext& ctx, const cpu::PackedRowFormat& format, const TensorView& src, const TensorView& base,
              const TensorView& dst_offsets, int64_t first_offset);
// Benchmarks: cpu::FillHashPackedRows into the F32 buffer `base` (memory of the context's device).
void FillHashPackedRows(const OpContext& ctx, const cpu::PackedRowFormat& format, const cpu::PackedRowRegions& regions,
                        uint64_t seed, float* base);
// plan pointers are memory of the context's device. row_ids I32 [T, max_rows], counts I32 [T];
// index_ids I32 [T, max_index_rows] (empty: no index outputs), num_visible / num_candidates I32 [T].
void BuildAttentionRows(const OpContext& ctx, const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry,
                        const TensorView& row_ids, const TensorView& counts, const TensorView& index_ids,
                        const TensorView& num_visible, const TensorView& num_candidates);
void AppendSelectedRows(const OpContext& ctx, const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry,
                        const TensorView& selected, const TensorView& selected_counts, const TensorView& row_ids,
                        const TensorView& counts);

// ---- attention sublayer, batched over the step's tokens ------------------------------------
// How the rows are stored, and what the caller guarantees about their values. kF32: f32 rows of d.
// kExactInBf16: f32 rows of d whose every value is a BF16 value (Numerics::kv_fp8's rows).
// kPacked: packed rows (cpu::PackedRowFormat, dim d) at row_pitch() bytes, decoded as
// cpu::DecodePackedRow does (their values are e4m3 codes times powers of two and BF16 values).
// The last two let the CUDA op run on tensor cores with ctx.tensor_core_linears
// (cuda::AttentionWithSinkSplitBf16: exact products, f32 sums rounded differently).
enum class AttentionRows { kF32, kExactInBf16, kPacked };
struct AttentionRowFormat {
  AttentionRows kind = AttentionRows::kF32;
  cpu::PackedRowFormat packed;  // kPacked only
};
// What the attention rounds (Numerics::bf16_attention_inputs): kBf16 rounds q to BF16 (nearest
// even) as it reads it, and each probability e^{s − max} before it weights its row; the softmax
// denominators sum the unrounded probabilities (cpu::AttentionWithSink has the exact rule).
enum class AttentionInputs { kF32, kBf16 };

// out[t] = AttentionWithSink(q[t], rows at base[row_ids[t, j]·w], j < counts[t]) for every token,
// w the row's width in floats (d, or kPacked's row_floats()).
// q, out: [T, H, d] f32; row_ids I32 [T, max_rows]; counts I32 [T]; sinks F32 [H]. q is not written.
void SparseAttention(const OpContext& ctx, const TensorView& q, const TensorView& base, const TensorView& row_ids,
                     const TensorView& counts, const TensorView& sinks, float scale, const TensorView& out,
                     const AttentionRowFormat& rows_format, AttentionInputs inputs);
// The lightning indexer for every token: scores of its candidate index rows (base rows of width
// dk at index_ids[t, j], j < num_visible[t]) and the top_k of them as candidate positions in
// ascending order (selected I32 [T, top_k], selected_counts I32 [T]). Both backends break ties
// between equal scores as the reference's one-shot prefill does (torch's CPU top-k over
// num_candidates[t] candidates; kernels/cpu/select_like_torch.h). GPU scratch (may be empty on
// the CPU): scores F32 [T, max_index_rows]; tie_scratch I64 [T, max_candidates] (8 bytes per
// candidate), max_candidates >= every num_candidates[t].
// What the caller guarantees about q and the index rows: kExactInBf16, every value is a BF16 value
// (Numerics::indexer_fp4's e2m1 codes times power-of-two scales), lets the CUDA op score on tensor
// cores with ctx.tensor_core_linears (cuda::IndexerTopK's bf16_exact).
enum class IndexerInputs { kF32, kExactInBf16 };
void IndexerSelect(const OpContext& ctx, const TensorView& q, const TensorView& weights, const TensorView& base,
                   const TensorView& index_ids, const TensorView& num_visible, const TensorView& num_candidates,
                   int64_t top_k, const TensorView& scores, const TensorView& tie_scratch, const TensorView& selected,
                   const TensorView& selected_counts, IndexerInputs inputs);

// One chunk's part of a batched compressor step (int64 fields; host and device layouts agree).
struct CompressorChunk {
  int64_t slot = 0;          // state slot (distinct within a call)
  int64_t token_offset = 0;  // first row of the chunk in kv / score
  int64_t num_tokens = 0;
  int64_t pos0 = 0;          // position of its first token
  int64_t row_offset = 0;    // its first emitted row in rows_out (rows are consecutive)
};
// CompressorAdvance for every chunk: the states of slot s are at base + state_offset +
// s·slot_floats (kv state, then the score state right after it). chunks: [B] in host memory
// (chunks_device: the same on the context's device; empty on the CPU). kv, score: [T, width]
// (row stride honoured); rows_out [R, dim]; the emitted rows' numbers go to row_index I64 [R].
// Returns nothing: the caller knows every count (cuda::CompressorRowsEmitted).
void CompressorAdvanceBatch(const OpContext& ctx, const CompressorShape& shape, const TensorView& ape,
                            const TensorView& kv, const TensorView& score, const TensorView& base,
                            int64_t state_offset, int64_t slot_floats, const std::vector<CompressorChunk>& chunks,
                            const TensorView& chunks_device, const TensorView& rows_out, const TensorView& row_index,
                            const TensorView& rows_emitted);

// ---- MoE permutation (kernels/cuda/moe.h has the contracts) --------------------------------
// expert_ids I32 [T, k] → offsets I32 [E+1], sorted_slots I32 [T·k], slot_rows I32 [T·k].
// scratch: bytes for the GPU (MoeAlignScratchBytes; may be empty on the CPU).
void MoeAlign(const OpContext& ctx, const TensorView& expert_ids, int64_t num_experts, const TensorView& offsets,
              const TensorView& sorted_slots, const TensorView& slot_rows, const TensorView& scratch);
// Route then MoeAlign, their outputs exactly: on the GPU one launch for steps of at most 8 tokens
// under DEEPINFER_ROUTE_ALIGN=1 (cuda::RouteAndAlign; not under the per-op profiler, which times
// the two ops apart).
void RouteAndAlign(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids,
                   const RouterParams& params, const TensorView& expert_ids, const TensorView& expert_weights,
                   const TensorView& offsets, const TensorView& sorted_slots, const TensorView& slot_rows,
                   const TensorView& scratch);
size_t MoeAlignScratchBytes(int64_t num_slots, int64_t num_experts);
// xe[r] = x[sorted_slots[r] / k], row_weights[r] = expert_weights[sorted_slots[r]] for
// r < offsets[E] (offsets: MoeAlign's I32 [E+1]); rows past it are untouched. On CUDA it is launched
// over the bound sorted_slots.numel() = T·k and reads offsets[E] on the device. xe: [>= T·k, d].
void MoeGather(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots, const TensorView& offsets,
               int64_t top_k, const TensorView& expert_weights, const TensorView& xe, const TensorView& row_weights);
// One projection (w1, w3 or w2) of every routed expert of a layer: E weights of one format and
// shape [N, K], each in its own memory, on the context's device. Built once (MakeExpertsWeight).
struct ExpertsWeight {
  std::vector<LinearWeight> experts;  // what the CPU path reads
  Buffer device_table;                // CUDA: the experts as the kernel's device descriptions
                                      // (cuda::DeviceWeight [E]); empty on the CPU
  Buffer folded;                      // CUDA, FP4 experts kept folded (cuda::FoldExperts); else empty
  Buffer chunk_words;                 // CUDA, FP4 experts' chunk words (cuda::WriteFp4ChunkWords); else empty
  Buffer fp4_tiles;                   // CUDA, FP4 experts' tiles (cuda::WriteFp4ExpertTiles) where
                                      // DEEPINFER_EXPERTS_TILES=1; else empty
};
// Checks that the experts share one format, dtype and shape (and, for CUDA, that the kernels accept
// them) and builds the device table on ctx's device (queued on its stream). keep_folded: FP4
// experts whose products with `input` run on the warpgroup-MMA FP8-input path also keep their
// folded e4m3 codes for the run (about twice their bytes; cuda::FoldedExpertsBytes), which
// ExpertsLinear then reads instead of converting nibbles: the same bits. Elsewhere it changes
// nothing. Otherwise such experts keep their chunk words (cuda::Fp4ChunkWordsBytes: 1/16 of their
// FP4 bytes, unless DEEPINFER_FP4_CHUNK_WORDS=0), which the kernel of their 1-16-row tiles reads
// instead of folding group exponents per item: the same bits.
ExpertsWeight MakeExpertsWeight(const OpContext& ctx, std::vector<LinearWeight> experts,
                                LinearInput input = LinearInput::kAsIs, bool keep_folded = false);
// Expert-grouped projection: y[r] = W_e · x[r] for every row r in [offsets[e], offsets[e+1]) of
// every expert e, bit-identical to Linear on each expert's rows. x: [R, K] f32 (row stride
// honoured), y: [R, N] f32 (row stride honoured), R the host bound on the rows (offsets[E] <= R);
// offsets: I32 [E+1] on the context's device (non-decreasing, from 0); rows at or past offsets[E]
// are untouched. scratch: ExpertsLinearScratchBytes(R, E) bytes for the GPU (may be empty on the
// CPU). plan_in_scratch: an earlier call with the same offsets, R and E left its tile lists in
// scratch (cuda::ExpertsLinear). codes: ExpertsLinearCodesBytes bytes (may be empty; unused on the
// CPU) where the GPU quantizes a kFp8Blocks x once for its warpgroup-MMA tiles. On CUDA nothing
// comes back to the host (kernels/cuda/linear.h).
void ExpertsLinear(const OpContext& ctx, const TensorView& x, const TensorView& offsets, const ExpertsWeight& w,
                   const TensorView& y, const TensorView& scratch, LinearInput input = LinearInput::kAsIs,
                   bool plan_in_scratch = false, const TensorView& codes = TensorView(), bool x_in_codes = false);
size_t ExpertsLinearScratchBytes(int64_t rows_bound, int64_t num_experts);
// Codes bytes ExpertsLinear can use for rows_bound rows (0 on the CPU and where no kernel uses any).
size_t ExpertsLinearCodesBytes(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input);
// Whether ExpertsLinear on the GPU takes the FP4 experts on BF16 MMAs for rows_bound rows with these
// codes (cuda::ExpertsLinearTakesBf16X, DEEPINFER_FP4_BF16): then MoeGatherBf16 can write x into the
// codes and the call take x_in_codes (x is then not read). False on the CPU.
bool ExpertsLinearTakesBf16X(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input,
                             const TensorView& codes);
// MoeGather's rows for such a call, act_quant'ed as BF16 into `codes` (cuda::GatherQuantizeRowsBf16),
// and its row weights; xe is not written. CUDA only.
void MoeGatherBf16(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots, const TensorView& offsets,
                   int64_t top_k, const TensorView& expert_weights, const TensorView& codes,
                   const TensorView& row_weights);
// Whether ExpertsLinear on the GPU takes these experts on the FP8-input path with x act_quant'ed once
// into these codes as e4m3 codes and scales, and may take it there already
// (cuda::ExpertsLinearTakesFp8Codes, DEEPINFER_EXPERTS_X_CODES): then MoeGatherFp8Codes and
// ClampedSwiGluFp8Codes can write x into the codes and the call take x_in_codes. False on the CPU.
bool ExpertsLinearTakesFp8Codes(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input,
                                const TensorView& codes);
// MoeGather's rows for such a call of `w`, act_quant'ed into `codes` (cuda::GatherQuantizeRows), and
// its row weights; xe is not written. CUDA only.
void MoeGatherFp8Codes(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots,
                       const TensorView& offsets, int64_t top_k, const TensorView& expert_weights,
                       const ExpertsWeight& w, const TensorView& codes, const TensorView& row_weights);
// ClampedSwiGlu's values act_quant'ed into `codes` as w2's ExpertsLinear call reads them with
// x_in_codes (cuda::SwiGluQuantizeRows; ExpertsLinearTakesFp8Codes for w2 must hold); gate is not
// written. CUDA only.
void ClampedSwiGluFp8Codes(const OpContext& ctx, const TensorView& gate, const TensorView& up, float limit,
                           const TensorView& row_weights, const TensorView& row_count, const ExpertsWeight& w2,
                           const TensorView& codes);
// out[t] = Σ over t's kept slots in increasing expert id of ye[slot_rows[slot]] (+ shared[t]).
void MoeCombine(const OpContext& ctx, const TensorView& ye, const TensorView& slot_rows, const TensorView& expert_ids,
                int64_t top_k, const TensorView& shared, const TensorView& out);

// ---- sampling on the device (kernels/cuda/sampler.h has the contract) ----------------------
// The host samples with sampling::Sample; these ops are CUDA only.
// logits: [rows, vocab] f32 (read only); params: [rows] SamplerRowParams (raw bytes, I8 view);
// tokens / stop_ids: I32 (may be empty when unused); scratch: SamplerScratchBytes(rows, vocab)
// bytes; sampled: I32 [rows]; logprobs F32 [rows], top_ids I32 / top_logprobs F32
// [rows, kSamplerMaxLogprobs] (may be empty).
void SampleRows(const OpContext& ctx, const TensorView& logits, int64_t sampleable_vocab, const TensorView& params,
                const TensorView& tokens, const TensorView& stop_ids, const TensorView& scratch,
                const TensorView& sampled, const TensorView& logprobs, const TensorView& top_ids,
                const TensorView& top_logprobs);
size_t SamplerScratchBytes(int64_t rows, int64_t vocab);  // 0 in a build without CUDA
// ids[dst_index[i]] = src[src_index[i]] (all I32).
void CopyIndexedTokens(const OpContext& ctx, const TensorView& ids, const TensorView& dst_index,
                       const TensorView& src, const TensorView& src_index);

}  // namespace deepinfer::ops
