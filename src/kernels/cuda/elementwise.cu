#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/ue8m0.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace deepinfer::cuda {

namespace {

constexpr int kRowThreads = 256;

// Elements a norm thread loads before using them (all in flight together).
constexpr int kNormBatch = 4;

// A norm's output value as stored: itself, or (bf16_out) rounded to BF16, nearest even, as
// Bf16RoundKernel rounds it.
__device__ __forceinline__ float NormOutput(float value, bool bf16_out) {
  return bf16_out ? __bfloat162float(__float2bfloat16_rn(value)) : value;
}

// Rows of more than kWarpRowMax values, one block per row. Thread j sums x[i]² over i = j,
// j + blockDim, ... in that order (fmaf from +0), then BlockSum; y[i] = w[i] · (x[i] · inv). Loads
// go kNormBatch at a time ahead of use.
__global__ void RmsNormKernel(const float* x, int64_t ldx, int64_t n, const void* weight, DType weight_dtype,
                              float eps, float* y, int64_t ldy, bool bf16_out) {
  PdlPrologue(PdlTriggerFirst{});
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * ldx;
  float* yr = y + blockIdx.x * ldy;
  const int64_t stride = blockDim.x;
  float ss = 0.f;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += kNormBatch * stride) {
    float v[kNormBatch];
#pragma unroll
    for (int u = 0; u < kNormBatch; ++u) v[u] = i0 + u * stride < n ? xr[i0 + u * stride] : 0.f;
#pragma unroll
    for (int u = 0; u < kNormBatch; ++u) {
      if (i0 + u * stride < n) ss = fmaf(v[u], v[u], ss);
    }
  }
  ss = BlockSum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += kNormBatch * stride) {
    float v[kNormBatch], w[kNormBatch];
#pragma unroll
    for (int u = 0; u < kNormBatch; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = i < n ? xr[i] : 0.f;
      w[u] = i < n && weight != nullptr ? LoadAsFloat(weight, weight_dtype, i) : 1.f;
    }
#pragma unroll
    for (int u = 0; u < kNormBatch; ++u) {
      const int64_t i = i0 + u * stride;
      if (i < n) yr[i] = NormOutput(w[u] * (v[u] * inv), bf16_out);
    }
  }
}

// Rows of kWarpRowMax < n <= kPerThread · kRowThreads (the model's 4096-wide norms): RmsNormKernel's
// arithmetic, the same bits, with the row held in registers: thread j loads x[j + 256u] and the
// weight's w[j + 256u] for every u at once, then sums the squares in u order (RmsNormKernel's
// order), so a row costs one memory round trip instead of 2·n / (kNormBatch · 256) (4096: eight, ~6
// us at batch 1). The weight's bytes are asked of L2 before the PDL wait (weight_bytes; 0: not).
template <int kPerThread>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormRowKernel(const float* x, int64_t ldx, int64_t n, const void* weight, DType weight_dtype, float eps,
                     float* y, int64_t ldy, int64_t weight_bytes, bool bf16_out) {
  PdlPrologue(L2Range{threadIdx.x == 0 ? weight : nullptr, weight_bytes}, PdlTriggerFirst{});
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * ldx;
  float* yr = y + blockIdx.x * ldy;
  float v[kPerThread], w[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kRowThreads;
    v[u] = i < n ? xr[i] : 0.f;
    w[u] = i < n && weight != nullptr ? LoadAsFloat(weight, weight_dtype, i) : 1.f;
  }
  float ss = 0.f;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    if (threadIdx.x + static_cast<int64_t>(u) * kRowThreads < n) ss = fmaf(v[u], v[u], ss);
  }
  ss = BlockSum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * kRowThreads;
    if (i < n) yr[i] = NormOutput(w[u] * (v[u] * inv), bf16_out);
  }
}
constexpr int64_t kRowRegistersMax = 32 * kRowThreads;  // RmsNormRowKernel<32>'s widest row

// Rows of at most kWarpRowMax values take one warp each (8 rows per block): lane j sums x[i]² over
// i = j, j + 32, ... in that order (fmaf from +0), then WarpSum; y[i] = w[i] · (x[i] · inv). The
// choice depends on n only, so a row's bits do not depend on m. (One block of 256 threads per row
// of 512 values, the per-head q norm of a prefill, left most threads idle behind two barriers.)
constexpr int64_t kWarpRowMax = 512;
constexpr int kWarpRowsPerBlock = kRowThreads / kWarpSize;
constexpr int kWarpRowPerLane = static_cast<int>(kWarpRowMax / kWarpSize);

// RmsNormWarpKernel's arithmetic on a row of n <= kWarpRowMax values held by the warp (lane j:
// v[u] = x[j + 32u], zeros past n): emit(u, i, w[i] · (v[u] · inv)) for each i = j + 32u < n.
template <class Emit>
__device__ __forceinline__ void WarpRmsNorm(const float (&v)[kWarpRowPerLane], int64_t n, int lane,
                                            const void* weight, DType weight_dtype, float eps, const Emit& emit) {
  float ss = 0.f;
#pragma unroll
  for (int u = 0; u < kWarpRowPerLane; ++u) {
    if (lane + static_cast<int64_t>(u) * kWarpSize < n) ss = fmaf(v[u], v[u], ss);
  }
  ss = WarpSum(ss);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
  for (int u = 0; u < kWarpRowPerLane; ++u) {
    const int64_t i = lane + static_cast<int64_t>(u) * kWarpSize;
    if (i < n) emit(u, i, (weight != nullptr ? LoadAsFloat(weight, weight_dtype, i) : 1.f) * (v[u] * inv));
  }
}

__global__ void __launch_bounds__(kRowThreads)
    RmsNormWarpKernel(const float* x, int64_t ldx, int64_t m, int64_t n, const void* weight, DType weight_dtype,
                      float eps, float* y, int64_t ldy, bool bf16_out) {
  PdlPrologue(PdlTriggerFirst{});
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= m) return;  // uniform per warp
  const float* xr = x + row * ldx;
  float* yr = y + row * ldy;
  float v[kWarpRowPerLane];
#pragma unroll
  for (int u = 0; u < kWarpRowPerLane; ++u) {
    const int64_t i = lane + static_cast<int64_t>(u) * kWarpSize;
    v[u] = i < n ? xr[i] : 0.f;
  }
  WarpRmsNorm(v, n, lane, weight, weight_dtype, eps,
              [&](int, int64_t i, float value) { yr[i] = NormOutput(value, bf16_out); });
}

__global__ void EmbeddingKernel(const int32_t* ids, const void* table, DType table_dtype, int64_t vocab,
                                int64_t dim, int64_t ld_table, float* y, int64_t ldy) {
  PdlPrologue();
  const int32_t id = ids[blockIdx.x];
  float* yr = y + blockIdx.x * ldy;
  const bool valid = id >= 0 && id < vocab;
  const int64_t base = static_cast<int64_t>(valid ? id : 0) * ld_table;
  // kEmbeddingBatch loads in flight before their stores (one at a time, y possibly aliasing the
  // table for the compiler, a 4096-wide row took 16 round trips: ~7 us at batch 1).
  constexpr int kEmbeddingBatch = 16;
  const int64_t stride = blockDim.x;
  for (int64_t i0 = threadIdx.x; i0 < dim; i0 += kEmbeddingBatch * stride) {
    float v[kEmbeddingBatch];
#pragma unroll
    for (int u = 0; u < kEmbeddingBatch; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = valid && i < dim ? LoadAsFloat(table, table_dtype, base + i) : __int_as_float(0x7fc00000);
    }
#pragma unroll
    for (int u = 0; u < kEmbeddingBatch; ++u) {
      if (i0 + u * stride < dim) yr[i0 + u * stride] = v[u];
    }
  }
}

// One block per token; threads over (head, pair). The token's cos / sin per pair are computed
// once into shared memory (the same cosf / sinf of the same angle for every head), then each
// thread rotates up to kRopeBatch pairs, loading them all before writing any.
constexpr int kRopeBatch = 4;

// The pair (a, b) rotated by (c, s) into p[0], p[1] = (a·c − b·s, a·s + b·c), the roundings
// spelled out (one product rounded, the other fused into the add: what nvcc chose for RopeKernel's
// `a * c - b * s` before this helper), so that every kernel that rotates rounds alike whatever
// the compiler would contract in its context.
__device__ __forceinline__ void RotatePair(float a, float b, float c, float s, float* p) {
  p[0] = __fmaf_rn(a, c, -__fmul_rn(b, s));
  p[1] = __fmaf_rn(b, c, __fmul_rn(a, s));
}

// Pair i's rotation at position `pos`: cos and sin of pos·inv_freq_i (sin negated for the inverse).
__device__ __forceinline__ void RopeCosSin(float pos, float inv_freq_i, bool inverse, float& c, float& s) {
  const float angle = pos * inv_freq_i;
  c = cosf(angle);
  s = inverse ? -sinf(angle) : sinf(angle);
}

__global__ void RopeKernel(float* x, int64_t num_heads, int64_t head_dim, int64_t ld_token, int64_t ld_head,
                           const int64_t* positions, const float* inv_freq, int64_t half, bool inverse) {
  PdlPrologue(PdlTriggerFirst{});
  extern __shared__ float rope_cs[];  // [half] cos, then [half] sin (negated for the inverse)
  const float pos = static_cast<float>(positions[blockIdx.x]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float c, s;
    RopeCosSin(pos, inv_freq[i], inverse, c, s);
    rope_cs[i] = c;
    rope_cs[half + i] = s;
  }
  __syncthreads();
  const int64_t offset = head_dim - 2 * half;
  const int64_t pairs = num_heads * half;
  const int64_t stride = blockDim.x;
  float* xt = x + blockIdx.x * ld_token;
  for (int64_t t0 = threadIdx.x; t0 < pairs; t0 += kRopeBatch * stride) {
    float a[kRopeBatch], b[kRopeBatch];
#pragma unroll
    for (int u = 0; u < kRopeBatch; ++u) {
      const int64_t t = t0 + u * stride;
      if (t < pairs) {
        const float* p = xt + (t / half) * ld_head + offset + 2 * (t % half);
        a[u] = p[0], b[u] = p[1];
      }
    }
#pragma unroll
    for (int u = 0; u < kRopeBatch; ++u) {
      const int64_t t = t0 + u * stride;
      if (t < pairs) {
        const int64_t i = t % half;
        float* p = xt + (t / half) * ld_head + offset + 2 * i;
        RotatePair(a[u], b[u], rope_cs[i], rope_cs[half + i], p);
      }
    }
  }
}

// |a| rounded to a grid with `mantissa_bits` fraction bits and minimum normal exponent `min_exp`,
// ties to even (the host's RoundToMiniFloat).
__device__ float RoundToMiniFloat(float a, int mantissa_bits, int min_exp) {
  if (a == 0.f) return 0.f;
  int e;
  frexpf(a, &e);
  int exp = e - 1;
  if (exp < min_exp) exp = min_exp;
  const float quantum = ldexpf(1.f, exp - mantissa_bits);
  return rintf(a / quantum) * quantum;
}

// A quantization block's ue8m0 scale from its amax, e4m3 (kFp8) or e2m1.
template <bool kFp8>
__device__ float RoundTripScale(float amax) {
  return kFp8 ? cpu::Ue8m0BlockScale(amax, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax)
              : cpu::Ue8m0BlockScale(amax, cpu::kE2m1AmaxFloor, cpu::kE2m1InvMax);
}

// One value through the code grid at `scale` and back.
template <bool kFp8>
__device__ float RoundTripValue(float v, float scale) {
  const float max_code = kFp8 ? cpu::kE4m3Max : cpu::kE2m1Max;
  const float q = fminf(fmaxf(v / scale, -max_code), max_code);
  float r = kFp8 ? RoundToMiniFloat(fabsf(q), 3, -6) : RoundToMiniFloat(fabsf(q), 1, 0);
  r = fminf(r, max_code);
  return copysignf(r, q) * scale;
}

// Rounds channels [b0, b1) of one row through e4m3 (kFp8) or e2m1 with one ue8m0 scale; called
// by every thread of the block.
template <bool kFp8>
__device__ void RoundTripBlock(float* xr, int64_t b0, int64_t b1, float* scratch) {
  float amax = 0.f;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i]));
  amax = BlockMax(amax, scratch);
  const float scale = RoundTripScale<kFp8>(amax);
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) xr[i] = RoundTripValue<kFp8>(xr[i], scale);
}

// Quantization blocks of at most kWarpBlockMax channels: one warp per (row, block), lane l holding
// channels b0 + 4l .. b0 + 4l + 3, 8 warps per thread block; no block barrier. The same amax (a
// max: any order) and the same per-value operations as RoundTripBlock, so the same bits.
constexpr int64_t kWarpBlockMax = 4 * kWarpSize;

// One quantization block, channels [b0, b1) of row xr (b1 - b0 <= kWarpBlockMax), by the warp:
// lane l holds channels b0 + 4l .. +3.
template <bool kFp8>
__device__ __forceinline__ void RoundTripWarpBlock(float* xr, int64_t b0, int64_t b1, int lane) {
  float v[4];
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t i = b0 + 4 * lane + k;
    v[k] = i < b1 ? xr[i] : 0.f;
    amax = fmaxf(amax, fabsf(v[k]));
  }
  const float scale = RoundTripScale<kFp8>(WarpMax(amax));
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t i = b0 + 4 * lane + k;
    if (i < b1) xr[i] = RoundTripValue<kFp8>(v[k], scale);
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(256) RoundTripWarpKernel(float* x, int64_t ldx, int64_t m, int64_t begin,
                                                           int64_t end, int64_t block, int64_t blocks_per_row,
                                                           const int32_t* row_count) {
  PdlPrologue(PdlTriggerFirst{});
  int64_t rows = m;
  if (row_count != nullptr) rows = *row_count < 0 ? 0 : *row_count < m ? *row_count : m;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (item >= rows * blocks_per_row) return;  // uniform per warp
  const int lane = threadIdx.x % kWarpSize;
  const int64_t b0 = begin + (item % blocks_per_row) * block;
  const int64_t b1 = min(end, b0 + block);
  RoundTripWarpBlock<kFp8>(x + (item / blocks_per_row) * ldx, b0, b1, lane);
}


// blockIdx.x: the quantization block; rows stride by gridDim.y over r < min(m, *row_count) (all m
// rows when row_count is null). blockDim = 32·k covering `block` values.
template <bool kFp8>
__global__ void RoundTripKernel(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                                const int32_t* row_count) {
  PdlPrologue();
  __shared__ float scratch[32];
  int64_t rows = m;
  if (row_count != nullptr) rows = *row_count < 0 ? 0 : *row_count < m ? *row_count : m;
  const int64_t b0 = begin + static_cast<int64_t>(blockIdx.x) * block;
  const int64_t b1 = min(end, b0 + block);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) RoundTripBlock<kFp8>(x + r * ldx, b0, b1, scratch);
}

// Channels [begin, end) of rows r < min(m, *row_count) (m when row_count is null) in blocks of
// `block`: the warp kernel where a block fits a warp, else one thread block per (block, row).
template <bool kFp8>
void LaunchRoundTrip(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                     const int32_t* row_count, cudaStream_t stream) {
  const int64_t blocks_per_row = CeilDiv(end - begin, block);
  if (block <= kWarpBlockMax) {
    const int64_t grid = CeilDiv(m * blocks_per_row, 256 / kWarpSize);
    if (grid > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, "round_trip", "too many blocks for one launch");
    RoundTripWarpKernel<kFp8><<<static_cast<unsigned>(grid), 256, 0, stream>>>(x, ldx, m, begin, end, block,
                                                                              blocks_per_row, row_count);
    return;
  }
  const dim3 grid(static_cast<unsigned>(blocks_per_row), static_cast<unsigned>(std::min<int64_t>(m, 65535)));
  const int threads = static_cast<int>(std::min<int64_t>(256, CeilDiv(block, 32) * 32));
  RoundTripKernel<kFp8><<<grid, threads, 0, stream>>>(x, ldx, m, begin, end, block, row_count);
}

// One block per row (grid-strided past 65535 rows), threads over the channels.
__global__ void Bf16RoundKernel(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end) {
  PdlPrologue(PdlTriggerFirst{});
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    float* xr = x + r * ldx;
    for (int64_t c = begin + threadIdx.x; c < end; c += blockDim.x) {
      xr[c] = __bfloat162float(__float2bfloat16_rn(xr[c]));
    }
  }
}

// The Walsh–Hadamard butterflies of a row of n (a power of two) values in shared memory: at each
// level len, the pairs (j, j + len) become a + b, a - b, pair t0, t0 + step, ... taken by the
// caller's thread; sync() (every participant) after each level.
template <class Sync>
__device__ __forceinline__ void HadamardButterflies(float* row, int n, unsigned t0, unsigned step, const Sync& sync) {
  for (int len = 1; len < n; len <<= 1) {
    for (int t = t0; t < n / 2; t += step) {
      const int j = (t / len) * 2 * len + (t % len);
      const float a = row[j], b = row[j + len];
      row[j] = a + b;
      row[j + len] = a - b;
    }
    sync();
  }
}

// One block per row; the row lives in shared memory during the butterflies.
__global__ void HadamardKernel(float* x, int64_t ldx, int n, float scale) {
  PdlPrologue();
  extern __shared__ float row[];
  float* xr = x + blockIdx.x * ldx;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = xr[i];
  __syncthreads();
  HadamardButterflies(row, n, threadIdx.x, blockDim.x, [] { __syncthreads(); });
  for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = row[i] * scale;
}

// Rows r < min(m, *row_count) (all m rows when row_count is null), striding over rows in y.
__global__ void SwiGluKernel(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                             const float* row_weights, const int32_t* row_count) {
  PdlPrologue();
  int64_t rows = m;
  if (row_count != nullptr) rows = *row_count < 0 ? 0 : *row_count < m ? *row_count : m;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float weight = row_weights != nullptr ? row_weights[r] : 1.f;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      g[r * ldg + i] = ClampedSwiGluValue(g[r * ldg + i], u[r * ldu + i], limit, weight);
    }
  }
}

// SwiGluKernel's values four columns at a time (n, ldg and ldu multiples of 4, g and u 16-byte
// aligned): a thread per (row, 4 columns) over all rows, 16-byte loads and stores, each value by
// SwiGluKernel's operations (the same bits). SwiGluKernel's grid of one block per row and 256
// columns kept one value a thread in flight (the 8k prefill's experts: 0.94 ms a layer for 1.2 GB).
__global__ void __launch_bounds__(256) SwiGluVec4Kernel(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m,
                                                        int64_t n, float limit, const float* row_weights,
                                                        const int32_t* row_count) {
  PdlPrologue();
  int64_t rows = m;
  if (row_count != nullptr) rows = *row_count < 0 ? 0 : *row_count < m ? *row_count : m;
  const int64_t quads = n / 4, total = rows * quads;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / quads, c = 4 * (e % quads);
    const float weight = row_weights != nullptr ? row_weights[r] : 1.f;
    float4* gp = reinterpret_cast<float4*>(g + r * ldg + c);
    float4 gate = *gp;
    float4 up = *reinterpret_cast<const float4*>(u + r * ldu + c);
    float* gv = &gate.x;
    const float* uv = &up.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) gv[k] = ClampedSwiGluValue(gv[k], uv[k], limit, weight);
    *gp = gate;
  }
}

__global__ void FillKernel(float* x, int64_t n, float value) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void FillHashUniformKernel(float* x, int64_t n, uint64_t seed, float lo, float hi) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = cpu::HashUniform(seed, static_cast<uint64_t>(i), lo, hi);
  }
}

__global__ void SpinKernel(int64_t nanoseconds) {
  PdlPrologue();
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<int64_t>(now - start) < nanoseconds);
}

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= factor;
  }
}

// RowSteps: one warp per head row (8 rows per block), the row in the warp's slice of shared memory
// between the steps. Each step is its kernel's own code: WarpRmsNorm (RmsNormWarpKernel),
// RopeCosSin and RotatePair (RopeKernel), HadamardButterflies (HadamardKernel), RoundTripWarpBlock
// (RoundTripWarpKernel) and Bf16RoundKernel's rounding.
constexpr int kRowStepsRows = kRowThreads / kWarpSize;
std::atomic<int> g_row_steps_test{-1};          // SetRowStepsForTesting
std::atomic<uint64_t> g_row_steps_launches{0};  // RowStepsLaunchesForTesting
static_assert(kRowStepsMaxWidth == kWarpRowMax, "RowSteps' norm is RmsNormWarpKernel's (WarpRmsNorm)");

// e4m3 (kFp8) or e2m1 round trip of channels [0, end) of a row in shared memory, in blocks of
// `block` (<= kWarpBlockMax) channels, one block at a time over the warp.
template <bool kFp8>
__device__ __forceinline__ void RoundTripRow(float* row, int64_t end, int64_t block, int lane) {
  for (int64_t b0 = 0; b0 < end; b0 += block) {
    RoundTripWarpBlock<kFp8>(row, b0, min(end, b0 + block), lane);
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kRowThreads)
    RowStepsKernel(float* x, int64_t m, int64_t num_heads, int64_t n, int64_t ld_token, int64_t ld_head,
                   const RowStepsArgs a, float hadamard_scale) {
  PdlPrologue();
  __shared__ float rows[kRowStepsRows][kRowStepsMaxWidth];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowStepsRows + warp;
  if (r >= m * num_heads) return;  // uniform per warp; no block barrier below
  const int64_t t = r / num_heads;
  float* xr = x + t * ld_token + (r % num_heads) * ld_head;
  float* row = rows[warp];

  float v[kWarpRowPerLane];
#pragma unroll
  for (int u = 0; u < kWarpRowPerLane; ++u) {
    const int64_t i = lane + static_cast<int64_t>(u) * kWarpSize;
    v[u] = i < n ? xr[i] : 0.f;
  }
  if (a.norm) {
    WarpRmsNorm(v, n, lane, a.norm_weight, a.norm_weight_dtype, a.eps,
                [&](int u, int64_t, float value) { v[u] = value; });
  }
#pragma unroll
  for (int u = 0; u < kWarpRowPerLane; ++u) {
    const int64_t i = lane + static_cast<int64_t>(u) * kWarpSize;
    if (i < n) row[i] = v[u];
  }
  __syncwarp();
  if (a.inv_freq != nullptr) {
    const float pos = static_cast<float>(a.positions[t]);
    const int64_t offset = n - 2 * a.rope_half;
    for (int64_t i = lane; i < a.rope_half; i += kWarpSize) {
      float c, s;
      RopeCosSin(pos, a.inv_freq[i], a.rope_inverse, c, s);
      float* p = row + offset + 2 * i;
      RotatePair(p[0], p[1], c, s, p);
    }
    __syncwarp();
  }
  if (a.hadamard) {
    HadamardButterflies(row, static_cast<int>(n), static_cast<unsigned>(lane), kWarpSize, [] { __syncwarp(); });
    for (int64_t i = lane; i < n; i += kWarpSize) row[i] *= hadamard_scale;
    __syncwarp();
  }
  if (a.fp8_end > 0) {
    RoundTripRow<true>(row, a.fp8_end, a.fp8_block, lane);
    for (int64_t i = a.fp8_end + lane; i < n; i += kWarpSize) row[i] = __bfloat162float(__float2bfloat16_rn(row[i]));
  }
  if (a.fp4_block > 0) {
    __syncwarp();
    RoundTripRow<false>(row, n, a.fp4_block, lane);
  }
  __syncwarp();
  for (int64_t i = lane; i < n; i += kWarpSize) xr[i] = row[i];
}

// The orthonormal Walsh–Hadamard transform's factor for rows of n (HadamardRows, RowSteps).
float HadamardScale(int64_t n) { return 1.f / std::sqrt(static_cast<float>(n)); }

// DEEPINFER_NORM_ROWS_IN_REGISTERS (read once; unset or 1: on, 0: off): norms of 513-8192 values
// on RmsNormRowKernel (the same bits as RmsNormKernel). Measured on an H100 (2026-12-07,
// docs/performance.md version 68): `rms_norm` at batch 1 0.132 -> 0.102 ms (3 layers, eager
// profile), batch 64 0.135 -> 0.111. Tests override it.
std::atomic<int> g_rms_norm_rows_in_registers_test{-1};          // SetRmsNormRowsInRegistersForTesting
std::atomic<uint64_t> g_rms_norm_rows_in_registers_launches{0};  // RmsNormRowsInRegistersLaunchesForTesting
bool RmsNormRowsInRegisters() {
  static const bool from_environment = EnvSwitch("DEEPINFER_NORM_ROWS_IN_REGISTERS", true, "rms_norm");
  return TestOrEnvironment(g_rms_norm_rows_in_registers_test, from_environment);
}

void CheckRows(int64_t m, const char* what) {
  if (m > 0x7fffffff) ThrowCudaError(__FILE__, __LINE__, what, "more than 2^31 rows");
}

}  // namespace

void RmsNorm(const float* x, int64_t ldx, int64_t m, int64_t n, const void* weight, DType weight_dtype,
             float eps, float* y, int64_t ldy, cudaStream_t stream, bool bf16_out) {
  if (m == 0) return;
  CheckRows(m, "rms_norm");
  if (n <= kWarpRowMax) {
    RmsNormWarpKernel<<<static_cast<unsigned>(CeilDiv(m, kWarpRowsPerBlock)), kRowThreads, 0, stream>>>(
        x, ldx, m, n, weight, weight_dtype, eps, y, ldy, bf16_out);
  } else if (n <= kRowRegistersMax && RmsNormRowsInRegisters()) {
    const int64_t weight_bytes = weight != nullptr && PrefetchWeights() ? n * DTypeSize(weight_dtype) : 0;
    const auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(m), kRowThreads, 0, stream>>>(x, ldx, n, weight, weight_dtype, eps, y, ldy,
                                                                    weight_bytes, bf16_out);
    };
    if (n <= 16 * kRowThreads) {
      launch(RmsNormRowKernel<16>);
    } else {
      launch(RmsNormRowKernel<32>);
    }
    g_rms_norm_rows_in_registers_launches.fetch_add(1);
  } else {
    RmsNormKernel<<<static_cast<unsigned>(m), kRowThreads, 0, stream>>>(x, ldx, n, weight, weight_dtype, eps, y, ldy,
                                                                        bf16_out);
  }
  DI_CUDA_LAUNCH_CHECK("rms_norm");
}

void RowSteps(float* x, int64_t m, int64_t num_heads, int64_t n, int64_t ld_token, int64_t ld_head,
              const RowStepsArgs& args, cudaStream_t stream) {
  if (m == 0 || num_heads == 0) return;
  CheckRows(m * num_heads, "row_steps");
  auto fail = [](const char* what) { ThrowCudaError(__FILE__, __LINE__, "row_steps", what); };
  if (n <= 0 || n > kRowStepsMaxWidth) fail("rows of 1 to 512 values");
  if (args.inv_freq != nullptr && (args.positions == nullptr || args.rope_half <= 0 || 2 * args.rope_half > n)) {
    fail("rope needs positions and 1 <= 2·half <= n");
  }
  if (args.hadamard && (n & (n - 1)) != 0) fail("the Hadamard transform needs a power-of-two row");
  if (args.fp8_end < 0 || args.fp8_end > n) fail("e4m3 channels past the row");
  if (args.fp8_end > 0 && (args.fp8_block <= 0 || args.fp8_block > kWarpBlockMax)) fail("e4m3 blocks of 1-128");
  if (args.fp4_block < 0 || args.fp4_block > kWarpBlockMax) fail("e2m1 blocks of 1-128");
  const int64_t blocks = CeilDiv(m * num_heads, int64_t{kRowStepsRows});
  RowStepsKernel<<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(x, m, num_heads, n, ld_token, ld_head,
                                                                          args, HadamardScale(n));
  DI_CUDA_LAUNCH_CHECK("row_steps");
  g_row_steps_launches.fetch_add(1);
}

bool RowStepsOn() {
  static const bool from_environment = EnvSwitch("DEEPINFER_ROW_STEPS", false, "row_steps");
  return TestOrEnvironment(g_row_steps_test, from_environment);
}

void SetRmsNormRowsInRegistersForTesting(int mode) {
  if (mode < -1 || mode > 1) {
    ThrowCudaError(__FILE__, __LINE__, "rms_norm", "SetRmsNormRowsInRegistersForTesting takes -1, 0 or 1");
  }
  g_rms_norm_rows_in_registers_test.store(mode);
}
uint64_t RmsNormRowsInRegistersLaunchesForTesting() { return g_rms_norm_rows_in_registers_launches.load(); }

void SetRowStepsForTesting(int mode) {
  if (mode < -1 || mode > 1) ThrowCudaError(__FILE__, __LINE__, "row_steps", "SetRowStepsForTesting takes -1, 0 or 1");
  g_row_steps_test.store(mode);
}

uint64_t RowStepsLaunchesForTesting() { return g_row_steps_launches.load(); }

void Embedding(const int32_t* ids, int64_t num_ids, const void* table, DType table_dtype, int64_t vocab,
               int64_t dim, int64_t ld_table, float* y, int64_t ldy, cudaStream_t stream) {
  if (num_ids == 0) return;
  CheckRows(num_ids, "embedding");
  EmbeddingKernel<<<static_cast<unsigned>(num_ids), kRowThreads, 0, stream>>>(ids, table, table_dtype, vocab, dim,
                                                                                ld_table, y, ldy);
  DI_CUDA_LAUNCH_CHECK("embedding");
}

void Rope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t ld_token, int64_t ld_head,
          const int64_t* positions, const float* inv_freq, int64_t half, bool inverse, cudaStream_t stream) {
  if (m == 0 || half == 0) return;
  CheckRows(m, "rope");
  if (2 * half > head_dim) ThrowCudaError(__FILE__, __LINE__, "rope", "rope dimension exceeds the head dimension");
  if (half > 4096) ThrowCudaError(__FILE__, __LINE__, "rope", "rope dimension above 8192");
  const size_t smem = 2 * static_cast<size_t>(half) * sizeof(float);
  RopeKernel<<<static_cast<unsigned>(m), kRowThreads, smem, stream>>>(x, num_heads, head_dim, ld_token, ld_head,
                                                                     positions, inv_freq, half, inverse);
  DI_CUDA_LAUNCH_CHECK("rope");
}

void Fp8RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                      cudaStream_t stream) {
  Fp8RoundTripRows(x, ldx, m, begin, end, block, nullptr, stream);
}

void Fp8RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                      const int32_t* row_count, cudaStream_t stream) {
  if (m == 0 || end <= begin) return;
  CheckRows(m, "fp8_round_trip");
  if (block <= 0) ThrowCudaError(__FILE__, __LINE__, "fp8_round_trip", "block must be positive");
  LaunchRoundTrip<true>(x, ldx, m, begin, end, block, row_count, stream);
  DI_CUDA_LAUNCH_CHECK("fp8_round_trip");
}

void Bf16RoundRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, cudaStream_t stream) {
  if (m == 0 || end <= begin) return;
  CheckRows(m, "bf16_round");
  const int threads = static_cast<int>(std::min<int64_t>(256, CeilDiv(end - begin, 32) * 32));
  Bf16RoundKernel<<<static_cast<unsigned>(std::min<int64_t>(m, 65535)), threads, 0, stream>>>(x, ldx, m, begin, end);
  DI_CUDA_LAUNCH_CHECK("bf16_round");
}

void Fp4RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t n, int64_t block, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  CheckRows(m, "fp4_round_trip");
  if (block <= 0) ThrowCudaError(__FILE__, __LINE__, "fp4_round_trip", "block must be positive");
  LaunchRoundTrip<false>(x, ldx, m, 0, n, block, nullptr, stream);
  DI_CUDA_LAUNCH_CHECK("fp4_round_trip");
}

void HadamardRows(float* x, int64_t ldx, int64_t m, int64_t n, cudaStream_t stream) {
  if (m == 0) return;
  CheckRows(m, "hadamard");
  if (n <= 0 || n > 4096 || (n & (n - 1)) != 0) {
    ThrowCudaError(__FILE__, __LINE__, "hadamard", "row length must be a power of two <= 4096");
  }
  const float scale = HadamardScale(n);
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, n / 2)));
  HadamardKernel<<<static_cast<unsigned>(m), threads, n * sizeof(float), stream>>>(x, ldx, static_cast<int>(n), scale);
  DI_CUDA_LAUNCH_CHECK("hadamard");
}

void ClampedSwiGlu(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                   const float* row_weights, cudaStream_t stream) {
  ClampedSwiGlu(g, ldg, u, ldu, m, n, limit, row_weights, nullptr, stream);
}

void ClampedSwiGlu(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                   const float* row_weights, const int32_t* row_count, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (n % 4 == 0 && ldg % 4 == 0 && ldu % 4 == 0 && aligned(g) && aligned(u)) {
    const int64_t blocks = std::min<int64_t>(CeilDiv(m * (n / 4), int64_t{256}), 8192);
    SwiGluVec4Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g, ldg, u, ldu, m, n, limit, row_weights,
                                                                         row_count);
    DI_CUDA_LAUNCH_CHECK("clamped_swiglu");
    return;
  }
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, kRowThreads), 64)),
                  static_cast<unsigned>(std::min<int64_t>(m, 65535)));
  SwiGluKernel<<<grid, kRowThreads, 0, stream>>>(g, ldg, u, ldu, m, n, limit, row_weights, row_count);
  DI_CUDA_LAUNCH_CHECK("clamped_swiglu");
}

void ScaleF32(float* x, int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  ScaleKernel<<<static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, kRowThreads), 4096)), kRowThreads, 0, stream>>>(
      x, n, factor);
  DI_CUDA_LAUNCH_CHECK("scale");
}

void FillHashUniformF32(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  FillHashUniformKernel<<<static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, kRowThreads), 8192)), kRowThreads, 0,
                          stream>>>(x, n, seed, lo, hi);
  DI_CUDA_LAUNCH_CHECK("fill_hash_uniform");
}

void SpinMicroseconds(int64_t microseconds, cudaStream_t stream) {
  if (microseconds <= 0) return;
  SpinKernel<<<1, 1, 0, stream>>>(microseconds * 1000);
  DI_CUDA_LAUNCH_CHECK("spin");
}

void FillF32(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  FillKernel<<<static_cast<unsigned>(std::min<int64_t>(CeilDiv(n, kRowThreads), 4096)), kRowThreads, 0, stream>>>(
      x, n, value);
  DI_CUDA_LAUNCH_CHECK("fill");
}

}  // namespace deepinfer::cuda
