// CUDA build of the read patterns: one device buffer of random bytes, each pattern's first pass
// checked against the plain read's word sum of the same bytes, then timed with events.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>

#include "base/error.h"
#include "bench/ceilings_fill.h"
#include "bench/cuda_timing.h"
#include "bench/read_patterns.h"
#include "bench/read_patterns_kernels.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"

namespace deepinfer::bench {
namespace {

constexpr uint64_t kSeed = 46;
static_assert(static_cast<int>(ReadWalk::kRuns) == 2, "read_patterns_kernels.cu's kWalkRuns");

ReadLaunch LaunchFor(const ReadPattern& p, const uint8_t* base) {
  ReadLaunch l;
  l.base = base;
  l.row_bytes = p.row_bytes;
  l.items = p.Items();
  l.chunks = p.Chunks();
  l.block_rows = p.block_rows;
  l.chunk_bytes = p.chunk_bytes;
  l.stages = p.stages;
  l.threads = p.threads;
  l.smem_bytes = p.smem_bytes;
  l.tiled = p.tiled;
  l.per_warp = p.per_warp;
  l.ring_restarts = p.ring_restarts;
  l.walk = static_cast<int>(p.walk);
  return l;
}

int Multiprocessors(int device_index) {
  int sms = 0;
  DI_BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_index));
  return sms;
}

// The pattern's grid: one block an item, or (strided, runs) as many as are resident, at most
// max_blocks where that is positive.
int64_t GridOf(const ReadPattern& p, int blocks_per_sm, int sms, int64_t max_blocks) {
  int64_t grid = p.walk == ReadWalk::kBlockPerItem ? p.Items()
                                                   : std::min<int64_t>(p.Items(), int64_t{blocks_per_sm} * sms);
  if (max_blocks > 0) grid = std::min(grid, max_blocks);
  return std::max<int64_t>(grid, 1);
}

// One pass of `p` over `base` into a zeroed *sum; returns the word sum.
uint64_t CheckedPass(const ReadPattern& p, const uint8_t* base, unsigned grid, const Buffer& sum,
                     const CudaStream& stream) {
  DI_BENCH_CUDA(cudaMemsetAsync(sum.data(), 0, sizeof(unsigned long long), stream.get()));
  DI_BENCH_CUDA(LaunchReadPattern(LaunchFor(p, base), grid, sum.as<unsigned long long>(), stream.get()));
  return ReadBack<unsigned long long>(sum, stream);
}

unsigned PlainGrid(int sms) { return static_cast<unsigned>(sms * 8); }

uint64_t PlainPass(const uint8_t* base, size_t bytes, int sms, const Buffer& sum, const CudaStream& stream) {
  DI_BENCH_CUDA(cudaMemsetAsync(sum.data(), 0, sizeof(unsigned long long), stream.get()));
  DI_BENCH_CUDA(LaunchPlainRead(base, bytes, PlainGrid(sms), sum.as<unsigned long long>(), stream.get()));
  return ReadBack<unsigned long long>(sum, stream);
}

Buffer Uploaded(const std::vector<uint8_t>& bytes, int device_index, const CudaStream& stream) {
  Buffer buffer(std::max<size_t>(bytes.size(), 16), DeviceId{DeviceType::kCuda, device_index});
  if (!bytes.empty()) {
    DI_BENCH_CUDA(cudaMemcpyAsync(buffer.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream.get()));
  }
  stream.Synchronize();
  return buffer;
}

}  // namespace

ReadPatternsReport TimeReadPatterns(int device_index, const std::vector<ReadPattern>& patterns, int iterations) {
  DI_CHECK(iterations > 0, "read patterns: {} iterations", iterations);
  DI_CHECK(!patterns.empty(), "read patterns: none given");
  int64_t largest = 0;
  for (const ReadPattern& p : patterns) {
    ValidateReadPattern(p);
    largest = std::max(largest, p.Bytes());
  }
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  ReadPatternsReport report;
  cudaDeviceProp prop{};
  DI_BENCH_CUDA(cudaGetDeviceProperties(&prop, device_index));
  report.device = prop.name;
  report.copy = TimeDeviceCopy(device_index, size_t{1} << 30, 10);
  const int sms = Multiprocessors(device_index);
  const CudaStream stream(device_index);
  const DeviceId device{DeviceType::kCuda, device_index};
  const Buffer buffer(static_cast<size_t>(largest), device), sum(sizeof(unsigned long long), device);
  const uint8_t* base = buffer.as<uint8_t>();
  DI_BENCH_CUDA(FillRandomE4m3(buffer.as<uint8_t>(), static_cast<size_t>(largest), kSeed, stream.get()));

  std::map<int64_t, uint64_t> plain_sums;  // by byte count
  for (const ReadPattern& p : patterns) {
    if (!plain_sums.count(p.Bytes())) {
      plain_sums[p.Bytes()] = PlainPass(base, static_cast<size_t>(p.Bytes()), sms, sum, stream);
    }
  }
  const double plain_seconds = TimeOnStream(stream, [&] {
    for (int i = 0; i < iterations; ++i) {
      DI_BENCH_CUDA(LaunchPlainRead(base, static_cast<size_t>(largest), PlainGrid(sms), sum.as<unsigned long long>(),
                                   stream.get()));
    }
  });
  report.plain_read_bytes_per_s = static_cast<double>(largest) * iterations / plain_seconds;

  for (const ReadPattern& p : patterns) {
    ReadTiming t;
    t.pattern = p;
    const ReadLaunch l = LaunchFor(p, base);
    DI_BENCH_CUDA(ReadPatternBlocksPerSm(l, &t.blocks_per_sm));
    DI_CHECK(t.blocks_per_sm > 0, "read pattern {}: no block fits an SM", p.name);
    t.grid = GridOf(p, t.blocks_per_sm, sms, 0);
    const unsigned grid = static_cast<unsigned>(t.grid);
    t.sums_agree = CheckedPass(p, base, grid, sum, stream) == plain_sums.at(p.Bytes());
    const double seconds = TimeOnStream(stream, [&] {
      for (int i = 0; i < iterations; ++i) {
        DI_BENCH_CUDA(LaunchReadPattern(l, grid, sum.as<unsigned long long>(), stream.get()));
      }
    });
    t.seconds = seconds / iterations;
    t.bytes_per_s = static_cast<double>(p.Bytes()) / t.seconds;
    report.patterns.push_back(t);
  }

  // Small reads: launch i reads `bytes` at offset (i · stride) mod the buffer's room, stride a
  // multiple of 256 bytes past 64 MiB, so that no launch finds its bytes in L2.
  constexpr int kSmallLaunches = 64;
  for (const int64_t bytes : SmallReadSizes()) {
    if (bytes > largest) continue;
    const int64_t room = largest - bytes + 1, stride = std::max<int64_t>(bytes, int64_t{64} << 20) + 256;
    auto offset = [&](int i) { return (static_cast<int64_t>(i) * stride) % room / 256 * 256; };
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(PlainGrid(sms), std::max<int64_t>(1, bytes / 4096)));
    const double seconds = TimeOnStream(stream, [&] {
      for (int i = 0; i < kSmallLaunches; ++i) {
        DI_BENCH_CUDA(LaunchPlainRead(base + offset(i), static_cast<size_t>(bytes), grid, sum.as<unsigned long long>(),
                                     stream.get()));
      }
    });
    SmallReadTiming t;
    t.bytes = bytes;
    t.seconds = seconds / kSmallLaunches;
    t.bytes_per_s = static_cast<double>(bytes) / t.seconds;
    report.small_reads.push_back(t);
  }
  return report;
}

uint64_t ReadPatternSumForTesting(int device_index, const ReadPattern& p, const std::vector<uint8_t>& bytes,
                                  int64_t max_blocks) {
  ValidateReadPattern(p);
  DI_CHECK(static_cast<int64_t>(bytes.size()) == p.Bytes(), "read pattern {}: {} bytes given, it reads {}", p.name,
           bytes.size(), p.Bytes());
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const CudaStream stream(device_index);
  const Buffer buffer = Uploaded(bytes, device_index, stream);
  const Buffer sum(sizeof(unsigned long long), DeviceId{DeviceType::kCuda, device_index});
  int blocks_per_sm = 0;
  DI_BENCH_CUDA(ReadPatternBlocksPerSm(LaunchFor(p, buffer.as<uint8_t>()), &blocks_per_sm));
  DI_CHECK(blocks_per_sm > 0, "read pattern {}: no block fits an SM", p.name);
  const int64_t grid = GridOf(p, blocks_per_sm, Multiprocessors(device_index), max_blocks);
  return CheckedPass(p, buffer.as<uint8_t>(), static_cast<unsigned>(grid), sum, stream);
}

uint64_t PlainReadSumForTesting(int device_index, const std::vector<uint8_t>& bytes) {
  DI_CHECK(bytes.size() % 16 == 0, "plain read of {} bytes: not whole 16-byte units", bytes.size());
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const CudaStream stream(device_index);
  const Buffer buffer = Uploaded(bytes, device_index, stream);
  const Buffer sum(sizeof(unsigned long long), DeviceId{DeviceType::kCuda, device_index});
  return PlainPass(buffer.as<uint8_t>(), bytes.size(), Multiprocessors(device_index), sum, stream);
}

}  // namespace deepinfer::bench
