// CUDA mHC kernels (kernels/cuda/hc.h) against their CPU twins on fresh random inputs.
//
// Tolerances. HcPre/HcHead: the mixes are W-term fp32 dot products (W = S·D = 16384 at Flash
// size) and a W-term sum of squares; the CPU sums them sequentially (the sum of squares in one
// running float), the GPU in a fixed tree. A float64 simulation of both orders at these shapes
// (inputs as below) gives mix differences up to ~5e-6 absolute (mixes are O(1); the CPU's
// sequential sum of squares, relative error ~3e-6, dominates), which the sigmoids (slope ≤ 1/4)
// and the Sinkhorn pass through at ≤ ~1.2e-6 on pre/post/comb (values in (0, 2]) and ≤ ~5e-6 on
// a, y (|X| ≤ 2). Asserted: atol 1e-5, rtol 1e-5 on pre/post/comb; atol 2e-5, rtol 1e-5 on a, y
// (CUDA expf's ≤ 2 ulp adds ~1e-7). HcPost has no reductions and no exp and the GPU repeats the
// CPU's unfused multiply-then-add: bit-exact against an x86 build, asserted with atol = rtol =
// 1e-6 so that a CPU build with contracted FMAs would still pass.

#include "kernels/cuda/hc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/hc.h"
#include "tensor/tensor_view.h"

namespace deepinfer::test {
namespace {

constexpr float kMixAtol = 1e-5f, kMixRtol = 1e-5f;
constexpr float kSumAtol = 2e-5f, kSumRtol = 1e-5f;

struct HcInputs {
  int64_t m, s, d, rows;
  std::vector<float> x, fn, base, scale;
};

// fn scaled by 1/sqrt(W) so the mixes are O(1) at every width (the regime where the sigmoids
// and the Sinkhorn are not saturated and errors pass through).
HcInputs MakeInputs(int64_t m, int64_t s, int64_t d, bool head, uint64_t seed) {
  HcInputs in{m, s, d, head ? s : (2 + s) * s, {}, {}, {}, {}};
  const int64_t w = s * d;
  const float f = 2.5f / std::sqrt(static_cast<float>(w));
  in.x = RandomFloats(static_cast<size_t>(m * w), seed, -2.f, 2.f);
  in.fn = RandomFloats(static_cast<size_t>(in.rows * w), seed + 1, -f, f);
  in.base = RandomFloats(static_cast<size_t>(in.rows), seed + 2, -1.f, 1.f);
  in.scale = RandomFloats(head ? 1 : 3, seed + 3, 0.5f, 1.5f);
  return in;
}

cpu::HcParams CpuParams(HcInputs& in) {
  cpu::HcParams p;
  p.fn = TensorView(in.fn.data(), DType::kF32, {in.rows, in.s * in.d});
  p.base = TensorView(in.base.data(), DType::kF32, {in.rows});
  p.scale = TensorView(in.scale.data(), DType::kF32, {static_cast<int64_t>(in.scale.size())});
  p.sinkhorn_iters = 20;
  return p;
}

struct HcPreOut {
  std::vector<float> a, post, comb;
};

// GPU HcPre on tokens [t0, t0 + m) of `in` (a with row stride lda, padding initialized to 7).
HcPreOut GpuHcPre(const HcInputs& in, int64_t t0, int64_t m, int64_t lda) {
  const int64_t w = in.s * in.d;
  const std::vector<float> x(in.x.begin() + t0 * w, in.x.begin() + (t0 + m) * w);
  DeviceArray<float> dx(x), dfn(in.fn), dbase(in.base), dscale(in.scale);
  DeviceArray<float> da(std::vector<float>(static_cast<size_t>(m * lda), 7.f));
  DeviceArray<float> dpost(static_cast<size_t>(m * in.s)), dcomb(static_cast<size_t>(m * in.s * in.s));
  cuda::HcParams p{dfn.get(), dbase.get(), dscale.get(), 20, 1e-6f, 1e-6f};
  cuda::HcPre(dx.get(), m, in.s, in.d, p, da.get(), lda, dpost.get(), dcomb.get(), nullptr);
  return {da.ToHost(), dpost.ToHost(), dcomb.ToHost()};
}

void CheckHcPre(int64_t m, int64_t s, int64_t d, uint64_t seed) {
  SCOPED_TRACE("M " + std::to_string(m) + " S " + std::to_string(s) + " D " + std::to_string(d));
  HcInputs in = MakeInputs(m, s, d, false, seed);
  const int64_t lda = d + 3;
  std::vector<float> a(static_cast<size_t>(m * lda), 7.f), post(static_cast<size_t>(m * s)),
      comb(static_cast<size_t>(m * s * s));
  cpu::HcPre(TensorView(in.x.data(), DType::kF32, {m, s, d}), CpuParams(in),
             TensorView(a.data(), DType::kF32, {m, lda}), TensorView(post.data(), DType::kF32, {m, s}),
             TensorView(comb.data(), DType::kF32, {m, s, s}));
  const HcPreOut got = GpuHcPre(in, 0, m, lda);
  EXPECT_TRUE(AllClose(got.post, post, kMixAtol, kMixRtol, "post"));
  EXPECT_TRUE(AllClose(got.comb, comb, kMixAtol, kMixRtol, "comb"));
  EXPECT_TRUE(AllClose(got.a, a, kSumAtol, kSumRtol, "a"));  // padding must stay 7 on both
}

TEST(CudaHc, PreSmall) {
  DI_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const int64_t m : {1, 5, 64}) CheckHcPre(m, 4, 64, seed += 10);
  // Odd widths (W below / not a multiple of the block), row counts not a multiple of the 8-row
  // pass (S = 1, 3), the largest S the CPU accepts.
  CheckHcPre(5, 4, 37, seed += 10);
  CheckHcPre(3, 3, 50, seed += 10);
  CheckHcPre(2, 1, 300, seed += 10);
  CheckHcPre(2, 16, 40, seed += 10);
}

TEST(CudaHc, PreFlash) {
  DI_REQUIRE_GPU();
  uint64_t seed = 200;
  // 300 and 1,100 tokens take the 4-tokens-per-block path.
  for (const int64_t m : {1, 5, 64, 300, 1100}) CheckHcPre(m, 4, 4096, seed += 10);
}

// HcPre's mix kernel choice for a scope (SetHcPersistentMixForTesting), -1 again after it.
using ScopedPersistentMix = ScopedSwitch<cuda::SetHcPersistentMixForTesting>;

// A token's outputs do not depend on the batch (nor on the 1- or 4-token block path, nor on the
// persistent kernel that takes 4-token groups from 256 tokens on): bit-exact. 64 (the threshold),
// 65, 300 and 1,100 tokens take 4 per block or group (65's last partly filled), their slices of 1
// and 5 tokens 1 per block; with the persistent kernel off and on.
TEST(CudaHc, PreBatchInvariant) {
  DI_REQUIRE_GPU();
  for (const int persistent : {0, 1}) {
    const ScopedPersistentMix mode(persistent);
    for (const int64_t tokens : {int64_t{64}, int64_t{65}, int64_t{300}, int64_t{1100}}) {
      SCOPED_TRACE(testing::Message() << tokens << " tokens, persistent mix " << persistent);
      const HcInputs in = MakeInputs(tokens, 4, 4096, false, 300);
      const uint64_t launches = cuda::HcPersistentMixLaunchesForTesting();
      const HcPreOut all = GpuHcPre(in, 0, tokens, 4096);
      EXPECT_EQ(cuda::HcPersistentMixLaunchesForTesting() - launches, persistent == 1 && tokens >= 256 ? 1u : 0u);
      for (const int64_t t0 : {int64_t{0}, int64_t{7}, tokens - 1}) {
        const int64_t m = t0 == 7 ? 5 : 1;
        const HcPreOut part = GpuHcPre(in, t0, m, 4096);
        auto slice = [&](const std::vector<float>& v, int64_t per) {
          return std::vector<float>(v.begin() + t0 * per, v.begin() + (t0 + m) * per);
        };
        EXPECT_TRUE(AllEqual(part.a, slice(all.a, 4096), "a"));
        EXPECT_TRUE(AllEqual(part.post, slice(all.post, 4), "post"));
        EXPECT_TRUE(AllEqual(part.comb, slice(all.comb, 16), "comb"));
      }
    }
  }
}

// The persistent kernel where clusters take several groups each (more groups than clusters fit
// the GPU), odd widths (W not a multiple of the 8 slices or of 256), and the padding of a: the
// same bits as the per-group kernel.
TEST(CudaHc, PrePersistentEqualsPerGroup) {
  DI_REQUIRE_GPU();
  struct Shape {
    int64_t m, d;
  };
  uint64_t seed = 400;
  for (const Shape& shape : {Shape{4097, 4096}, Shape{300, 37}, Shape{999, 1000}, Shape{258, 64}}) {
    SCOPED_TRACE(testing::Message() << shape.m << " tokens, D " << shape.d);
    const HcInputs in = MakeInputs(shape.m, 4, shape.d, false, seed += 10);
    const int64_t lda = shape.d + 3;
    HcPreOut per_group, persistent;
    {
      const ScopedPersistentMix mode(0);
      per_group = GpuHcPre(in, 0, shape.m, lda);
    }
    {
      const ScopedPersistentMix mode(1);
      const uint64_t launches = cuda::HcPersistentMixLaunchesForTesting();
      persistent = GpuHcPre(in, 0, shape.m, lda);
      EXPECT_EQ(cuda::HcPersistentMixLaunchesForTesting() - launches, 1u);
    }
    EXPECT_TRUE(AllEqual(persistent.a, per_group.a, "a"));  // padding 7 on both
    EXPECT_TRUE(AllEqual(persistent.post, per_group.post, "post"));
    EXPECT_TRUE(AllEqual(persistent.comb, per_group.comb, "comb"));
  }
}

struct MixShape {
  int64_t m, d;
};

// For each shape: HcPre's and HcHead's outputs with the unrolling switch (Scoped: its test
// override) on equal those with it off, and `launches` (its unrolled-launch count) rose by one in
// HcPre.
template <class Scoped>
void ExpectUnrolledMixEqualsRolled(std::initializer_list<MixShape> shapes, uint64_t seed, uint64_t (*launches)()) {
  for (const MixShape& shape : shapes) {
    SCOPED_TRACE(testing::Message() << shape.m << " tokens, D " << shape.d);
    const HcInputs in = MakeInputs(shape.m, 4, shape.d, false, seed += 10);
    HcPreOut rolled, unrolled;
    {
      const Scoped off(0);
      rolled = GpuHcPre(in, 0, shape.m, shape.d);
    }
    {
      const Scoped on(1);
      const uint64_t before = launches();
      unrolled = GpuHcPre(in, 0, shape.m, shape.d);
      EXPECT_EQ(launches() - before, 1u) << "the unrolled kernel did not run";
    }
    EXPECT_TRUE(AllEqual(unrolled.a, rolled.a, "a"));
    EXPECT_TRUE(AllEqual(unrolled.post, rolled.post, "post"));
    EXPECT_TRUE(AllEqual(unrolled.comb, rolled.comb, "comb"));

    const HcInputs head = MakeInputs(shape.m, 4, shape.d, true, seed += 10);
    DeviceArray<float> dx(head.x), dfn(head.fn), dbase(head.base), dscale(head.scale);
    const cuda::HcParams p{dfn.get(), dbase.get(), dscale.get(), 20, 1e-6f, 1e-6f};
    auto run_head = [&](int unroll) {
      const Scoped mode(unroll);
      DeviceArray<float> dy(std::vector<float>(static_cast<size_t>(shape.m * shape.d), 3.f));
      cuda::HcHead(dx.get(), shape.m, 4, shape.d, p, dy.get(), shape.d, nullptr);
      return dy.ToHost();
    };
    EXPECT_TRUE(AllEqual(run_head(1), run_head(0), "head"));
  }
}

// The 4-token mix kernels' stride loop unrolled four times (DEEPINFER_HC_MIX_UNROLL): the bits of
// the rolled loop, for HcPre (the deferred Sinkhorn, persistent kernel off) and HcHead, at widths
// that are and are not multiples of the unrolled step (8 slices of 256 threads x 4).
TEST(CudaHc, UnrolledMixEqualsRolled) {
  DI_REQUIRE_GPU();
  const ScopedPersistentMix per_group(0);
  ExpectUnrolledMixEqualsRolled<ScopedSwitch<cuda::SetHcMixUnrollForTesting>>(
      {{64, 4096}, {65, 4096}, {300, 1000}, {67, 37}}, 500, cuda::HcMixUnrollLaunchesForTesting);
}

// The one-token mix kernel's stride loop unrolled four times (DEEPINFER_HC_MIX_ONE_TOKEN_UNROLL,
// decode batches below the 4-token kernels' threshold): the bits of the rolled loop for HcPre (the
// Sinkhorn in the kernel) and HcHead, at widths that are and are not multiples of the unrolled step.
TEST(CudaHc, OneTokenUnrolledMixEqualsRolled) {
  DI_REQUIRE_GPU();
  ExpectUnrolledMixEqualsRolled<ScopedSwitch<cuda::SetHcMixOneTokenUnrollForTesting>>(
      {{1, 4096}, {5, 4096}, {63, 1000}, {3, 37}}, 700, cuda::HcMixOneTokenUnrollLaunchesForTesting);
}

// The mix kernels reduce a pass's 24 or 32 sums with one reduce-scatter (WarpReduceScatter<32>):
// the bits of WarpSum on each, over 262,144 sums; and the check sees a one-ulp change of one input.
TEST(CudaHc, WarpReduceScatterEqualsWarpSum) {
  DI_REQUIRE_GPU();
  EXPECT_EQ(cuda::WarpReduceScatterMismatchesForTesting(), 0u);
  EXPECT_GT(cuda::WarpReduceScatterMismatchesForTesting(true), 0u);
}

TEST(CudaHc, ZeroTokens) {
  DI_REQUIRE_GPU();
  cuda::HcParams p{nullptr, nullptr, nullptr, 20, 1e-6f, 1e-6f};
  DeviceArray<float> fn(24 * 256), base(24), scale(3);
  p.fn = fn.get(), p.base = base.get(), p.scale = scale.get();
  cuda::HcPre(nullptr, 0, 4, 64, p, nullptr, 64, nullptr, nullptr, nullptr);
  cuda::HcHead(nullptr, 0, 4, 64, p, nullptr, 64, nullptr);
  cuda::HcPost(nullptr, 64, nullptr, nullptr, nullptr, 0, 4, 64, nullptr, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize(), "sync");
}

void CheckHcHead(int64_t m, int64_t s, int64_t d, uint64_t seed) {
  SCOPED_TRACE("M " + std::to_string(m) + " S " + std::to_string(s) + " D " + std::to_string(d));
  HcInputs in = MakeInputs(m, s, d, true, seed);
  const int64_t ldy = d + 1;
  std::vector<float> y(static_cast<size_t>(m * ldy), 3.f);
  cpu::HcHead(TensorView(in.x.data(), DType::kF32, {m, s, d}), CpuParams(in),
              TensorView(y.data(), DType::kF32, {m, ldy}));
  DeviceArray<float> dx(in.x), dfn(in.fn), dbase(in.base), dscale(in.scale);
  DeviceArray<float> dy(std::vector<float>(static_cast<size_t>(m * ldy), 3.f));
  cuda::HcParams p{dfn.get(), dbase.get(), dscale.get(), 20, 1e-6f, 1e-6f};
  cuda::HcHead(dx.get(), m, s, d, p, dy.get(), ldy, nullptr);
  EXPECT_TRUE(AllClose(dy.ToHost(), y, kSumAtol, kSumRtol, "y"));
}

TEST(CudaHc, Head) {
  DI_REQUIRE_GPU();
  uint64_t seed = 400;
  for (const int64_t m : {1, 5, 64}) CheckHcHead(m, 4, 64, seed += 10);
  CheckHcHead(4, 3, 77, seed += 10);
  for (const int64_t m : {1, 5, 64, 300}) CheckHcHead(m, 4, 4096, seed += 10);
}

// o's rows padded by o_pad floats: 5 keeps them unaligned (the one-channel kernel), 0 or 4 with
// d % 4 == 0 and s == 4 aligned (four channels per thread).
void CheckHcPost(int64_t m, int64_t s, int64_t d, uint64_t seed, int64_t o_pad = 5) {
  SCOPED_TRACE("M " + std::to_string(m) + " S " + std::to_string(s) + " D " + std::to_string(d) + " ldo D+" +
               std::to_string(o_pad));
  const int64_t ldo = d + o_pad;
  std::vector<float> o = RandomFloats(static_cast<size_t>(m * ldo), seed, -2.f, 2.f);
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * s * d), seed + 1, -2.f, 2.f);
  std::vector<float> post = RandomFloats(static_cast<size_t>(m * s), seed + 2, 0.f, 2.f);
  std::vector<float> comb = RandomFloats(static_cast<size_t>(m * s * s), seed + 3, 0.f, 1.f);
  std::vector<float> want(static_cast<size_t>(m * s * d));
  cpu::HcPost(TensorView(o.data(), DType::kF32, {m, ldo}), TensorView(x.data(), DType::kF32, {m, s, d}),
              TensorView(post.data(), DType::kF32, {m, s}), TensorView(comb.data(), DType::kF32, {m, s, s}),
              TensorView(want.data(), DType::kF32, {m, s, d}));
  DeviceArray<float> dout(o), dx(x), dpost(post), dcomb(comb), dy(want.size());
  cuda::HcPost(dout.get(), ldo, dx.get(), dpost.get(), dcomb.get(), m, s, d, dy.get(), nullptr);
  EXPECT_TRUE(AllClose(dy.ToHost(), want, 1e-6f, 1e-6f, "x_out"));
}

TEST(CudaHc, Post) {
  DI_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const int64_t m : {1, 5, 64}) CheckHcPost(m, 4, 64, seed += 10);
  CheckHcPost(3, 3, 300, seed += 10);
  CheckHcPost(2, 16, 33, seed += 10);
  for (const int64_t m : {1, 5, 64}) CheckHcPost(m, 4, 4096, seed += 10);
  for (const int64_t m : {1, 64, 300}) CheckHcPost(m, 4, 4096, seed += 10, 0);
  CheckHcPost(7, 4, 1028, seed += 10, 4);  // 1028 = 4 · 257: a partial last block of channels
  CheckHcPost(2, 16, 64, seed += 10, 0);   // aligned, but 16 streams: one channel per thread
}

}  // namespace
}  // namespace deepinfer::test
