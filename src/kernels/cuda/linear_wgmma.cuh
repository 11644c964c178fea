// The FP8-input path (LinearMath::kFp8Act) on Hopper's warpgroup MMAs (wgmma), included by
// linear.cu after linear_mma.cuh: it uses linear.cu's Params and Kind and linear_mma.cuh's fp8
// helpers.
//
// Kernels of one call:
//   1. QuantizeRowsKernel: act_quant of x once per (row, 128-column chunk) into the caller's
//      scratch: e4m3 codes [m_pad, K] and scales [K/128, m_pad] (transposed, so a chunk's scales of
//      a token tile are contiguous). Same arithmetic as mma::fp8::QuantizeX (the chunk's amax, its
//      power-of-two scale, codes rounded from x times the scale's exact reciprocal), so the same
//      codes and scales; rows m..m_pad-1 quantize zeros.
//   2. WgmmaBlock: 128 weight rows × 64 tokens per block, the two warpgroups 64 weight rows each
//      (wgmma m64n64k32: A = weight codes, B = x codes, both K-major in 128-byte swizzled shared
//      memory), a 4-stage cp.async pipeline over 128-column chunks (each thread's copy addresses
//      fixed per block; no per-unit tests where all 128 weight rows exist, 16-byte aligned). FP8
//      weights land in shared memory as they are stored; FP4 nibbles (e8m0 group scales) are
//      turned into e4m3 codes with the group scales folded in, per chunk, so that a chunk is one
//      k32 chain as FP8's is.
//      WgmmaLinearKernel runs it for Linear, linear.cu's ExpertsWgmmaKernel for every tile of
//      ExpertsLinear (FP8 and FP4 weights); the experts' tiles of 1-8 and 9-16 rows run it on 8-
//      and 16-token tiles (m64n8k32, m64n16k32: each output column the same dot product as at
//      64, so the same bits; only the accumulators shrink).
//   3. Linear at decode-sized M only: SumSlicesKernel (below).
//
// Order of every output (WgmmaBlock): FP8 weights: per chunk an accumulator from +0 takes the
// chunk's four k32 steps in order, then part = fma(acc, w_scale·x_scale, part); FP4: per chunk and
// FoldPass, the four steps chained over codes with the group scales folded in, the chunk's columns
// in the FP4 order (Fp4OrderUnit: each step takes 8 columns of each group), then
// part = fma(acc, 2^top·x_scale, part).
// part restarts from +0 at each 512-column slice; total = P_0, total += P_1, ...
// in slice order. Every caller of the path (Linear at any M and slicing, every expert tile) runs
// this one order, which is what keeps a row's bits independent of its batch.
//
// Numerics: the bits differ from the mma.sync kernels'. Measured on the H200 (2026-12-01): a
// single k32 step of wgmma already rounds differently from mma.sync m16n8k32, and the FP8 chunk's
// four steps chained in the accumulator lose up to 2^-10.8 of S = Σ|w·x| where mma.sync stays
// within 2^-12 (Hopper's FP8 wgmma adds into an accumulator of about 13-14 bits; DeepSeek-V3's
// report measured it and promotes to f32 every 128 columns, as this order does, and as DeepSeek's
// own FP8 GEMM does). So one row's bits stay independent of the batch only if every M takes this
// path: Linear does at every M (sliced below 1 wave of blocks, the same adds), ExpertsLinear for
// every tile. The model passes scratch at every M; a caller without scratch gets mma.sync's bits
// at every M.
//
// Used for K % 128 == 0 on an sm_90a build on compute capability 9.0 with scratch
// (LinearScratchBytes, ExpertsLinearCodesBytes), FP8 weights (either scale dtype) and FP4 weights
// with e8m0 scales (the checkpoints'; FP4 with f32 scales takes the mma.sync kernels at every M);
// Linear also needs one group. Weight rows that are not 16-byte aligned are read with byte loads.
#pragma once

namespace wgmma {

constexpr int kChunk = mma::kChunk;                  // 128 columns = 128 bytes of e4m3 per row
constexpr int kRowsPerGroup = 64;                    // weight rows per warpgroup (wgmma's M)
constexpr int kGroups = 2;                           // consumer warpgroups per block
constexpr int kBlockRows = kRowsPerGroup * kGroups;  // 128: one FP8 scale block of rows
constexpr int kTokens = 64;                          // tokens per block (wgmma's N)
constexpr int kStages = 4;  // cp.async stages
constexpr int kThreads = 128 * kGroups;
constexpr int kWStageBytes = kBlockRows * kChunk;  // 16 KiB
constexpr int kXStageBytes = kTokens * kChunk;     // 8 KiB
static_assert(kBlockRows == kFp8Block, "a block's rows share one FP8 weight-scale row");

__host__ __device__ inline int64_t PaddedRows(int64_t m) { return CeilDiv(m, kTokens) * kTokens; }

// FP4 weights' column order within a 128-column chunk (the "FP4 order"): every product of an FP4
// weight on these kernels takes a chunk's columns in this order, x's codes and the weight's folded
// codes alike, so that the register-fed kernel's thread q of a warp (linear_wgmma_rs.cuh) holds, in
// every k32 step, 8 columns of the row's group q (32 columns, one e8m0 exponent): one table entry
// and one 16-byte read per row and chunk. In 4-byte units: the chunk's unit 8s + v (k32 step s,
// unit v of its 32 columns; A-fragment thread q holds v = q and v = 4 + q) holds columns
// 4p..4p+3 with p = 8(v % 4) + 2s + v / 4; column unit p sits at Fp4OrderUnit(p).
__host__ __device__ constexpr int Fp4OrderUnit(int p) { return 8 * ((p % 8) / 2) + 4 * (p % 2) + p / 8; }
static_assert(Fp4OrderUnit(0) == 0 && Fp4OrderUnit(1) == 4 && Fp4OrderUnit(2) == 8 && Fp4OrderUnit(8) == 1 &&
                  Fp4OrderUnit(31) == 31,
              "thread q's step-s columns 32q + 8s..+7 at units 8s + q and 8s + 4 + q");

// ---- 1. act_quant into scratch ----------------------------------------------------------------
//
// One warp per (row, chunk): lane l quantizes columns 128·c + 4l .. +3, stored in column order, or
// in the FP4 order (Fp4OrderUnit) for FP4 weights' products.

// A lane's four codes (little-endian, columns col..col + 3) of act_quant of row `row` of x (zeros
// for row >= m) and the chunk's scale: every lane of the warp takes the same (row, chunk), col =
// 128·c + 4·lane. The one act_quant of every FP8-input wgmma product.
struct QuantizedUnit {
  uint32_t codes;
  float scale;
};
// The first half: the lane's four values (zeros for row >= m), a load that callers may issue for
// several (row, chunk) pairs before the second half, QuantizeLoaded, takes the warp's amax.
__device__ __forceinline__ float4 LoadUnit(const float* __restrict__ x, int64_t ldx, int64_t m, int64_t row,
                                           int64_t col, bool x_vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row < m) {
    const float* src = x + row * ldx + col;
    if (x_vec) {
      v = __ldg(reinterpret_cast<const float4*>(src));
    } else {
      v = make_float4(__ldg(src), __ldg(src + 1), __ldg(src + 2), __ldg(src + 3));
    }
  }
  return v;
}
__device__ __forceinline__ QuantizedUnit QuantizeLoaded(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = WarpMax(amax);
  const float scale = cpu::Ue8m0BlockScale(amax, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax);
  const float inv = __frcp_rn(scale);  // exact: a power of two
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv)), __NV_SATFINITE,
                                               __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.z, inv), __fmul_rn(v.w, inv)), __NV_SATFINITE,
                                               __NV_E4M3);
  return QuantizedUnit{lo | (hi << 16), scale};
}

// A lane's unit of row `row`, chunk c stored as the GEMMs read the codes scratch: its codes at
// codes + row·k + 128·c (unit Fp4OrderUnit(lane) where fp4_order, else lane), the scale (lane 0)
// at scales[c·m_pad + row].
__device__ __forceinline__ void StoreUnit(const QuantizedUnit& u, uint8_t* codes, float* scales, int64_t row,
                                          int64_t c, int64_t k, int64_t m_pad, bool fp4_order, int lane) {
  const int unit = fp4_order ? Fp4OrderUnit(lane) : lane;
  *reinterpret_cast<uint32_t*>(codes + row * k + c * kChunk + 4 * unit) = u.codes;
  if (lane == 0) scales[c * m_pad + row] = u.scale;
}

// The (row, chunk) item of the calling warp over `rows` rows of `chunks` chunks (one warp an item,
// in the order of the warps of the grid): false where the warp has none, or its row is at or past
// *row_count (when given).
__device__ __forceinline__ bool WarpRowItem(int64_t rows, int64_t chunks, const int32_t* row_count, int64_t* row,
                                            int64_t* c) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (item >= rows * chunks) return false;
  *row = item / chunks, *c = item % chunks;
  return row_count == nullptr || *row < *row_count;
}

// Also zeroes zero_ints[0, zero_count) (block 0): the arrival counts of the GEMM that follows.
__global__ void __launch_bounds__(256) QuantizeRowsKernel(const float* __restrict__ x, int64_t ldx, int64_t m,
                                                          int64_t m_pad, int64_t k, bool x_vec, bool fp4_order,
                                                          uint8_t* codes, float* scales, int* zero_ints,
                                                          int zero_count) {
  PdlPrologue(PdlTriggerFirst{});
  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < zero_count; i += blockDim.x) zero_ints[i] = 0;
  }
  const int lane = threadIdx.x % kWarpSize;
  int64_t row = 0, c = 0;
  if (!WarpRowItem(m_pad, k / kChunk, nullptr, &row, &c)) return;  // uniform per warp
  StoreUnit(QuantizeLoaded(LoadUnit(x, ldx, m, row, c * kChunk + 4 * lane, x_vec)), codes, scales, row, c, k, m_pad,
            fp4_order, lane);
}

// The calling warp's item of MoeGather's rows for the act_quant kernels: row r < max_rows (r <
// *row_count where given) of k / kChunk chunks, from x row sorted_slots[r] / top_k. store(unit,
// row, c, lane) writes the lane's act_quant unit of the row's chunk c, then row_weights[r] =
// expert_weights[sorted_slots[r]] (where given). A warp without an item, a row past the count or
// one of a negative slot writes nothing. Uniform per warp.
template <class Store>
__device__ __forceinline__ void GatherUnit(const float* __restrict__ x, int64_t ldx, int64_t k,
                                           const int32_t* __restrict__ sorted_slots,
                                           const int32_t* __restrict__ row_count, int64_t top_k, int64_t max_rows,
                                           bool x_vec, const float* __restrict__ expert_weights,
                                           float* __restrict__ row_weights, Store&& store) {
  const int lane = threadIdx.x % kWarpSize;
  int64_t row = 0, c = 0;
  if (!WarpRowItem(max_rows, k / kChunk, row_count, &row, &c)) return;
  const int32_t slot = sorted_slots[row];
  if (slot < 0) return;
  const int64_t token = slot / top_k;
  // LoadUnit's row bound: the token's row is always within x (m = token + 1).
  store(QuantizeLoaded(LoadUnit(x, ldx, token + 1, token, c * kChunk + 4 * lane, x_vec)), row, c, lane);
  if (c == 0 && lane == 0 && row_weights != nullptr) row_weights[row] = expert_weights[slot];
}

// The MoE's clamped SwiGLU (swiglu.cuh: elementwise.cu's values) of gate row `row` and up row `row`,
// times row_weights[row] (1 where null), act_quant'ed: the lane's unit of chunk c (columns
// 128·c + 4·lane ..; g and u rows 16-byte aligned).
__device__ __forceinline__ QuantizedUnit SwiGluUnit(const float* __restrict__ g, int64_t ldg,
                                                    const float* __restrict__ u, int64_t ldu, int64_t row, int64_t c,
                                                    float limit, const float* __restrict__ row_weights, int lane) {
  const float weight = row_weights != nullptr ? row_weights[row] : 1.f;
  const int64_t col = c * kChunk + 4 * lane;
  const float4 gate = *reinterpret_cast<const float4*>(g + row * ldg + col);
  const float4 up = *reinterpret_cast<const float4*>(u + row * ldu + col);
  return QuantizeLoaded(make_float4(ClampedSwiGluValue(gate.x, up.x, limit, weight),
                                    ClampedSwiGluValue(gate.y, up.y, limit, weight),
                                    ClampedSwiGluValue(gate.z, up.z, limit, weight),
                                    ClampedSwiGluValue(gate.w, up.w, limit, weight)));
}

// MoeGather's rows act_quant'ed as QuantizeRowsKernel would write them from MoeGather's output:
// codes row r < max_rows (r < *row_count where row_count is given) from x row sorted_slots[r] /
// top_k, and row_weights[r] = expert_weights[sorted_slots[r]] (when given); rows past the count or
// of a negative slot are untouched, as MoeGather leaves them (no kernel reads their results). One
// warp per (row, chunk); the codes for m_pad rows (GemmArgs of ScratchLayout(codes, m_pad, k)).
__global__ void __launch_bounds__(256) GatherQuantizeRowsKernel(
    const float* __restrict__ x, int64_t ldx, int64_t k, const int32_t* __restrict__ sorted_slots,
    const int32_t* __restrict__ row_count, int64_t top_k, int64_t max_rows, int64_t m_pad, bool x_vec, bool fp4_order,
    const float* __restrict__ expert_weights, float* __restrict__ row_weights, uint8_t* codes, float* scales) {
  PdlPrologue(PdlTriggerFirst{});
  GatherUnit(x, ldx, k, sorted_slots, row_count, top_k, max_rows, x_vec, expert_weights, row_weights,
             [&](const QuantizedUnit& unit, int64_t row, int64_t c, int lane) {
               StoreUnit(unit, codes, scales, row, c, k, m_pad, fp4_order, lane);
             });
}

// SwiGluUnit's rows act_quant'ed as QuantizeRowsKernel would write them from ClampedSwiGlu's output:
// rows r < min(m, *row_count) (all m where row_count is null); other rows untouched. One warp per
// (row, chunk).
__global__ void __launch_bounds__(256) SwiGluQuantizeRowsKernel(
    const float* __restrict__ g, int64_t ldg, const float* __restrict__ u, int64_t ldu, int64_t m, int64_t n,
    int64_t m_pad, float limit, const float* __restrict__ row_weights, const int32_t* __restrict__ row_count,
    bool fp4_order, uint8_t* codes, float* scales) {
  PdlPrologue(PdlTriggerFirst{});
  const int lane = threadIdx.x % kWarpSize;
  int64_t row = 0, c = 0;
  if (!WarpRowItem(m, n / kChunk, row_count, &row, &c)) return;  // uniform per warp
  StoreUnit(SwiGluUnit(g, ldg, u, ldu, row, c, limit, row_weights, lane), codes, scales, row, c, n, m_pad, fp4_order,
            lane);
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

// The descriptors of 128-byte swizzled K-major tiles (SwizzledDescriptor) as two words: the
// low word's address field (bits 0-13: shared address / 16) and a high word common to every such
// tile, so that a step's or part's offset within a tile is one 32-bit add to the low word (the
// field never carries: shared addresses stay under 256 KiB).
__device__ __forceinline__ uint32_t DescriptorLow(uint32_t addr) {
  return static_cast<uint32_t>(SwizzledDescriptor(addr));
}
__device__ __forceinline__ uint32_t DescriptorHigh() {
  return static_cast<uint32_t>(SwizzledDescriptor(0) >> 32);
}

// Shared-memory loads and stores at 32-bit shared addresses: the block's shared memory reaches
// this code through a generic pointer, and the compiler then emits generic loads (LD.E) for it.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t LdShared32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 LdSharedF32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 LdShared128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 LdShared64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void StShared64(uint32_t addr, uint32_t x, uint32_t y) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void StShared32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void StShared128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
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

// d (+)= A·B for one k32 step, m64n64k32, e4m3 × e4m3 → f32: accumulate == 0 ignores d (wgmma's
// scale-d); the blocks pass 1 with d zeroed, as mma.sync adds its C.
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

// d (+)= A·B for one k32 step, m64n8k32, e4m3 × e4m3 → f32, as MmaM64N64K32 for 8 tokens (each
// output column the same dot product at either width: the experts' tiles of 1-8 rows).
__device__ __forceinline__ void MmaM64N8K32(float (&d)[4], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale-d = 1: acc is zeroed first, as mma.sync adds its C
}

// d (+)= A·B for one k32 step, m64n16k32, e4m3 × e4m3 → f32, as MmaM64N64K32 for 16 tokens.
__device__ __forceinline__ void MmaM64N16K32(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale-d = 1: acc is zeroed first, as mma.sync adds its C
}

// d (+)= A·B for one k32 step, m64n128k32, e4m3 × e4m3 → f32, as MmaM64N64K32 for 128 tokens.
__device__ __forceinline__ void MmaM64N128K32(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale-d = 1: acc is zeroed first, as mma.sync adds its C
}

// d (+)= A·B for one k32 step, m64n96k32, e4m3 × e4m3 → f32, as MmaM64N64K32 for 96 tokens.
__device__ __forceinline__ void MmaM64N96K32(float (&d)[48], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22,"
      " %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43,"
      " %44, %45, %46, %47}, "
      "%48, %49, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale-d = 1: acc is zeroed first, as mma.sync adds its C
}

// d (+)= A·B for one k32 step, m64n104k32, e4m3 × e4m3 → f32, as MmaM64N64K32 for 104 tokens.
__device__ __forceinline__ void MmaM64N104K32(float (&d)[52], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %54, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n104k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22,"
      " %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43,"
      " %44, %45, %46, %47, %48, %49, %50, %51}, "
      "%52, %53, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale-d = 1: acc is zeroed first, as mma.sync adds its C
}

// d (+)= A·B for one k32 step on a tile of 2·kElems tokens (4: m64n8k32, 8: m64n16k32, 32:
// m64n64k32, 48: m64n96k32, 52: m64n104k32, 64: m64n128k32), the accumulator's previous value added.
template <int kElems>
__device__ __forceinline__ void MmaK32(float (&d)[kElems], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kElems == 4 || kElems == 8 || kElems == 32 || kElems == 48 || kElems == 52 || kElems == 64,
                "8-, 16-, 64-, 96-, 104- or 128-token tiles");
  if constexpr (kElems == 4) {
    MmaM64N8K32(d, desc_a, desc_b);
  } else if constexpr (kElems == 8) {
    MmaM64N16K32(d, desc_a, desc_b);
  } else if constexpr (kElems == 32) {
    MmaM64N64K32(d, desc_a, desc_b, 1);
  } else if constexpr (kElems == 48) {
    MmaM64N96K32(d, desc_a, desc_b);
  } else if constexpr (kElems == 52) {
    MmaM64N104K32(d, desc_a, desc_b);
  } else {
    MmaM64N128K32(d, desc_a, desc_b);
  }
}

struct GemmArgs {
  const uint8_t* codes;   // [m_pad, k] e4m3
  const float* xscales;   // [k / 128, m_pad]
  int64_t m_pad;
};

// FP4 runs folded ("FP4: the group scales folded into the codes" below) at 1 block per SM with the running
// total in registers: of the three layouts measured on the H200 (that one; 2 blocks per SM within
// 128 registers; two converted tiles, pipelined) the fastest (docs/performance.md, version 8), and
// faster than scaling each k32 step (version 6's kernel, removed with the other two).

// Shared memory of one block. Per stage: the chunk's weight bytes as stored (FP8: the swizzled
// e4m3 tile wgmma reads; FP4: the packed nibbles, 64 bytes per row), the x codes (swizzled), the
// 64 x scales and, FP4 only, the next chunk's four e8m0 group exponents of each of the 128 rows
// (one word per row: WgmmaBlock folds them a chunk ahead without a global load in the loop).
// FP4 adds one swizzled e4m3 tile that the nibbles are turned into per chunk.
template <Kind K>
struct SmemLayout {
  static constexpr bool kFold = K == Kind::kFp4;
  static constexpr int kStages = wgmma::kStages;
  static constexpr int kWBytes = K == Kind::kFp4 ? kBlockRows * kChunk / 2 : kBlockRows * kChunk;
  static constexpr int kX = kWBytes;  // 8 or 16 KiB: 1024-byte aligned
  static constexpr int kXs = kX + kXStageBytes;
  static constexpr int kExps = kXs + kTokens * 4;  // FP4: [kBlockRows] words of chunk c + 1
  static constexpr int kStage = kXs + 1024;
  static_assert(kExps + kBlockRows * 4 <= kStage, "the exponent words fit the stage's last KiB");
  static constexpr int kConverted = kStages * kStage;
  static constexpr int kTiles = kFold ? 1 : 0;  // converted tiles
  // FP4 only: the byte_perm tables of the shifts 0-8 (kFoldedTables), read with a lane-varying
  // index (constant memory would serialize it), then FoldRowInfo of the block's 128 rows for two
  // chunks (slot (c - c_begin) % 2 holds chunk c's).
  static constexpr int kTables = kConverted + kTiles * kWStageBytes;
  static constexpr int kTablesBytes = kFold ? 128 : 0;
  static constexpr int kRowInfo = kTables + kTablesBytes;
  static constexpr int kRowInfoSlots = kFold ? 2 : 0;
  static constexpr int kRowInfoBytes = kRowInfoSlots * kBlockRows * 4;
  static constexpr int kBytes = kRowInfo + kRowInfoBytes + 1024;  // + base alignment
};

// 4·kWords bytes from global memory as little-endian words: one vector load where `aligned`
// (src 4·kWords-byte aligned), else byte loads.
template <int kWords>
__device__ __forceinline__ void LoadWords(const uint8_t* src, bool aligned, uint32_t (&word)[kWords]) {
  static_assert(kWords == 2 || kWords == 4, "8 or 16 bytes");
  if (aligned) {
    if constexpr (kWords == 4) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
      word[0] = v.x, word[1] = v.y, word[2] = v.z, word[3] = v.w;
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
      word[0] = v.x, word[1] = v.y;
    }
    return;
  }
#pragma unroll
  for (int w = 0; w < kWords; ++w) word[w] = 0u;
#pragma unroll
  for (int b = 0; b < 4 * kWords; ++b) word[b / 4] |= static_cast<uint32_t>(__ldg(src + b)) << (8 * (b % 4));
}

// 16 bytes from global memory into shared memory, zeros when !valid: cp.async where the source is
// 16-byte aligned, else byte loads (or the zeros) and a plain store, covered like cp.async by the
// fence before wgmma.
__device__ __forceinline__ void Copy16(uint8_t* dst, const uint8_t* src, bool valid, bool aligned) {
  if (!valid) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);  // no cp.async: src may be unaligned
  } else if (aligned) {
    CpAsync16(dst, src);
  } else {
    uint32_t word[4];
    LoadWords(src, false, word);
    *reinterpret_cast<uint4*>(dst) = make_uint4(word[0], word[1], word[2], word[3]);
  }
}

// The stage copies of one block, fixed for the block. Thread tid copies, per chunk, the 16-byte
// units of weight rows tid / kWUnits + i·kWRowsPerPass (unit tid % kWUnits) and of token rows
// tid / kXUnits + i·kXRowsPerPass (unit tid % kXUnits); every pass lands kPassBytes further into
// the stage (the swizzle of a row depends on row % 8 only, and a pass moves a multiple of 8 rows).
template <Kind K>
struct StageCopies {
  static constexpr int kRowBytes = SmemLayout<K>::kWBytes / kBlockRows;  // 128 (FP8) or 64 (FP4)
  static constexpr int kWUnits = kRowBytes / 16;
  static constexpr int kWRowsPerPass = kThreads / kWUnits;
  static constexpr int kWPasses = kBlockRows / kWRowsPerPass;
  static constexpr int kXUnits = kChunk / 16;
  static constexpr int kXRowsPerPass = kThreads / kXUnits;
  static constexpr int kXPasses = kTokens / kXRowsPerPass;
  static constexpr int kPassBytes = 4096;
  static_assert(kWRowsPerPass * kRowBytes == kPassBytes && kXRowsPerPass * kChunk == kPassBytes, "pass stride");
  static_assert(kWRowsPerPass % 8 == 0 && kXRowsPerPass % 8 == 0, "a pass keeps the swizzle phase");

  const uint8_t* w;        // this thread's first weight unit, chunk 0
  const uint8_t* x;        // this thread's first code unit, chunk 0
  int64_t w_pass_stride;   // bytes of kWRowsPerPass weight rows
  int64_t x_pass_stride;   // bytes of kXRowsPerPass code rows
  int w_dst, x_dst;        // stage offsets of the first units
  int x_row;               // this thread's first token row within the tile
  bool whole_w;            // all 128 weight rows exist and are 16-byte aligned: unconditional cp.async
  const uint8_t* exps;     // FP4, tid < kBlockRows with row n0 + tid < n: the row's exponents, chunk 0
  bool exps_words;         // exps 4-byte aligned for every chunk: cp.async of one word

  // with_x false: the block never copies x (XPanel), and a.codes may be null: x is left null.
  __device__ __forceinline__ StageCopies(const Params& p, const GemmArgs& a, int64_t n0, int64_t t_codes,
                                         bool with_x = true) {
    const int tid = threadIdx.x;
    const int w_row = tid / kWUnits, w_unit = tid % kWUnits;
    x_row = tid / kXUnits;
    const int x_unit = tid % kXUnits;
    whole_w = n0 + kBlockRows <= p.n && p.w_vec16;
    w = p.w + (whole_w ? n0 + w_row : 0) * p.w_row_bytes + w_unit * 16;
    w_pass_stride = kWRowsPerPass * p.w_row_bytes;
    // FP8 rows land swizzled (wgmma reads them); FP4 rows plainly (ConvertFp4Folded reads them).
    w_dst = K == Kind::kFp4 ? w_row * kRowBytes + w_unit * 16 : SwizzledOffset(w_row, w_unit);
    x = with_x ? a.codes + (t_codes + x_row) * p.k + x_unit * 16 : nullptr;
    x_pass_stride = kXRowsPerPass * p.k;
    x_dst = SmemLayout<K>::kX + SwizzledOffset(x_row, x_unit);
    exps = nullptr;
    exps_words = false;
    if (K == Kind::kFp4 && tid < kBlockRows && n0 + tid < p.n) {
      exps = p.scale + (n0 + tid) * p.scale_row_stride;
      exps_words = ((reinterpret_cast<uintptr_t>(exps) | static_cast<uintptr_t>(p.scale_row_stride)) & 3u) == 0;
    }
  }
};

// Queues chunk c of the block's weight rows n0..n0+127 (zeros past n), its first `tokens` token
// rows t_codes.. of the codes and their scales into stage buffer `stage` (cp.async; the caller
// commits the group). Token rows from `tokens` on are left as they were: their columns of the
// product are never stored (wgmma keeps the columns apart), so a 1-row expert tile reads 1 row.
// A block whose 128 rows all exist, 16-byte aligned, copies without a test per unit. kLoadX false:
// the weight's bytes only (a block that quantizes x itself: XPanel).
template <Kind K, bool kLoadX = true>
__device__ __forceinline__ void LoadStage(const Params& p, const GemmArgs& a, const StageCopies<K>& cp,
                                          uint8_t* stage, int64_t n0, int64_t t_codes, int tokens, int c) {
  using S = StageCopies<K>;
  const int tid = threadIdx.x;
  // FP4: a row's chunks p.w_chunk_bytes apart (S::kRowBytes in the rows as stored; chunk-major
  // nibbles farther); FP8: S::kRowBytes.
  const int64_t chunk_bytes = K == Kind::kFp4 ? p.w_chunk_bytes : S::kRowBytes;
  if (cp.whole_w) {
    const uint8_t* src = cp.w + c * chunk_bytes;
#pragma unroll
    for (int i = 0; i < S::kWPasses; ++i) CpAsync16(stage + cp.w_dst + i * S::kPassBytes, src + i * cp.w_pass_stride);
  } else {
#pragma unroll
    for (int i = 0; i < S::kWPasses; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / S::kWUnits, unit = id % S::kWUnits;
      const bool valid = n0 + row < p.n;
      const uint8_t* src = p.w + (valid ? n0 + row : 0) * p.w_row_bytes + c * chunk_bytes + unit * 16;
      Copy16(stage + cp.w_dst + i * S::kPassBytes, src, valid, p.w_vec16);
    }
  }
  if constexpr (kLoadX) {
    const uint8_t* x_src = cp.x + c * kChunk;
#pragma unroll
    for (int i = 0; i < S::kXPasses; ++i) {
      if (cp.x_row + i * S::kXRowsPerPass < tokens) {
        CpAsync16(stage + cp.x_dst + i * S::kPassBytes, x_src + i * cp.x_pass_stride);
      }
    }
    if (tid < tokens) {
      CpAsyncOrZero<4>(stage + SmemLayout<K>::kXs + 4 * tid, a.xscales + c * a.m_pad + t_codes + tid, true);
    }
  }
  if constexpr (K == Kind::kFp4) {
    // Row tid's exponents of chunk c + 1 (where it exists): read by this thread alone
    // (WgmmaBlock's NextFoldRowInfo) after its wait for this group.
    const int64_t next = static_cast<int64_t>(c) + 1;
    if (cp.exps != nullptr && next < p.k / kChunk) {
      uint8_t* dst = stage + SmemLayout<K>::kExps + 4 * tid;
      const uint8_t* src = cp.exps + 4 * next;
      if (cp.exps_words) {
        CpAsyncOrZero<4>(dst, src, true);
      } else {
        uint32_t word = 0u;
#pragma unroll
        for (int b = 0; b < 4; ++b) word |= static_cast<uint32_t>(__ldg(src + b)) << (8 * b);
        *reinterpret_cast<uint32_t*>(dst) = word;
      }
    }
  }
}

// ---- FP4: the group scales folded into the codes ----------------------------------------------
//
// The arithmetic (exact shifts 0-8, passes) is kernels/cpu/fp4_fold.h's: per row, chunk and pass,
// codes of the taken groups' values over 2^top, so the MMA needs one scale per row, 2^top.

// byte_perm tables per shift d = 0..8: magnitudes 0-3, then 4-7 (kernels/cpu/fp4_fold.h, exact,
// checked at compile time there; copied to shared memory per block).
static_assert(cpu::kFp4FoldMaxShift == 8, "nine tables");
#define DI_FOLDED_TABLE(d) {cpu::FoldedTableWord(d, 0), cpu::FoldedTableWord(d, 4)}
__constant__ const uint32_t kFoldedTables[9][2] = {DI_FOLDED_TABLE(0), DI_FOLDED_TABLE(1), DI_FOLDED_TABLE(2),
                                                   DI_FOLDED_TABLE(3), DI_FOLDED_TABLE(4), DI_FOLDED_TABLE(5),
                                                   DI_FOLDED_TABLE(6), DI_FOLDED_TABLE(7), DI_FOLDED_TABLE(8)};
#undef DI_FOLDED_TABLE

// The four e8m0 group exponents of row `row` (< p.n) for chunk c.
__device__ __forceinline__ void GroupExponents(const Params& p, int64_t row, int c, int (&e)[4]) {
  const uint8_t* s = p.scale + row * p.scale_row_stride + 4 * static_cast<int64_t>(c);
#pragma unroll
  for (int j = 0; j < 4; ++j) e[j] = __ldg(s + j);
}

// The row's scale for pass `pass` of chunk c: 2^top, or 1 where the pass takes nothing of the row
// (its codes are zeros, so its MMA adds +0) or the row is past p.n.
__device__ __forceinline__ float FoldedRowScale(const Params& p, int64_t row, int c, int pass) {
  if (row >= p.n) return 1.f;
  int e[4];
  GroupExponents(p, row, c, e);
  const cpu::FoldPass f = cpu::FoldPassOf(e, pass);
  return f.any ? DecodeE8m0(static_cast<uint8_t>(f.top)) : 1.f;
}

// 16 folded e4m3 codes from 16 nibbles (8 bytes, low nibble first; each word in the sign-split
// layout where `sign_split`, Params::w_sign_split) through the byte_perm table words lo / hi of
// their shift.
__device__ __forceinline__ uint4 FoldedUnitCodes(uint2 v, uint32_t lo, uint32_t hi, bool sign_split) {
  uint4 codes;
  mma::fp8::E2m1x8WordToE4m3x8Table(sign_split, v.x, lo, hi, codes.x, codes.y);
  mma::fp8::E2m1x8WordToE4m3x8Table(sign_split, v.y, lo, hi, codes.z, codes.w);
  return codes;
}

// Where the FP4 order (Fp4OrderUnit) puts word t (columns 16u + 4t..+3) of a chunk's 16-column
// unit u: 16-byte unit Fp4OrderUnit(4u + t) / 4 = 4(u % 2) + t, at byte 4·(u / 2) within it.
__host__ __device__ constexpr int Fp4OrderUnit16(int u, int t) { return 4 * (u % 2) + t; }
__host__ __device__ constexpr int Fp4OrderByteIn16(int u) { return 4 * (u / 2); }
// Whether Fp4OrderUnit permutes a chunk's 32 units and Fp4OrderUnit16 / Fp4OrderByteIn16 place
// every word where it says.
__host__ __device__ constexpr bool Fp4OrderConsistent() {
  bool seen[32] = {};
  for (int p = 0; p < 32; ++p) {
    const int unit = Fp4OrderUnit(p);
    if (unit < 0 || unit >= 32 || seen[unit]) return false;
    seen[unit] = true;
    if (4 * Fp4OrderUnit16(p / 4, p % 4) + Fp4OrderByteIn16(p / 4) / 4 != unit) return false;
  }
  return true;
}
static_assert(Fp4OrderConsistent(), "the FP4 order is a permutation, placed alike by unit and by word");

// Columns 16·unit.. of row `row` of the converted tile (FP4 order, swizzled): the stage's 16
// nibbles there (raw: 64 bytes per row, column order) through the byte_perm table words lo / hi of
// their shift, or zeros where the pass does not take their group (sign_split: FoldedUnitCodes').
__device__ __forceinline__ void StoreFoldedUnit(const uint8_t* raw, uint8_t* tile, int row, int unit, bool taken,
                                                uint32_t lo, uint32_t hi, bool sign_split) {
  uint4 codes = make_uint4(0u, 0u, 0u, 0u);
  if (taken) {
    codes = FoldedUnitCodes(*reinterpret_cast<const uint2*>(raw + row * (kChunk / 2) + unit * 8), lo, hi, sign_split);
  }
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  // SwizzledOffset(row, Fp4OrderUnit16(unit, t)) + Fp4OrderByteIn16(unit), the swizzle split:
  // (4(unit % 2) + t) ^ (row % 8) = (4(unit % 2) ^ (row & 4)) + (t ^ (row & 3)).
  const int x = row & 7;
  uint8_t* base = tile + row * kChunk + ((Fp4OrderUnit16(unit, 0) ^ (x & 4)) << 4) + Fp4OrderByteIn16(unit);
#pragma unroll
  for (int t = 0; t < 4; ++t) *reinterpret_cast<uint32_t*>(base + ((t ^ (x & 3)) << 4)) = words[t];
}

// Pass `pass` of chunk c: the stage's nibbles (`raw`) into folded e4m3 codes in `tile` (rows n0..
// of the weight; rows past p.n are zeros). Returns whether one of this thread's rows has groups
// left for a later pass.
__device__ __forceinline__ bool ConvertFp4Folded(const Params& p, const uint8_t* raw, uint8_t* tile,
                                                 const uint32_t* tables, int64_t n0, int c, int pass) {
  constexpr int kUnits = kChunk / 16;
  const int unit = static_cast<int>(threadIdx.x) % kUnits, group = unit / 2;  // 16 columns: half a group
  bool more = false;
#pragma unroll 1  // the rare later passes: registers for the callers' loops
  for (int i = 0; i < kBlockRows * kUnits / kThreads; ++i) {
    const int row = static_cast<int>(threadIdx.x) / kUnits + i * (kThreads / kUnits);
    uint32_t lo = 0u, hi = 0u;
    bool taken = true;  // rows past p.n hold zero nibbles: any table gives zeros
    if (n0 + row < p.n) {
      int e[4];
      GroupExponents(p, n0 + row, c, e);
      const cpu::FoldPass f = cpu::FoldPassOf(e, pass);
      more = more || f.more;
      // This unit's group exponent by selects (an index into e[] would put it in local memory).
      const int eg = group == 0 ? e[0] : group == 1 ? e[1] : group == 2 ? e[2] : e[3];
      taken = cpu::FoldPassTakes(f, eg);
      if (taken) {
        lo = tables[2 * (f.top - eg)];
        hi = tables[2 * (f.top - eg) + 1];
      }
    }
    StoreFoldedUnit(raw, tile, row, unit, taken, lo, hi, p.w_sign_split);
  }
  return more;
}

// Pass 0 of row `row`'s chunk c packed in a word (cpu::FirstFoldPassWord), once per (row, chunk)
// for the conversion and the row scale; rows past p.n: cpu::kFoldNoRowWord.
__device__ __forceinline__ uint32_t FoldRowInfo(const Params& p, int64_t row, int c) {
  if (row >= p.n) return cpu::kFoldNoRowWord;
  int e[4];
  GroupExponents(p, row, c, e);
  return cpu::FirstFoldPassWord(e);
}

// FoldRowInfo of row n0 + tid (tid < kBlockRows) for chunk c + 1, from the exponent word LoadStage
// queued with chunk c's stage (this thread's own copy, landed once its wait for chunk c returned).
__device__ __forceinline__ uint32_t NextFoldRowInfo(const Params& p, const uint8_t* stage_exps, int64_t n0, int tid) {
  if (n0 + tid >= p.n) return cpu::kFoldNoRowWord;
  const uint32_t word = reinterpret_cast<const uint32_t*>(stage_exps)[tid];
  int e[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) e[j] = static_cast<int>((word >> (8 * j)) & 0xffu);
  return cpu::FirstFoldPassWord(e);
}

// The row scale of pass 0 from its word: 2^top, or 1 where it takes nothing.
__device__ __forceinline__ float FoldedRowScaleOf(uint32_t info) {
  return cpu::FoldWordAny(info) ? DecodeE8m0(static_cast<uint8_t>(cpu::FoldWordTop(info))) : 1.f;
}

// Pass 0 of ConvertFp4Folded from the rows' FoldRowInfo (`info`: the block's 128 rows): the same
// codes (sign_split: Params::w_sign_split). Returns whether one of this thread's rows has groups
// left for a later pass.
__device__ __forceinline__ bool ConvertFp4FoldedFirst(const uint8_t* raw, uint8_t* tile, const uint32_t* tables,
                                                      const uint32_t* info, bool sign_split) {
  constexpr int kUnits = kChunk / 16;
  const int unit = static_cast<int>(threadIdx.x) % kUnits, group = unit / 2;  // 16 columns: half a group
  bool more = false;
#pragma unroll
  for (int i = 0; i < kBlockRows * kUnits / kThreads; ++i) {
    const int row = static_cast<int>(threadIdx.x) / kUnits + i * (kThreads / kUnits);
    const uint32_t r = info[row];
    more = more || cpu::FoldWordMore(r);
    const uint32_t shift = cpu::FoldWordShift(r, group);
    const bool taken = shift != cpu::kFoldGroupLeft;
    StoreFoldedUnit(raw, tile, row, unit, taken, taken ? tables[2 * shift] : 0u, taken ? tables[2 * shift + 1] : 0u,
                    sign_split);
  }
  return more;
}

// part += acc · (row scale · x_scale), one fused multiply-add per element of the D fragment (rows
// ra = 16·warp + g and rb = ra + 8 of the warpgroup's tile, tokens 8i + 2q and + 1; a fragment of
// kElems = tokens / 2 elements): sa for ra (elements 4i, 4i + 1), sb for rb. FP8 passes its block
// scale as both; a folded FP4 pass its rows' 2^top. The scale product is exact (x_scale is a
// power of two). Only the tile's first `tokens` token columns (a block-uniform count; rounded up to
// 8) are taken: the others of part are left as they were and must never be stored.
template <int kElems>
__device__ __forceinline__ void AddScaledRows(float (&part)[kElems], const float (&acc)[kElems], float sa, float sb,
                                              const float* xs, int q, int tokens = 2 * kElems) {
#pragma unroll
  for (int i = 0; i < kElems / 4; ++i) {
    if (8 * i >= tokens) continue;  // uniform: a decode tile of 1-8 tokens takes one of 8 (or 16)
    const float x0 = xs[8 * i + 2 * q], x1 = xs[8 * i + 2 * q + 1];
    part[4 * i + 0] = __fmaf_rn(acc[4 * i + 0], __fmul_rn(sa, x0), part[4 * i + 0]);
    part[4 * i + 1] = __fmaf_rn(acc[4 * i + 1], __fmul_rn(sa, x1), part[4 * i + 1]);
    part[4 * i + 2] = __fmaf_rn(acc[4 * i + 2], __fmul_rn(sb, x0), part[4 * i + 2]);
    part[4 * i + 3] = __fmaf_rn(acc[4 * i + 3], __fmul_rn(sb, x1), part[4 * i + 3]);
  }
}

// AddScaledRows in two halves, the first callable before the MMAs' wait (ptxas then keeps the
// loads ahead of it): ScaleProducts reads the x scales at shared address xs_addr (ld.shared: a
// generic pointer to shared memory costs a generic load a column) and writes s[e], the factor
// AddScaledRows applies to acc[e] (sa·x0, sa·x1, sb·x0, sb·x1, the same roundings);
// AddScaledProducts, after the wait, part[e] = fma(acc[e], s[e], part[e]). The same bits as
// AddScaledRows.
template <int kElems>
__device__ __forceinline__ void ScaleProducts(float (&s)[kElems], float sa, float sb, uint32_t xs_addr, int q) {
#pragma unroll
  for (int i = 0; i < kElems / 4; ++i) {
    const float x0 = __uint_as_float(LdShared32(xs_addr + 4 * (8 * i + 2 * q)));
    const float x1 = __uint_as_float(LdShared32(xs_addr + 4 * (8 * i + 2 * q + 1)));
    s[4 * i + 0] = __fmul_rn(sa, x0);
    s[4 * i + 1] = __fmul_rn(sa, x1);
    s[4 * i + 2] = __fmul_rn(sb, x0);
    s[4 * i + 3] = __fmul_rn(sb, x1);
  }
}
template <int kElems>
__device__ __forceinline__ void AddScaledProducts(float (&part)[kElems], const float (&acc)[kElems],
                                                  const float (&s)[kElems]) {
#pragma unroll
  for (int e = 0; e < kElems; ++e) part[e] = __fmaf_rn(acc[e], s[e], part[e]);
}

template <int kElems>
__device__ __forceinline__ void ZeroForWgmma(float (&acc)[kElems]) {
#pragma unroll
  for (int i = 0; i < kElems; ++i) {
    acc[i] = 0.f;
    PinRegister(acc[i]);  // the zeros are written before the fence, not moved past it
  }
}

template <int kElems>
__device__ __forceinline__ void PinAll(float (&acc)[kElems]) {
#pragma unroll
  for (int i = 0; i < kElems; ++i) PinRegister(acc[i]);
}

template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Issues acc = the chunk's four k32 steps chained from +0 with accumulation (as mma.sync adds its
// C = +0, not wgmma's scale-d = 0): A at w_addr, B at x_addr (swizzled tiles). acc is not to be
// touched until ChunkChainWait.
// On a tile of 8, 16, 64 or 128 tokens (acc of 4, 8, 32 or 64).
template <int kElems>
__device__ __forceinline__ void ChunkChainIssue(float (&acc)[kElems], uint32_t w_addr, uint32_t x_addr) {
  ZeroForWgmma(acc);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < kChunk / 32; ++kk) {
    MmaK32(acc, SwizzledDescriptor(w_addr + 32 * kk), SwizzledDescriptor(x_addr + 32 * kk));
  }
  WgmmaCommit();
}

// ChunkChainIssue's MMAs with each step's descriptors as DescriptorLow of the tile plus 2 per k32
// step (32 bytes) and DescriptorHigh(): the same descriptors (the address field never carries) in
// fewer instructions than SwizzledDescriptor of each step's address.
template <int kElems>
__device__ __forceinline__ void ChunkChainIssueLow(float (&acc)[kElems], uint32_t w_addr, uint32_t x_addr) {
  ZeroForWgmma(acc);
  const uint32_t w_lo = DescriptorLow(w_addr), x_lo = DescriptorLow(x_addr);
  const uint64_t high = static_cast<uint64_t>(DescriptorHigh()) << 32;
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < kChunk / 32; ++kk) {
    MmaK32(acc, high | (w_lo + 2 * kk), high | (x_lo + 2 * kk));
  }
  WgmmaCommit();
}

template <int kElems>
__device__ __forceinline__ void ChunkChainWait(float (&acc)[kElems]) {
  WgmmaWaitAll();
  PinAll(acc);
}

// ChunkChainIssue, complete on return.
template <int kElems>
__device__ __forceinline__ void ChunkChain(float (&acc)[kElems], uint32_t w_addr, uint32_t x_addr) {
  ChunkChainIssue(acc, w_addr, x_addr);
  ChunkChainWait(acc);
}

// A barrier of the block's first kThreads threads (its two MMA warpgroups): the whole block's
// where that is all of it (kWhole), else named barrier 1 (a warp-specialized block's producer does
// not take part).
enum class Barrier : uint8_t { kWhole, kMmaThreads };
template <Barrier B>
__device__ __forceinline__ void SyncMmaThreads() {
  if constexpr (B == Barrier::kWhole) {
    __syncthreads();
  } else {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
  }
}
// SyncMmaThreads, returning whether `pred` held on any of those threads.
template <Barrier B>
__device__ __forceinline__ bool SyncMmaThreadsOr(bool pred) {
  if constexpr (B == Barrier::kWhole) {
    return __syncthreads_or(pred);
  } else {
    uint32_t any = 0;
    asm volatile(
        "{\n"
        ".reg .pred pin, pout;\n"
        "setp.ne.u32 pin, %1, 0;\n"
        "bar.red.or.pred pout, 1, %2, pin;\n"
        "selp.u32 %0, 1, 0, pout;\n"
        "}\n"
        : "=r"(any)
        : "r"(static_cast<uint32_t>(pred)), "n"(kThreads)
        : "memory");
    return any != 0;
  }
}

// A folded FP4 chunk's passes 1, 2, ... after pass 0's scaling, while `again` (the block's choice,
// every thread or none: only where a row of the block spans more than 8 binades of group scale in
// chunk c): each rewrites `tile` after a barrier, chains its MMAs and scales them into part (rows
// ra and ra + 8). All kThreads MMA threads call it (B: their barrier). Inline, on the caller's
// registers: a call here would make ptxas serialize every wgmma of the kernel (C7510).
template <int kElems, Barrier B = Barrier::kWhole>
__device__ __forceinline__ void FoldedLaterPasses(const Params& p, const uint8_t* stage, uint8_t* tile,
                                                  const uint32_t* tables, int64_t n0, int c, uint32_t w_addr,
                                                  uint32_t x_addr, const float* xs, int q, int64_t ra, bool again,
                                                  float (&acc)[kElems], float (&part)[kElems]) {
  for (int pass = 1; again; ++pass) {
    SyncMmaThreads<B>();  // both warpgroups' MMAs have read the tile before this pass rewrites it
    const bool later = ConvertFp4Folded(p, stage, tile, tables, n0, c, pass);
    FenceProxyAsyncShared();
    again = SyncMmaThreadsOr<B>(later);
    ChunkChain(acc, w_addr, x_addr);
    AddScaledRows(part, acc, FoldedRowScale(p, ra, c, pass), FoldedRowScale(p, ra + 8, c, pass), xs, q);
  }
}

// ---- FP4 experts converted ahead of the GEMM (ExpertsLinear at prefill sizes) ------------------
//
// Where an ExpertsLinear call has many rows per expert, linear.cu's PreFoldKernel writes each FP4
// expert's pass-0 folded codes once into scratch (e4m3 [N, K], plain rows: an FP8 weight to the
// stage copies), the FirstFoldPassWord of each (row, chunk) and, per (128-row block, chunk),
// whether a row there has groups left for later passes. WgmmaBlockPreFolded loads the codes as
// FP8 weights and scales each row by its word's 2^top; a chunk with later passes loads its nibbles
// and runs FoldedLaterPasses as the FP4 kernel does. The same codes, MMAs and adds as
// WgmmaBlock<kFp4>: the same bits, without a conversion per chunk and token tile.
struct PreFolded {
  const uint32_t* words;  // [chunks][n_pad]: FirstFoldPassWord (kFoldNoRowWord past n)
  const uint8_t* more;    // [n_pad / kBlockRows][chunks]: 1 where a row of the block has a later pass
  int64_t n_pad;          // rows rounded up to kBlockRows
};

// Shared memory of WgmmaBlockPreFolded: the FP8 stages, then the byte_perm tables and one
// chunk's nibbles of the block's rows (for later passes; 64 bytes per row).
struct PreFoldedSmem {
  static constexpr int kTables = SmemLayout<Kind::kFp8>::kConverted;
  static constexpr int kRaw = kTables + 128;
  static constexpr int kBytes = kRaw + kBlockRows * kChunk / 2 + 1024;  // + base alignment
};

// Chunk c's nibbles of weight rows n0.. into raw (64 bytes per row; zeros past p.n). Plain loads:
// the rare path of a block whose rows span more than 8 binades of group scale.
__device__ __forceinline__ void LoadRawNibbles(const Params& p, uint8_t* raw, int64_t n0, int c) {
  constexpr int kUnits = kChunk / 2 / 16;  // 16-byte units per row
  for (int id = static_cast<int>(threadIdx.x); id < kBlockRows * kUnits; id += kThreads) {
    const int row = id / kUnits, unit = id % kUnits;
    const bool valid = n0 + row < p.n;
    const uint8_t* src = p.w + (valid ? n0 + row : 0) * p.w_row_bytes + c * p.w_chunk_bytes + unit * 16;
    uint32_t word[4] = {0u, 0u, 0u, 0u};
    if (valid) LoadWords(src, p.w_vec16, word);
    *reinterpret_cast<uint4*>(raw + row * (kChunk / 2) + unit * 16) = make_uint4(word[0], word[1], word[2], word[3]);
  }
}

// The FP8 weight's scale of chunk c for rows n0.. (one per chunk for all 128 rows: n0 is a multiple
// of the 128-row scale block).
__device__ __forceinline__ float Fp8BlockScale(const Params& p, int64_t n0, int c) {
  const int64_t si = (n0 / kFp8Block) * p.scale_row_stride + c;
  return p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + si) : DecodeE8m0(__ldg(p.scale + si));
}

// Stores a block's results: result(j) is D fragment element j (of a tile of kTileTokens tokens),
// element 4i + e being weight row ra (ra + 8 for e >= 2) and token t_y + 8i + 2q (+1 for odd e);
// rows at or past p.n and tokens at or past p.m are not written.
template <int kTileTokens = kTokens, class Result>
__device__ __forceinline__ void StoreBlockResult(const Params& p, int64_t ra, int64_t t_y, int q, const Result& result) {
  const int64_t rb = ra + 8;
#pragma unroll
  for (int i = 0; i < kTileTokens / 8; ++i) {
    const int64_t tok = t_y + 8 * i + 2 * q;
    if (ra < p.n && tok < p.m) p.y[tok * p.ldy + ra] = result(4 * i + 0);
    if (ra < p.n && tok + 1 < p.m) p.y[(tok + 1) * p.ldy + ra] = result(4 * i + 1);
    if (rb < p.n && tok < p.m) p.y[tok * p.ldy + rb] = result(4 * i + 2);
    if (rb < p.n && tok + 1 < p.m) p.y[(tok + 1) * p.ldy + rb] = result(4 * i + 3);
  }
}

// After chunk c's adds into part: at the end of a 512-column slice (or of the range), total = part
// for the range's first slice, else total += part; part restarts from +0. Token columns from
// `tokens` on (rounded up to 8, as AddScaledRows) are skipped.
template <int kElems>
__device__ __forceinline__ void EndChunk(float (&total)[kElems], float (&part)[kElems], int c, int c_begin,
                                         int c_end, int tokens = 2 * kElems) {
  if ((c + 1) % mma::kSliceChunks == 0 || c + 1 == c_end) {
    const bool first_slice = c < c_begin + mma::kSliceChunks;
#pragma unroll
    for (int i = 0; i < kElems; ++i) {
      if (8 * (i / 4) >= tokens) continue;
      total[i] = first_slice ? part[i] : __fadd_rn(total[i], part[i]);
      part[i] = 0.f;
    }
  }
}

// This thread's first weight row of a block at weight row n0 (D fragment rows ra and ra + 8).
__device__ __forceinline__ int64_t BlockRow(int64_t n0) {
  const int tid = static_cast<int>(threadIdx.x);
  return n0 + (tid / 128) * kRowsPerGroup + 16 * ((tid % 128) / kWarpSize) + (tid % kWarpSize) / 4;
}

// x quantized by the block itself (Linear at 1-8 rows: WgmmaLinearFusedKernel), in place of
// QuantizeRowsKernel and the codes scratch: per chunk i of the block's range (at most kMaxChunks),
// the 8 token rows' codes as a swizzled tile (1 KiB, at CodesAddress(i)) and their 8 scales (at
// Scales(i)); rows at or past p.m quantize zeros, as QuantizeRowsKernel pads. The same act_quant
// (LoadUnit, QuantizeLoaded), so the same codes and scales. It sits after SmemLayout<K>'s bytes.
struct XPanel {
  static constexpr int kTokens = 8;
  static constexpr int kMaxChunks = 8;
  static constexpr int kTileBytes = kTokens * kChunk;  // one 8-row swizzle group
  static_assert(kThreads / kWarpSize == kTokens, "warp w quantizes token row w");
  template <Kind K>
  static constexpr int Offset() {
    return (SmemLayout<K>::kRowInfo + SmemLayout<K>::kRowInfoBytes + 1023) / 1024 * 1024;
  }
  // Dynamic shared memory of a block with a panel (+ base alignment).
  template <Kind K>
  static constexpr int Bytes() {
    return Offset<K>() + kMaxChunks * (kTileBytes + kTokens * 4) + 1024;
  }

  uint8_t* base;
  __device__ __forceinline__ explicit XPanel(uint8_t* panel) : base(panel) {}
  __device__ __forceinline__ uint32_t CodesAddress(int i) const { return SharedAddress(base) + i * kTileBytes; }
  __device__ __forceinline__ float* Scales(int i) const {
    return reinterpret_cast<float*>(base + kMaxChunks * kTileBytes) + i * kTokens;
  }
  // act_quant of x's chunks [c_begin, c_end) (at most kMaxChunks) into the panel, every load issued
  // before the first amax: rows 0-7 of x, the launch's only token tile (its host holds p.m <= 8).
  // Plain stores: the caller's fence and barrier publish them to wgmma.
  template <Kind K>
  __device__ __forceinline__ void Fill(const Params& p, int c_begin, int c_end) const {
    const int row = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int chunks = c_end - c_begin;  // uniform
    float4 v[kMaxChunks];
#pragma unroll
    for (int i = 0; i < kMaxChunks; ++i) {
      const int64_t col = static_cast<int64_t>(c_begin + i) * kChunk + 4 * lane;
      if (i < chunks) v[i] = LoadUnit(p.x, p.ldx, p.m, row, col, p.x_vec);
    }
    const int unit = K == Kind::kFp4 ? Fp4OrderUnit(lane) : lane;               // the lane's 4-byte unit of the row
    const int offset = row * kChunk + (((unit >> 2) ^ row) << 4) + 4 * (unit & 3);  // SwizzledOffset, row < 8
#pragma unroll
    for (int i = 0; i < kMaxChunks; ++i) {
      if (i < chunks) {
        const QuantizedUnit u = QuantizeLoaded(v[i]);
        *reinterpret_cast<uint32_t*>(base + i * kTileBytes + offset) = u.codes;
        if (lane == 0) Scales(i)[row] = u.scale;
      }
    }
  }
};

// One block's 128 weight rows n0.. × 64 tokens over chunks [c_begin, c_end) (c_begin a multiple of
// mma::kSliceChunks): x rows t_codes.. of the codes, y rows t_y.. of p.y (rows at or past p.m
// and columns at or past p.n are not written). The order of every output:
//   FP8 weights: per chunk one k32 chain from +0 (four steps), then part = fma(acc, w_scale·x_scale, part);
//   FP4 weights (e8m0 scales): per chunk and pass (FoldPass: one pass unless a row of the
//     block spans more than 8 binades of group scale there), one k32 chain from +0 over the folded
//     codes (ConvertFp4Folded), then part = fma(acc, 2^top(row, pass)·x_scale, part). A pass that
//     takes nothing of a row adds +0 to its part (bits unchanged), so a row's bits depend on its
//     own scales only, not on the rows it shares a block with.
//   part restarts from +0 at each 512-column slice; total = P_0, total += P_1, ... in slice order,
// so a one-slice range stores that slice's P_s. All threads call it; it leaves no copies in flight
// and shared memory free after a barrier.
// WgmmaBlockTotals is all of it but the store: it leaves each thread's outputs in total (D
// fragment element j as StoreBlockResult numbers them) with no copies in flight, but other
// threads may still read shared memory. kStore (WgmmaBlock): it stores them too and ends with the
// barrier (in-line: the same code as before the split). kPanel (8-token tiles): x comes from the
// block's XPanel, which it fills after queueing the first weight stages, not the codes scratch.
template <Kind K, int kTok, bool kPanel = false, bool kStore = false>
__device__ __forceinline__ void WgmmaBlockTotals(const Params& p, const GemmArgs& a, int64_t n0, int64_t t_codes,
                                                 int64_t t_y, int c_begin, int c_end, uint8_t* smem,
                                                 float (&total)[kTok / 2]) {
  static_assert(K == Kind::kFp8 || K == Kind::kFp4, "FP8 or FP4 weights");
  static_assert(kTok == 8 || kTok == 16 || kTok == kTokens, "8-, 16- or 64-token tiles");
  static_assert(!kPanel || kTok == XPanel::kTokens, "the panel holds 8 token rows");
  constexpr int kElems = kTok / 2;
  using L = SmemLayout<K>;
  const int tid = threadIdx.x;
  const int group = tid / 128;  // warpgroup: weight rows 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;  // the D fragment's row group and column pair
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kTok), p.m - t_y));  // valid token rows of the tile
  const int64_t ra = n0 + group * kRowsPerGroup + 16 * warp + g;  // this thread's weight rows: ra, ra + 8
  const StageCopies<K> copies(p, a, n0, t_codes, !kPanel);
  uint32_t* row_infos = reinterpret_cast<uint32_t*>(smem + L::kRowInfo);  // FP4: [2][kBlockRows]
  if constexpr (K == Kind::kFp4) {
    // Read after the chunk loop's first barrier; the caller's previous block ended with one.
    if (tid < 18) reinterpret_cast<uint32_t*>(smem + L::kTables)[tid] = kFoldedTables[tid / 2][tid % 2];
    if (tid < kBlockRows && c_begin < c_end) row_infos[tid] = FoldRowInfo(p, n0 + tid, c_begin);
  }

  // FP8: chunk c's weight block scale, loaded an iteration ahead.
  float block_scale = 0.f;
  if constexpr (K == Kind::kFp8) {
    if (c_begin < c_end) block_scale = Fp8BlockScale(p, n0, c_begin);
  }
  // acc: one chunk's k32 chain; part: the current 512-column slice; total: over slices.
  float acc[kElems], part[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) acc[i] = part[i] = total[i] = 0.f;

#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) {
    if (c_begin + s < c_end) {
      LoadStage<K, !kPanel>(p, a, copies, smem + s * L::kStage, n0, t_codes, tokens, c_begin + s);
    }
    CpAsyncCommit();
  }
  const XPanel panel(smem + XPanel::Offset<K>());
  if constexpr (kPanel) panel.Fill<K>(p, c_begin, c_end);  // the loop's first barrier publishes it
  for (int c = c_begin; c < c_end; ++c) {
    CpAsyncWait<L::kStages - 2>();  // chunk c's group has landed (this thread's copies)
    FenceProxyAsyncShared();
    __syncthreads();  // everyone's copies of chunk c; everyone done with stage (c - 1) % L::kStages
    {
      const int next = c + L::kStages - 1;
      if (next < c_end) {
        LoadStage<K, !kPanel>(p, a, copies, smem + ((next - c_begin) % L::kStages) * L::kStage, n0, t_codes, tokens,
                              next);
      }
      CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
    }
    uint8_t* stage = smem + ((c - c_begin) % L::kStages) * L::kStage;
    const float* xs = kPanel ? panel.Scales(c - c_begin) : reinterpret_cast<const float*>(stage + L::kXs);
    const uint32_t x_addr = kPanel ? panel.CodesAddress(c - c_begin)
                                   : static_cast<uint32_t>(__cvta_generic_to_shared(stage + L::kX));
    if constexpr (K == Kind::kFp8) {
      const uint32_t w_addr = static_cast<uint32_t>(__cvta_generic_to_shared(stage + group * kRowsPerGroup * kChunk));
      const float sw = block_scale;
      if (c + 1 < c_end) block_scale = Fp8BlockScale(p, n0, c + 1);  // in flight during the MMAs
      ChunkChain(acc, w_addr, x_addr);
      AddScaledRows(part, acc, sw, sw, xs, q, tokens);
    } else {  // FP4, e8m0 scales folded into the codes
      uint8_t* tile = smem + L::kConverted;
      const uint32_t w_addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile + group * kRowsPerGroup * kChunk));
      const uint32_t* tables = reinterpret_cast<const uint32_t*>(smem + L::kTables);
      const uint32_t* info = row_infos + ((c - c_begin) % 2) * kBlockRows;
      const bool more = ConvertFp4FoldedFirst(stage, tile, tables, info, p.w_sign_split);
      FenceProxyAsyncShared();
      const bool again = __syncthreads_or(more);  // the converted tile is complete
      ChunkChainIssue(acc, w_addr, x_addr);
      // The next chunk's row infos while the MMAs run, into the slot chunk c - 1 used: every
      // thread's last read of it came before this iteration's first barrier.
      if (tid < kBlockRows && c + 1 < c_end) {
        row_infos[((c + 1 - c_begin) % 2) * kBlockRows + tid] = NextFoldRowInfo(p, stage + L::kExps, n0, tid);
      }
      const int local_a = static_cast<int>(ra - n0);
      const float sa = FoldedRowScaleOf(info[local_a]), sb = FoldedRowScaleOf(info[local_a + 8]);
      ChunkChainWait(acc);
      AddScaledRows(part, acc, sa, sb, xs, q, tokens);
      FoldedLaterPasses(p, stage, tile, tables, n0, c, w_addr, x_addr, xs, q, ra, again, acc, part);
    }
    EndChunk(total, part, c, c_begin, c_end, tokens);
  }
  CpAsyncWaitAll();
  if constexpr (kStore) {
    StoreBlockResult<kTok>(p, ra, t_y, q, [&](int j) { return total[j]; });
    __syncthreads();  // shared memory free for the caller's next block
  }
}

template <Kind K, int kTok = kTokens>
__device__ __forceinline__ void WgmmaBlock(const Params& p, const GemmArgs& a, int64_t n0, int64_t t_codes,
                                           int64_t t_y, int c_begin, int c_end, uint8_t* smem) {
  float total[kTok / 2];
  WgmmaBlockTotals<K, kTok, false, true>(p, a, n0, t_codes, t_y, c_begin, c_end, smem, total);
}

// WgmmaBlock<kFp4>'s products and order for an FP4 expert pre-folded by linear.cu's PreFoldKernel:
// p's weight is the expert's codes (an FP8 weight of row stride K), pf the fold words and
// later-pass flags, nibbles() the expert's FP4 weight as Params (built only for a chunk with later
// passes, so that it holds no registers in the loop). Pipelined over two accumulators: chunk c's
// MMAs are issued before chunk c - 1 is scaled into part (wgmma.wait_group 1), so the tensor cores
// work while the block scales; a chunk's later passes, and the last chunk, wait for everything.
// Stages: chunk c + 2 is loaded into the stage chunk c - 2 used (its MMAs completed before this
// iteration's barrier), two chunks ahead instead of WgmmaBlock's three. Each output takes the same
// adds in the same order as WgmmaBlock<kFp4> on the nibbles: the same bits.
template <int kTok, class Nibbles>
__device__ __forceinline__ void WgmmaBlockPreFolded(const Params& p, const GemmArgs& a, int64_t n0, int64_t t_codes,
                                                    int64_t t_y, int c_begin, int c_end, uint8_t* smem,
                                                    const PreFolded& pf, const Nibbles& nibbles) {
  using L = SmemLayout<Kind::kFp8>;
  constexpr int kAhead = L::kStages - 2;  // chunks in flight ahead of the one being issued
  static_assert(kAhead == 2, "CpAsyncWait<kAhead - 1> below");
  static_assert(kTok == 8 || kTok == 16 || kTok == kTokens, "8-, 16- or 64-token tiles");
  constexpr int kElems = kTok / 2;
  const int tid = threadIdx.x;
  const int group = tid / 128;
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int tokens = static_cast<int>(min(static_cast<int64_t>(kTok), p.m - t_y));
  const int64_t ra = n0 + group * kRowsPerGroup + 16 * warp + g;
  const StageCopies<Kind::kFp8> copies(p, a, n0, t_codes);
  const uint32_t* tables = reinterpret_cast<const uint32_t*>(smem + PreFoldedSmem::kTables);
  // Read by later passes only, after at least one barrier (the caller's previous block ended with one).
  if (tid < 18) reinterpret_cast<uint32_t*>(smem + PreFoldedSmem::kTables)[tid] = kFoldedTables[tid / 2][tid % 2];
  const int64_t chunks = p.k / kChunk;
  const uint8_t* more = pf.more + (n0 / kBlockRows) * chunks;

  float acc0[kElems], acc1[kElems], part[kElems], total[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) acc0[i] = acc1[i] = part[i] = total[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (c_begin + s < c_end) {
      LoadStage<Kind::kFp8>(p, a, copies, smem + s * L::kStage, n0, t_codes, tokens, c_begin + s);
    }
    CpAsyncCommit();
  }
  auto stage_of = [&](int c) { return smem + ((c - c_begin) % L::kStages) * L::kStage; };
  auto w_addr_of = [&](int c) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + group * kRowsPerGroup * kChunk));
  };
  auto x_addr_of = [&](int c) { return static_cast<uint32_t>(__cvta_generic_to_shared(stage_of(c) + L::kX)); };
  // Chunk c's MMAs complete in `done`: its scaling, later passes and slice end.
  auto finish = [&](int c, float (&done)[kElems], float sa, float sb, bool again) {
    const float* xs = reinterpret_cast<const float*>(stage_of(c) + L::kXs);
    AddScaledRows(part, done, sa, sb, xs, q, tokens);
    if (again) {  // uniform over the block
      const Params fp4 = nibbles();
      uint8_t* raw = smem + PreFoldedSmem::kRaw;
      LoadRawNibbles(fp4, raw, n0, c);  // FoldedLaterPasses' first barrier publishes it
      FoldedLaterPasses(fp4, raw, stage_of(c), tables, n0, c, w_addr_of(c), x_addr_of(c), xs, q, ra, true, done,
                        part);
    }
    EndChunk(total, part, c, c_begin, c_end, tokens);
  };
  // Chunk c: wait for its copies, queue chunk c + kAhead's, issue its MMAs into cur; returns its
  // row scales and later-pass flag (the barrier's OR: uniform, as ptxas must see it).
  struct Issued {
    float sa, sb;
    bool again;
  };
  auto issue = [&](int c, float (&cur)[kElems]) {
    const bool flag = __ldg(more + c) != 0;
    CpAsyncWait<kAhead - 1>();  // chunk c's group has landed (this thread's copies)
    FenceProxyAsyncShared();
    // Everyone's copies of chunk c; chunk c - 2's MMAs and scaling done everywhere.
    const bool again = __syncthreads_or(flag);
    if (c + kAhead < c_end) {
      LoadStage<Kind::kFp8>(p, a, copies, stage_of(c + kAhead), n0, t_codes, tokens, c + kAhead);
    }
    CpAsyncCommit();  // possibly empty: keeps the group count per iteration fixed
    ChunkChainIssue(cur, w_addr_of(c), x_addr_of(c));
    const uint32_t* words = pf.words + c * pf.n_pad;
    return Issued{FoldedRowScaleOf(__ldg(words + ra)), FoldedRowScaleOf(__ldg(words + ra + 8)), again};
  };
  // Chunk c into cur while chunk c - 1 (in prev, issued as `before`) completes and is finished.
  auto step = [&](int c, float (&cur)[kElems], float (&prev)[kElems], const Issued& before) {
    const Issued now = issue(c, cur);
    WgmmaWait<1>();  // chunk c - 1's group; c's stays in flight
    PinAll(prev);
    finish(c - 1, prev, before.sa, before.sb, before.again);
    return now;
  };
  // Peeled so that no wgmma wait sits in a branch: chunk c_begin, then pairs, then the last.
  Issued last = issue(c_begin, acc0);
  int c = c_begin + 1;
  for (; c + 1 < c_end; c += 2) {
    last = step(c, acc1, acc0, last);
    last = step(c + 1, acc0, acc1, last);
  }
  if (c < c_end) {  // an even chunk count: the last chunk goes into acc1
    last = step(c, acc1, acc0, last);
    ChunkChainWait(acc1);
    finish(c, acc1, last.sa, last.sb, last.again);
  } else {
    ChunkChainWait(acc0);
    finish(c - 1, acc0, last.sa, last.sb, last.again);
  }
  CpAsyncWaitAll();
  StoreBlockResult<kTok>(p, ra, t_y, q, [&](int j) { return total[j]; });
  __syncthreads();  // shared memory free for the caller's next block
}

__device__ __forceinline__ uint8_t* AlignedSmem(uint8_t* raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
}

// A sliced block of tile (blockIdx.x, blockIdx.y) has stored its P_z; the tile's last block to
// arrive (of gridDim.z, counted in arrivals[blockIdx.y · gridDim.x + blockIdx.x], zero before
// the launch) adds the tile's P_0 + P_1 + ... left to right into p.y, as SumSlicesKernel does:
// the same bits. The partials are read from L2 (__ldcg): other SMs wrote them. With `reset` the
// last block sets the count back to 0 (counts that no launch before zeroes: TakeArrivals).
template <int kTok>
__device__ __forceinline__ void SumSlicesInLastBlock(const Params& p, const float* partials, int* arrivals,
                                                     int64_t n0, int64_t t0, bool reset = false) {
  __shared__ int is_last;
  const int tile = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
  __threadfence();  // this thread's stores of P_z, before the block's arrival
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(arrivals + tile, 1) == static_cast<int>(gridDim.z) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // the other blocks' partials, seen through their arrivals
  const int64_t plane = p.m * p.n;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kTok), p.m - t0));
  const int cols = static_cast<int>(min(static_cast<int64_t>(kBlockRows), p.n - n0));
  const int slices = static_cast<int>(gridDim.z);
  constexpr int kLoads = 16;  // slices' loads in flight before their adds
  for (int e = threadIdx.x; e < rows * kBlockRows; e += blockDim.x) {
    const int r = e / kBlockRows, c = e % kBlockRows;
    if (c >= cols) continue;
    const int64_t i = (t0 + r) * p.n + n0 + c;
    float total = 0.f;
    for (int base = 0; base < slices; base += kLoads) {
      float v[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        if (base + j < slices) v[j] = __ldcg(partials + (base + j) * plane + i);
      }
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        if (base + j < slices) total = base + j == 0 ? v[j] : __fadd_rn(total, v[j]);
      }
    }
    p.y[(t0 + r) * p.ldy + n0 + c] = total;
  }
  if (reset && threadIdx.x == 0) arrivals[tile] = 0;  // every block of the tile has arrived
}

// What thread threadIdx.x of a WgmmaLinearKernel block asks L2 for before its PDL wait: FP8 weight
// row n0 + threadIdx.x (threadIdx.x < kBlockRows, the row < n) over the block's chunks (its slice's
// with gridDim.z > 1, else all); nothing past one token tile (gridDim.y > 1: the tiles' blocks
// would ask for the same bytes), for other kinds, or without p.prefetch_w.
template <Kind K>
__device__ __forceinline__ L2Range WgmmaBlockRowsPrefetch(const Params& p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kBlockRows + threadIdx.x;
  if (K != Kind::kFp8 || !p.prefetch_w || gridDim.y != 1 || threadIdx.x >= kBlockRows || row >= p.n) return {};
  const int64_t chunks = p.k / kChunk;
  const int64_t c0 = gridDim.z == 1 ? 0 : static_cast<int64_t>(blockIdx.z) * mma::kSliceChunks;
  const int64_t c_end = gridDim.z == 1 ? chunks : min(chunks, c0 + mma::kSliceChunks);
  return {p.w + row * p.w_row_bytes + c0 * kChunk, (c_end - c0) * kChunk};
}

// Linear: grid (ceil(n / 128), m_pad / 64, slices); kThreads threads, SmemLayout<K>::kBytes of
// dynamic shared memory. slices == 1: each block takes all of K and stores y. Otherwise block z
// takes 512-column slice z and stores its partial sum P_z at partials + z·m·n (row stride n), and
// SumSlicesKernel adds them in slice order (arrivals null), or each tile's last block does
// (SumSlicesInLastBlock): the same adds as one block's, so the same bits.
// kTok = 8 (products of at most 8 rows: grid (ceil(n / 128), 1, slices)) runs m64n8k32 on the
// same codes: each output column the same dot product, so the same bits.
template <Kind K, int kTok = kTokens>
__global__ void __launch_bounds__(kThreads, K == Kind::kFp8 ? 2 : 1)
    WgmmaLinearKernel(const Params p, const GemmArgs a, float* partials, int* arrivals) {
  PdlPrologue(WgmmaBlockRowsPrefetch<K>(p));
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  extern __shared__ uint8_t smem_raw[];
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTok, n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int chunks = static_cast<int>(p.k / kChunk);
  if (gridDim.z == 1) {
    WgmmaBlock<K, kTok>(p, a, n0, t0, t0, 0, chunks, AlignedSmem(smem_raw));
  } else {
    Params slice = p;
    slice.y = partials + static_cast<int64_t>(blockIdx.z) * p.m * p.n;
    slice.ldy = p.n;
    const int c0 = static_cast<int>(blockIdx.z) * mma::kSliceChunks;
    WgmmaBlock<K, kTok>(slice, a, n0, t0, t0, c0, min(chunks, c0 + mma::kSliceChunks), AlignedSmem(smem_raw));
    if constexpr (kTok == 8) {  // the host passes arrivals at 8-token tiles only
      if (arrivals != nullptr) SumSlicesInLastBlock<kTok>(p, partials, arrivals, n0, t0);
    }
  }
#endif
}

// ---- thread-block clusters (PTX) ----------------------------------------------------------------

// Every thread of every block of the cluster arrives, then waits: this block's shared-memory
// writes before it are visible to the cluster's reads after it (release / acquire).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
// A float at shared address `addr` of the cluster's block `rank` (addr: this block's address of
// the same variable; every block of a kernel lays its shared memory out alike).
__device__ __forceinline__ float LdClusterF32(uint32_t addr, int rank) {
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Linear at decode sizes in one launch (DEEPINFER_LINEAR_FUSED): WgmmaLinearKernel's blocks,
// products and order (the same bits as it with SumSlicesKernel), with
//   - kTok = 8 (1-8 rows, grid y = 1): x quantized by each block into its XPanel instead of
//     QuantizeRowsKernel's scratch (a block's range: at most XPanel::kMaxChunks chunks; `a` unused);
//     kTok = 64: the codes scratch as WgmmaLinearKernel reads it;
//   - slices > 1 (gridDim.z, K split in 512-column slices): launched in clusters of (1, 1, slices),
//     so block z of a cluster (its rank) holds slice z. Each block leaves its P_z in its own shared
//     memory; after a cluster barrier each block adds a share of the tile's outputs as
//     SumSlicesKernel does, P_0 + P_1 + ... left to right, reading the cluster's shared memory,
//     and stores y. No partials in global memory and no second launch. Or, at kTok = 8 with
//     `arrivals` (launched without clusters, DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK): each block
//     stores P_z at partials + z·m·n and the tile's last block adds them (SumSlicesInLastBlock,
//     resetting its count).
// grid (ceil(n / 128), ceil(m / kTok), slices); kThreads threads; XPanel::Bytes<K>() (kTok 8) or
// SmemLayout<K>::kBytes (kTok 64) of dynamic shared memory; slices <= kMaxClusterSlices.
constexpr int kMaxClusterSlices = 16;
template <Kind K, int kTok>
__global__ void __launch_bounds__(kThreads, K == Kind::kFp8 ? 2 : 1)
    WgmmaLinearFusedKernel(const Params p, const GemmArgs a, float* partials, int* arrivals) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a only; the host never picks this path elsewhere (DeviceHasWgmma)
#else
  static_assert(kTok == XPanel::kTokens || kTok == kTokens, "8-token tiles with a panel, 64 from scratch");
  constexpr bool kPanel = kTok == XPanel::kTokens;
  static_assert(kTok * kBlockRows * 4 <= SmemLayout<K>::kConverted, "a slice's partial tile fits the stages");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = AlignedSmem(smem_raw);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTok, n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int chunks = static_cast<int>(p.k / kChunk);
  const int slices = static_cast<int>(gridDim.z);  // uniform
  const int slice = static_cast<int>(blockIdx.z);
  const int c_begin = slices == 1 ? 0 : slice * mma::kSliceChunks;
  const int c_end = slices == 1 ? chunks : min(chunks, c_begin + mma::kSliceChunks);
  float total[kTok / 2];
  WgmmaBlockTotals<K, kTok, kPanel>(p, a, n0, t0, t0, c_begin, c_end, smem, total);
  const int q = tid % 4;
  const int64_t ra = BlockRow(n0);
  if (slices == 1) {
    StoreBlockResult<kTok>(p, ra, t0, q, [&](int j) { return total[j]; });
    return;
  }
  if constexpr (kPanel) {
    if (arrivals != nullptr) {  // uniform: launched without clusters; P_z through the partials
      Params part = p;
      part.y = partials + static_cast<int64_t>(slice) * p.m * p.n;
      part.ldy = p.n;
      StoreBlockResult<kTok>(part, ra, t0, q, [&](int j) { return total[j]; });
      SumSlicesInLastBlock<kTok>(p, partials, arrivals, n0, t0, true);
      return;
    }
  }
  // P_z as [kTok tokens][kBlockRows rows] f32 over the stages, which every thread is done with.
  __syncthreads();
  float* mine = reinterpret_cast<float*>(smem);
  const int r = static_cast<int>(ra - n0);
#pragma unroll
  for (int j = 0; j < kTok / 2; ++j) {
    const int tok = 8 * (j / 4) + 2 * q + (j % 2), row = r + 8 * ((j % 4) / 2);  // StoreBlockResult's element j
    mine[tok * kBlockRows + row] = total[j];
  }
  ClusterSync();
  // This block's share of the tile's stored outputs (token-major, rows fastest: coalesced stores),
  // at most kMaxSums a thread (slices >= 2), summed into registers; the stores follow the closing
  // barrier, so that every read of a peer's shared memory has completed before the peer may leave.
  const int outputs = static_cast<int>(min(static_cast<int64_t>(kTok), p.m - t0)) * kBlockRows;
  const int share = (outputs + slices - 1) / slices;
  const int begin = slice * share, end = min(outputs, begin + share);
  constexpr int kMaxSums = (kTok * kBlockRows / 2 + kThreads - 1) / kThreads;
  const uint32_t mine_addr = SharedAddress(mine);
  float sums[kMaxSums];
#pragma unroll
  for (int k = 0; k < kMaxSums; ++k) {
    const int o = begin + tid + k * kThreads;
    if (o >= end || n0 + o % kBlockRows >= p.n) continue;  // not stored: not read
    float v[kMaxClusterSlices];
#pragma unroll
    for (int s = 0; s < kMaxClusterSlices; ++s) {
      if (s < slices) v[s] = LdClusterF32(mine_addr + 4 * o, s);
    }
    sums[k] = v[0];
#pragma unroll
    for (int s = 1; s < kMaxClusterSlices; ++s) {
      if (s < slices) sums[k] = __fadd_rn(sums[k], v[s]);
    }
  }
  ClusterSyncBeforeExit();  // no block leaves (its shared memory with it) while another still reads it
#pragma unroll
  for (int k = 0; k < kMaxSums; ++k) {
    const int o = begin + tid + k * kThreads;
    const int64_t row = n0 + o % kBlockRows;
    if (o < end && row < p.n) p.y[(t0 + o / kBlockRows) * p.ldy + row] = sums[k];
  }
#endif
}

// y[r, o] = P_0 + P_1 + ... + P_{slices-1} (left to right, round to nearest) for r < m, o < n;
// P_s at partials + s·m·n, row stride n.
__global__ void __launch_bounds__(256) SumSlicesKernel(const float* __restrict__ partials, int slices, int64_t m,
                                                       int64_t n, float* __restrict__ y, int64_t ldy) {
  PdlPrologue(PdlTriggerFirst{});
  const int64_t plane = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < plane;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float total = partials[i];
    for (int s = 1; s < slices; ++s) total = __fadd_rn(total, partials[s * plane + i]);
    y[(i / n) * ldy + i % n] = total;
  }
}

// Scratch of the wgmma path for m rows of K columns: codes [m_pad, K], then (256-byte aligned)
// the scales [K / 128, m_pad]; Linear's sliced launch adds (256-byte aligned) the partial sums
// [slices, m, n] f32 (WgmmaLinearLayout in linear.cu).
inline int64_t CodeBytes(int64_t m_pad, int64_t k) { return CeilDiv(m_pad * k, 256) * 256; }
inline size_t ScratchBytesForPaddedRows(int64_t m_pad, int64_t k) {
  return static_cast<size_t>(CodeBytes(m_pad, k) + (k / kChunk) * m_pad * 4);
}
inline size_t ScratchBytes(int64_t m, int64_t k) { return ScratchBytesForPaddedRows(PaddedRows(m), k); }
// ExpertsLinear's tiles start at any row and read 64 rows of codes from there.
inline int64_t ExpertsPaddedRows(int64_t rows_bound) { return PaddedRows(rows_bound) + kTokens; }
inline GemmArgs ScratchLayout(void* scratch, int64_t m_pad, int64_t k) {
  uint8_t* base = static_cast<uint8_t*>(scratch);
  return GemmArgs{base, reinterpret_cast<const float*>(base + CodeBytes(m_pad, k)), m_pad};
}

// DEEPINFER_WGMMA=0 in the environment turns the path off (the mma.sync kernels run, with the same
// bits): the benchmarks' side-by-side of the two (scripts/gpu-bench.sh). Read once.
inline bool EnvIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}
inline bool WgmmaTurnedOff() {
  static const bool off = EnvIs("DEEPINFER_WGMMA", "0");
  return off;
}

// Whether the current device runs this build's wgmma kernels: sm_90a code built
// (DEEPINFER_HAS_SM90A), compute capability 9.0 (asked once per device), not turned off.
inline bool DeviceHasWgmma() {
#if !defined(DEEPINFER_HAS_SM90A)
  return false;  // no sm_90a code in this build: the kernels would only trap
#endif
  if (WgmmaTurnedOff()) return false;
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

// The weights this path takes: FP8 (either scale dtype) and FP4 with e8m0 scales.
inline bool WeightUsable(Kind kind, bool scale_f32) {
  return kind == Kind::kFp8 || (kind == Kind::kFp4 && !scale_f32);
}

// ExpertsLinear's FP8-input tiles: WeightUsable (any row alignment), K % 128 == 0, codes scratch
// for ExpertsPaddedRows(rows_bound) rows, 256-byte aligned.
inline bool ExpertsUsable(Kind kind, bool scale_f32, int64_t k, const void* codes, size_t codes_bytes,
                          int64_t rows_bound) {
  return WeightUsable(kind, scale_f32) && k > 0 && k % kChunk == 0 && codes != nullptr &&
         Aligned(codes, 0, 256) &&
         codes_bytes >= ScratchBytesForPaddedRows(ExpertsPaddedRows(rows_bound), k) && DeviceHasWgmma();
}

// Linear's FP8-input products on warpgroup MMAs: WeightUsable (rows of any alignment, as the
// experts': byte loads where not 16-byte aligned), one group, K % 128 == 0, scratch of `needed`
// bytes (WgmmaLinearLayout), 256-byte aligned. Any M.
inline bool Usable(const Params& p, Kind kind, int64_t groups, size_t needed) {
  return WeightUsable(kind, p.scale_f32) && groups == 1 && p.k > 0 && p.k % kChunk == 0 &&
         p.scratch != nullptr && Aligned(p.scratch, 0, 256) && p.scratch_bytes >= needed && DeviceHasWgmma();
}

}  // namespace wgmma
