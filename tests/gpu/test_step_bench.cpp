// The pieces of `deepinfer bench steps` that run on the GPU (issue 8): the hash-uniform state
// fill equals the host's bit for bit, and the decode and prefill benchmarks measure the demo
// model eagerly, as a CUDA graph and per op, with the per-op profile covering every layer.
#include <gtest/gtest.h>

#include <cstring>

#include "bench/step_bench.h"
#include "engine/workload.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cpu/hash_uniform.h"
#include "ops/ops.h"

namespace deepinfer::testing {
namespace {

TEST(CudaFill, HashUniformBitExactWithTheHost) {
  DI_REQUIRE_GPU();
  const int64_t n = 1000003;
  test::DeviceArray<float> x(static_cast<size_t>(n));
  const ops::OpContext ctx{DeviceId{DeviceType::kCuda, 0}, nullptr};
  ops::FillHashUniform(ctx, x.get(), n, 11, -1.f, 1.f);
  const std::vector<float> got = x.ToHost();
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = cpu::HashUniform(11, static_cast<uint64_t>(i), -1.f, 1.f);
    differ += std::memcmp(&got[i], &want, sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0);
}

TEST(StepBench, DecodeAndPrefillOnTheDemoModel) {
  DI_REQUIRE_GPU();
  LoadOptions lo;
  lo.device = DeviceId{DeviceType::kCuda, 0};
  LoadedModel loaded = LoadModel(DemoModelDir(), lo);
  const Model& model = *loaded.model;
  bench::StepBenchOptions o;
  o.batches = {1, 5};
  o.contexts = {300};
  o.prompts = {200};
  o.decode_iterations = 3;
  o.prefill_iterations = 1;
  const std::vector<bench::StepPoint> decode = bench::RunDecodeBench(model, o);
  const std::vector<bench::StepPoint> prefill = bench::RunPrefillBench(model, o);
  ASSERT_EQ(decode.size(), 2u);
  ASSERT_EQ(prefill.size(), 1u);
  const bench::LayerMix mix = bench::LayerMixOf(model.config());
  bench::Rates rates;
  rates.copy_bytes_per_s = 4e12;
  for (const bench::StepPoint& p : decode) {
    EXPECT_TRUE(p.skipped.empty()) << p.skipped;
    EXPECT_GT(p.eager_seconds, 0);
    EXPECT_GT(p.graph_seconds, 0);
    // Every layer and the head appear in the profile, each with its linear layers.
    for (int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
      bool found = false;
      for (const auto& [key, t] : p.profile) found |= key.first.rfind("layer " + std::to_string(l) + " ", 0) == 0;
      EXPECT_TRUE(found) << "layer " << l << " missing from the profile";
    }
    EXPECT_GT(p.profile.count({"head", "linear"}) + p.profile.count({"head", "dense_linear"}), 0u);
    // Scaled to its own layer mix, a step is the step measured.
    const bench::Extrapolation e = bench::Extrapolate(p, mix, rates);
    ASSERT_TRUE(e.ok) << e.why_not;
    EXPECT_NEAR(e.step_seconds / p.best_seconds(), 1.0, 1e-9);
    EXPECT_NEAR((e.weight_bytes + e.state_read_bytes) / p.cost.bytes(), 1.0, 1e-9);
    std::printf("demo decode batch %ld at %ld: eager %.3f ms, graph %.3f ms, floor %.4f ms at 4 TB/s\n",
                static_cast<long>(p.batch), static_cast<long>(p.context), 1e3 * p.eager_seconds,
                1e3 * p.graph_seconds, 1e3 * e.floor_seconds);
  }
  EXPECT_GT(prefill[0].eager_seconds, 0);
  EXPECT_LT(prefill[0].graph_seconds, 0) << "prefill is not captured";
  const nlohmann::json j = bench::ToJson(prefill[0], rates, &mix);
  EXPECT_GT(j["profile_seconds"]["linear"].get<double>(), 0);
}

}  // namespace
}  // namespace deepinfer::testing
