// The state's packed attention rows (v4_state.h: dsv4-model.md §6.2's BF16 and FP8 rows) against
// f32 rows holding the same rounded values (Numerics::state_rows), on the reference goldens with
// every reference rounding: the logits of a chunked prefill and of the decode steps after it are
// the same bits, and a block takes fewer bytes. The chunks (7 tokens) make the ring copies, the
// compressors' rows that close across steps and the fresh rows of several steps all pass through
// the packed format before the attention reads them.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "model/model_test_support.h"

namespace deepinfer::testing {
namespace {

class PackedRowsTest : public ::testing::TestWithParam<std::string> {};

std::vector<std::vector<float>> PrefillThenDecode(const Golden& g, StateRows rows, size_t* block_bytes) {
  LoadOptions opts = WithEveryReferenceRounding();
  opts.numerics.state_rows = rows;
  LoadedModel loaded = LoadModel(g.dir, opts);
  *block_bytes = loaded.model->CreateState(1, 4, 128, 0)->bytes_per_block();
  SequenceDriver driver(*loaded.model);
  std::vector<std::vector<float>> logits{driver.Prefill(g.prompt_ids, 7)};
  for (size_t i = 0; i < std::min<size_t>(g.greedy.size(), 6); ++i) logits.push_back(driver.Step(g.greedy[i]));
  return logits;
}

TEST_P(PackedRowsTest, SameLogitsAsF32Rows) {
  const Golden g = LoadGolden(GetParam());
  size_t f32_bytes = 0, bf16_bytes = 0, fp8_bytes = 0;
  const auto f32 = PrefillThenDecode(g, StateRows::kF32, &f32_bytes);
  for (const auto& [rows, name, bytes] : {std::tuple{StateRows::kBf16, "bf16", &bf16_bytes},
                                          std::tuple{StateRows::kFp8, "fp8", &fp8_bytes}}) {
    const auto packed = PrefillThenDecode(g, rows, bytes);
    ASSERT_EQ(packed.size(), f32.size());
    for (size_t s = 0; s < packed.size(); ++s) {
      ASSERT_EQ(packed[s].size(), f32[s].size());
      EXPECT_EQ(std::memcmp(packed[s].data(), f32[s].data(), packed[s].size() * sizeof(float)), 0)
          << name << " rows: step " << s << " (0: the prefill) differs";
    }
  }
  // The goldens' rows: head_dim 128 with 32 rope dims, 176 bytes as FP8, 256 as BF16, 512 as f32; a
  // block's index rows stay f32, so the block shrinks by less than the rows do.
  EXPECT_LT(fp8_bytes, bf16_bytes);
  EXPECT_LT(bf16_bytes, f32_bytes);
  std::printf("[%s] bytes a block: f32 rows %zu, BF16 rows %zu, FP8 rows %zu\n", GetParam().c_str(), f32_bytes,
              bf16_bytes, fp8_bytes);
}

INSTANTIATE_TEST_SUITE_P(Goldens, PackedRowsTest, ::testing::ValuesIn(GoldenNames()));

}  // namespace
}  // namespace deepinfer::testing
