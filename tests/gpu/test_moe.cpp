// The MoE token ↔ expert permutation on the GPU against the CPU model's routing lists
// (V4Model::Moe): every output is data movement or the CPU's own summation order: bit-exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/moe.h"

namespace deepinfer {
namespace {

using test::AllEqual;
using test::DeviceArray;
using test::RandomFloats;

struct HostRouting {
  std::vector<int32_t> offsets, sorted_slots, slot_rows;
};

// The CPU model's construction: routed[e] = kept slots of expert e in increasing slot order.
HostRouting Reference(const std::vector<int32_t>& ids, int64_t m, int64_t k, int64_t e) {
  std::vector<std::vector<int32_t>> routed(e);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t x = ids[t * k + j];
      bool repeated = x < 0 || x >= e;
      for (int64_t jj = 0; jj < j; ++jj) repeated |= ids[t * k + jj] == x;
      if (!repeated) routed[x].push_back(static_cast<int32_t>(t * k + j));
    }
  }
  HostRouting r;
  r.sorted_slots.assign(m * k, -1);
  r.slot_rows.assign(m * k, -1);
  int32_t row = 0;
  for (int64_t x = 0; x < e; ++x) {
    r.offsets.push_back(row);
    for (int32_t slot : routed[x]) r.sorted_slots[row] = slot, r.slot_rows[slot] = row, ++row;
  }
  r.offsets.push_back(row);
  return r;
}

// invalid_every > 0: every invalid_every-th id is outside [0, E) (−1 or E, alternately): dropped.
void CheckAlign(int64_t m, int64_t k, int64_t e, uint64_t seed, bool with_repeats, int64_t d = 96,
                int64_t invalid_every = 0) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(m * k);
  for (int64_t t = 0; t < m; ++t) {
    // Distinct experts per token (score routing) or hash-table rows with repeats.
    std::vector<int32_t> pool(e);
    for (int64_t x = 0; x < e; ++x) pool[x] = static_cast<int32_t>(x);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = with_repeats ? static_cast<int32_t>(rng() % 5) : pool[j];
  }
  for (int64_t i = invalid_every - 1; invalid_every > 0 && i < m * k; i += invalid_every) {
    ids[i] = (i / invalid_every) % 2 ? static_cast<int32_t>(e) : -1;
  }
  const HostRouting want = Reference(ids, m, k, e);
  DeviceArray<int32_t> dids(ids), doff(e + 1), dsorted(m * k), drows(m * k);
  DeviceArray<uint8_t> scratch(cuda::MoeAlignScratchBytes(m * k, e));
  cuda::MoeAlign(dids.get(), m, k, e, doff.get(), dsorted.get(), drows.get(), scratch.get(), nullptr);
  EXPECT_TRUE(AllEqual(doff.ToHost(), want.offsets, "offsets"));
  EXPECT_TRUE(AllEqual(dsorted.ToHost(), want.sorted_slots, "sorted slots"));
  EXPECT_TRUE(AllEqual(drows.ToHost(), want.slot_rows, "slot rows"));

  // Gather, then combine what the experts would return (here: the gathered rows scaled by the
  // row weight and a per-row constant), against the CPU order of additions. d % 4 == 0 takes the
  // float4 paths.
  std::vector<float> x = RandomFloats(m * d, seed + 1), w = RandomFloats(m * k, seed + 2, 0.f, 1.f);
  std::vector<float> shared = RandomFloats(m * d, seed + 3);
  const int64_t rows = want.offsets.back();
  DeviceArray<float> dx(x), dw(w), dxe(std::max<int64_t>(rows, 1) * d), drw(std::max<int64_t>(rows, 1));
  cuda::MoeGather(dx.get(), d, d, dsorted.get(), rows, k, dw.get(), dxe.get(), drw.get(), nullptr);
  std::vector<float> xe = dxe.ToHost(), rw = drw.ToHost();
  std::vector<float> want_xe(rows * d), want_rw(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t slot = want.sorted_slots[r];
    for (int64_t i = 0; i < d; ++i) want_xe[r * d + i] = x[(slot / k) * d + i];
    want_rw[r] = w[slot];
  }
  xe.resize(rows * d), rw.resize(rows);
  EXPECT_TRUE(AllEqual(xe, want_xe, "gathered rows"));
  EXPECT_TRUE(AllEqual(rw, want_rw, "row weights"));

  std::vector<float> ye(std::max<int64_t>(rows, 1) * d);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) ye[r * d + i] = want_xe[r * d + i] * want_rw[r] + 0.001f * static_cast<float>(r);
  }
  std::vector<float> want_out(m * d, 0.f);
  for (int64_t x_id = 0; x_id < e; ++x_id) {
    for (int64_t r = want.offsets[x_id]; r < want.offsets[x_id + 1]; ++r) {
      const int64_t t = want.sorted_slots[r] / k;
      for (int64_t i = 0; i < d; ++i) want_out[t * d + i] += ye[r * d + i];
    }
  }
  for (int64_t i = 0; i < m * d; ++i) want_out[i] += shared[i];
  DeviceArray<float> dye(ye), dshared(shared), dout(m * d);
  cuda::MoeCombine(dye.get(), drows.get(), dids.get(), m, k, d, dshared.get(), dout.get(), nullptr);
  EXPECT_TRUE(AllEqual(dout.ToHost(), want_out, "combined"));
}

TEST(CudaMoeAlign, DecodeBatchFlash) {
  DI_REQUIRE_GPU();
  CheckAlign(64, 6, 256, 1, false);  // 64 tokens, top-6 of 256 experts
}

// Rows wide enough for MoeCombine to give a token several column blocks: Flash's 4096 (1,024
// float4 columns: 4 blocks) and 1,030 (not a multiple of 4: float columns, 5 blocks' worth, capped
// at 4), at batch sizes 1 and 3; the same sums as the CPU's order.
TEST(CudaMoeAlign, CombineWideRows) {
  DI_REQUIRE_GPU();
  CheckAlign(1, 6, 256, 21, false, 4096);
  CheckAlign(3, 6, 256, 22, false, 4096);
  CheckAlign(3, 6, 5, 23, true, 1030);
}

TEST(CudaMoeAlign, PrefillChunkFlash) {
  DI_REQUIRE_GPU();
  CheckAlign(2048, 6, 256, 2, false);  // 12,288 slots: the many-slots path
}

TEST(CudaMoeAlign, HashRowsWithRepeatedExperts) {
  DI_REQUIRE_GPU();
  CheckAlign(300, 6, 5, 3, true);  // repeats dropped after the first; 5 experts, crowded
}

// From cuda::kMoeAlignDeviceSlots (256) slots MoeAlign counts and places over the whole device
// (one warp per expert): the same outputs, with repeats, crowded experts, decode batches 64 and
// 256 and an 8k prefill's 49,152 slots.
TEST(CudaMoeAlign, ManySlotsPath) {
  DI_REQUIRE_GPU();
  static_assert(cuda::kMoeAlignDeviceSlots == 256, "the cases below sit around 256 slots");
  CheckAlign(51, 5, 5, 11, true);    // 255 slots: still the single block
  CheckAlign(43, 6, 5, 8, true);     // 258 slots: just past the threshold
  CheckAlign(256, 6, 256, 14, false);  // decode batch 256
  CheckAlign(1000, 6, 256, 9, true);
  CheckAlign(8192, 6, 256, 10, false);
  CheckAlign(1000, 6, 256, 12, false, 96, 7);  // ids of -1 and E dropped on this path too
  CheckAlign(300, 6, 64, 13, false, 96, 7);    // and on the single block's
}

TEST(CudaMoeAlign, SingleToken) {
  DI_REQUIRE_GPU();
  CheckAlign(1, 2, 8, 4, false);
}

// The scalar gather and combine (a width that is not a multiple of 4), and tokens with more kept
// rows than the combine loads at once (top-12: a second batch of rows).
TEST(CudaMoeAlign, OddWidthAndManyRowsPerToken) {
  DI_REQUIRE_GPU();
  CheckAlign(37, 6, 32, 5, false, 50);
  CheckAlign(30, 12, 64, 6, false);
  CheckAlign(30, 12, 64, 7, false, 50);
}

}  // namespace
}  // namespace deepinfer
