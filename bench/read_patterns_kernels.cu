#include "bench/read_patterns_kernels.h"

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::bench {
namespace {

using cuda::CpAsync16;
using cuda::CpAsyncCommit;
using cuda::CpAsyncWait;
using cuda::CpAsyncWaitAll;
using cuda::PdlPrologue;

constexpr int kPlainThreads = 256;
constexpr int kWalkRuns = 2;  // ReadWalk::kRuns

__device__ __forceinline__ uint64_t WordsOf(uint4 v) {
  return static_cast<uint64_t>(v.x) + static_cast<uint64_t>(v.y) + static_cast<uint64_t>(v.z) +
         static_cast<uint64_t>(v.w);
}

// Adds each thread's `sum` to *out: a warp's lanes summed by shuffles, one atomic a warp.
__device__ __forceinline__ void AddBlockSum(uint64_t sum, unsigned long long* out) {
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(out, static_cast<unsigned long long>(sum));
}

// One pass of a pattern: the block's items as one flat sequence of chunks (item k of the block's
// list, chunk c at k · chunks + c), ring_restarts cutting it into one segment an item. Within a
// segment chunk f goes into stage f % kStages, kStages − 1 chunks ahead of the one waited on. Each
// thread copies, and later reads, the same 16-byte units of every tile, so a stage is refilled by
// the thread that read it: the barrier after each chunk's wait is the mimicked kernel's, not a
// need of this one.
template <int kStages>
__global__ void ReadPatternKernel(const ReadLaunch l, unsigned long long* sum_out) {
  PdlPrologue();
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int tile_units = l.block_rows * l.chunk_bytes / 16, units_per_row = l.chunk_bytes / 16;
  // This thread's units of a tile: first + i · stride, i < count.
  int first, stride, count;
  if (l.per_warp) {
    const int warp_units = tile_units / (l.threads / 32);
    first = warp * warp_units + lane;
    stride = 32;
    count = warp_units / 32;
  } else {
    first = static_cast<int>(threadIdx.x);
    stride = l.threads;
    count = tile_units / l.threads;
  }
  // This block's items: item_begin + k · item_step, k < item_count. A block an item is the strided
  // walk on a grid of every item (the host's choice); a smaller grid (tests) still reads them all.
  const int64_t b = blockIdx.x, grid = gridDim.x;
  int64_t item_begin = b, item_step = grid, item_count = b < l.items ? (l.items - b + grid - 1) / grid : 0;
  if (l.walk == kWalkRuns) {
    const int64_t per = l.items / grid, extra = l.items % grid;
    item_begin = b * per + min(b, extra);
    item_step = 1;
    item_count = per + (b < extra ? 1 : 0);
  }
  const int64_t tile_bytes = int64_t{l.block_rows} * l.chunk_bytes;
  auto issue = [&](int64_t f) {
    const int64_t item = item_begin + (f / l.chunks) * item_step, c = f % l.chunks;
    uint8_t* stage = smem + (f % kStages) * tile_bytes;
    for (int i = 0; i < count; ++i) {
      const int u = first + i * stride;
      const uint8_t* src = l.tiled ? l.base + (item * l.chunks + c) * tile_bytes + int64_t{u} * 16
                                   : l.base + (item * l.block_rows + u / units_per_row) * l.row_bytes +
                                         c * l.chunk_bytes + (u % units_per_row) * 16;
      CpAsync16(stage + u * 16, src);
    }
  };
  uint64_t sum = 0;
  const int64_t flat = item_count * l.chunks;
  const int64_t segment = l.ring_restarts ? l.chunks : flat;
  for (int64_t s0 = 0; s0 < flat; s0 += segment) {
    const int64_t s1 = s0 + segment;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s0 + s < s1) issue(s0 + s);
      CpAsyncCommit();
    }
    for (int64_t f = s0; f < s1; ++f) {
      CpAsyncWait<kStages - 2>();  // chunk f's group
      if (l.per_warp) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      const uint8_t* stage = smem + (f % kStages) * tile_bytes;
      for (int i = 0; i < count; ++i) {
        sum += WordsOf(*reinterpret_cast<const uint4*>(stage + (first + i * stride) * 16));
      }
      if (f + kStages - 1 < s1) issue(f + kStages - 1);
      CpAsyncCommit();  // possibly empty: one group an iteration
    }
    CpAsyncWaitAll();
  }
  AddBlockSum(sum, sum_out);
}

__global__ void PlainReadKernel(const uint4* __restrict__ base, size_t units, unsigned long long* sum_out) {
  PdlPrologue();
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint64_t sum = 0;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * step < units; i += 4 * step) {
    const uint4 a = __ldcs(base + i), b = __ldcs(base + i + step), c = __ldcs(base + i + 2 * step),
                d = __ldcs(base + i + 3 * step);
    sum += WordsOf(a) + WordsOf(b) + WordsOf(c) + WordsOf(d);
  }
  for (; i < units; i += step) sum += WordsOf(__ldcs(base + i));
  AddBlockSum(sum, sum_out);
}

template <int kStages>
cudaError_t BlocksPerSmOf(const ReadLaunch& l, int* blocks_per_sm) {
  cudaError_t e = cudaFuncSetAttribute(ReadPatternKernel<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       l.smem_bytes);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, ReadPatternKernel<kStages>, l.threads,
                                                       static_cast<size_t>(l.smem_bytes));
}

template <int kStages>
cudaError_t LaunchOf(const ReadLaunch& l, unsigned grid, unsigned long long* sum, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(ReadPatternKernel<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       l.smem_bytes);
  if (e != cudaSuccess) return e;
  ReadPatternKernel<kStages><<<grid, static_cast<unsigned>(l.threads), static_cast<size_t>(l.smem_bytes), stream>>>(
      l, sum);
  return cudaGetLastError();
}

template <template <int> class F, class... Args>
cudaError_t ByStages(int stages, Args&&... args) {
  switch (stages) {
    case 2:
      return F<2>::Run(args...);
    case 3:
      return F<3>::Run(args...);
    case 4:
      return F<4>::Run(args...);
    case 5:
      return F<5>::Run(args...);
    case 6:
      return F<6>::Run(args...);
    case 7:
      return F<7>::Run(args...);
    case 8:
      return F<8>::Run(args...);
    default:
      return cudaErrorInvalidValue;
  }
}

template <int kStages>
struct BlocksPerSmF {
  static cudaError_t Run(const ReadLaunch& l, int* blocks_per_sm) { return BlocksPerSmOf<kStages>(l, blocks_per_sm); }
};

template <int kStages>
struct LaunchF {
  static cudaError_t Run(const ReadLaunch& l, unsigned grid, unsigned long long* sum, cudaStream_t stream) {
    return LaunchOf<kStages>(l, grid, sum, stream);
  }
};

}  // namespace

cudaError_t ReadPatternBlocksPerSm(const ReadLaunch& l, int* blocks_per_sm) {
  return ByStages<BlocksPerSmF>(l.stages, l, blocks_per_sm);
}

cudaError_t LaunchReadPattern(const ReadLaunch& l, unsigned grid, unsigned long long* sum, cudaStream_t stream) {
  return ByStages<LaunchF>(l.stages, l, grid, sum, stream);
}

cudaError_t LaunchPlainRead(const uint8_t* base, size_t bytes, unsigned grid, unsigned long long* sum,
                            cudaStream_t stream) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(base) % 16 != 0 || grid == 0) return cudaErrorInvalidValue;
  PlainReadKernel<<<grid, kPlainThreads, 0, stream>>>(reinterpret_cast<const uint4*>(base), bytes / 16, sum);
  return cudaGetLastError();
}

}  // namespace deepinfer::bench
