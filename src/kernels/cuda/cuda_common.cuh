// Shared device helpers for the CUDA kernels: launch checks, reductions, and exact decoders of the
// checkpoint's number formats (the device twins of tensor/dtype.h; every format is a subset of
// f32, so decoding is exact).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device/cuda_error.h"
#include "tensor/dtype.h"

// After a launch: reports a launch-configuration error with the kernel's name.
#define DI_CUDA_LAUNCH_CHECK(what) DI_CUDA_CHECK(cudaGetLastError(), what)

namespace deepinfer::cuda {

constexpr int kWarpSize = 32;

__host__ __device__ inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether ptr is a-byte aligned and a stride of `bytes` keeps it so (vector loads of a bytes along
// rows `bytes` apart).
__host__ __device__ inline bool Aligned(const void* ptr, int64_t bytes, int64_t a) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(a) == 0 && bytes % a == 0;
}

// Asynchronous copies from global to shared memory (cp.async): the thread goes on without waiting
// for the data, so one thread can have many copies in flight. CpAsyncWaitAll / CpAsyncWait<N>
// wait for the calling thread's own copies (all of them / all but the N most recently committed
// groups); a barrier then shows them to other threads.
// 16 bytes, bypassing L1.
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(__cvta_generic_to_global(gmem_src))
               : "memory");
}
// kBytes (4, 8 or 16) bytes to the shared address `dst`, both addresses kBytes-aligned: src_bytes
// (kBytes or 0) of them read from gmem_src, the rest zeros (gmem_src, still a valid address, is not
// read where src_bytes is 0).
template <int kBytes>
__device__ __forceinline__ void CpAsyncSharedOrZero(unsigned dst, const void* gmem_src, unsigned src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
                 "l"(__cvta_generic_to_global(gmem_src)), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst),
                 "l"(__cvta_generic_to_global(gmem_src)), "n"(kBytes), "r"(src_bytes)
                 : "memory");
  }
}
// CpAsyncSharedOrZero where `copy` holds, else nothing: a predicated instruction, no branch.
template <int kBytes>
__device__ __forceinline__ void CpAsyncSharedOrZeroIf(bool copy, unsigned dst, const void* gmem_src,
                                                      unsigned src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca copies 4 or 8 bytes");
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %3, 0;\n"
      "@p cp.async.ca.shared.global [%0], [%1], %2, %4;\n"
      "}\n" ::"r"(dst),
      "l"(__cvta_generic_to_global(gmem_src)), "n"(kBytes), "r"(static_cast<unsigned>(copy)), "r"(src_bytes)
      : "memory");
}
// The same to a generic pointer into shared memory, all of it read where `fill`, else zeros.
template <int kBytes>
__device__ __forceinline__ void CpAsyncOrZero(void* smem_dst, const void* gmem_src, bool fill) {
  CpAsyncSharedOrZero<kBytes>(static_cast<unsigned>(__cvta_generic_to_shared(smem_dst)), gmem_src, fill ? kBytes : 0u);
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ inline float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sums N per-lane partial vectors over the warp with WarpSum's butterfly tree (levels lane^16,
// ^8, ^4, ^2, ^1; the order linear.h states for the GEMVs), as a reduce-scatter: while more than
// one value is left, a level sends half of them to the partner and adds the received half to the
// kept one (the pairs added are exactly the butterfly's, and a + b == b + a bit for bit); once one
// value is left, the remaining levels are a plain butterfly. Afterwards v[0, max(N/32, 1)) hold
// finished sums; ReducedIndex names which. N is a power of two. (The GEMVs' reduction, and the hc
// mix's 24-32 sums of a pass: 31 shuffles where 32 WarpSums take 160.)
template <int N, int D = 16>
__device__ __forceinline__ void WarpReduceScatter(float* v, int lane) {
  if constexpr (D >= 1) {
    if constexpr (N > 1) {
      constexpr int kHalf = N / 2;
      const bool upper = (lane & D) != 0;
#pragma unroll
      for (int i = 0; i < kHalf; ++i) {
        const float send = upper ? v[i] : v[i + kHalf];
        const float keep = upper ? v[i + kHalf] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, D);
      }
      WarpReduceScatter<kHalf, D / 2>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], D);
      WarpReduceScatter<1, D / 2>(v, lane);
    }
  }
}

// The input index of v[i] after WarpReduceScatter<N> on `lane`.
template <int N>
__device__ __forceinline__ int ReducedIndex(int lane, int i) {
  int idx = i;
  int n = N;
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) {
    if (n > 1) {
      n /= 2;
      if (lane & d) idx += n;
    }
  }
  return idx;
}

__device__ inline float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch`: 32 floats of shared memory. Fixed order for a fixed blockDim: deterministic.
__device__ inline float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = lane < num_warps ? scratch[lane] : 0.f;
  return WarpSum(v);
}

__device__ inline float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; 0x7f/0xff are NaN, no infinities.
__device__ inline float DecodeE4m3(uint8_t v) {
  const uint32_t sign = (v >> 7) & 1u;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t man = v & 0x7u;
  float mag;
  if (exp == 0xfu && man == 0x7u) {
    mag = __int_as_float(0x7fc00000);
  } else if (exp == 0) {
    mag = static_cast<float>(man) * 0x1p-9f;  // subnormal: man · 2^-6 / 8
  } else {
    mag = __uint_as_float(((exp + 120u) << 23) | (man << 20));
  }
  return sign ? -mag : mag;
}

// A switch of the environment: `unset` where it is unset or empty, else 0 or 1; any other value
// throws, naming `what` (the operation that read it).
inline bool EnvSwitch(const char* name, bool unset, const char* what) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  if (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0) return *v == '1';
  const std::string message = std::string(name) + " must be 0 or 1, got '" + v + "'";
  ThrowCudaError(__FILE__, __LINE__, what, message.c_str());
}

// A switch's state: the test's override where set (0 or 1), else what the environment said.
inline bool TestOrEnvironment(const std::atomic<int>& test, bool from_environment) {
  const int mode = test.load();
  return mode >= 0 ? mode == 1 : from_environment;
}

// DEEPINFER_PREFETCH_WEIGHTS (read once; unset or 0: off, 1: on): the kernels that take
// PdlPrologue(L2Range) ask L2 for their weights before their PDL wait (their launches pass size 0
// when off). The same bits either way: only when the bytes arrive changes. Measured on an H100
// (docs/performance.md, versions 68 and 69): no gain in the decode graphs (batch 1 1.150 ms on,
// 1.143 off; batch 64 4.388 / 4.371; batch 256 7.596 / 7.580), and in eager launches (no PDL, so
// no window) the weight kernels lose 1-3% at batch 1. Off by default since.
inline bool PrefetchWeights() {
  static const bool on = EnvSwitch("DEEPINFER_PREFETCH_WEIGHTS", false, "cuda kernels");
  return on;
}

// Tests: a device counter from 0, launch(counter) (kernels that add to it; returns the first error),
// then the counter's value. Synchronizes the device; `what` names the caller in its error.
template <class Launch>
uint64_t DeviceCountForTesting(const char* what, const Launch& launch) {
  unsigned long long* count = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&count, sizeof(*count)), "cudaMalloc");
  unsigned long long host = 0;
  cudaError_t e = cudaMemset(count, 0, sizeof(*count));
  if (e == cudaSuccess) e = launch(count);
  if (e == cudaSuccess) e = cudaMemcpy(&host, count, sizeof(host), cudaMemcpyDeviceToHost);
  cudaFree(count);
  DI_CUDA_CHECK(e, what);
  return host;
}

// Programmatic dependent launch: every kernel of this project begins with PdlPrologue(). Where a
// CUDA graph made the kernel a programmatic dependent of the one before it (CudaGraph, unless
// DEEPINFER_PDL=0; docs/cuda-backend.md), griddepcontrol.wait holds the whole block until that grid
// has completed and its memory is visible, so nothing before the call may read another kernel's
// output; launched any other way it returns at once. launch_dependents then lets the next kernel's
// blocks be scheduled as soon as every block of this one has started: they only wait in their own
// prologue, and the launch latency between the two kernels overlaps this one's work.
__device__ __forceinline__ void PdlPrologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// [p, p + bytes) into L2 without waiting for it (cp.async.bulk.prefetch.L2, sm_90): its 16-byte
// aligned part, so that no byte outside the range is asked for, in pieces of kL2PrefetchPiece;
// nothing where p is null or bytes <= 0.
constexpr uint64_t kL2PrefetchPiece = 16384;
__device__ __forceinline__ void PrefetchL2(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p == nullptr || bytes <= 0) return;
  const uint64_t begin = (reinterpret_cast<uint64_t>(p) + 15u) & ~uint64_t{15};
  const uint64_t end = (reinterpret_cast<uint64_t>(p) + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  for (uint64_t at = begin; at < end; at += kL2PrefetchPiece) {
    const uint64_t left = end - at;
    const uint32_t piece = static_cast<uint32_t>(left < kL2PrefetchPiece ? left : kL2PrefetchPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(at), "r"(piece) : "memory");
  }
#endif
}

// PdlPrologue for kernels that read no weights and run few blocks (norms, ropes, row copies and
// quantizers, slice sums, the attention at small batches): launch_dependents before the wait, so
// that the kernel after it is launched once this one's blocks have started rather than once they
// have waited for the kernel before. A weight kernel behind a run of such kernels then starts, and
// asks L2 for its weights (PdlPrologue(L2Range)), while the kernel before the run still works.
// Every dependent still waits in its own prologue for this kernel's completion, which comes after
// this kernel's own wait, so what each kernel reads is unchanged.
struct PdlTriggerFirst {};
__device__ __forceinline__ void PdlPrologue(PdlTriggerFirst) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// A range of bytes that no kernel writes (weights), for PdlPrologue(L2Range) to ask L2 for.
struct L2Range {
  const void* bytes = nullptr;  // null: none
  int64_t size = 0;
};

// PdlPrologue with an L2 prefetch before the wait: a kernel's blocks may start while the kernel
// before it still runs (a programmatic dependent), and asking for its weights there moves their
// first DRAM round trip under that kernel. The argument may read only the kernel's parameters. The
// host passes size 0 where PrefetchWeights() is off.
__device__ __forceinline__ void PdlPrologue(L2Range constant) {
  PrefetchL2(constant.bytes, constant.size);
  PdlPrologue();
}
// Both: the prefetch, then PdlPrologue(PdlTriggerFirst) (a light kernel with a small weight).
__device__ __forceinline__ void PdlPrologue(L2Range constant, PdlTriggerFirst first) {
  PrefetchL2(constant.bytes, constant.size);
  PdlPrologue(first);
}

// The cluster barrier at the end of a kernel whose blocks read each other's shared memory: no block
// leaves (its shared memory going with it) until every thread of the cluster has arrived. The
// arrive is relaxed (barrier.cluster.arrive.relaxed: no fence, where cluster.sync()'s release
// arrive compiled to MEMBAR.ALL.GPU, which waits for the thread's global stores). Contract: every
// value a thread read from a peer's shared memory has been used (summed, stored) before the call,
// so those reads have completed, and no thread reads a peer's shared memory after it. It orders no
// memory access: where a block's threads read, after it, shared memory that other threads of the
// block wrote before it, the block needs its own __syncthreads() as well. Every thread that has
// not exited calls it (no .aligned: a warp may arrive diverged).
__device__ __forceinline__ void ClusterSyncBeforeExit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait;\n" ::: "memory");
#endif
}

// e8m0: a bare biased exponent, 2^(e-127); 0xff is NaN.
__device__ inline float DecodeE8m0(uint8_t e) {
  if (e == 0xffu) return __int_as_float(0x7fc00000);
  if (e == 0) return 0x1p-127f;
  return __uint_as_float(static_cast<uint32_t>(e) << 23);
}

// e2m1 nibble: 1 sign, 2 exponent, 1 mantissa: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
__device__ inline float DecodeE2m1(uint8_t nibble) {
  constexpr float kMagnitudes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float mag = kMagnitudes[nibble & 0x7u];
  return (nibble & 0x8u) ? -mag : mag;
}

// Element `i` of a dense BF16/F16/F32 array as f32.
__device__ inline float LoadAsFloat(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(data)[i]) << 16);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

inline int NumBlocks(int64_t n, int threads) { return static_cast<int>(CeilDiv(n, threads)); }

}  // namespace deepinfer::cuda
