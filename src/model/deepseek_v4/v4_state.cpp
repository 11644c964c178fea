#include "model/deepseek_v4/v4_state.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <numeric>

#include "base/error.h"
#include "kernels/cpu/ue8m0.h"
#include "ops/ops.h"

namespace deepinfer::v4 {

namespace {
int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
constexpr int64_t kInitialFreshRows = 512;
}  // namespace

cpu::PackedRowFormat StateLayout::PackedRowFormatFor(const ModelConfig& c, bool fp8) {
  return cpu::PackedRowFormat{c.head_dim, fp8 ? c.head_dim - c.qk_rope_head_dim : 0, 64};
}

StateLayout StateLayout::ForConfig(const ModelConfig& c, int64_t block_size, const cpu::PackedRowFormat& rows) {
  StateLayout l;
  l.block_size = block_size;
  l.window = c.sliding_window;
  l.head_dim = c.head_dim;
  l.index_dim = c.index_head_dim;
  l.num_layers = c.num_hidden_layers + c.num_nextn_predict_layers;
  if (rows.dim > 0) {
    DI_CHECK(rows.dim == c.head_dim, "{}: packed state rows of {} values for head_dim {}", c.source, rows.dim,
             c.head_dim);
    rows.Validate();
    l.row_format = rows;
    l.row_floats = l.row_format.row_floats();
  } else {
    l.row_floats = l.head_dim;
  }
  const int64_t w = l.row_floats;
  l.row_align = std::lcm(w, std::max<int64_t>(l.index_dim, 1));
  int64_t slot = 0, block = 0;
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    slot = RoundUp(slot, w);
    const int64_t r = c.compress_ratio(layer);
    if (r != 0 && block_size % r != 0) {
      DI_THROW("{}: block size {} is not a multiple of compress ratio {} (layer {})", c.source,
               block_size, r, layer);
    }
    l.ratio.push_back(r);
    l.window_offset.push_back(slot);
    slot += l.window * w;
    if (r != 0) {
      l.compressor_offset.push_back(slot);
      slot += 2 * l.main_shape(layer).state_floats();
      block = RoundUp(block, w);
      l.main_rows_offset.push_back(block);
      block += (block_size / r) * w;
    } else {
      l.compressor_offset.push_back(-1);
      l.main_rows_offset.push_back(-1);
    }
    if (r == 4) {
      l.indexer_offset.push_back(slot);
      slot += 2 * l.index_shape().state_floats();
      block = RoundUp(block, l.index_dim);
      l.index_rows_offset.push_back(block);
      block += (block_size / 4) * l.index_dim;
    } else {
      l.indexer_offset.push_back(-1);
      l.index_rows_offset.push_back(-1);
    }
  }
  l.slot_floats = RoundUp(slot, l.row_align);
  l.block_floats = RoundUp(block, l.row_align);
  return l;
}

StateStorage::StateStorage(StateLayout layout, int64_t num_slots, int64_t num_blocks, DeviceId device,
                           int64_t fresh_rows)
    : layout_(std::move(layout)), num_slots_(num_slots), num_blocks_(num_blocks) {
  fresh_base_ = blocks_base() + std::max<int64_t>(num_blocks_, 1) * layout_.block_floats;
  fresh_rows_ = std::max(fresh_rows, kInitialFreshRows);
  memory_ = Buffer(static_cast<size_t>(fresh_base_ + fresh_rows_ * layout_.row_floats) * sizeof(float), device);
  for (int32_t s = 0; s < num_slots; ++s) ResetSlot(s);
}

ops::OpContext StateStorage::Context() const { return ops::OpContext{memory_.device(), stream_}; }

TensorView StateStorage::base() const {
  return TensorView(memory_.data(), DType::kF32, {static_cast<int64_t>(memory_.size() / sizeof(float))},
                    memory_.device());
}

void StateStorage::EnsureFreshRows(int64_t tokens) {
  if (tokens <= fresh_rows_) return;
  const int64_t rows = std::max(tokens, 2 * fresh_rows_);
  Buffer bigger(static_cast<size_t>(fresh_base_ + rows * layout_.row_floats) * sizeof(float), memory_.device());
  ops::CopyBytes(Context(), bigger.data(), memory_.data(), static_cast<size_t>(fresh_base_) * sizeof(float));
  memory_ = std::move(bigger);
  fresh_rows_ = rows;
}

float* StateStorage::Slot(int32_t slot) const {
  DI_CHECK(slot >= 0 && slot < num_slots_, "state slot {} out of range [0, {})", slot, num_slots_);
  return memory_.as<float>() + slots_base() + static_cast<int64_t>(slot) * layout_.slot_floats;
}

float* StateStorage::Block(int32_t block) const {
  DI_CHECK(block > 0 && block < num_blocks_, "block {} out of range [1, {})", block, num_blocks_);
  return memory_.as<float>() + blocks_base() + static_cast<int64_t>(block) * layout_.block_floats;
}

float* StateStorage::Window(int32_t slot, int64_t layer) const {
  return Slot(slot) + layout_.window_offset[layer];
}

float* StateStorage::CompressorKv(int32_t slot, int64_t layer) const {
  DI_CHECK(layout_.compressor_offset[layer] >= 0, "layer {} has no compressor", layer);
  return Slot(slot) + layout_.compressor_offset[layer];
}

float* StateStorage::CompressorScore(int32_t slot, int64_t layer) const {
  return CompressorKv(slot, layer) + layout_.main_shape(layer).state_floats();
}

float* StateStorage::IndexerKv(int32_t slot, int64_t layer) const {
  DI_CHECK(layout_.indexer_offset[layer] >= 0, "layer {} has no indexer", layer);
  return Slot(slot) + layout_.indexer_offset[layer];
}

float* StateStorage::IndexerScore(int32_t slot, int64_t layer) const {
  return IndexerKv(slot, layer) + layout_.index_shape().state_floats();
}

float* StateStorage::MainRows(int32_t block, int64_t layer) const {
  DI_CHECK(layout_.main_rows_offset[layer] >= 0, "layer {} has no compressed rows", layer);
  return Block(block) + layout_.main_rows_offset[layer];
}

float* StateStorage::IndexRows(int32_t block, int64_t layer) const {
  DI_CHECK(layout_.index_rows_offset[layer] >= 0, "layer {} has no index rows", layer);
  return Block(block) + layout_.index_rows_offset[layer];
}

void StateStorage::ResetSlot(int32_t slot) const {
  const ops::OpContext ctx = Context();
  ops::FillFloats(ctx, Slot(slot), layout_.slot_floats, 0.f);
  for (int64_t layer = 0; layer < layout_.num_layers; ++layer) {
    if (layout_.compressor_offset[layer] >= 0) {
      const int64_t n = layout_.main_shape(layer).state_floats();
      ops::FillFloats(ctx, CompressorScore(slot, layer), n, -std::numeric_limits<float>::infinity());
    }
    if (layout_.indexer_offset[layer] >= 0) {
      const int64_t n = layout_.index_shape().state_floats();
      ops::FillFloats(ctx, IndexerScore(slot, layer), n, -std::numeric_limits<float>::infinity());
    }
  }
}

void StateStorage::CopySlot(int32_t from, int32_t to) const {
  if (from == to) return;
  ops::CopyBytes(Context(), Slot(to), Slot(from), static_cast<size_t>(layout_.slot_floats) * sizeof(float));
}

void StateStorage::CopyBlock(int32_t from, int32_t to) const {
  if (from == to) return;
  ops::CopyBytes(Context(), Block(to), Block(from), static_cast<size_t>(layout_.block_floats) * sizeof(float));
}

void StateStorage::PoisonBlock(int32_t block) const {
  ops::FillFloats(Context(), Block(block), layout_.block_floats, cpu::F32FromBits(0xffffffffu));
}

void StateStorage::FillForBenchmark(uint64_t seed) const {
  const ops::OpContext ctx = Context();
  float* base = memory_.as<float>();
  ops::FillHashUniform(ctx, base, fresh_base_, seed, -1.f, 1.f);
  if (!layout_.packed_rows()) return;
  for (int64_t layer = 0; layer < layout_.num_layers; ++layer) {
    ops::FillHashPackedRows(ctx, layout_.row_format,
                            {slots_base() + layout_.window_offset[layer], layout_.slot_floats, num_slots_, layout_.window},
                            seed, base);
    if (layout_.main_rows_offset[layer] >= 0) {
      ops::FillHashPackedRows(ctx, layout_.row_format,
                              {blocks_base() + layout_.main_rows_offset[layer], layout_.block_floats,
                               std::max<int64_t>(num_blocks_, 1), layout_.rows_per_block(layer)},
                              seed, base);
    }
  }
}

}  // namespace deepinfer::v4
