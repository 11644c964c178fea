#include "bench/phases_kernels.h"

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::bench {
namespace {

using cuda::PdlPrologue;

constexpr int kThreads = 256;
constexpr uint32_t kPrefetchPiece = 16384;  // bytes a cp.async.bulk.prefetch.L2 asks for

__device__ __forceinline__ uint64_t WordsOf(uint4 v) {
  return static_cast<uint64_t>(v.x) + static_cast<uint64_t>(v.y) + static_cast<uint64_t>(v.z) +
         static_cast<uint64_t>(v.w);
}

// The word sum of units [first, units) of `base`, `step` apart, four loads in flight.
__device__ __forceinline__ uint64_t StridedSum(const uint4* __restrict__ base, uint64_t units, uint64_t first,
                                               uint64_t step) {
  uint64_t sum = 0, i = first;
  for (; i + 3 * step < units; i += 4 * step) {
    const uint4 a = __ldcs(base + i), b = __ldcs(base + i + step), c = __ldcs(base + i + 2 * step),
                d = __ldcs(base + i + 3 * step);
    sum += WordsOf(a) + WordsOf(b) + WordsOf(c) + WordsOf(d);
  }
  for (; i < units; i += step) sum += WordsOf(__ldcs(base + i));
  return sum;
}

__device__ __forceinline__ void AddWarpSums(uint64_t sum, unsigned long long* out) {
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0 && sum != 0) atomicAdd(out, static_cast<unsigned long long>(sum));
}

__global__ void __launch_bounds__(kThreads) PhaseReadKernel(PhaseSpan span, unsigned long long* sum,
                                                            unsigned* steps) {
  PdlPrologue();
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  AddWarpSums(StridedSum(reinterpret_cast<const uint4*>(span.base), span.bytes / 16,
                         static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x, step),
              sum);
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(steps, 1u);
}

// Every block arrives once: the last to arrive resets the count and moves the generation on, the
// others wait for it to move. Block-wide, with the block's writes visible device-wide before its
// arrival and the others' after its departure.
__device__ __forceinline__ void GridBarrier(unsigned* barrier) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* count = barrier;
    volatile unsigned* generation = barrier + 1;
    const unsigned seen = *generation;
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(const_cast<unsigned*>(generation), 1u);
    } else {
      while (*generation == seen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) PersistentPhasesKernel(const PhaseSpan* __restrict__ spans, int phases,
                                                                   int prefetch, unsigned long long* sum,
                                                                   unsigned* steps, unsigned* barrier) {
  PdlPrologue();
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t total = 0;
  for (int p = 0; p < phases; ++p) {
    const PhaseSpan span = spans[p];
    total += StridedSum(reinterpret_cast<const uint4*>(span.base), span.bytes / 16, first, step);
    if (prefetch && p + 1 < phases) {
      // This block's share of the next phase, whole 256-byte units, in pieces of kPrefetchPiece.
      const PhaseSpan next = spans[p + 1];
      const uint64_t share = (next.bytes / 256 + gridDim.x - 1) / gridDim.x * 256;
      const uint64_t begin = min(next.bytes, share * blockIdx.x), end = min(next.bytes, begin + share);
      for (uint64_t at = begin + static_cast<uint64_t>(threadIdx.x) * kPrefetchPiece; at < end;
           at += static_cast<uint64_t>(blockDim.x) * kPrefetchPiece) {
        const uint32_t bytes = static_cast<uint32_t>(min(static_cast<uint64_t>(kPrefetchPiece), end - at));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(next.base + at), "r"(bytes) : "memory");
#endif
      }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(steps, 1u);
    GridBarrier(barrier);
  }
  AddWarpSums(total, sum);
}

}  // namespace

cudaError_t LaunchPhaseRead(PhaseSpan span, unsigned grid, unsigned long long* sum, unsigned* steps,
                            cudaStream_t stream) {
  if (grid == 0 || span.bytes % 256 != 0 || reinterpret_cast<uintptr_t>(span.base) % 256 != 0) {
    return cudaErrorInvalidValue;
  }
  PhaseReadKernel<<<grid, kThreads, 0, stream>>>(span, sum, steps);
  return cudaGetLastError();
}

cudaError_t PersistentPhasesBlocksPerSm(int* blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, PersistentPhasesKernel, kThreads, 0);
}

cudaError_t LaunchPersistentPhases(const PhaseSpan* spans, int phases, unsigned grid, bool prefetch,
                                   unsigned long long* sum, unsigned* steps, unsigned* barrier, cudaStream_t stream) {
  if (grid == 0 || phases <= 0) return cudaErrorInvalidValue;
  PersistentPhasesKernel<<<grid, kThreads, 0, stream>>>(spans, phases, prefetch ? 1 : 0, sum, steps, barrier);
  return cudaGetLastError();
}

}  // namespace deepinfer::bench
