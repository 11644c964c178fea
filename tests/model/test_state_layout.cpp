// The V4 state's layout and storage (model/deepseek_v4/v4_state.h): exact offsets for a small
// config worked by hand from dsv4-model.md §6 (a window ring per layer; per compressed layer a
// kv and a score state of [coff·ratio, coff·dim]; per CSA layer the indexer's pair of
// [8, 2·index_dim]; per block block_size/ratio main rows and block_size/4 index rows), the row
// alignment every row id relies on for the real configs (f32 and packed attention rows), and the
// storage's slot and block operations: which floats each one touches, and nothing else.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "model/config.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/state_row.h"
#include "model/deepseek_v4/v4_state.h"

namespace deepinfer::v4 {
namespace {

// 3 layers (SWA, CSA, HCA-like ratio 8) and one MTP layer; head_dim 8, index_dim 4, window 4.
ModelConfig SmallConfig() {
  ModelConfig c;
  c.source = "small test config";
  c.head_dim = 8;
  c.index_head_dim = 4;
  c.sliding_window = 4;
  c.num_hidden_layers = 3;
  c.num_nextn_predict_layers = 1;
  c.compress_ratios = {0, 4, 8, 0};
  c.qk_rope_head_dim = 4;  // for packed rows: 4 e4m3 channels, 4 BF16 ones
  return c;
}

cpu::PackedRowFormat Fp8Rows(const ModelConfig& c) { return StateLayout::PackedRowFormatFor(c, /*fp8=*/true); }

TEST(StateLayout, SmallConfigOffsetsByHand) {
  const StateLayout l = StateLayout::ForConfig(SmallConfig(), /*block_size=*/8);
  EXPECT_EQ(l.num_layers, 4);
  EXPECT_EQ(l.row_align, 8);
  // Slot: layer 0 ring [0, 32); layer 1 ring [32, 64), compressor kv+score 2·(8·16) [64, 320),
  // indexer 2·(8·8) [320, 448); layer 2 ring [448, 480), compressor 2·(8·8) [480, 608); layer 3
  // ring [608, 640).
  EXPECT_EQ(l.window_offset, (std::vector<int64_t>{0, 32, 448, 608}));
  EXPECT_EQ(l.compressor_offset, (std::vector<int64_t>{-1, 64, 480, -1}));
  EXPECT_EQ(l.indexer_offset, (std::vector<int64_t>{-1, 320, -1, -1}));
  EXPECT_EQ(l.slot_floats, 640);
  // Block of 8 tokens: layer 1's 2 main rows [0, 16) and 2 index rows [16, 24); layer 2's 1 main
  // row [24, 32).
  EXPECT_EQ(l.main_rows_offset, (std::vector<int64_t>{-1, 0, 24, -1}));
  EXPECT_EQ(l.index_rows_offset, (std::vector<int64_t>{-1, 16, -1, -1}));
  EXPECT_EQ(l.block_floats, 32);
  EXPECT_EQ(l.rows_per_block(1), 2);
  EXPECT_EQ(l.rows_per_block(2), 1);
}

// The same config with packed rows (rope 4 of head_dim 8: 4 e4m3 codes, 4 BF16 values, 1 scale,
// 13 bytes padded to 16, one float4): attention rows take 4 floats, everything else as before.
TEST(StateLayout, SmallConfigPackedOffsetsByHand) {
  const StateLayout l = StateLayout::ForConfig(SmallConfig(), /*block_size=*/8, Fp8Rows(SmallConfig()));
  EXPECT_EQ(l.row_format.dim, 8);
  EXPECT_EQ(l.row_format.fp8_end, 4);
  EXPECT_EQ(l.row_format.block, 64);
  EXPECT_EQ(l.row_floats, 4);
  EXPECT_EQ(l.row_align, 4);
  // Slot: layer 0 ring [0, 16); layer 1 ring [16, 32), compressor [32, 288), indexer [288, 416);
  // layer 2 ring [416, 432), compressor [432, 560); layer 3 ring [560, 576).
  EXPECT_EQ(l.window_offset, (std::vector<int64_t>{0, 16, 416, 560}));
  EXPECT_EQ(l.compressor_offset, (std::vector<int64_t>{-1, 32, 432, -1}));
  EXPECT_EQ(l.indexer_offset, (std::vector<int64_t>{-1, 288, -1, -1}));
  EXPECT_EQ(l.slot_floats, 576);
  // Block: layer 1's 2 main rows [0, 8) and 2 index rows [8, 16); layer 2's main row [16, 20).
  EXPECT_EQ(l.main_rows_offset, (std::vector<int64_t>{-1, 0, 16, -1}));
  EXPECT_EQ(l.index_rows_offset, (std::vector<int64_t>{-1, 8, -1, -1}));
  EXPECT_EQ(l.block_floats, 20);
}

TEST(StateLayout, RejectsABlockSizeThatIsNotAMultipleOfARatio) {
  EXPECT_THROW(StateLayout::ForConfig(SmallConfig(), /*block_size=*/12), std::exception);  // 12 % 8 != 0
}

// Every row the attention or the indexer reads is addressed as (float offset) / width, so every
// region of rows must start at a multiple of its width, in every slot and block.
void ExpectRowsAligned(const StateLayout& l) {
  EXPECT_EQ(l.slot_floats % l.row_align, 0);
  EXPECT_EQ(l.block_floats % l.row_align, 0);
  EXPECT_EQ(l.row_align % l.row_floats, 0);
  EXPECT_EQ(l.row_align % l.index_dim, 0);
  EXPECT_EQ(l.row_floats, l.packed_rows() ? l.row_format.row_pitch() / 4 : l.head_dim);
  EXPECT_EQ(l.row_floats % 4, 0) << "rows 16-byte aligned";
  int64_t slot_end = 0;
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    SCOPED_TRACE(testing::Message() << "layer " << layer);
    EXPECT_EQ(l.window_offset[layer] % l.row_floats, 0);
    EXPECT_GE(l.window_offset[layer], slot_end);  // regions in order, none overlapping
    slot_end = l.window_offset[layer] + l.window * l.row_floats;
    if (l.compressor_offset[layer] >= 0) {
      EXPECT_GE(l.compressor_offset[layer], slot_end);
      slot_end = l.compressor_offset[layer] + 2 * l.main_shape(layer).state_floats();
      EXPECT_EQ(l.main_rows_offset[layer] % l.row_floats, 0);
    }
    if (l.indexer_offset[layer] >= 0) {
      EXPECT_GE(l.indexer_offset[layer], slot_end);
      slot_end = l.indexer_offset[layer] + 2 * l.index_shape().state_floats();
      EXPECT_EQ(l.index_rows_offset[layer] % l.index_dim, 0);
    }
  }
  EXPECT_LE(slot_end, l.slot_floats);
}

TEST(StateLayout, RealConfigsKeepEveryRowRegionAligned) {
  for (const std::string path : {std::string(DEEPINFER_SOURCE_DIR) + "/bench/configs/v4-flash-3layer/config.json",
                                 std::string(DEEPINFER_SOURCE_DIR) + "/bench/configs/v4-flash-2layer/config.json"}) {
    SCOPED_TRACE(path);
    const ModelConfig c = LoadModelConfig(path);
    for (int64_t block_size : {128, 256}) {
      const StateLayout l = StateLayout::ForConfig(c, block_size);
      EXPECT_EQ(l.head_dim, 512);
      ExpectRowsAligned(l);
      // Packed rows: §6.2's 584 bytes at a 592-byte pitch (148 floats).
      const StateLayout p = StateLayout::ForConfig(c, block_size, Fp8Rows(c));
      EXPECT_EQ(p.row_format.row_bytes(), 584);
      EXPECT_EQ(p.row_floats, 148);
      EXPECT_EQ(p.row_align, 4736);  // lcm(148, 128)
      ExpectRowsAligned(p);
      EXPECT_LT(p.block_floats, l.block_floats);
      // BF16 rows: 1,024 bytes, 256 floats.
      const StateLayout h = StateLayout::ForConfig(c, block_size, StateLayout::PackedRowFormatFor(c, false));
      EXPECT_EQ(h.row_format.row_pitch(), 1024);
      EXPECT_EQ(h.row_floats, 256);
      ExpectRowsAligned(h);
      EXPECT_LT(p.block_floats, h.block_floats);
      EXPECT_LT(h.block_floats, l.block_floats);
    }
  }
  ExpectRowsAligned(StateLayout::ForConfig(SmallConfig(), 8));
  ExpectRowsAligned(StateLayout::ForConfig(SmallConfig(), 8, Fp8Rows(SmallConfig())));
  EXPECT_THROW(StateLayout::ForConfig(SmallConfig(), 8, cpu::PackedRowFormat{16, 8, 64}), std::exception)
      << "rows of 16 values for head_dim 8";
}

std::vector<float> Floats(const float* p, int64_t n) { return std::vector<float>(p, p + n); }

bool AllEqualTo(const float* p, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) {
    if (!(p[i] == v)) return false;
  }
  return true;
}

TEST(StateStorage, SlotsAndBlocksTouchOnlyTheirOwnFloats) {
  const StateLayout l = StateLayout::ForConfig(SmallConfig(), 8);
  StateStorage s(l, /*num_slots=*/3, /*num_blocks=*/4);
  EXPECT_EQ(s.blocks_base(), 3 * 640);
  EXPECT_EQ(s.fresh_base(), 3 * 640 + 4 * 32);
  EXPECT_EQ(s.bytes(), static_cast<size_t>(3 * 640 + 4 * 32) * sizeof(float));
  float* base = s.base().data<float>();

  // A new slot: zeros, −inf on the score states (compressors' and indexer's).
  const float inf = std::numeric_limits<float>::infinity();
  const float* slot1 = base + 640;
  EXPECT_TRUE(AllEqualTo(slot1, 64 + 128, 0.f));            // layer 0-1 rings, layer 1 kv state
  EXPECT_TRUE(AllEqualTo(slot1 + 192, 128, -inf));          // layer 1 score state
  EXPECT_TRUE(AllEqualTo(slot1 + 320, 64, 0.f));            // indexer kv state
  EXPECT_TRUE(AllEqualTo(slot1 + 384, 64, -inf));           // indexer score state
  EXPECT_TRUE(AllEqualTo(slot1 + 448, 32 + 64, 0.f));       // layer 2 ring, kv state
  EXPECT_TRUE(AllEqualTo(slot1 + 544, 64, -inf));           // layer 2 score state
  EXPECT_TRUE(AllEqualTo(slot1 + 608, 32, 0.f));            // MTP ring

  // Every float of the allocation numbered; then each operation changes only its own range.
  for (int64_t i = 0; i < s.fresh_base(); ++i) base[i] = static_cast<float>(i);
  std::vector<float> expected = Floats(base, s.fresh_base());
  s.CopySlot(0, 2);
  for (int64_t i = 0; i < 640; ++i) expected[2 * 640 + i] = static_cast<float>(i);
  s.CopyBlock(3, 1);
  for (int64_t i = 0; i < 32; ++i) expected[1920 + 32 + i] = static_cast<float>(1920 + 3 * 32 + i);
  EXPECT_EQ(Floats(base, s.fresh_base()), expected);
  s.PoisonBlock(2);
  for (int64_t i = 0; i < s.fresh_base(); ++i) {
    const bool in_block_2 = i >= 1920 + 64 && i < 1920 + 96;
    ASSERT_EQ(std::isnan(base[i]), in_block_2) << "float " << i;
    if (!in_block_2) ASSERT_EQ(base[i], expected[static_cast<size_t>(i)]) << "float " << i;
  }
  s.ResetSlot(1);
  EXPECT_TRUE(AllEqualTo(base + 640, 192, 0.f));
  EXPECT_TRUE(AllEqualTo(base + 640 + 192, 128, -inf));
  EXPECT_EQ(base[639], 639.f);   // slot 0's last float
  EXPECT_EQ(base[1281], 1.f);    // slot 2's second float (a copy of slot 0's)

  // Growing the fresh rows keeps every slot and block.
  std::vector<float> before = Floats(s.base().data<float>(), s.fresh_base());
  s.EnsureFreshRows(600);
  EXPECT_EQ(s.base().numel(), s.fresh_base() + 1024 * 8);  // max(600, 2 · 512) rows of head_dim
  const std::vector<float> after = Floats(s.base().data<float>(), s.fresh_base());
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_TRUE(std::memcmp(&before[i], &after[i], sizeof(float)) == 0) << "float " << i;
  }
}

// FillForBenchmark with packed rows: every window and main row holds the encoding of its hashed
// values (decoding to their FP8 / BF16 rounding), the f32 regions their hashed floats.
TEST(StateStorage, PackedBenchmarkFillEncodesEveryAttentionRow) {
  const StateLayout l = StateLayout::ForConfig(SmallConfig(), 8, Fp8Rows(SmallConfig()));
  StateStorage s(l, 2, 3);
  s.FillForBenchmark(77);
  const float* base = s.base().data<float>();
  std::vector<bool> attention_row(static_cast<size_t>(s.fresh_base()), false);
  auto expect_row = [&](int64_t o) {
    std::vector<float> want(8), got(8);
    for (int64_t c = 0; c < 8; ++c) want[c] = cpu::HashUniform(77, static_cast<uint64_t>(o + c), -1.f, 1.f);
    cpu::Fp8RoundTrip(want.data(), 4, 64);
    cpu::Bf16Round(want.data() + 4, 4);
    cpu::DecodePackedRow(l.row_format, reinterpret_cast<const uint8_t*>(base + o), got.data());
    EXPECT_EQ(got, want) << "row at float " << o;
    for (int64_t i = 0; i < l.row_floats; ++i) attention_row[static_cast<size_t>(o + i)] = true;
  };
  for (int64_t layer = 0; layer < l.num_layers; ++layer) {
    for (int32_t slot = 0; slot < 2; ++slot) {
      for (int64_t j = 0; j < l.window; ++j) expect_row(s.Window(slot, layer) - base + j * l.row_floats);
    }
    if (l.main_rows_offset[layer] < 0) continue;
    for (int32_t block = 1; block < 3; ++block) {
      for (int64_t j = 0; j < l.rows_per_block(layer); ++j) expect_row(s.MainRows(block, layer) - base + j * l.row_floats);
    }
  }
  for (int64_t i = 0; i < s.fresh_base(); ++i) {
    if (!attention_row[static_cast<size_t>(i)] && i >= s.blocks_base() + l.block_floats) {  // past the null block
      ASSERT_EQ(base[i], cpu::HashUniform(77, static_cast<uint64_t>(i), -1.f, 1.f)) << "float " << i;
    }
  }
  // Poison: every byte 0xff, so a packed row decodes to NaNs.
  s.PoisonBlock(1);
  std::vector<float> row(8);
  cpu::DecodePackedRow(l.row_format, reinterpret_cast<const uint8_t*>(s.MainRows(1, 1)), row.data());
  for (float v : row) EXPECT_TRUE(std::isnan(v));
}

TEST(StateStorage, RejectsSlotsAndBlocksOutOfRange) {
  StateStorage s(StateLayout::ForConfig(SmallConfig(), 8), 3, 4);
  EXPECT_THROW(s.CopySlot(0, 3), std::exception);
  EXPECT_THROW(s.CopySlot(-1, 0), std::exception);
  EXPECT_THROW(s.CopyBlock(0, 1), std::exception) << "block 0 is the null block";
  EXPECT_THROW(s.PoisonBlock(4), std::exception);
  EXPECT_THROW(s.CompressorKv(0, 0), std::exception) << "layer 0 has no compressor";
  EXPECT_THROW(s.IndexerKv(0, 2), std::exception) << "layer 2 has no indexer";
  EXPECT_EQ(s.CompressorKv(1, 2) - s.base().data<float>(), 640 + 480);
  EXPECT_EQ(s.IndexerScore(2, 1) - s.base().data<float>(), 2 * 640 + 320 + 64);
}

}  // namespace
}  // namespace deepinfer::v4
