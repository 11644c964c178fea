// CUDA build of the phase chains: the chain's weights side by side in one buffer of random bytes,
// each way checked once against the plain read's word sum, then timed with events.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "base/error.h"
#include "bench/ceilings_fill.h"
#include "bench/cuda_timing.h"
#include "bench/phases.h"
#include "bench/phases_kernels.h"
#include "bench/read_patterns_kernels.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"

namespace deepinfer::bench {
namespace {

constexpr uint64_t kSeed = 4646;
constexpr int64_t kBytesPerGraphBlock = 32 << 10;  // a phase kernel's blocks: one per 32 KiB, SMs × 8 at most

struct Counters {
  Buffer sum, steps, barrier;
  explicit Counters(DeviceId device)
      : sum(sizeof(unsigned long long), device),
        steps(sizeof(unsigned), device),
        barrier(2 * sizeof(unsigned), device) {}
  void Zero(const CudaStream& stream) const {
    DI_BENCH_CUDA(cudaMemsetAsync(sum.data(), 0, sum.size(), stream.get()));
    DI_BENCH_CUDA(cudaMemsetAsync(steps.data(), 0, steps.size(), stream.get()));
  }
};

}  // namespace

PhasesReport TimePhases(int device_index, const std::vector<Phase>& chain, const std::string& chain_name,
                        int iterations) {
  ValidateChain(chain);
  DI_CHECK(iterations > 0, "phases: {} iterations", iterations);
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  PhasesReport r;
  cudaDeviceProp prop{};
  DI_BENCH_CUDA(cudaGetDeviceProperties(&prop, device_index));
  r.device = prop.name;
  r.chain = chain_name;
  r.phases = static_cast<int64_t>(chain.size());
  r.bytes = ChainBytes(chain);
  const int sms = prop.multiProcessorCount;
  const DeviceId device{DeviceType::kCuda, device_index};
  const CudaStream stream(device_index);
  const Buffer weights(static_cast<size_t>(std::max<int64_t>(r.bytes, 256)), device);
  DI_BENCH_CUDA(FillRandomE4m3(weights.as<uint8_t>(), weights.size(), kSeed, stream.get()));
  std::vector<PhaseSpan> spans;
  int64_t offset = 0;
  for (const Phase& p : chain) {
    spans.push_back({weights.as<uint8_t>() + offset, static_cast<uint64_t>(p.bytes)});
    offset += p.bytes;
  }
  const Buffer device_spans(spans.size() * sizeof(PhaseSpan), device);
  DI_BENCH_CUDA(cudaMemcpyAsync(device_spans.data(), spans.data(), device_spans.size(), cudaMemcpyHostToDevice,
                                 stream.get()));
  const Counters counters(device);
  DI_BENCH_CUDA(cudaMemsetAsync(counters.barrier.data(), 0, counters.barrier.size(), stream.get()));
  auto* sum = counters.sum.as<unsigned long long>();
  auto* steps = counters.steps.as<unsigned>();

  // The chain's word sum and the plain read's rate over its bytes.
  const unsigned plain_grid = static_cast<unsigned>(sms * 8);
  counters.Zero(stream);
  if (r.bytes > 0) {
    DI_BENCH_CUDA(LaunchPlainRead(weights.as<uint8_t>(), static_cast<size_t>(r.bytes), plain_grid, sum, stream.get()));
  }
  const uint64_t want = ReadBack<unsigned long long>(counters.sum, stream);
  if (r.bytes > 0) {
    const double seconds = TimeOnStream(stream, [&] {
      for (int i = 0; i < iterations; ++i) {
        DI_BENCH_CUDA(
            LaunchPlainRead(weights.as<uint8_t>(), static_cast<size_t>(r.bytes), plain_grid, sum, stream.get()));
      }
    });
    r.plain_read_bytes_per_s = static_cast<double>(r.bytes) * iterations / seconds;
    r.floor_seconds = static_cast<double>(r.bytes) / r.plain_read_bytes_per_s;
  }

  // Runs `pass` once checked and `iterations` times timed; records the way.
  auto measure = [&](const std::string& way, int64_t grid, const std::function<void()>& pass) {
    PhasesTiming t;
    t.way = way;
    t.grid = grid;
    counters.Zero(stream);
    pass();
    t.sums_agree = ReadBack<unsigned long long>(counters.sum, stream) == want &&
                   ReadBack<unsigned>(counters.steps, stream) == static_cast<unsigned>(chain.size());
    const double seconds = TimeOnStream(stream, [&] {
      for (int i = 0; i < iterations; ++i) pass();
    });
    t.seconds = seconds / iterations;
    t.overhead_per_phase = (t.seconds - r.floor_seconds) / static_cast<double>(chain.size());
    r.ways.push_back(t);
  };

  for (const bool pdl : {true, false}) {
    CudaGraph graph;
    CudaGraph::BeginCapture(stream.get());
    try {
      for (const PhaseSpan& span : spans) {
        const int64_t blocks =
            span.bytes == 0 ? 1
                            : std::clamp<int64_t>(static_cast<int64_t>(span.bytes) / kBytesPerGraphBlock, 1, sms * 8);
        DI_BENCH_CUDA(LaunchPhaseRead(span, static_cast<unsigned>(blocks), sum, steps, stream.get()));
      }
    } catch (...) {
      cudaGraph_t abandoned = nullptr;
      cudaStreamEndCapture(stream.get(), &abandoned);
      if (abandoned != nullptr) cudaGraphDestroy(abandoned);
      throw;
    }
    graph.EndCapture(stream.get(), pdl);
    if (pdl) r.programmatic_edges = static_cast<int64_t>(graph.ProgrammaticEdges());
    measure(pdl ? "graph_pdl" : "graph", 0, [&] { graph.Launch(stream.get()); });
  }

  int blocks_per_sm = 0;
  DI_BENCH_CUDA(PersistentPhasesBlocksPerSm(&blocks_per_sm));
  DI_CHECK(blocks_per_sm >= 1, "phases: the persistent kernel fits no SM");
  const int64_t grid = int64_t{sms} * std::min(blocks_per_sm, 2);  // every block resident for the barrier
  for (const bool prefetch : {false, true}) {
    measure(prefetch ? "persistent_prefetch" : "persistent", grid, [&] {
      DI_BENCH_CUDA(LaunchPersistentPhases(device_spans.as<PhaseSpan>(), static_cast<int>(spans.size()),
                                            static_cast<unsigned>(grid), prefetch, sum, steps,
                                            counters.barrier.as<unsigned>(), stream.get()));
    });
  }
  return r;
}

}  // namespace deepinfer::bench
