// The state's packed attention rows (dsv4-model.md §6.2; v4_state.h) against f32 rows holding the
// same rounded values (Numerics::f32_state_rows), on the reference goldens with every reference
// rounding: the logits of a chunked prefill and of the decode steps after it are the same bits,
// and the state takes the packed rows' bytes. The chunks (7 tokens) make the ring copies, the
// compressors' rows that close across steps and the fresh rows of several steps all pass through
// the packed format before the attention reads them.
#include <gtest/gtest.h>

#include <cstring>

#include "model/model_test_support.h"

namespace deepinfer::testing {
namespace {

class PackedRowsTest : public ::testing::TestWithParam<std::string> {};

std::vector<std::vector<float>> PrefillThenDecode(const Golden& g, bool f32_state_rows, size_t* state_bytes) {
  LoadOptions opts = WithEveryReferenceRounding();
  opts.numerics.f32_state_rows = f32_state_rows;
  LoadedModel loaded = LoadModel(g.dir, opts);
  *state_bytes = loaded.model->CreateState(1, 4, 128, 0)->bytes_per_block();
  SequenceDriver driver(*loaded.model);
  std::vector<std::vector<float>> logits{driver.Prefill(g.prompt_ids, 7)};
  for (size_t i = 0; i < std::min<size_t>(g.greedy.size(), 6); ++i) logits.push_back(driver.Step(g.greedy[i]));
  return logits;
}

TEST_P(PackedRowsTest, SameLogitsAsF32Rows) {
  const Golden g = LoadGolden(GetParam());
  size_t packed_bytes = 0, f32_bytes = 0;
  const auto packed = PrefillThenDecode(g, false, &packed_bytes);
  const auto f32 = PrefillThenDecode(g, true, &f32_bytes);
  ASSERT_EQ(packed.size(), f32.size());
  for (size_t s = 0; s < packed.size(); ++s) {
    ASSERT_EQ(packed[s].size(), f32[s].size());
    EXPECT_EQ(std::memcmp(packed[s].data(), f32[s].data(), packed[s].size() * sizeof(float)), 0)
        << "step " << s << " (0: the prefill) differs";
  }
  // The goldens' rows: head_dim 128 with 32 rope dims, 176 bytes packed against 512 as f32; a
  // block's index rows stay f32, so the block shrinks by less than the rows do.
  EXPECT_LT(packed_bytes, f32_bytes);
  std::printf("[%s] bytes a block: packed rows %zu, f32 rows %zu\n", GetParam().c_str(), packed_bytes, f32_bytes);
}

INSTANTIATE_TEST_SUITE_P(Goldens, PackedRowsTest, ::testing::ValuesIn(GoldenNames()));

}  // namespace
}  // namespace deepinfer::testing
