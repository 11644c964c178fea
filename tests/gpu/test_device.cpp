// Device runtime pieces: the arena on a real device, streams, events, pinned async copies.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "device/arena.h"
#include "device/cuda_stream.h"
#include "kernels/cuda/elementwise.h"
#include "gpu/gpu_test_util.h"

namespace deepinfer {
namespace {

TEST(CudaDevice, ArenaCarvesTheMeasuredMemory) {
  DI_REQUIRE_GPU();
  size_t free_bytes = 0, total = 0;
  DeviceArena::MemoryInfo(0, &free_bytes, &total);
  ASSERT_GT(total, 0u);
  ASSERT_LE(free_bytes, total);
  DeviceArena arena(0, 64 << 20);
  void* a = arena.Carve(1000, "a");
  void* b = arena.Carve(4 << 20, "b");
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);
  EXPECT_EQ(arena.layout().CheckIntegrity(), "");
  // The carved memory is real device memory: a round trip through it.
  std::vector<uint8_t> host(4 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 31);
  ASSERT_EQ(cudaMemcpy(b, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<uint8_t> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), b, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, back);
  EXPECT_THROW(arena.Carve(61 << 20, "too big"), Error);
}

TEST(CudaDevice, PinnedAsyncCopyCompletesByEvent) {
  DI_REQUIRE_GPU();
  CudaStream stream(0);
  CudaEvent done;
  const size_t n = 1 << 20;
  PinnedBuffer src(n * sizeof(int32_t)), dst(n * sizeof(int32_t));
  for (size_t i = 0; i < n; ++i) src.as<int32_t>()[i] = static_cast<int32_t>(i ^ 0x5a5a);
  test::DeviceArray<int32_t> dev(n);
  ASSERT_EQ(cudaMemcpyAsync(dev.get(), src.data(), src.size(), cudaMemcpyHostToDevice, stream.get()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dst.data(), dev.get(), dst.size(), cudaMemcpyDeviceToHost, stream.get()), cudaSuccess);
  done.Record(stream.get());
  done.Synchronize();
  EXPECT_TRUE(done.Done());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
}

TEST(CudaDevice, StreamWaitOrdersWorkAcrossStreams) {
  DI_REQUIRE_GPU();
  CudaStream producer(0), consumer(0);
  CudaEvent ready, t0(true), t1(true);
  const size_t n = 8 << 20;
  test::DeviceArray<uint8_t> a(n), b(n);
  PinnedBuffer out(n);
  t0.Record(producer.get());
  ASSERT_EQ(cudaMemsetAsync(a.get(), 0x7b, n, producer.get()), cudaSuccess);
  t1.Record(producer.get());
  ready.Record(producer.get());
  ready.StreamWait(consumer.get());
  ASSERT_EQ(cudaMemcpyAsync(b.get(), a.get(), n, cudaMemcpyDeviceToDevice, consumer.get()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), b.get(), n, cudaMemcpyDeviceToHost, consumer.get()), cudaSuccess);
  consumer.Synchronize();
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(out.as<uint8_t>()[i], 0x7b) << i;
  t1.Synchronize();
  EXPECT_GE(CudaEvent::ElapsedMs(t0, t1), 0.f);
}

// A captured chain of kernels, each reading its predecessor's whole output: with programmatic
// edges (the default) every kernel is launched while the one before it may still run and must
// wait for it in PdlPrologue; one that did not would read a partly scaled buffer here.
TEST(CudaDevice, GraphKernelsWaitForTheirProgrammaticPredecessors) {
  DI_REQUIRE_GPU();
  CudaStream stream(0);
  const int64_t n = int64_t{32} << 20;  // 128 MiB: grids of many blocks
  constexpr int kScales = 24;
  test::DeviceArray<float> x(static_cast<size_t>(n));
  CudaGraph graph;
  CudaGraph::BeginCapture(stream.get());
  cuda::FillF32(x.get(), n, 1.f, stream.get());
  for (int i = 0; i < kScales; ++i) cuda::ScaleF32(x.get(), n, 2.f, stream.get());
  graph.EndCapture(stream.get());
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(graph.ProgrammaticEdges(), ProgrammaticDependentLaunch() && major >= 9 ? size_t{kScales} : size_t{0});
  EXPECT_EQ(graph.CriticalPathKernels(), graph.KernelNodes());  // one stream: one chain
  std::vector<float> host(static_cast<size_t>(n));
  for (int launch = 0; launch < 3; ++launch) {
    graph.Launch(stream.get());
    ASSERT_EQ(cudaMemcpyAsync(host.data(), x.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream.get()),
              cudaSuccess);
    stream.Synchronize();
    int64_t wrong = 0;
    for (const float v : host) wrong += v != 16777216.f;  // 2^24
    ASSERT_EQ(wrong, 0) << "launch " << launch;
  }
}

// Two branches forked from a captured stream and joined again: each branch starts after the
// main stream's work before the fork (its fill would otherwise be overwritten), the main stream's
// work after the join waits for both (it would otherwise scale a buffer a branch then refills).
// The fork's and join's edges stay plain; the chains' links become programmatic.
TEST(CudaDevice, ForkedBranchesOfACaptureRunBetweenTheForkAndTheJoin) {
  DI_REQUIRE_GPU();
  CudaStream main(0);
  StreamBranches branches(0, 2);
  ASSERT_EQ(branches.size(), 2);
  const int64_t n = int64_t{16} << 20;  // 64 MiB each
  constexpr int kLongChain = 12, kShortChain = 4;
  test::DeviceArray<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  CudaGraph graph;
  CudaGraph::BeginCapture(main.get());
  cuda::FillF32(x.get(), n, 0.f, main.get());
  branches.Fork(main.get(), 0, 2);
  cuda::FillF32(x.get(), n, 1.f, branches.stream(0));
  for (int i = 0; i < kLongChain; ++i) cuda::ScaleF32(x.get(), n, 2.f, branches.stream(0));
  cuda::FillF32(y.get(), n, 1.f, branches.stream(1));
  for (int i = 0; i < kShortChain; ++i) cuda::ScaleF32(y.get(), n, 3.f, branches.stream(1));
  branches.Join(main.get(), 0, 2);
  cuda::ScaleF32(x.get(), n, 2.f, main.get());
  cuda::ScaleF32(y.get(), n, 2.f, main.get());
  graph.EndCapture(main.get());
  EXPECT_EQ(graph.KernelNodes(), size_t{1 + 1 + kLongChain + 1 + kShortChain + 2});
  EXPECT_EQ(graph.CriticalPathKernels(), size_t{1 + 1 + kLongChain + 2});  // through x's branch
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  const size_t chain_links = kLongChain + kShortChain + 1;  // x's and y's chains, the scales after the join
  EXPECT_EQ(graph.ProgrammaticEdges(), ProgrammaticDependentLaunch() && major >= 9 ? chain_links : size_t{0});
  std::vector<float> hx(static_cast<size_t>(n)), hy(static_cast<size_t>(n));
  for (int launch = 0; launch < 3; ++launch) {
    graph.Launch(main.get());
    ASSERT_EQ(cudaMemcpyAsync(hx.data(), x.get(), n * sizeof(float), cudaMemcpyDeviceToHost, main.get()),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(hy.data(), y.get(), n * sizeof(float), cudaMemcpyDeviceToHost, main.get()),
              cudaSuccess);
    main.Synchronize();
    int64_t wrong_x = 0, wrong_y = 0;
    for (const float v : hx) wrong_x += v != 8192.f;  // 2^13
    for (const float v : hy) wrong_y += v != 162.f;   // 3^4 * 2
    ASSERT_EQ(wrong_x, 0) << "launch " << launch;
    ASSERT_EQ(wrong_y, 0) << "launch " << launch;
  }
  // A fork and join of the second side stream alone, queued eagerly.
  cuda::FillF32(x.get(), n, 0.f, main.get());
  branches.Fork(main.get(), 1, 1);
  cuda::FillF32(x.get(), n, 1.f, branches.stream(1));
  for (int i = 0; i < kLongChain; ++i) cuda::ScaleF32(x.get(), n, 2.f, branches.stream(1));
  branches.Join(main.get(), 1, 1);
  cuda::ScaleF32(x.get(), n, 2.f, main.get());
  ASSERT_EQ(cudaMemcpyAsync(hx.data(), x.get(), n * sizeof(float), cudaMemcpyDeviceToHost, main.get()), cudaSuccess);
  main.Synchronize();
  int64_t wrong = 0;
  for (const float v : hx) wrong += v != 8192.f;
  EXPECT_EQ(wrong, 0);
  EXPECT_THROW(branches.Fork(main.get(), 0, 3), Error);
  EXPECT_THROW(branches.Join(main.get(), 2, 1), Error);
}

}  // namespace
}  // namespace deepinfer
