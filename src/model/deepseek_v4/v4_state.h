// Per-sequence state of DeepSeek-V4 in the model's device memory (dsv4-model.md §6): a fixed part
// per state slot and a paged part per block.
//
//   slot  (one per running sequence):
//     every layer (trunk + MTP):  raw window ring [window] attention rows; row of position p = p % window
//     compressed layers:          compressor kv state + score state, each [coff·ratio, coff·dim] f32
//     CSA layers:                 indexer compressor kv + score, each [8, 2·index_dim] f32
//   block (block_size tokens of one sequence):
//     compressed layers:          block_size/ratio main (attention) rows
//     CSA layers:                 block_size/4 index rows [index_dim] f32
//   Compressed row r of a sequence lives in block block_table[r / rows_per_block] at
//   r % rows_per_block. Block 0 exists and is never handed out (the null block).
//
// Attention rows (window, main and fresh rows) are f32 [head_dim], or, under Numerics::kv_fp8
// (whose rows hold e4m3 codes times power-of-two scales and BF16 values), packed rows
// (kernels/cpu/state_row.h) at a pitch of row_pitch() bytes: dsv4-model.md §6.2's BF16 rows (1,024
// bytes for V4) or its FP8 rows (448 e4m3 codes, 64 BF16 values and 7 ue8m0 scales: 584 bytes and
// 8 zero bytes, 592, so that every row starts 16-byte aligned). They take row_floats floats.
//
// One allocation on the model's device holds, in this order, the slots, the blocks and the
// step's fresh KV rows ([tokens] attention rows, written by the forward): every row the attention
// reads is then a row id (an int32: float offset / row width) from one base pointer. Offsets of
// attention rows are multiples of row_floats and those of index rows multiples of index_dim
// (slot_floats, block_floats and the per-layer offsets are padded to make it so).
#pragma once

#include <cstdint>
#include <vector>

#include "device/buffer.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cpu/state_row.h"
#include "model/config.h"
#include "ops/op_context.h"

namespace deepinfer::v4 {

struct StateLayout {
  int64_t block_size = 128;
  int64_t window = 0;
  int64_t head_dim = 0;
  int64_t index_dim = 0;
  int64_t num_layers = 0;                 // trunk + MTP
  std::vector<int64_t> ratio;             // per layer
  std::vector<int64_t> window_offset;     // per layer, floats into a slot
  std::vector<int64_t> compressor_offset; // per layer (−1 if none): kv state, then score state
  std::vector<int64_t> indexer_offset;    // per layer (−1 if none): kv state, then score state
  std::vector<int64_t> main_rows_offset;  // per layer (−1 if none), floats into a block
  std::vector<int64_t> index_rows_offset; // per layer (−1 if none)
  int64_t slot_floats = 0;
  int64_t block_floats = 0;
  int64_t row_align = 1;                  // lcm(row_floats, index_dim): regions start at multiples
  cpu::PackedRowFormat row_format;        // packed attention rows' format; dim 0: f32 rows
  int64_t row_floats = 0;                 // floats an attention row takes (head_dim, or row_format.row_floats())

  // rows: the attention rows' packed format (PackedRowFormatFor), or dim 0 for f32 rows. Packed
  // rows must hold values the format keeps exactly (Numerics::kv_fp8's rounding).
  static StateLayout ForConfig(const ModelConfig& config, int64_t block_size, const cpu::PackedRowFormat& rows = {});
  // fp8: §6.2's FP8 rows {head_dim, head_dim - rope dims, 64}; else BF16 rows {head_dim, 0, 64}.
  static cpu::PackedRowFormat PackedRowFormatFor(const ModelConfig& config, bool fp8);
  bool packed_rows() const { return row_format.dim > 0; }
  int64_t rows_per_block(int64_t layer) const { return block_size / ratio[layer]; }
  cpu::CompressorShape main_shape(int64_t layer) const { return {ratio[layer], head_dim}; }
  cpu::CompressorShape index_shape() const { return {4, index_dim}; }
};

class StateStorage {
 public:
  // fresh_rows: room for that many fresh KV rows (tokens per step) from the start (0: a small
  // default; EnsureFreshRows grows it).
  StateStorage(StateLayout layout, int64_t num_slots, int64_t num_blocks, DeviceId device = {},
               int64_t fresh_rows = 0);

  const StateLayout& layout() const { return layout_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t num_blocks() const { return num_blocks_; }
  size_t bytes() const { return static_cast<size_t>(fresh_base_) * sizeof(float); }
  DeviceId device() const { return memory_.device(); }

  // The whole allocation as F32 [floats]: the base of every row offset.
  TensorView base() const;
  int64_t slots_base() const { return 0; }
  int64_t blocks_base() const { return num_slots_ * layout_.slot_floats; }
  int64_t fresh_base() const { return fresh_base_; }
  // Makes room for `tokens` fresh rows (reallocates, keeping slots and blocks, when short).
  void EnsureFreshRows(int64_t tokens);
  // CUDA: where ResetSlot / CopySlot / CopyBlock / PoisonBlock / EnsureFreshRows queue their work.
  void SetStream(cudaStream_t stream) { stream_ = stream; }

  float* Window(int32_t slot, int64_t layer) const;
  float* CompressorKv(int32_t slot, int64_t layer) const;
  float* CompressorScore(int32_t slot, int64_t layer) const;
  float* IndexerKv(int32_t slot, int64_t layer) const;
  float* IndexerScore(int32_t slot, int64_t layer) const;
  float* MainRows(int32_t block, int64_t layer) const;   // [rows_per_block] attention rows
  float* IndexRows(int32_t block, int64_t layer) const;  // [rows_per_block, index_dim]

  // Pointers below are into the model's device memory (not dereferenceable on the host when
  // that is a GPU). Empties a slot for a new sequence: windows zeroed, compressor states reset.
  void ResetSlot(int32_t slot) const;
  // Copies slot `from` into slot `to` (whole fixed state).
  void CopySlot(int32_t from, int32_t to) const;
  // Copies every row of block `from` into block `to`.
  void CopyBlock(int32_t from, int32_t to) const;
  // Overwrites every byte of a block with 0xff (debug: use-after-release becomes visible): a NaN
  // in every f32, every e4m3 code, every BF16 value and, as +inf, every packed row's scale.
  void PoisonBlock(int32_t block) const;
  // Every float of the slots and blocks set to cpu::HashUniform(seed, i, -1, 1); with packed rows,
  // every window and main row then holds cpu::FillHashPackedRows's encoding of such values instead.
  void FillForBenchmark(uint64_t seed) const;

 private:
  float* Slot(int32_t slot) const;
  float* Block(int32_t block) const;
  ops::OpContext Context() const;
  StateLayout layout_;
  int64_t num_slots_;
  int64_t num_blocks_;
  int64_t fresh_base_ = 0;
  int64_t fresh_rows_ = 0;
  Buffer memory_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace deepinfer::v4
