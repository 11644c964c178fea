// Plain descriptions of where a step's tokens and a layer's rows live, shared by the CPU and
// CUDA row kernels (no dependencies: includable from .cu files). Pointers in StepRowsPlan point
// to host memory for the CPU kernels and to device memory for the CUDA ones.
//
// All row locations are float offsets from one base pointer (the model state buffer: slots,
// paged blocks and the step's fresh KV rows in one allocation). A row id (int32) is an offset
// divided by the row's width, so every offset of a row kind is a multiple of its width.
#pragma once

#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace deepinfer::cpu {

// One chunk (sequence) of the step; int64 fields only, so host and device layouts agree.
struct SeqRowsInfo {
  int64_t token_offset = 0;  // first token of the chunk in the step
  int64_t num_tokens = 0;
  int64_t start_pos = 0;     // position of the chunk's first token
  int64_t slot = 0;          // state slot
  int64_t prompt_end = 0;    // SequenceChunk::prompt_end (0: the chunk's end)
  int64_t block_offset = 0;  // the chunk's block table starts at block_tables[block_offset]
};

struct StepRowsPlan {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  const int32_t* token_seq = nullptr;    // [num_tokens]: the chunk of each token
  const int64_t* token_pos = nullptr;    // [num_tokens]: absolute positions
  const SeqRowsInfo* seqs = nullptr;     // [num_seqs]
  const int32_t* block_tables = nullptr; // concatenated block tables (physical block ids)
};

// One layer's row addresses, in floats from the base.
struct LayerRowGeometry {
  int64_t row_floats = 0;        // width of attention rows (window, fresh and main rows) in floats:
                                 // head_dim f32 values, or a packed row's pitch / 4 (StateLayout)
  int64_t index_dim = 0;         // width of index rows
  int64_t window = 0;
  int64_t ratio = 0;             // 0 (window only), 4 (CSA) or 128 (HCA)
  int64_t rows_per_block = 0;    // block_size / ratio
  int64_t slots_base = 0;        // slot s starts at slots_base + s·slot_floats
  int64_t slot_floats = 0;
  int64_t window_offset = 0;     // the layer's window ring within a slot: row of position p at
                                 // + (p mod window)·row_floats
  int64_t blocks_base = 0;       // block b starts at blocks_base + b·block_floats
  int64_t block_floats = 0;
  int64_t main_rows_offset = 0;  // within a block: compressed row r at + (r mod rows_per_block)·row_floats
  int64_t index_rows_offset = 0; // within a block: index row r at + (r mod rows_per_block)·index_dim
  int64_t fresh_base = 0;        // the step's fresh KV row of token t at fresh_base + t·row_floats
};

// Float offsets of chunk b's compressed (main) row r, of its index row r, and of position p's row
// in slot `slot`'s ring (the host-side planning, the CPU kernels and the CUDA kernels share these).
DI_HOST_DEVICE inline int64_t MainRowOffset(const StepRowsPlan& plan, const LayerRowGeometry& g, int64_t b, int64_t r) {
  const int64_t block = plan.block_tables[plan.seqs[b].block_offset + r / g.rows_per_block];
  return g.blocks_base + block * g.block_floats + g.main_rows_offset + (r % g.rows_per_block) * g.row_floats;
}
DI_HOST_DEVICE inline int64_t IndexRowOffset(const StepRowsPlan& plan, const LayerRowGeometry& g, int64_t b, int64_t r) {
  const int64_t block = plan.block_tables[plan.seqs[b].block_offset + r / g.rows_per_block];
  return g.blocks_base + block * g.block_floats + g.index_rows_offset + (r % g.rows_per_block) * g.index_dim;
}
DI_HOST_DEVICE inline int64_t RingRowOffset(const LayerRowGeometry& g, int64_t slot, int64_t p) {
  return g.slots_base + slot * g.slot_floats + g.window_offset + (p % g.window) * g.row_floats;
}

}  // namespace deepinfer::cpu
