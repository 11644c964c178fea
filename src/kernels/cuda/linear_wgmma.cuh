// Linear's FP8-input path for large M on Hopper's warpgroup MMAs (wgmma), included by linear.cu
// after linear_mma.cuh: it uses linear.cu's Params and linear_mma.cuh's fp8 constants.
//
// Two kernels per call:
//   1. QuantizeRowsKernel: act_quant of x once per (row, 128-column chunk) into the caller's
//      scratch: e4m3 codes [m_pad, K] and scales [K/128, m_pad] (transposed, so a chunk's scales of
//      a token tile are contiguous). Same arithmetic as mma::fp8::QuantizeX (the chunk's amax, its
//      power-of-two scale, codes rounded from x times the scale's exact reciprocal), so the same
//      codes and scales; rows m..m_pad-1 quantize zeros.
//   2. WgmmaFp8Kernel: a block computes 128 weight rows × 64 tokens, the two warpgroups 64 weight
//      rows each (wgmma m64n64k32: A = weight codes, B = x codes, both K-major in 128-byte swizzled
//      shared memory), with a 4-stage cp.async pipeline over 128-column chunks.
//
// Order of every output: linear_mma.cuh's fp8 order for FP8 weights (so the bits of fp8::Block and
// fp8::StagedBlock, provided the tensor cores compute a k32 step of wgmma as they compute the
// same step of mma.sync m16n8k32, which the gpu tests check): per chunk an accumulator from +0
// takes the chunk's four k32 steps in order; part = part + acc·(w_scale·x_scale) in chunk order,
// from +0 at each 512-column slice; total = P_0, total += P_1, ... in slice order.
//
// Used for: FP8 weights, kFp8Act, one group (Linear), m > 32, K % 128 == 0, 16-byte aligned weight
// rows and scratch of Fp8ActScratchBytes(m, K). Otherwise StagedBlock's path runs (same bits).
#pragma once

namespace wgmma {

constexpr int kChunk = mma::kChunk;                  // 128 columns = 128 bytes of e4m3 per row
constexpr int kRowsPerGroup = 64;                    // weight rows per warpgroup (wgmma's M)
constexpr int kGroups = 2;                           // consumer warpgroups per block
constexpr int kBlockRows = kRowsPerGroup * kGroups;  // 128: one FP8 scale block of rows
constexpr int kTokens = 64;                          // tokens per block (wgmma's N)
constexpr int kStages = 4;
constexpr int kThreads = 128 * kGroups;
constexpr int kWStageBytes = kBlockRows * kChunk;  // 16 KiB
constexpr int kXStageBytes = kTokens * kChunk;     // 8 KiB
constexpr int kStageBytes = kWStageBytes + kXStageBytes + 1024;  // + the chunk's 64 x scales (256 B), padded
constexpr int kSmemBytes = kStages * kStageBytes + 1024;          // + alignment of the base to 1024
static_assert(kBlockRows == kFp8Block, "a block's rows share one FP8 weight-scale row");

__host__ __device__ inline int64_t PaddedRows(int64_t m) { return CeilDiv(m, kTokens) * kTokens; }

// ---- 1. act_quant into scratch ----------------------------------------------------------------
//
// One warp per (row, chunk): lane l quantizes columns 128·c + 4l .. +3.
__global__ void __launch_bounds__(256) QuantizeRowsKernel(const float* __restrict__ x, int64_t ldx, int64_t m,
                                                          int64_t m_pad, int64_t k, bool x_vec, uint8_t* codes,
                                                          float* scales) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t chunks = k / kChunk;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (item >= m_pad * chunks) return;  // uniform per warp
  const int64_t row = item / chunks, c = item % chunks;
  const int64_t col = c * kChunk + 4 * lane;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row < m) {
    const float* src = x + row * ldx + col;
    if (x_vec) {
      v = __ldg(reinterpret_cast<const float4*>(src));
    } else {
      v = make_float4(__ldg(src), __ldg(src + 1), __ldg(src + 2), __ldg(src + 3));
    }
  }
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = WarpMax(amax);
  const float scale = cpu::Ue8m0BlockScale(amax, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax);
  const float inv = __frcp_rn(scale);  // exact: a power of two
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv)), __NV_SATFINITE,
                                               __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.z, inv), __fmul_rn(v.w, inv)), __NV_SATFINITE,
                                               __NV_E4M3);
  *reinterpret_cast<uint32_t*>(codes + row * k + col) = lo | (hi << 16);
  if (lane == 0) scales[c * m_pad + row] = scale;
}

// ---- 2. the GEMM --------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major operand: rows of 128 bytes in 128-byte swizzle
// (16-byte unit u of row r stored at unit u ^ (r % 8)), 8-row groups 1024 bytes apart; `addr` is
// the shared address of row 0's byte 32·kk for k32 step kk (the tile itself 1024-byte aligned).
__device__ __forceinline__ uint64_t SwizzledDescriptor(uint32_t addr) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3ffffu) >> 4);
  desc |= static_cast<uint64_t>(1) << 16;            // leading byte offset: unused with this swizzle
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;    // stride byte offset: between 8-row groups
  desc |= static_cast<uint64_t>(1) << 62;            // 128-byte swizzle
  return desc;
}

// Byte offset of 16-byte unit `unit` of row `row` in a swizzled tile.
__device__ __forceinline__ int SwizzledOffset(int row, int unit) { return row * kChunk + ((unit ^ (row & 7)) << 4); }

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Makes this thread's generic-proxy writes to shared memory (cp.async included) visible to the
// async proxy that wgmma reads through; a barrier after it covers the other threads.
__device__ __forceinline__ void FenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving accesses of `r` across a wgmma fence / wait.
__device__ __forceinline__ void PinRegister(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d (+)= A·B for one k32 step, m64n64k32, e4m3 × e4m3 → f32: accumulate == 0 starts d from zero.
__device__ __forceinline__ void MmaM64N64K32(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

struct GemmArgs {
  const uint8_t* codes;   // [m_pad, k] e4m3
  const float* xscales;   // [k / 128, m_pad]
  int64_t m_pad;
};

// Queues (cp.async, one group per call) chunk c's weight rows n0..n0+127, token rows t0..t0+63 and
// their 64 scales into stage buffer `stage`. Weight rows past n are zero-filled.
__device__ __forceinline__ void LoadStage(const Params& p, const GemmArgs& a, uint8_t* stage, int64_t n0, int64_t t0,
                                          int64_t c) {
  const int tid = threadIdx.x;
  uint8_t* w_tile = stage;
  uint8_t* x_tile = stage + kWStageBytes;
  float* xs = reinterpret_cast<float*>(stage + kWStageBytes + kXStageBytes);
  constexpr int kUnits = kChunk / 16;  // 8 units of 16 bytes per row
#pragma unroll
  for (int i = 0; i < kBlockRows * kUnits / kThreads; ++i) {
    const int id = tid + i * kThreads;
    const int row = id / kUnits, unit = id % kUnits;
    const bool valid = n0 + row < p.n;
    const uint8_t* src = p.w + (valid ? n0 + row : 0) * p.w_row_bytes + c * kChunk + unit * 16;
    CpAsyncOrZero<16>(w_tile + SwizzledOffset(row, unit), src, valid);
  }
#pragma unroll
  for (int i = 0; i < kTokens * kUnits / kThreads; ++i) {
    const int id = tid + i * kThreads;
    const int row = id / kUnits, unit = id % kUnits;
    CpAsync16(x_tile + SwizzledOffset(row, unit), a.codes + (t0 + row) * p.k + c * kChunk + unit * 16);
  }
  if (tid < kTokens / 4) CpAsync16(xs + 4 * tid, a.xscales + c * a.m_pad + t0 + 4 * tid);
}

// Grid (ceil(n / 128), m_pad / 64); kThreads threads, kSmemBytes of dynamic shared memory.
__global__ void __launch_bounds__(kThreads, 2) WgmmaFp8Kernel(const Params p, const GemmArgs a) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int tid = threadIdx.x;
  const int group = tid / 128;          // consumer warpgroup: weight rows 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;  // the D fragment's row group and column pair
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
  const int64_t chunks = p.k / kChunk;
  const int64_t scale_base = (n0 / kFp8Block) * p.scale_row_stride;

  float acc[32], part[32], total[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = part[i] = total[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) LoadStage(p, a, smem + s * kStageBytes, n0, t0, s);
    CpAsyncCommit();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    CpAsyncWait<kStages - 2>();  // chunk c's group has landed (this thread's copies)
    FenceProxyAsyncShared();
    __syncthreads();  // everyone's copies of chunk c; everyone done with stage (c - 1) % kStages
    {
      const int64_t next = c + kStages - 1;
      if (next < chunks) LoadStage(p, a, smem + (next % kStages) * kStageBytes, n0, t0, next);
      CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
    }
    uint8_t* stage = smem + (c % kStages) * kStageBytes;
    const uint32_t w_addr = static_cast<uint32_t>(__cvta_generic_to_shared(stage + group * kRowsPerGroup * kChunk));
    const uint32_t x_addr = static_cast<uint32_t>(__cvta_generic_to_shared(stage + kWStageBytes));
#pragma unroll
    for (int i = 0; i < 32; ++i) PinRegister(acc[i]);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kChunk / 32; ++kk) {
      MmaM64N64K32(acc, SwizzledDescriptor(w_addr + 32 * kk), SwizzledDescriptor(x_addr + 32 * kk), kk > 0);
    }
    WgmmaCommit();
    WgmmaWaitAll();
#pragma unroll
    for (int i = 0; i < 32; ++i) PinRegister(acc[i]);

    // part += acc · (w_scale · x_scale), element by element as fp8::Block does.
    const int64_t si = scale_base + c;
    const float sw = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
    const float* xs = reinterpret_cast<const float*>(stage + kWStageBytes + kXStageBytes);
#pragma unroll
    for (int i = 0; i < kTokens / 8; ++i) {
      const float s0 = __fmul_rn(sw, xs[8 * i + 2 * q]), s1 = __fmul_rn(sw, xs[8 * i + 2 * q + 1]);
      part[4 * i + 0] = __fadd_rn(part[4 * i + 0], __fmul_rn(acc[4 * i + 0], s0));
      part[4 * i + 1] = __fadd_rn(part[4 * i + 1], __fmul_rn(acc[4 * i + 1], s1));
      part[4 * i + 2] = __fadd_rn(part[4 * i + 2], __fmul_rn(acc[4 * i + 2], s0));
      part[4 * i + 3] = __fadd_rn(part[4 * i + 3], __fmul_rn(acc[4 * i + 3], s1));
    }
    if ((c + 1) % mma::kSliceChunks == 0 || c + 1 == chunks) {
      const bool first_slice = c < mma::kSliceChunks;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        total[i] = first_slice ? part[i] : __fadd_rn(total[i], part[i]);
        part[i] = 0.f;
      }
    }
  }
  CpAsyncWaitAll();

  // D fragment: element 4i + e is weight row 16·warp + g (+8 for e >= 2), token 8i + 2q (+1 for
  // odd e) of the warpgroup's tile.
  const int64_t row = n0 + group * kRowsPerGroup + 16 * warp + g;
#pragma unroll
  for (int i = 0; i < kTokens / 8; ++i) {
    const int64_t tok = t0 + 8 * i + 2 * q;
    if (row < p.n && tok < p.m) p.y[tok * p.ldy + row] = total[4 * i + 0];
    if (row < p.n && tok + 1 < p.m) p.y[(tok + 1) * p.ldy + row] = total[4 * i + 1];
    if (row + 8 < p.n && tok < p.m) p.y[tok * p.ldy + row + 8] = total[4 * i + 2];
    if (row + 8 < p.n && tok + 1 < p.m) p.y[(tok + 1) * p.ldy + row + 8] = total[4 * i + 3];
  }
#endif
}

// Scratch of the wgmma path for m rows of K columns: codes [m_pad, K], then (256-byte aligned)
// the scales [K / 128, m_pad].
inline int64_t CodeBytes(int64_t m_pad, int64_t k) { return CeilDiv(m_pad * k, 256) * 256; }
inline size_t ScratchBytes(int64_t m, int64_t k) {
  const int64_t m_pad = PaddedRows(m);
  return static_cast<size_t>(CodeBytes(m_pad, k) + (k / kChunk) * m_pad * 4);
}
inline GemmArgs ScratchLayout(void* scratch, int64_t m_pad, int64_t k) {
  uint8_t* base = static_cast<uint8_t*>(scratch);
  return GemmArgs{base, reinterpret_cast<const float*>(base + CodeBytes(m_pad, k)), m_pad};
}

// Whether the current device runs wgmma (compute capability 9.0), asked once per device.
inline bool DeviceHasWgmma() {
  static std::atomic<uint64_t> known{0}, has{0};  // bit d: device d asked / is 9.0
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= 64) return false;
  const uint64_t bit = uint64_t{1} << device;
  if ((known.load() & bit) == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      return false;
    }
    if (major == 9 && minor == 0) has.fetch_or(bit);
    known.fetch_or(bit);
  }
  return (has.load() & bit) != 0;
}

inline bool Usable(const Params& p, Kind kind, int64_t groups) {
  return DeviceHasWgmma() && kind == Kind::kFp8 && groups == 1 && p.m > mma::kMaxTm * mma::kTok && p.k > 0 && p.k % kChunk == 0 &&
         p.w_vec16 && p.scratch != nullptr && reinterpret_cast<uintptr_t>(p.scratch) % 256 == 0 &&
         p.scratch_bytes >= ScratchBytes(p.m, p.k);
}

}  // namespace wgmma
