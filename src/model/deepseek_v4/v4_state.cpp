#include "model/deepseek_v4/v4_state.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace deepinfer::v4 {

StateLayout StateLayout::ForConfig(const ModelConfig& c, int64_t block_size) {
  StateLayout l;
  l.block_size = block_size;
  l.window = c.sliding_window;
  l.head_dim = c.head_dim;
  l.index_dim = c.index_head_dim;
  l.num_layers = c.num_hidden_layers + c.num_nextn_predict_layers;
  int64_t slot = 0, block = 0;
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    const int64_t r = c.compress_ratio(layer);
    if (r != 0 && block_size % r != 0) {
      DI_THROW("{}: block size {} is not a multiple of compress ratio {} (layer {})", c.source,
               block_size, r, layer);
    }
    l.ratio.push_back(r);
    l.window_offset.push_back(slot);
    slot += l.window * l.head_dim;
    if (r != 0) {
      l.compressor_offset.push_back(slot);
      slot += 2 * l.main_shape(layer).state_floats();
      l.main_rows_offset.push_back(block);
      block += (block_size / r) * l.head_dim;
    } else {
      l.compressor_offset.push_back(-1);
      l.main_rows_offset.push_back(-1);
    }
    if (r == 4) {
      l.indexer_offset.push_back(slot);
      slot += 2 * l.index_shape().state_floats();
      l.index_rows_offset.push_back(block);
      block += (block_size / 4) * l.index_dim;
    } else {
      l.indexer_offset.push_back(-1);
      l.index_rows_offset.push_back(-1);
    }
  }
  l.slot_floats = slot;
  l.block_floats = block;
  return l;
}

StateStorage::StateStorage(StateLayout layout, int64_t num_slots, int64_t num_blocks)
    : layout_(std::move(layout)),
      num_slots_(num_slots),
      num_blocks_(num_blocks),
      slots_(static_cast<size_t>(num_slots * layout_.slot_floats) * sizeof(float)),
      blocks_(static_cast<size_t>(std::max<int64_t>(num_blocks * layout_.block_floats, 1)) *
              sizeof(float)) {
  for (int32_t s = 0; s < num_slots; ++s) ResetSlot(s);
}

float* StateStorage::Slot(int32_t slot) const {
  DI_CHECK(slot >= 0 && slot < num_slots_, "state slot {} out of range [0, {})", slot, num_slots_);
  return slots_.as<float>() + static_cast<int64_t>(slot) * layout_.slot_floats;
}

float* StateStorage::Block(int32_t block) const {
  DI_CHECK(block > 0 && block < num_blocks_, "block {} out of range [1, {})", block, num_blocks_);
  return blocks_.as<float>() + static_cast<int64_t>(block) * layout_.block_floats;
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
  float* base = Slot(slot);
  std::memset(base, 0, static_cast<size_t>(layout_.slot_floats) * sizeof(float));
  for (int64_t layer = 0; layer < layout_.num_layers; ++layer) {
    if (layout_.compressor_offset[layer] >= 0) {
      cpu::CompressorReset(layout_.main_shape(layer), CompressorKv(slot, layer),
                           CompressorScore(slot, layer));
    }
    if (layout_.indexer_offset[layer] >= 0) {
      cpu::CompressorReset(layout_.index_shape(), IndexerKv(slot, layer), IndexerScore(slot, layer));
    }
  }
}

void StateStorage::CopySlot(int32_t from, int32_t to) const {
  if (from == to) return;
  std::memcpy(Slot(to), Slot(from), static_cast<size_t>(layout_.slot_floats) * sizeof(float));
}

void StateStorage::CopyBlock(int32_t from, int32_t to) const {
  if (from == to) return;
  std::memcpy(Block(to), Block(from), static_cast<size_t>(layout_.block_floats) * sizeof(float));
}

void StateStorage::PoisonBlock(int32_t block) const {
  float* b = Block(block);
  std::fill(b, b + layout_.block_floats, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace deepinfer::v4
