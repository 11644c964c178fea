// CUDA attention core of DeepSeek-V4 (dsv4-model.md §5.6), batched over query tokens: the twin of
// cpu::AttentionWithSink. Each query attends, with H heads, over its own list of key rows taken
// from a shared row pool; the rows are also the values (MQA with K = V), and a per-head sink logit
// enters only the softmax denominator.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/state_row.h"

namespace deepinfer::cuda {

// Shapes (f32 unless stated; all pointers are device pointers):
//   q        [M, H, d]: query m's head h at q + m·q_stride + h·d (q_stride >= H·d).
//   rows     [R, d]: the row pool; row r at rows + r·row_stride (row_stride >= d).
//   row_ids  int32 [M, max_rows] contiguous: query m attends over the rows
//            row_ids[m·max_rows + j], j < counts[m], in that order (repeats allowed). Every such
//            id must lie in [0, R); the kernel does not check (an id outside reads out of bounds).
//   counts   int32 [M]: 0 <= counts[m] <= max_rows (values outside are clamped into that range).
//   sinks    [H]: per-head sink logit, not multiplied by `scale` (−inf is allowed: no sink).
//   out      [M, H, d]: query m's head h at out + m·out_stride + h·d. Only those elements are
//            written.
// For each query m and head h, with s_j = scale · q[m,h]·rows[row_ids[m,j]] and
// Mx = max(max_j s_j, sinks[h]):
//   out[m,h] = Σ_j e^{s_j − Mx} rows[row_ids[m,j]] / (Σ_j e^{s_j − Mx} + e^{sinks[h] − Mx}),
// and counts[m] == 0 gives zeros, as in cpu::AttentionWithSink over the gathered rows.
//
// Numerics: fp32 throughout. A query's rows are cut into 8 consecutive runs of 32-row tiles (a
// thread-block cluster of 8 blocks, one run each, so that one query still spreads over 8 SMs);
// each run is an online softmax over its tiles in the given row order, and the 8 states are merged
// in run order. The result for a (query, head) depends only on that query's inputs, its row count
// and d (deterministic and batch invariant), but sums in a different order than the CPU's BLAS
// (differences of a few fp32 ulps of the output scale).
// Limits: 1 <= d <= 1024, H >= 1, max_rows >= 0. No scratch; nothing is allocated or synchronized.
// Launches on `stream`; M == 0 launches nothing.
// bf16_inputs (Numerics::bf16_attention_inputs), as cpu::AttentionWithSink's: q rounded to BF16
// (nearest even) as it is read, each probability e^{s − max} rounded to BF16 before it weights its
// row, the sums of the probabilities unrounded. Here max is the run's running maximum at the
// probability's tile, where the CPU takes the final one: where they differ, the two round
// different values (1 BF16 unit of the probability at most), otherwise they agree as above.
// packed (not null): the pool holds packed rows of that format (cpu::PackedRowFormat, dim ==
// head_dim) instead of f32 rows: row r's row_pitch() bytes at rows + r·row_stride (row_stride
// floats >= row_floats(), rows and row_stride·4 16-byte aligned; dim, fp8_end and block
// multiples of 16), read as the values cpu::DecodePackedRow gives.
void AttentionWithSink(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                       const int32_t* row_ids, const int32_t* counts, int64_t max_rows,
                       const float* sinks, int64_t num_queries, int64_t num_heads, int64_t head_dim,
                       float scale, float* out, int64_t out_stride, cudaStream_t stream, bool bf16_inputs = false,
                       const cpu::PackedRowFormat* packed = nullptr);

// The same attention on BF16 tensor cores (attention_mma.cu): the scores and the weighted sums as
// mma.sync MMAs, q and the probabilities entering as their three BF16 parts, the rows as BF16.
// Contract: every value of every row a query reads is exact in BF16 (Numerics::kv_fp8's rows:
// e4m3 codes times power-of-two scales, and BF16 rope channels); then every product is exact and
// the result differs from AttentionWithSink's only in how the f32 sums are rounded. A row value
// that is not exact in BF16 is rounded to nearest (no error is raised).
// Work split and order: clusters of blocks_per_query blocks (1, 2, 4 or 8; 0 takes
// AttentionSplitBf16Blocks()) per query and block of up to 64 heads, runs of 64-row tiles
// (attention_mma.cu has the order of every sum): deterministic and batch invariant for a given
// blocks_per_query, whose value changes the order of the sums. Shapes as AttentionWithSink;
// limits in AttentionSplitBf16Usable (anything else throws).
// bf16_inputs: AttentionWithSink's rounding rule; q and the probabilities are then one BF16 part
// each, so the scores and the weighted sums take one MMA per step instead of three (the two parts
// dropped are zero), and q is converted once per block instead of split in every tile.
// packed: as AttentionWithSink's (its values are exact in BF16 by construction).
bool AttentionSplitBf16Usable(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                              int64_t num_heads, int64_t head_dim,  // d ∈ {64, 128, 256, 512}; 16-byte rows
                              const cpu::PackedRowFormat* packed = nullptr);
void AttentionWithSinkSplitBf16(const float* q, int64_t q_stride, const float* rows, int64_t row_stride,
                                const int32_t* row_ids, const int32_t* counts, int64_t max_rows, const float* sinks,
                                int64_t num_queries, int64_t num_heads, int64_t head_dim, float scale, float* out,
                                int64_t out_stride, cudaStream_t stream, int blocks_per_query = 0,
                                bool bf16_inputs = false, int heads_per_block = 0,
                                const cpu::PackedRowFormat* packed = nullptr);
// The default blocks per query: DEEPINFER_ATTENTION_SPLIT (1, 2, 4 or 8; read once, anything else
// throws) or 2, chosen from docs/performance.md's sweep after version 11. For experiments: every
// query of a run must take the same value, which the process-wide default guarantees.
int AttentionSplitBf16Blocks();
// Heads per block where H > 32: 64 (four head groups, one block an SM) or 32 (two groups; with
// bf16_inputs two blocks fit an SM, each reading the rows itself). A head's bits do not depend on
// it. heads_per_block = 0 takes DEEPINFER_ATTENTION_HEADS (32 or 64; read once, anything else
// throws) or 64.
int AttentionSplitBf16BlockHeads();

}  // namespace deepinfer::cuda
