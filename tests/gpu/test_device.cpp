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

}  // namespace
}  // namespace deepinfer
