// Shared by the linear-layer tests (test_linear.cpp, test_experts_linear.cpp): the weight formats
// under test, random weights in each, their device description, and the order-of-summation bound
// a CUDA linear layer is held to against cpu::Linear.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/linear.h"
#include "tensor/linear_weight.h"

namespace deepinfer::test {

struct Spec {
  const char* name;
  WeightFormat format;
  DType dtype;
  DType scale_dtype;
};

inline const Spec kF32{"f32", WeightFormat::kDense, DType::kF32, DType::kF32};
inline const Spec kBf16{"bf16", WeightFormat::kDense, DType::kBF16, DType::kF32};
inline const Spec kF16{"f16", WeightFormat::kDense, DType::kF16, DType::kF32};
inline const Spec kFp8E8m0{"fp8_e8m0", WeightFormat::kFp8, DType::kF8E4M3, DType::kF8E8M0};
inline const Spec kFp8F32{"fp8_f32", WeightFormat::kFp8, DType::kF8E4M3, DType::kF32};
inline const Spec kFp4{"fp4", WeightFormat::kFp4, DType::kFP4E2M1x2, DType::kF8E8M0};
inline const Spec kAllSpecs[] = {kF32, kBf16, kF16, kFp8E8m0, kFp8F32, kFp4};

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// How a weight [out, in] of `spec` is stored: data rows of `cols` stored elements (`pad` past the
// row's own), and the scale's [scale_rows, scale_cols] (0 x 0 for dense weights).
struct WeightStorage {
  int64_t cols = 0, scale_rows = 0, scale_cols = 0;
};
WeightStorage StorageFor(const Spec& spec, int64_t out, int64_t in, int64_t pad);

// `n` stored data elements of `spec`: dense values in [-1, 1); e4m3 codes over the whole finite
// range; FP4 random nibbles.
std::vector<uint8_t> RandomWeightData(const Spec& spec, size_t n, uint64_t seed);
// `n` scale elements of `spec` (checkpoint-like): e8m0 2^-7..2^3 or f32 in [1e-3, 2e-2) for FP8,
// e8m0 2^-8..2^1 for FP4; empty for dense weights.
std::vector<uint8_t> RandomWeightScales(const Spec& spec, size_t n, uint64_t seed);

cuda::DeviceWeight::Format DeviceFormat(WeightFormat format);

// |W| dequantized to a dense f32 weight [out, in] (for the error bound).
std::vector<float> AbsDense(const LinearWeight& w);

// The CPU and the GPU add the same exactly-dequantized products in different orders; the CPU
// rounds every product and then sums 8 chains of K/8 terms, a 3-level tree and a tail of < 8, so
// its error is at most γ(K/8 + 12)·S with S = Σ|x_k·w_k| and γ(n) ≈ n·2^-24; the GPU fuses
// products (fmaf) over 32 chains of 8·ceil(K/256) terms and a 5-level tree: γ(8·ceil(K/256) + 5)·S.
// The bound is the sum of both, +1% for S itself being an f32 sum. It is a worst case (the typical
// error is ~sqrt of it), so it cannot flake, yet it stays far below the size of any single product
// (S/K on average): a dropped, doubled or misdecoded term of normal size fails it.
// Under LinearMath::kSplitBf16 (linear_mma.cuh) the GPU's sums are chains of MMAs instead: per
// 512-column slice up to 4 chunks × 8 steps × 3 parts = 96 MMAs, each adding 16 exact products to
// the running sum with at most 2 roundings' worth of error (the tensor cores' adder may truncate
// rather than round to nearest), then one add per slice: γ(2·3·8·chunks_per_slice + slices + 5)·S.
// Under kFp8Act the inputs are e4m3 codes and the tensor cores' accumulation inside one MMA may
// keep only about 14 bits (DeepSeek's measurement on Hopper), so the GPU term is 2^-12·S
// (4096 units of 2^-24) plus the slice and chunk adds; the tests give the CPU the rounded x
// (RoundForFp8Act), so the products are the same exact values on both sides. Where kFp8Act runs
// on warpgroup MMAs (cuda::Fp8ActOnWarpgroupMma) the FP8 chunk's four k32 steps chain in that
// reduced-precision accumulator: measured up to 2^-10.8·S on the H200 (2026-12-01), so the GPU
// term is 2^-9·S there. That no longer catches one dropped term of average size (S/K); the
// warpgroup-MMA tests add exact checks on integer data for that (test_linear.cpp).
// OrderBoundC uses the bound of TestLinearMath().
double OrderBoundC(int64_t k);

// The math the helpers of the linear tests pass to cuda::Linear / GroupedLinear / ExpertsLinear
// (and whose bound OrderBoundC uses): kSimtF32 unless a ScopedLinearMath is alive.
cuda::LinearMath TestLinearMath();
// Under kFp8Act: rounds the first k values of each of `rows` rows (stride ld) of x through the
// reference's act_quant (cpu::Fp8RoundTrip, blocks of 128), as the model does before those
// linears; otherwise leaves x alone.
void RoundForFp8Act(std::vector<float>& x, int64_t rows, int64_t k, int64_t ld);
// Makes the first 128-column block of every row of x (row stride ld, at least 128 columns) one
// whose act_quant halves its scale when applied twice: amax 228·2^-9 gives scale 2^-9 and a
// largest code of 224 (228 rounded), so the rounded block's amax is exactly 448·2^-10 and the
// second pass takes scale 2^-10 with every code doubled. The other values are shrunk below it.
void HalvingScaleBlocks(std::vector<float>& x, int64_t rows, int64_t ld);
// Inputs of an act_quant-in-the-kernel check: `raw`, rows × k random values (row stride k), every
// seventh times 300 (the block scales spread) and HalvingScaleBlocks; `rounded`, the same through
// RoundForFp8Act.
struct Fp8ActInputs {
  std::vector<float> raw, rounded;
};
Fp8ActInputs MakeFp8ActInputs(int64_t rows, int64_t k, uint64_t seed);
class ScopedLinearMath {
 public:
  explicit ScopedLinearMath(cuda::LinearMath math);
  ~ScopedLinearMath();
  ScopedLinearMath(const ScopedLinearMath&) = delete;
  ScopedLinearMath& operator=(const ScopedLinearMath&) = delete;

 private:
  cuda::LinearMath previous_;
};
// cuda::SetTmaKernelsForTesting(mode, expert_tokens) for the scope: the TMA-fed kernels on (1) or
// off (0), then back to the environment's choice.
class ScopedTmaKernels {
 public:
  explicit ScopedTmaKernels(int mode, int expert_tokens = 64) { cuda::SetTmaKernelsForTesting(mode, expert_tokens); }
  ~ScopedTmaKernels() { cuda::SetTmaKernelsForTesting(-1); }
  ScopedTmaKernels(const ScopedTmaKernels&) = delete;
  ScopedTmaKernels& operator=(const ScopedTmaKernels&) = delete;
};
// cuda::SetFp4InBlockForTesting(mode, units) for the scope: the FP4 experts converted in the
// GEMM's blocks (1; 1 or 2 units side by side, 0: the environment's count) or pre-folded (0), then
// back to the environment's choice.
class ScopedFp4InBlock {
 public:
  explicit ScopedFp4InBlock(int mode, int units = 0) { cuda::SetFp4InBlockForTesting(mode, units); }
  ~ScopedFp4InBlock() { cuda::SetFp4InBlockForTesting(-1); }
  ScopedFp4InBlock(const ScopedFp4InBlock&) = delete;
  ScopedFp4InBlock& operator=(const ScopedFp4InBlock&) = delete;
};
// cuda::SetFp4Bf16ForTesting(mode, tokens) for the scope (the FP4 experts on BF16 MMAs with the scales
// folded: other bits than Linear's), then back to the environment's.
class ScopedFp4Bf16 {
 public:
  explicit ScopedFp4Bf16(int mode, int tokens = 0) { cuda::SetFp4Bf16ForTesting(mode, tokens); }
  ~ScopedFp4Bf16() { cuda::SetFp4Bf16ForTesting(-1); }
  ScopedFp4Bf16(const ScopedFp4Bf16&) = delete;
  ScopedFp4Bf16& operator=(const ScopedFp4Bf16&) = delete;
};
// cuda::SetCublasLtBf16ForTesting(mode) for the scope, then back to the environment's.
using ScopedCublasLtBf16 = ScopedSwitch<cuda::SetCublasLtBf16ForTesting>;
// cuda::SetCublasLtDenseForTesting(mode) for the scope, then back to the environment's.
using ScopedCublasLtDense = ScopedSwitch<cuda::SetCublasLtDenseForTesting>;
// cuda::SetCublasLtFp8ForTesting(mode, min_rows) for the scope, then back to the environment's.
class ScopedCublasLtFp8 {
 public:
  explicit ScopedCublasLtFp8(int mode, int64_t min_rows = 0) { cuda::SetCublasLtFp8ForTesting(mode, min_rows); }
  ~ScopedCublasLtFp8() { cuda::SetCublasLtFp8ForTesting(-1); }
  ScopedCublasLtFp8(const ScopedCublasLtFp8&) = delete;
  ScopedCublasLtFp8& operator=(const ScopedCublasLtFp8&) = delete;
};
// cuda::SetLinearSliceMaxRowsForTesting(rows) for the scope, then back to the environment's.
class ScopedLinearSliceMaxRows {
 public:
  explicit ScopedLinearSliceMaxRows(int64_t rows) { cuda::SetLinearSliceMaxRowsForTesting(rows); }
  ~ScopedLinearSliceMaxRows() { cuda::SetLinearSliceMaxRowsForTesting(-1); }
  ScopedLinearSliceMaxRows(const ScopedLinearSliceMaxRows&) = delete;
  ScopedLinearSliceMaxRows& operator=(const ScopedLinearSliceMaxRows&) = delete;
};
// cuda::SetGroupedBf16ForTesting(mode, piece_rows) for the scope, then back to the environment's.
class ScopedGroupedBf16 {
 public:
  explicit ScopedGroupedBf16(int mode, int64_t piece_rows = 0) { cuda::SetGroupedBf16ForTesting(mode, piece_rows); }
  ~ScopedGroupedBf16() { cuda::SetGroupedBf16ForTesting(-1); }
  ScopedGroupedBf16(const ScopedGroupedBf16&) = delete;
  ScopedGroupedBf16& operator=(const ScopedGroupedBf16&) = delete;
};
using ScopedStagedSlices = ScopedSwitch<cuda::SetStagedSlicesForTesting>;
using ScopedDenseSplit = ScopedSwitch<cuda::SetDenseSplitForTesting>;
using ScopedDenseSlicesDeep = ScopedSwitch<cuda::SetDenseSlicesDeepForTesting>;
using ScopedDenseSlicesNarrow = ScopedSwitch<cuda::SetDenseSlicesNarrowForTesting>;
using ScopedLinearSmallTiles = ScopedSwitch<cuda::SetLinearSmallTilesForTesting>;
using ScopedLinearFused = ScopedSwitch<cuda::SetLinearFusedForTesting>;
using ScopedLinearSliceSumInBlock = ScopedSwitch<cuda::SetLinearSliceSumInBlockForTesting>;
using ScopedLinearQuantizeInBlock = ScopedSwitch<cuda::SetLinearQuantizeInBlockForTesting>;
using ScopedGroupedHalfBlocks = ScopedSwitch<cuda::SetGroupedHalfBlocksForTesting>;
using ScopedGroupedSlices = ScopedSwitch<cuda::SetGroupedSlicesForTesting>;
using ScopedGroupedSlicesLean = ScopedSwitch<cuda::SetGroupedSlicesLeanForTesting>;
using ScopedGroupedSlicesWide = ScopedSwitch<cuda::SetGroupedSlicesWideForTesting>;
using ScopedGroupedSlicesUpTo32 = ScopedSwitch<cuda::SetGroupedSlicesUpTo32ForTesting>;
using ScopedGroupedSlicesPartials = ScopedSwitch<cuda::SetGroupedSlicesPartialsForTesting>;
using ScopedTmaWarpSpecialized = ScopedSwitch<cuda::SetTmaWarpSpecializedForTesting>;
using ScopedTmaStore = ScopedSwitch<cuda::SetTmaStoreForTesting>;
using ScopedDenseOverlap = ScopedSwitch<cuda::SetDenseOverlapForTesting>;
using ScopedDenseParts = ScopedSwitch<cuda::SetDensePartsForTesting>;
using ScopedDenseWs = ScopedSwitch<cuda::SetDenseWsForTesting>;
using ScopedBf16WsPairs = ScopedSwitch<cuda::SetBf16WsPairsForTesting>;
using ScopedDenseTiles = ScopedSwitch<cuda::SetDenseTilesForTesting>;
using ScopedDenseTilesInPlace = ScopedSwitch<cuda::SetDenseTilesInPlaceForTesting>;
using ScopedExpertsRegisterA = ScopedSwitch<cuda::SetExpertsRegisterAForTesting>;
using ScopedFp4ChunkWords = ScopedSwitch<cuda::SetFp4ChunkWordsForTesting>;
using ScopedExpertsXCodes = ScopedSwitch<cuda::SetExpertsXCodesForTesting>;
// The in-block FP4 experts converted in the MMA warpgroups' registers where they have chunk words.
using ScopedFp4InBlockRegisters = ScopedSwitch<cuda::SetFp4InBlockRegistersForTesting>;
// Its up-shifted warps (the row scales once a slice).
using ScopedFp4SliceScale = ScopedSwitch<cuda::SetFp4SliceScaleForTesting>;
// Those calls on the kernel with one converted weight tile for two token tiles instead.
using ScopedFp4TilePairs = ScopedSwitch<cuda::SetFp4TilePairsForTesting>;
::testing::AssertionResult WithinOrderBound(const std::vector<float>& got, const std::vector<float>& want,
                                            const std::vector<float>& sabs, int64_t k, const std::string& what);
// The same with the bound c·S given.
::testing::AssertionResult WithinBoundC(const std::vector<float>& got, const std::vector<float>& want,
                                        const std::vector<float>& sabs, double c, const std::string& what);
// c for split-BF16 products chained in one f32 accumulator over K (GroupedLinear on warpgroup
// MMAs, cuda::GroupedSplitOnWarpgroupMma): the products are exact (three BF16 parts of x); each of
// the 3K products may be rounded once as it is added (an MMA's 16 inside it, then the MMA's sum
// into the accumulator: 3K/16 more), plus the CPU's k/8 + 12.
double SplitChainBoundC(int64_t k);

}  // namespace deepinfer::test
