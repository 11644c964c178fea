// CUDA KV compressor (kernels/cuda/compressor.h) against the CPU twin: batches of sequences with
// their own slots and positions, fed call after call into the same states (prefill chunks that
// cross several windows, fresh states started at positions that are not window-aligned, a reset
// mid-run, runs of single-token decode steps).
//
// Exactness. Row numbers, row counts and the whole state pool (including slots and gaps that no
// sequence owns) are bit-exact: the state is data movement plus one fp32 add (score + ape) done
// identically. Pooled rows: same operations in the same order without FMAs, but CUDA's expf (≤ 2
// ulp) is not the host's expf (< 1 ulp), so each softmax weight may differ by a few ulp; a float
// simulation of that perturbation over 8 and 128 candidates with |kv| ≤ 1 gives ≤ 3e-7 absolute.
// Asserted: atol 2e-6, rtol 2e-6. Rows not owned by any sequence must stay untouched (NaN).

#include "kernels/cuda/compressor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/compressor.h"

namespace deepinfer::test {
namespace {

constexpr float kRowAtol = 2e-6f, kRowRtol = 2e-6f;

// One sequence's part of a step: which slot it feeds and how many tokens.
struct Feed {
  int64_t slot;
  int64_t n;
};

class CompressorHarness {
 public:
  CompressorHarness(int64_t ratio, int64_t dim, int64_t num_slots, uint64_t seed)
      : shape_{ratio, dim}, num_slots_(num_slots), seed_(seed),
        pos_(static_cast<size_t>(num_slots), 0) {
    sf_ = shape_.state_floats();
    // kv state at +3, score state at +sf+10, slot stride 2·sf+17: gaps on every side.
    stride_ = 2 * sf_ + 17;
    // Garbage everywhere: slots never reset and the gaps must come through untouched.
    pool_ = RandomFloats(static_cast<size_t>(num_slots * stride_ + 8), seed_++, -9.f, 9.f);
    dpool_ = std::make_unique<DeviceArray<float>>(pool_);
    ape_ = RandomFloats(static_cast<size_t>(ratio * shape_.width()), seed_++, -1.f, 1.f);
    dape_ = std::make_unique<DeviceArray<float>>(ape_);
  }

  float* CpuKv(int64_t slot) { return pool_.data() + slot * stride_ + 3; }
  float* CpuScore(int64_t slot) { return pool_.data() + slot * stride_ + sf_ + 10; }
  cuda::CompressorStatePool GpuPool() const {
    return {dpool_->get() + 3, dpool_->get() + sf_ + 10, stride_};
  }

  // Resets the slots on both sides and restarts their positions at `pos`.
  void Reset(const std::vector<int64_t>& slots, int64_t pos) {
    for (const int64_t s : slots) {
      cpu::CompressorReset(shape_, CpuKv(s), CpuScore(s));
      pos_[s] = pos;
    }
    DeviceArray<int64_t> dslots(slots);
    cuda::CompressorReset(shape_, GpuPool(), dslots.get(), static_cast<int64_t>(slots.size()), nullptr);
    EXPECT_TRUE(AllEqual(dpool_->ToHost(), pool_, "state pool after reset"));
  }

  // One batched call; `tight` packs rows exactly, else by the upper bound n/ratio + 1 (with two
  // spare rows at the end).
  void Step(const std::vector<Feed>& feeds, bool tight) {
    const int64_t b_count = static_cast<int64_t>(feeds.size());
    const int64_t m = shape_.ratio, w = shape_.width(), dim = shape_.dim;
    const int64_t ld = 2 * w + 3;  // fused [kv | 1 gap | score | 2 gap] rows
    std::vector<cuda::CompressorSeq> seqs;
    int64_t tokens = 0, rows = 0;
    for (const Feed& f : feeds) {
      const int64_t pos0 = pos_[f.slot];
      seqs.push_back({f.slot, tokens, f.n, pos0, rows});
      tokens += f.n;
      rows += tight ? cuda::CompressorRowsEmitted(m, pos0, f.n) : f.n / m + 1;
    }
    const int64_t capacity = tight ? rows : rows + 2;
    const int64_t ldr = dim + 2;
    const std::vector<float> proj = RandomFloats(static_cast<size_t>(tokens * ld), seed_++, -1.f, 1.f);
    // Scores spread wider than kv so the softmax is far from uniform.
    std::vector<float> proj_scaled = proj;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < w; ++c) proj_scaled[t * ld + w + 1 + c] *= 4.f;
    }

    std::vector<float> want_rows(static_cast<size_t>(capacity * ldr), std::numeric_limits<float>::quiet_NaN());
    std::vector<int64_t> want_index(static_cast<size_t>(capacity), -1);
    std::vector<int64_t> want_emitted(static_cast<size_t>(b_count));
    for (int64_t b = 0; b < b_count; ++b) {
      const cuda::CompressorSeq& sq = seqs[b];
      std::vector<float> kv(static_cast<size_t>(sq.num_tokens * w)), score(kv.size());
      for (int64_t t = 0; t < sq.num_tokens; ++t) {
        const float* row = proj_scaled.data() + (sq.token_offset + t) * ld;
        std::memcpy(kv.data() + t * w, row, static_cast<size_t>(w) * sizeof(float));
        std::memcpy(score.data() + t * w, row + w + 1, static_cast<size_t>(w) * sizeof(float));
      }
      std::vector<float> out(static_cast<size_t>((sq.num_tokens / m + 1) * dim));
      std::vector<int64_t> index(static_cast<size_t>(sq.num_tokens / m + 1));
      const int64_t emitted =
          cpu::CompressorAdvance(shape_, ape_.data(), kv.data(), score.data(), sq.num_tokens, sq.pos0,
                                 CpuKv(sq.slot), CpuScore(sq.slot), out.data(), index.data());
      want_emitted[b] = emitted;
      ASSERT_EQ(emitted, cuda::CompressorRowsEmitted(m, sq.pos0, sq.num_tokens));
      for (int64_t j = 0; j < emitted; ++j) {
        std::memcpy(want_rows.data() + (sq.row_offset + j) * ldr, out.data() + j * dim,
                    static_cast<size_t>(dim) * sizeof(float));
        want_index[sq.row_offset + j] = index[j];
      }
      pos_[sq.slot] += sq.num_tokens;
    }

    DeviceArray<float> dproj(proj_scaled);
    DeviceArray<cuda::CompressorSeq> dseqs(seqs);
    DeviceArray<float> drows(std::vector<float>(want_rows.size(), std::numeric_limits<float>::quiet_NaN()));
    DeviceArray<int64_t> dindex(std::vector<int64_t>(want_index.size(), -1));
    DeviceArray<int64_t> demitted(want_emitted.size());
    cuda::CompressorAdvance(shape_, dape_->get(), dproj.get(), dproj.get() + w + 1, ld, GpuPool(), dseqs.get(), b_count,
                            drows.get(), ldr, dindex.get(), demitted.get(), capacity, nullptr);
    const std::string what = "step " + std::to_string(step_++);
    EXPECT_TRUE(AllEqual(demitted.ToHost(), want_emitted, what + " rows emitted"));
    EXPECT_TRUE(AllEqual(dindex.ToHost(), want_index, what + " row index"));
    EXPECT_TRUE(AllClose(drows.ToHost(), want_rows, kRowAtol, kRowRtol, what + " rows"));
    EXPECT_TRUE(AllEqual(dpool_->ToHost(), pool_, what + " state pool"));
  }

  int64_t pos(int64_t slot) const { return pos_[slot]; }

 private:
  cpu::CompressorShape shape_;  // the same type as cuda::CompressorShape
  int64_t num_slots_;
  uint64_t seed_;
  std::vector<int64_t> pos_;
  int64_t sf_ = 0, stride_ = 0;
  std::vector<float> pool_, ape_;
  std::unique_ptr<DeviceArray<float>> dpool_, dape_;
  int64_t step_ = 0;
};

// Ratio 4 (overlapping): slots used out of order, slot 2 never used (must stay as it was).
void RunOverlapping(int64_t dim, uint64_t seed) {
  SCOPED_TRACE("ratio 4 dim " + std::to_string(dim));
  CompressorHarness h(4, dim, 7, seed);
  h.Reset({5, 0, 3, 6}, 0);
  h.Reset({1}, 5);  // fresh state at positions that are not window-aligned
  h.Reset({4}, 7);
  h.Step({{5, 13}, {1, 1}, {0, 9}, {3, 0}, {4, 30}, {6, 4}}, false);
  h.Step({{0, 3}, {4, 4}, {5, 8}, {1, 1}, {6, 17}}, true);
  for (int i = 0; i < 11; ++i) h.Step({{1, 1}, {3, 1}, {5, 1}, {0, 1}, {4, 1}, {6, 1}}, i % 2 == 0);
  h.Reset({5}, 2);  // restart one sequence mid-run, not window-aligned
  h.Step({{6, 2}, {5, 11}, {3, 5}, {0, 0}, {1, 6}}, false);
  for (int i = 0; i < 6; ++i) h.Step({{5, 1}, {3, 1}}, true);
  h.Step({{4, 64}}, false);  // one sequence alone, many windows
}

TEST(CudaCompressor, Ratio4Csa) {
  DI_REQUIRE_GPU();
  RunOverlapping(512, 1000);
}

TEST(CudaCompressor, Ratio4Indexer) {
  DI_REQUIRE_GPU();
  RunOverlapping(128, 2000);
}

TEST(CudaCompressor, Ratio4OddDim) {
  DI_REQUIRE_GPU();
  RunOverlapping(200, 2500);  // channels not a multiple of the block
}

TEST(CudaCompressor, Ratio128Hca) {
  DI_REQUIRE_GPU();
  CompressorHarness h(128, 512, 5, 3000);
  h.Reset({0, 1, 3, 4}, 0);
  h.Reset({3}, 127);
  h.Reset({4}, 300);
  h.Reset({1}, 5);
  // Slot 4: positions 300 … 899 close windows 2 … 6 (5 rows), starting mid-window.
  h.Step({{4, 600}, {0, 200}, {1, 1}, {3, 1}}, false);
  h.Step({{1, 122}, {3, 0}, {0, 56}, {4, 37}}, true);
  // Decode: every sequence crosses at least one window boundary.
  for (int i = 0; i < 130; ++i) h.Step({{3, 1}, {0, 1}, {4, 1}, {1, 1}}, i % 3 == 0);
  h.Step({{0, 384}, {1, 129}}, false);
}

TEST(CudaCompressor, NoRows) {
  DI_REQUIRE_GPU();
  CompressorHarness h(4, 128, 2, 4000);
  h.Reset({0, 1}, 0);
  h.Step({{0, 0}, {1, 0}}, false);
  h.Step({{0, 3}, {1, 2}}, true);  // no window closes: zero rows, the states still advance
  h.Step({{1, 1}}, true);
  cuda::CompressorAdvance({4, 128}, nullptr, nullptr, nullptr, 256, h.GpuPool(), nullptr, 0, nullptr, 128, nullptr,
                          nullptr, 0, nullptr);  // an empty batch is a no-op
  DI_CUDA_CHECK(cudaDeviceSynchronize(), "sync");
}

}  // namespace
}  // namespace deepinfer::test
