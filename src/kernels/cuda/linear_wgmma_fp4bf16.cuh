// The FP4 experts' products on BF16 warpgroup MMAs with every scale folded into the operands
// (`DEEPINFER_FP4_BF16`, off by default; docs/performance.md, version 57). Included by linear.cu after
// linear_wgmma_rs.cuh.
//
// An FP4 weight value e2m1 · 2^(e - 127) (e its group's e8m0 byte) and an act_quant'ed x value
// e4m3 · 2^s (ue8m0 scales) are both exact in BF16 (8 significant bits, f32's exponent range, its
// subnormals down to 2^-133), and their product exact in f32. So where the group bytes are at most
// kMaxGroupByte, each output is one chain of k16 MMAs over all of K from +0, with no per-chunk
// scale-adds: the sum of the exact products in wgmma's f32 accumulation, the same values cpu::Linear
// sums (a different order, and so different bits from the FP8-input path's, which rounds a part per
// 128 columns).
//
// The BF16 order of a 128-column chunk (x is written in it, the weight's nibbles stay as stored): A
// fragment thread q of k16 step S = 2s + h holds, for each of its rows, the group q's columns
// 32q + 8s + {2h, 2h + 4} (registers a0 for row g and a1 for row g + 8, the first column in the low
// half) and 32q + 8s + {2h + 1, 2h + 5} (a2 and a3). So nibble word s of the row's group q (columns 8s .. 8s + 7)
// gives steps 2s and 2s + 1, and x's column c of the chunk sits at Fp4Bf16Position(c).
#pragma once

#include <cuda_bf16.h>

namespace wgmma {
namespace fp4bf16 {

// The largest group byte the one-multiply conversion takes exactly (its multiplier 2^(e - 1) must be
// a BF16 normal): scales up to 2, far above any trained FP4 expert's.
constexpr int kMaxGroupByte = 128;

// Where column c (0-127) of a chunk sits in the BF16 order: k16 step S at positions 16S .. 16S + 15.
__host__ __device__ constexpr int Fp4Bf16Position(int c) {
  const int q = c / 32, s = (c % 32) / 8, i = c % 8;
  const int h = (i % 4) / 2, pair = i % 2, high = i / 4;
  return 16 * (2 * s + h) + 2 * q + 8 * pair + high;
}
__host__ __device__ constexpr bool Fp4Bf16OrderIsAPermutation() {
  bool seen[128] = {};
  for (int c = 0; c < 128; ++c) {
    const int p = Fp4Bf16Position(c);
    if (p < 0 || p >= 128 || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}
static_assert(Fp4Bf16OrderIsAPermutation(), "the BF16 order permutes a chunk's columns");
static_assert(Fp4Bf16Position(0) == 0 && Fp4Bf16Position(4) == 1 && Fp4Bf16Position(1) == 8 &&
                  Fp4Bf16Position(2) == 16 && Fp4Bf16Position(32) == 2 && Fp4Bf16Position(127) == 127,
              "thread 0's step 0 holds columns 0, 4 (a0) and 1, 5 (a2); step 1 columns 2, 6 and 3, 7");

// The BF16 pair multiplier of group byte e (0 <= e <= kMaxGroupByte): 2^(e - 1) in both halves.
__device__ __forceinline__ uint32_t GroupMultiplier(uint32_t e) {
  const uint32_t half = (e + 126u) << 7;
  return half | (half << 16);
}

// BF16 pair `pair` (0-3) of nibble word w (nibble i = bits 4i .. 4i + 3, sign in the top bit): the low
// half nibble `pair`, the high half nibble pair + 4, each e2m1 · 2^(e - 127) for the multiplier of e.
// The nibble's magnitude bits placed at BF16 bits 6-8 (exponent bits 0-1 and the mantissa's top bit)
// with its sign at bit 15 read as ±e2m1 · 2^-126 (a subnormal for e2m1's own subnormal 0.5); the
// multiply by 2^(e - 1) is exact.
template <int kPair>
__device__ __forceinline__ uint32_t PairOfWord(uint32_t w, uint32_t multiplier) {
  constexpr int kMagShift = 6 - 4 * kPair, kSignShift = 12 - 4 * kPair;
  const uint32_t mag = (kMagShift >= 0 ? w << kMagShift : w >> -kMagShift) & 0x01c001c0u;
  const uint32_t placed = mag | ((w << kSignShift) & 0x80008000u);
  uint32_t out;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(placed), "r"(multiplier));
  return out;
}

// PairOfWord's BF16 pair from a word in the sign-split layout (cpu::SignSplitWord: the signs of
// nibbles 0-3 at bits 7, 15, 23, 31, those of 4-7 at bits 3, 11, 19, 27; `shifted` = w << 4 puts
// the latter at bits 7, 15, ...): one byte permute brings nibble kPair's sign byte to byte 1 and
// nibble kPair + 4's to byte 3, where the stored order's shift brings them. The same pair.
template <int kPair>
__device__ __forceinline__ uint32_t PairOfSignSplitWord(uint32_t w, uint32_t shifted, uint32_t multiplier) {
  constexpr int kMagShift = 6 - 4 * kPair;
  constexpr uint32_t kSelector = (static_cast<uint32_t>(kPair) << 4) | (static_cast<uint32_t>(4 + kPair) << 12);
  const uint32_t mag = (kMagShift >= 0 ? w << kMagShift : w >> -kMagShift) & 0x01c001c0u;
  const uint32_t placed = mag | (__byte_perm(w, shifted, kSelector) & 0x80008000u);
  uint32_t out;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(placed), "r"(multiplier));
  return out;
}

// Steps 2s and 2s + 1's registers of one row (lo = 0: row g, a0 / a2; 1: row g + 8, a1 / a3) from
// its group's nibble word s: frag[0..3] step 2s's {a0, a1, a2, a3}, frag[4..7] step 2s + 1's.
// kSignSplit: the word in the sign-split layout (Params::w_sign_split); the same registers.
template <bool kSignSplit = false>
__device__ __forceinline__ void WordToSteps(uint32_t w, uint32_t multiplier, uint32_t* frag, int lo) {
  if constexpr (kSignSplit) {
    const uint32_t shifted = w << 4;
    frag[0 + lo] = PairOfSignSplitWord<0>(w, shifted, multiplier);
    frag[2 + lo] = PairOfSignSplitWord<1>(w, shifted, multiplier);
    frag[4 + lo] = PairOfSignSplitWord<2>(w, shifted, multiplier);
    frag[6 + lo] = PairOfSignSplitWord<3>(w, shifted, multiplier);
  } else {
    frag[0 + lo] = PairOfWord<0>(w, multiplier);
    frag[2 + lo] = PairOfWord<1>(w, multiplier);
    frag[4 + lo] = PairOfWord<2>(w, multiplier);
    frag[6 + lo] = PairOfWord<3>(w, multiplier);
  }
}

// d (+)= A·B for one k16 step, m64nNk16 (N = kTok: 104 or 208), bf16 × bf16 → f32, A from registers
// (this thread's fragment), B (x, K-major, 128-byte swizzle) from shared memory by descriptor words;
// scale_d 0 starts from zero.
template <int kTok>
__device__ __forceinline__ void MmaBf16Rs(float (&d)[kTok / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t desc_lo, uint32_t desc_hi, uint32_t scale_d);
template <>
__device__ __forceinline__ void MmaBf16Rs<104>(float (&d)[52], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t desc_lo, uint32_t desc_hi, uint32_t scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 desc;\n"
      "mov.b64 desc, {%56, %57};\n"
      "setp.ne.b32 p, %58, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n104k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35,"
      " %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51},"
      " {%52, %53, %54, %55}, desc, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(desc_lo), "r"(desc_hi), "r"(scale_d));
}
template <>
__device__ __forceinline__ void MmaBf16Rs<208>(float (&d)[104], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t desc_lo, uint32_t desc_hi, uint32_t scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 desc;\n"
      "mov.b64 desc, {%108, %109};\n"
      "setp.ne.b32 p, %110, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n208k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17,"
      " %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35,"
      " %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53,"
      " %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71,"
      " %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89,"
      " %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103},"
      " {%104, %105, %106, %107}, desc, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(desc_lo), "r"(desc_hi), "r"(scale_d));
}

// m64n104k16 on the first 52 accumulators of a 208-token tile's (its tokens 0-103, StoreBlockResult's
// elements 0-51): the narrow tiles of ExpertsFp4Bf16Kernel<208>, whose rows all sit there. Each output
// column is the same chain of k16 steps as at n208 (the bits of the 104-token kernel's tiles);
// elements 52-103 are left as they are.
template <int kElems>
__device__ __forceinline__ void MmaBf16RsNarrow(float (&d)[kElems], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t desc_lo, uint32_t desc_hi, uint32_t scale_d) {
  static_assert(kElems >= 52, "a tile of at least 104 tokens");
  MmaBf16Rs<104>(*reinterpret_cast<float(*)[52]>(&d[0]), a0, a1, a2, a3, desc_lo, desc_hi, scale_d);
}

// Lane `lane`'s act_quant unit (columns 4·lane .. + 3 of a chunk, QuantizeLoaded's codes and scale)
// as the BF16 values code · scale (exact) at their places in the chunk's BF16 order (`chunk`: the
// row's chunk in the output).
__device__ __forceinline__ void StoreUnitBf16(const QuantizedUnit& u, __nv_bfloat16* chunk, int lane) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float v = __fmul_rn(DecodeE4m3(static_cast<uint8_t>(u.codes >> (8 * b))), u.scale);
    chunk[Fp4Bf16Position(4 * lane + b)] = __float2bfloat16_rn(v);
  }
}

// act_quant of x's m rows (zeros for rows m .. m_pad - 1) as BF16 values code · scale, each chunk in
// the BF16 order: out [m_pad][k]. One warp per (row, chunk), lane l quantizing columns 4l .. 4l + 3 as
// QuantizeRowsKernel does (the same codes and scales).
__global__ void __launch_bounds__(256) QuantizeRowsBf16Kernel(const float* __restrict__ x, int64_t ldx, int64_t m,
                                                              int64_t m_pad, int64_t k, bool x_vec,
                                                              __nv_bfloat16* __restrict__ out) {
  PdlPrologue();
  const int lane = threadIdx.x % kWarpSize;
  int64_t row = 0, c = 0;
  if (!WarpRowItem(m_pad, k / kChunk, nullptr, &row, &c)) return;  // uniform per warp
  StoreUnitBf16(QuantizeLoaded(LoadUnit(x, ldx, m, row, c * kChunk + 4 * lane, x_vec)), out + row * k + c * kChunk,
                lane);
}

// MoeGather's rows as QuantizeRowsBf16Kernel writes them, from the tokens' rows: out row r < max_rows
// (r < *row_count where row_count is given) is act_quant of x row sorted_slots[r] / top_k in BF16, the
// BF16 order, and row_weights[r] = expert_weights[sorted_slots[r]] (when given); rows past the count
// or of a negative slot are untouched, as MoeGather leaves them. One warp per (row, chunk).
__global__ void __launch_bounds__(256) GatherQuantizeRowsBf16Kernel(
    const float* __restrict__ x, int64_t ldx, int64_t k, const int32_t* __restrict__ sorted_slots,
    const int32_t* __restrict__ row_count, int64_t top_k, int64_t max_rows, bool x_vec,
    const float* __restrict__ expert_weights, float* __restrict__ row_weights, __nv_bfloat16* __restrict__ out) {
  PdlPrologue();
  GatherUnit(x, ldx, k, sorted_slots, row_count, top_k, max_rows, x_vec, expert_weights, row_weights,
             [&](const QuantizedUnit& unit, int64_t row, int64_t c, int lane) {
               StoreUnitBf16(unit, out + row * k + c * kChunk, lane);
             });
}

// SwiGluUnit's rows (the MoE's clamped SwiGLU times row_weights[r], act_quant'ed) written as
// QuantizeRowsBf16Kernel writes w2's input: rows r < min(m, *row_count) (all m where row_count is
// null); other rows untouched. One warp per (row, chunk); g and u rows 16-byte aligned.
__global__ void __launch_bounds__(256) SwiGluQuantizeRowsBf16Kernel(
    const float* __restrict__ g, int64_t ldg, const float* __restrict__ u, int64_t ldu, int64_t m, int64_t n,
    float limit, const float* __restrict__ row_weights, const int32_t* __restrict__ row_count,
    __nv_bfloat16* __restrict__ out) {
  PdlPrologue();
  const int lane = threadIdx.x % kWarpSize;
  int64_t row = 0, c = 0;
  if (!WarpRowItem(m, n / kChunk, row_count, &row, &c)) return;  // uniform per warp
  StoreUnitBf16(SwiGluUnit(g, ldg, u, ldu, row, c, limit, row_weights, lane), out + row * n + c * kChunk, lane);
}

}  // namespace fp4bf16
}  // namespace wgmma
