#include "bench/ceilings_fill.h"

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::bench {
namespace {

using cuda::PdlPrologue;

__device__ inline uint64_t Hash(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillBf16Kernel(uint16_t* dst, size_t n, uint64_t seed) {
  PdlPrologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = Hash(seed, i);
    const uint32_t sign = static_cast<uint32_t>(h & 1u) << 15;
    const uint32_t exponent = 121u + static_cast<uint32_t>((h >> 1) % 6u);  // 2^-6 .. 2^-1
    const uint32_t mantissa = static_cast<uint32_t>(h >> 8) & 0x7fu;
    dst[i] = static_cast<uint16_t>(sign | (exponent << 7) | mantissa);
  }
}

// Element i's random e4m3 code: the hash's top byte, NaN (0x7f, 0xff) made ±448.
__device__ inline uint8_t RandomE4m3Code(uint64_t seed, size_t i) {
  uint32_t code = static_cast<uint32_t>(Hash(seed, i) >> 24) & 0xffu;
  if ((code & 0x7fu) == 0x7fu) code ^= 1u;
  return static_cast<uint8_t>(code);
}

__global__ void FillE4m3Kernel(uint8_t* dst, size_t n, uint64_t seed) {
  PdlPrologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = RandomE4m3Code(seed, i);
  }
}

__global__ void FillE4m3FloatsKernel(float* dst, size_t n, size_t cols, uint64_t seed) {
  PdlPrologue();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint8_t code = RandomE4m3Code(seed, i);
    if (i % cols % 128 == 0) code = (code & 0x80u) | 0x7eu;  // ±448 (the code's sign), the block's amax
    dst[i] = cuda::DecodeE4m3(code);
  }
}

constexpr int kThreads = 256;

unsigned Blocks(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
}

}  // namespace

cudaError_t FillRandomBf16(uint16_t* dst, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(dst, n, seed);
  return cudaGetLastError();
}

cudaError_t FillRandomE4m3(uint8_t* dst, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillE4m3Kernel<<<Blocks(n), kThreads, 0, stream>>>(dst, n, seed);
  return cudaGetLastError();
}

cudaError_t FillRandomE4m3Floats(float* dst, size_t rows, size_t cols, uint64_t seed, cudaStream_t stream) {
  const size_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  FillE4m3FloatsKernel<<<Blocks(n), kThreads, 0, stream>>>(dst, n, cols, seed);
  return cudaGetLastError();
}

}  // namespace deepinfer::bench
