// The V4 KV compressor on the GPU (dsv4-model.md §5.4, §6.1), batched over sequences: the device
// twin of kernels/cpu/compressor.h. Every `ratio` tokens of a sequence pool into one row by a
// per-channel softmax over gate scores; ratio 4 (CSA and the indexer) uses overlapping windows of
// 8 (the previous window's A halves, channels [0, dim), + this window's B halves, channels
// [dim, 2·dim)); other ratios (128, HCA) do not overlap.
//
// Per-sequence partial state: exactly the CPU layout (kernels/cpu/compressor.h), fp32:
//   kv_state, score_state: [slots, width], slots = coff·ratio, width = coff·dim, coff = 2 if
//   overlapping else 1. Scores are stored with `ape` added; empty slots hold −inf (and kv 0).
//   Overlapping: slots [0, ratio) hold the previous window, [ratio, 2·ratio) the current one.
// A state written here and one written by the CPU twin are interchangeable, bit for bit.
//
// States live in a slot pool: slot i's kv state starts at pool.kv + i·pool.slot_stride and its
// score state at pool.score + i·pool.slot_stride (floats). Pointers are device pointers; nothing
// is allocated and nothing synchronizes (launches go on `stream`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/compressor.h"

namespace deepinfer::cuda {

// The CPU twin's shape (ratio, output width and the state sizes they imply), used on the host.
using cpu::CompressorShape;

struct CompressorStatePool {
  float* kv = nullptr;       // slot 0's kv state
  float* score = nullptr;    // slot 0's score state
  int64_t slot_stride = 0;   // floats from one slot's state to the next's (>= state_floats)
};

// One sequence's part of a CompressorAdvance batch (a device array of these; plain int64 fields,
// so the host and device layouts agree).
struct CompressorSeq {
  int64_t slot = 0;          // state slot in the pool; distinct within a batch
  int64_t token_offset = 0;  // row of this sequence's first token in kv / score
  int64_t num_tokens = 0;    // n >= 0 tokens at positions pos0 … pos0+n−1
  int64_t pos0 = 0;          // >= 0
  int64_t row_offset = 0;    // first row of rows_out / row_index_out that belongs to it
};

// Rows emitted by feeding positions pos0 … pos0+n−1: the windows closing in that range,
// ⌊(pos0+n)/ratio⌋ − ⌊pos0/ratio⌋ (≤ n/ratio + 1). Their row numbers are consecutive, starting at
// ⌊pos0/ratio⌋. Known on the host without reading anything back.
inline int64_t CompressorRowsEmitted(int64_t ratio, int64_t pos0, int64_t n) {
  return (pos0 + n) / ratio - pos0 / ratio;
}

// kv_state ← 0, score_state ← −inf for each of the `num_slots` slots listed in `slots` (device
// array of int64).
void CompressorReset(const CompressorShape& shape, const CompressorStatePool& pool, const int64_t* slots,
                     int64_t num_slots, cudaStream_t stream);

// For each sequence b of `seqs` (device array [num_seqs]), CPU CompressorAdvance on its tokens:
// kv / score rows seqs[b].token_offset … +n−1 (row stride ld, >= width; scores without ape), ape
// [ratio, width] contiguous. Sequence b's j-th emitted row (j < count_b =
// CompressorRowsEmitted(ratio, pos0_b, n_b)) is written to rows_out row row_offset_b + j ([dim],
// row stride ldr >= dim) with its row number ⌊pos0_b/ratio⌋ + j in row_index_out[row_offset_b +
// j]; rows_emitted[b] = count_b. Rows of rows_out / row_index_out not owned that way are left
// untouched.
//
// The caller lays out the rows: row_offset must be non-decreasing with row_offset_{b+1} >=
// row_offset_b + count_b (tight: the prefix sums of CompressorRowsEmitted; or any upper bound
// such as n_b/ratio + 1), and rows_capacity (the rows of rows_out, which sets the grid) >=
// row_offset_b + count_b for every b. Slots must be distinct within a batch.
void CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv, const float* score,
                       int64_t ld, const CompressorStatePool& pool, const CompressorSeq* seqs, int64_t num_seqs,
                       float* rows_out, int64_t ldr, int64_t* row_index_out, int64_t* rows_emitted,
                       int64_t rows_capacity, cudaStream_t stream);

}  // namespace deepinfer::cuda
