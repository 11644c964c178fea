// CUDA linear layers, the twins of cpu::Linear / cpu::GroupedLinear: y[m, o] = Σ_k x[m, k]·W[o, k]
// with W in any checkpoint format, dequantized exactly to f32 (every format is a subset of f32),
// f32 activations and f32 accumulation.
//
// Summation order (the same for every M, every path and every tile, so results are deterministic
// and batch invariant: a row's outputs do not depend on M or on the other rows, and chunked prefill
// equals one-shot prefill bit for bit):
//   K is cut into slabs of 256; slab s gives lane l (0..31) the 8 columns k = 256·s + 8·l + e,
//   e = 0..7. Lane l keeps one partial p_l = fmaf(x[m,k], W[o,k], p_l) over its columns in
//   ascending k, starting from +0; columns past K enter as fmaf(0, 0, p_l). Then
//   y[m, o] = the butterfly tree of the 32 partials: levels lane^16, ^8, ^4, ^2, ^1.
// Two kernels implement that order: a GEMV for M <= kGemvMaxRows (each warp streams a few weight
// rows once, with wide loads, for all M rows; this is the decode path) and a shared-memory tiled
// SIMT GEMM for larger M (blocks of 32 rows × 16 outputs; each weight slab is dequantized once per
// block into shared memory). No tensor cores. ExpertsLinear runs the same two block codes per tile.
//
// The difference to the CPU (8 lanes then a 3-level tree, products rounded before adding) is only
// the order of the f32 sums.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace deepinfer::cuda {

// A weight in device memory: the device-side description of a LinearWeight (tensor/linear_weight.h
// cannot be included here). W[o, i] for o < out_features, i < in_features:
//   kDense  data [out, in] of `dtype` (kF32 | kBF16 | kF16); W = data[o, i]. `scale` unused.
//   kFp8    data [out, in] e4m3 bytes; scale [ceil(out/128), ceil(in/128)] of `scale_dtype`
//           (kF8E8M0 | kF32): W = e4m3(data[o, i]) · scale[o/128, i/128].
//   kFp4    data [out, in/2] bytes of packed e2m1 (low nibble = even column); in % 32 == 0;
//           scale [out, in/32] of `scale_dtype` (kF8E8M0 | kF32): W = e2m1(o, i) · scale[o, i/32].
// `dtype` is read only for kDense. Row strides count stored elements: `dtype` elements for kDense,
// bytes for kFp8 / kFp4 (one byte holds two FP4 values), `scale_dtype` elements for the scale;
// the column stride of both is 1. Wider loads are used when data and data_row_stride allow them
// (16-byte aligned rows for kDense, 8 for kFp8, 4 for kFp4); any alignment works.
struct DeviceWeight {
  enum class Format : uint8_t { kDense, kFp8, kFp4 };

  Format format = Format::kDense;
  DType dtype = DType::kF32;
  DType scale_dtype = DType::kF8E8M0;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const void* data = nullptr;
  int64_t data_row_stride = 0;
  const void* scale = nullptr;
  int64_t scale_row_stride = 0;
  // kFp4 only: 0 for the rows as stored; else the nibbles are chunk-major (RewriteFp4ExpertsChunkMajor):
  // bytes from one 128-column chunk's 64-byte row pieces to the next chunk's, data_row_stride (64)
  // between the rows' pieces of one chunk, each 32-bit word in the sign-split layout
  // (cpu::SignSplitWord). Read by the FP8-input warpgroup-MMA kernels only.
  int64_t data_chunk_stride = 0;
};

// The arithmetic of Linear, GroupedLinear and ExpertsLinear (their last argument):
//   kSimtF32    the f32 SIMT kernels described above (the default);
//   kSplitBf16  tensor cores (mma.sync BF16, f32 accumulation) for BF16 weights and for FP8 / FP4
//               weights with e8m0 scales and K <= 8192: every weight is exact in BF16 and each f32
//               activation is split into three BF16 parts whose sum is exact, so the products are
//               exact and only the f32 rounding of the sums differs from kSimtF32 (order in
//               linear_mma.cuh: fixed by K alone, batch invariant, ExpertsLinear equal to Linear).
//               Other weights (F32, F16, f32 scales) keep the SIMT kernels.
//   kFp8Act     for inputs the reference quantizes (its act_quant): FP8 and FP4 weights (either
//               scale dtype) multiply e4m3 codes on the tensor cores: each x row is quantized per
//               128 columns in the kernel (power-of-two scales, kernels/cpu/ue8m0.h; an input
//               already rounded through Fp8RoundTripRows keeps its values exactly), FP4 codes
//               become e4m3 exactly, and the scales are applied in f32 after each chunk (FP8) or
//               32-column group (FP4). Not the f32 math of the other two: x is rounded, and the
//               tensor cores' accumulation inside one MMA may keep fewer than 24 bits. Other
//               weights take kSplitBf16's choice. Order again fixed by K (linear_mma.cuh); past
//               32 rows Linear stages 64 × 64 tiles in shared memory with the same bits. Given
//               scratch on an sm_90a device, FP8 weights and FP4 weights with e8m0 scales
//               instead take warpgroup MMAs at every M, x quantized once (linear_wgmma.cuh): FP8
//               in the same order, other roundings; FP4 with the group scales folded into the
//               e4m3 codes, scaled once per chunk (linear_wgmma.cuh, FoldPass).
enum class LinearMath : uint8_t { kSimtF32, kSplitBf16, kFp8Act };

// The kernels that give up batch invariance for speed (docs/numerics.md): Linear's FP8 products of
// 512+ rows on cuBLASLt (DEEPINFER_CUBLASLT_FP8), GroupedLinear's prefill products on one BF16 part
// on cuBLASLt (DEEPINFER_CUBLASLT_BF16) and the prefill's FP4 experts on BF16 MMAs
// (DEEPINFER_FP4_BF16). Each runs where its environment switch is 1, never where it is 0, and,
// where it is unset, in the calls a thread makes while a scope that allows them is open on it
// (ops' wrappers open one from OpContext::fast_prefill). Scopes nest; the innermost decides.
class BatchVariantKernelsScope {
 public:
  explicit BatchVariantKernelsScope(bool allowed);
  ~BatchVariantKernelsScope();
  BatchVariantKernelsScope(const BatchVariantKernelsScope&) = delete;
  BatchVariantKernelsScope& operator=(const BatchVariantKernelsScope&) = delete;

 private:
  bool previous_;
};

// M at or below which Linear / GroupedLinear use the GEMV kernel (both kernels give identical bits).
inline constexpr int64_t kGemvMaxRows = 16;

// y[r, o] = Σ_k x[r, k]·W[o, k] for r < m, o < w.out_features. x: [m, in_features] f32 with row
// stride ldx >= in_features; y: [m, out_features] f32 with row stride ldy >= out_features (the
// columns past out_features are not written). m == 0 is a no-op. Asynchronous on `stream`.
// scratch (DEVICE, 256-byte aligned, LinearScratchBytes(m, w, math) bytes; may be null): under
// kFp8Act on an sm_90a device, where x is quantized once for the warpgroup-MMA path (FP8 weights,
// FP4 weights with e8m0 scales, in_features % 128 == 0, one group; any m). Its sums round
// differently from the mma.sync kernels that run without scratch (linear_wgmma.cuh), so a caller
// that needs a row's bits independent of m passes scratch at every m, or at none.
// tiles (DEVICE, may be null; read only for a BF16 w under kSplitBf16): w again as 16 KiB tiles of
// 128 rows × 64 columns (DenseTilesBytes, written once by WriteDenseTiles), which the split-BF16
// kernels (the 8- and 64-token ones, the warp-specialized one) read instead of w's data, each chunk
// one contiguous read instead of 128 pieces a row apart: the same bits.
// round_x_to_bf16: y = W · bf16(x), x rounded to nearest even as the kernel reads it and multiplied
// as one BF16 part instead of three (the bits of the three-part kernels on Bf16RoundRows(x)); only
// where LinearRoundsXToBf16 holds for the same arguments, an error elsewhere.
void Linear(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
            cudaStream_t stream, LinearMath math = LinearMath::kSimtF32, void* scratch = nullptr,
            size_t scratch_bytes = 0, const void* tiles = nullptr, bool round_x_to_bf16 = false);
// Whether Linear with these arguments takes round_x_to_bf16: a BF16 weight's split-BF16 product on
// the dense warp-specialized kernels (1-8 rows: DEEPINFER_DENSE_WS8; more: DEEPINFER_DENSE_WS64 and
// DEEPINFER_DENSE_WS), with scratch for x's parts, on an sm_90a device; not on cuBLASLt
// (DEEPINFER_CUBLASLT_DENSE) nor on the K slices' cluster kernel. Fails where Linear's own checks of
// the arguments fail.
bool LinearRoundsXToBf16(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
                         LinearMath math, void* scratch, size_t scratch_bytes, const void* tiles);
// Several products of one x, y_i = x·W_i^T over m rows (every weight of the same in_features),
// each with the bits Linear gives it with the same scratch, on `stream`. Where two or more of them
// take the dense warp-specialized path (BF16 weights under kSplitBf16, m >= 256, a grid that fills
// the GPU, scratch of LinearScratchBytes for each), the others run first (as Linear would), then
// x's BF16 parts are split into the scratch once for all of those; else each runs as Linear, in
// list order. x_is_bf16: x's values are BF16 already (the caller's contract), so the products
// that take a kernel rounding x (LinearRoundsXToBf16) multiply x as one BF16 part, shared or
// alone, with the bits of three parts of which two are zeros; the others run as without, and no
// cuBLASLt product shares x's parts.
struct LinearOutput {
  const DeviceWeight* w;
  float* y;
  int64_t ldy;
};
void LinearsOfOneInput(const float* x, int64_t ldx, int64_t m, const LinearOutput* outputs, int count,
                       cudaStream_t stream, LinearMath math, void* scratch, size_t scratch_bytes,
                       bool x_is_bf16 = false);
// Tests only: how many of LinearsOfOneInput's products ran on x's parts split once for several.
uint64_t SharedXPartsLaunchesForTesting();
// Scratch bytes Linear can use for m rows of x (0 where no path uses scratch): for FP8 and FP4
// weights under kFp8Act, x's codes (above); for BF16 weights under kSplitBf16 past 8 rows, x's
// three BF16 parts, split once per call for the 64-token dense kernel (the same bits as without).
size_t LinearScratchBytes(int64_t m, const DeviceWeight& w, LinearMath math);
// Whether Linear and ExpertsLinear under kFp8Act run `w` on e4m3 MMAs (FP8 / FP4 weights, K within
// the tensor-core paths' limit): every such kernel quantizes x per 128 columns as it reads it,
// with the values (and bits) it gives an x already rounded through act_quant, so the caller may
// pass x unrounded.
bool QuantizesFp8Input(const DeviceWeight& w);
// Whether kFp8Act products given scratch (codes) run on warpgroup MMAs on the current device: an
// sm_90a build on compute capability 9.0, and DEEPINFER_WGMMA is not 0.
bool Fp8ActOnWarpgroupMma();
// Tests only: the TMA-fed kernels (Linear's unsplit FP8 products, GroupedLinear's split-BF16
// products, the pre-folded FP4 experts, those on tiles of expert_tokens = 64 or 128 tokens) on (1)
// or off (0) for the whole process, in place of the environment's DEEPINFER_TMA,
// DEEPINFER_TMA_GROUPED and DEEPINFER_TMA_EXPERTS; -1 returns to those. Each TMA-fed kernel gives
// the bits of the kernel it replaces, which is what the tests check by running both.
void SetTmaKernelsForTesting(int mode, int expert_tokens = 64);
// Whether this build and driver can run the TMA-fed kernels on the current device (sm_90a code,
// compute capability 9.0, the driver's tensor-map encoder).
bool TmaKernelsAvailable();
// Tests only: how many TMA-fed kernels this process has launched (so a test can tell that the
// kernel it compares did run).
uint64_t TmaLaunchesForTesting();
// Tests only: the split-BF16 staged products with K's slices over a cluster (decode batches of
// 1-256 rows; the bits of the one-block kernels) where they apply (1), never (0), or as
// DEEPINFER_STAGED_SLICES says (-1, the default: past 32 rows only, unless it is 0 or 1); and
// how many such launches this process has made.
void SetStagedSlicesForTesting(int mode);
uint64_t StagedSlicesLaunchesForTesting();
// Tests only: BF16 weights' split-BF16 products on warpgroup MMAs (at every M, sm_90a) on (1),
// off (0: the mma.sync kernels), or as DEEPINFER_DENSE_WGMMA says (-1, the default: on unless 0);
// and how many such launches this process has made.
void SetDenseSplitForTesting(int mode);
uint64_t DenseSplitLaunchesForTesting();
// Tests only: the dense split-BF16 products of 1-8 rows whose K slices spread over a cluster on the
// deep ring (a rank's whole slice copied at once; the same bits) on (1), off (0), or as
// DEEPINFER_DENSE_SLICES_DEEP says (-1, the default: off unless 1); and how many such launches ran.
void SetDenseSlicesDeepForTesting(int mode);
uint64_t DenseSlicesDeepLaunchesForTesting();
// Tests only: Linear's FP8-input warpgroup-MMA products of at most 8 rows on 8-token tiles (the
// same bits) on (1), off (0), or as DEEPINFER_LINEAR_SMALL_TILES says (-1, the default: on unless
// 0); and how many such launches this process has made.
void SetLinearSmallTilesForTesting(int mode);
uint64_t LinearSmallTilesLaunchesForTesting();
// Tests only: Linear's FP8-input warpgroup-MMA products of 1-8 rows and its K-sliced ones as one
// launch each (x quantized in the GEMM's blocks, the slices summed in thread-block clusters; the
// same bits) on (1), off (0), or as DEEPINFER_LINEAR_FUSED says (-1, the default: off unless 1);
// and how many such launches this process has made.
void SetLinearFusedForTesting(int mode);
uint64_t LinearFusedLaunchesForTesting();
// Tests only: Linear's K-split wgmma products add their slices in each tile's last block (the same
// bits) on (1), off (0), or as DEEPINFER_LINEAR_SLICE_SUM_IN_BLOCK says (-1, the default: off
// unless 1); and how many such launches this process has made.
void SetLinearSliceSumInBlockForTesting(int mode);
uint64_t LinearSliceSumInBlockLaunchesForTesting();
// Tests only: Linear's wgmma products of 1-8 rows as one launch each, x quantized in the blocks
// and split products' slices added by each tile's last block (the same bits), on (1), off (0), or
// as DEEPINFER_LINEAR_QUANTIZE_IN_BLOCK says (-1, the default: off unless 1); and how many such
// launches this process has made.
void SetLinearQuantizeInBlockForTesting(int mode);
uint64_t LinearQuantizeInBlockLaunchesForTesting();
// Tests only: Linear's wgmma products of more than `rows` rows are never split into K slices
// (DEEPINFER_LINEAR_SLICE_MAX_ROWS); kUnboundedRowsForTesting: no bound; -1: the environment's.
inline constexpr int64_t kUnboundedRowsForTesting = int64_t{1} << 40;
void SetLinearSliceMaxRowsForTesting(int64_t rows);
// Tests only: GroupedLinear's TMA-fed split-BF16 kernel on blocks of 64 weight rows where twice
// the 128-row grid fits one wave (the same bits) on (1), off (0), or as
// DEEPINFER_GROUPED_HALF_BLOCKS says (-1, the default: on unless 0); and how many such launches
// this process has made.
void SetGroupedHalfBlocksForTesting(int mode);
uint64_t GroupedHalfBlocksLaunchesForTesting();
// Tests only: GroupedLinear's products of at most 8 rows on the TMA-fed kernel's K slices over a
// cluster (8-token tiles of 64 weight rows; the same bits) on (1), off (0), or as
// DEEPINFER_GROUPED_SLICES says (-1, the default: on unless 0); and how many such launches this
// process has made.
void SetGroupedSlicesForTesting(int mode);
uint64_t GroupedSlicedLaunchesForTesting();
// Tests only: those K slices on the lean layout (2 stages, one tile set: 9 blocks an SM; the same
// bits) on (1), off (0), or as DEEPINFER_GROUPED_SLICES_LEAN says (-1, the default: on unless 0);
// and how many such launches this process has made.
void SetGroupedSlicesLeanForTesting(int mode);
uint64_t GroupedSlicesLeanLaunchesForTesting();
// Tests only: the lean K slices on blocks of 128 weight rows (two warpgroups; the same bits) on
// (1), off (0), or as DEEPINFER_GROUPED_SLICES_WIDE says (-1, the default: on unless 0); and how
// many such launches this process has made.
void SetGroupedSlicesWideForTesting(int mode);
uint64_t GroupedSlicesWideLaunchesForTesting();
// Tests only: the K slices also for products of 9-32 rows (16- or 32-token tiles on the lean 128-row
// layout; the same bits) on (1), off (0), or as DEEPINFER_GROUPED_SLICES_UP_TO_32 says (-1, the
// default: on unless 0); and how many such launches this process has made.
void SetGroupedSlicesUpTo32ForTesting(int mode);
uint64_t GroupedSlicesUpTo32LaunchesForTesting();
// Tests only: the dense K slices of 9-32 rows on 16- or 32-token tiles (the same bits) on (1), off
// (0), or as DEEPINFER_DENSE_SLICES_NARROW says (-1, the default: off unless 1); and how many such
// launches this process has made.
void SetDenseSlicesNarrowForTesting(int mode);
uint64_t DenseSlicesNarrowLaunchesForTesting();
// Tests only: those K slices without a cluster, each slice's sum through the caller's scratch and
// SumSlicesKernel (the same bits; GroupedLinearScratchBytes asks for the scratch at 1-8 rows under
// the switch) on (1), off (0), or as DEEPINFER_GROUPED_SLICES_PARTIALS says (-1, the default: off
// unless 1); and how many such launches this process has made.
void SetGroupedSlicesPartialsForTesting(int mode);
uint64_t GroupedSlicesPartialsLaunchesForTesting();
// Tests only: GroupedLinear's products of at least 256 rows given scratch on the weight converted
// to BF16 once per call and x's parts split once (GroupedBf16WsKernel; the same bits) on (1), off
// (0), or as DEEPINFER_GROUPED_BF16 says (-1, the default: on unless 0); piece_rows > 0 splits x
// into pieces of that many rows (0: the 512 MiB budget's); and how many such GEMM launches (one per
// piece) this process has made.
void SetGroupedBf16ForTesting(int mode, int64_t piece_rows = 0);
uint64_t GroupedBf16LaunchesForTesting();
// Linear's TMA-fed products on the persistent, warp-specialized kernel (TmaLinearWsKernel; the same
// bits) on (1), off (0: TmaLinearKernel), or as DEEPINFER_TMA_WS says (-1, the default: on unless
// 0); and how many such launches this process has made.
void SetTmaWarpSpecializedForTesting(int mode);
uint64_t TmaWarpSpecializedLaunchesForTesting();
// Tests only: TmaLinearWsKernel's (and GroupedLinear's one-part BF16 kernel's) output tiles by TMA
// stores (where y allows them) on (1), off (0), or as DEEPINFER_TMA_STORE says (-1, the default:
// on unless 0); and how many such launches of TmaLinearWsKernel this process has made.
void SetTmaStoreForTesting(int mode);
uint64_t TmaStoreLaunchesForTesting();
// Tests only: launches of GroupedLinear's one-part BF16 kernel with TMA stores (the same switch).
uint64_t GroupedTmaStoreLaunchesForTesting();
// The FP4 experts at prefill sizes converted in the GEMM's blocks (ExpertsFp4InBlockKernel: no
// per-call pre-fold; the same bits) on (1), off (0: pre-folded), or as DEEPINFER_FP4_IN_BLOCK says
// (-1, the default: on unless 0), converting `units` chunks side by side (1 or 2; 0: as
// DEEPINFER_FP4_IN_BLOCK_UNITS says, unset 2); and how many such launches this process has made.
void SetFp4InBlockForTesting(int mode, int units = 0);
uint64_t Fp4InBlockLaunchesForTesting();
// Those launches, where the experts have chunk words, on ExpertsFp4RegistersTmaKernel (the weight
// operand converted in the MMA warpgroups' registers; the same bits) on (1), off (0), or as
// DEEPINFER_FP4_IN_BLOCK_RS says (-1, the default: on unless 0); and how many it has made.
void SetFp4InBlockRegistersForTesting(int mode);
uint64_t Fp4InBlockRegistersLaunchesForTesting();
// DEEPINFER_FP4_BF16's choice for this process (0 or 1; -1: back to the environment's) and its tile
// tokens (104 or 208; 0: DEEPINFER_FP4_BF16_TOKENS's), and the launches of ExpertsFp4Bf16Kernel so far.
void SetFp4Bf16ForTesting(int mode, int tokens = 0);
uint64_t Fp4Bf16LaunchesForTesting();
// DEEPINFER_FP4_BF16_NARROW's choice (0 or 1; -1: the environment's): the 208-token tiles of at most
// 104 rows on m64n104k16 MMAs (the same bits).
void SetFp4Bf16NarrowForTesting(int mode);
// Those launches instead on ExpertsFp4TilePairKernel (one converted weight tile for two 104-token
// tiles; the same bits) on (1), off (0), or as DEEPINFER_FP4_TILE_PAIRS says (-1, the default: off
// unless 1); and how many it has made.
void SetFp4TilePairsForTesting(int mode);
uint64_t Fp4TilePairsLaunchesForTesting();
// Tests only: DEEPINFER_CUBLASLT_FP8 for this process (-1 back to the environment's, 0 off, 1 on)
// and the rows from which it takes a product (0: the default, 512); and its launches so far.
void SetCublasLtFp8ForTesting(int mode, int64_t min_rows = 0);
uint64_t CublasLtFp8LaunchesForTesting();
// Tests only: DEEPINFER_CUBLASLT_BF16 for this process (-1 back to the environment's, 0 off, 1 on)
// and its launches so far (GroupedLinear's one-part BF16 products on cuBLASLt).
void SetCublasLtBf16ForTesting(int mode);
uint64_t CublasLtBf16LaunchesForTesting();
// Tests only: DEEPINFER_CUBLASLT_DENSE for this process (-1 back to the environment's, 0 off, 1 on)
// and its products so far (dense split-BF16 products of 512+ rows as three cuBLASLt BF16 GEMMs).
void SetCublasLtDenseForTesting(int mode);
uint64_t CublasLtDenseLaunchesForTesting();
// That kernel's up-shifted warps (the row scales applied once a slice where the chunk words allow
// it; the same bits) on (1), off (0), or as DEEPINFER_FP4_SLICE_SCALE says (-1, the default: on
// unless 0).
void SetFp4SliceScaleForTesting(int mode);
// Tests only: the 64-token dense split-BF16 kernels with each chunk's MMAs overlapping the next
// chunk's conversion (the same bits) on (1), off (0), or as DEEPINFER_DENSE_OVERLAP says (-1, the
// default: on unless 0).
void SetDenseOverlapForTesting(int mode);
// Tests only: the 64-token dense split-BF16 products on x's parts split once per call into the
// caller's scratch (the same bits) on (1), off (0), or as DEEPINFER_DENSE_PARTS says (-1, the
// default: on unless 0); and how many such launches this process has made.
void SetDensePartsForTesting(int mode);
uint64_t DensePartsLaunchesForTesting();
// Tests only: the dense split-BF16 products of at least 256 rows (DEEPINFER_DENSE_WS_MIN_ROWS: or
// 64) on x's parts and the warp-specialized TMA kernel (the same bits) on (1), off (0), or as
// DEEPINFER_DENSE_WS says (-1, the default: on unless 0); the fewest rows that take it (0: the
// environment's); and how many such launches this process has made.
void SetDenseWsForTesting(int mode);
// Tests only: DEEPINFER_DENSE_WS8's switch on (1), off (0), or as the variable says (-1, the default:
// on unless 0); and how many dense products of 1-8 rows ran on the 8-token warp-specialized kernel.
void SetDenseWs8ForTesting(int mode);
uint64_t DenseWs8LaunchesForTesting();
// Tests only: DEEPINFER_DENSE_WS64's switch on (1), off (0), or as the variable says (-1, the
// default: on unless 0); and how many dense products of 9 rows up to the warp-specialized kernel's
// fewest ran on its 64-token tiles.
void SetDenseWs64ForTesting(int mode);
uint64_t DenseWs64LaunchesForTesting();
// Tests only: DEEPINFER_DENSE_WS_TOKENS_FASTEST (the dense products of 2-4 128-token tiles without
// pairs, token tiles fastest; the same bits) on (1), off (0) or as the environment says (-1; unset:
// on); and how many launches took it in this process.
void SetDenseWsTokensFastestForTesting(int mode);
uint64_t DenseWsTokensFastestLaunchesForTesting();
void SetDenseWsMinRowsForTesting(int64_t rows);
uint64_t DenseWsLaunchesForTesting();
// Tests only: how many of those dense warp-specialized launches (8-, 64- and 128-token) multiplied x
// rounded to BF16 as their one part (Linear's round_x_to_bf16).
uint64_t DenseRoundedXLaunchesForTesting();
// Tests only: GroupedBf16WsKernel in clusters of two blocks sharing x's tiles by multicast (the
// same bits; wherever a product has two row blocks or more) on (1), off (0), or as
// DEEPINFER_BF16_WS_PAIRS says (-1, the default: unset, dense products of at most 256 rows); and
// how many such launches this process has made.
void SetBf16WsPairsForTesting(int mode);
uint64_t Bf16WsPairLaunchesForTesting();
// Tests only: how many words the FP4 kernels' eight-nibble conversion (E2m1x8ToE4m3x8Table) turns
// into other e4m3 codes than the four-nibble one, over 3·65,536 words whose halves take every
// 16-bit pattern, for each folded table (0 expected). Synchronizes the device.
uint64_t Fp4CodeMismatchesForTesting();
// Tests only: the FP4 experts' tiles of 1-8 and 9-16 rows on the register-fed warpgroup-MMA kernel
// (the same bits) on (1), off (0), or as DEEPINFER_EXPERTS_REGISTER_A and
// DEEPINFER_EXPERTS_REGISTER_A16 say (-1, the default: on unless 0); and how many such launches on
// tiles of `tile_tokens` (8 or 16) this process has made.
void SetExpertsRegisterAForTesting(int mode);
uint64_t ExpertsRegisterALaunchesForTesting(int tile_tokens);

// Bytes of a BF16 weight's tiles (Linear's `tiles`) under `math`: 0 where no kernel would read
// them (not BF16 in 16-byte aligned rows, not kSplitBf16, in_features % 64 != 0, no warpgroup MMAs
// on this device, or its products of 1-8 rows take the K slices over a cluster: narrow weights of
// 2-8 slices) or DEEPINFER_DENSE_TILES is not 1 (read once; unset: off).
size_t DenseTilesBytes(const DeviceWeight& w, LinearMath math);
// Writes them for `w` into `out` (DEVICE, 256-byte aligned, bytes >= DenseTilesBytes(w,
// kSplitBf16)) on `stream`, and synchronizes it (load time).
void WriteDenseTiles(const DeviceWeight& w, void* out, size_t bytes, cudaStream_t stream);
// Tests only: DenseTilesBytes's switch on (1), off (0) or as DEEPINFER_DENSE_TILES says (-1, the
// default: off unless 1); and how many launches have read a weight's tiles.
void SetDenseTilesForTesting(int mode);
uint64_t DenseTilesLaunchesForTesting();
// Whether `w`'s tiles go in place of its rows under `math` (DEEPINFER_DENSE_TILES_IN_PLACE, read
// once; unset or 1: on, 0: off): a kernel would read its tiles (DenseTilesBytes's conditions but its
// switch, DEEPINFER_DENSE_TILES, which asks only for a second copy), a multiple of 128 rows and no
// row padding, so the tiles take exactly the rows' bytes; never with DEEPINFER_CUBLASLT_DENSE=1
// (whose products read rows).
bool DenseTilesInPlace(const DeviceWeight& w, LinearMath math);
// Rewrites w's rows (DEVICE) as its tiles in place on `stream` (a 64 MiB scratch at most, freed
// before it returns), and synchronizes it (load time). Then Linear takes the weight with tiles ==
// w.data and runs only the kernels that read tiles (a product that would read rows throws).
void RewriteAsDenseTiles(const DeviceWeight& w, cudaStream_t stream);
// Tests only: DenseTilesInPlace's switch on (1), off (0) or as the environment says (-1: on unless 0).
void SetDenseTilesInPlaceForTesting(int mode);

// Throws (like Linear would) unless `w` is a weight Linear accepts. For weights that kernels read
// from device memory (ExpertsLinear), which cannot be checked at launch.
void CheckWeight(const DeviceWeight& w);

// The grouped projection of the V4 output path: W is [G·R, K] (G = num_groups,
// R = out_features / G, K = in_features); y[r, g, :] = W[g·R:(g+1)·R, :] · x[r, g, :].
// x: [m, G, K] and y: [m, G, R], both contiguous f32. Same summation order as Linear, except
// where GroupedSplitOnWarpgroupMma: then kSplitBf16 runs one accumulator over K on warpgroup MMAs
// (linear_wgmma_split.cuh), at every M. round_x_to_bf16: y = W · bf16(x), x rounded to nearest
// even as those kernels read it, on one BF16 part instead of three (the bits of the three-part
// kernels on Bf16RoundRows(x)); only where they run (GroupedRoundsXToBf16), an error elsewhere.
// scratch (DEVICE, 256-byte aligned, GroupedLinearScratchBytes bytes; may be null): where given,
// products of at least 256 rows on the warpgroup-MMA path convert the weight to BF16 once and
// split x's parts once into it, then multiply them (the same bits as without); under
// DEEPINFER_GROUPED_SLICES_PARTIALS, products of 1-8 rows keep their K slices' sums in it.
void GroupedLinear(const float* x, int64_t m, int64_t num_groups, const DeviceWeight& w, float* y,
                   cudaStream_t stream, LinearMath math = LinearMath::kSimtF32, bool round_x_to_bf16 = false,
                   void* scratch = nullptr, size_t scratch_bytes = 0);
// Scratch bytes GroupedLinear can use for m rows (0 where no kernel uses any): the BF16 weight and
// x's parts (one BF16 part with round_x_to_bf16, else three) for at most 512 MiB of rows at once;
// under DEEPINFER_GROUPED_SLICES_PARTIALS, at 1-8 rows, the K slices' sums (ceil(K / 512) · m · G · R
// floats).
size_t GroupedLinearScratchBytes(int64_t m, int64_t num_groups, const DeviceWeight& w, LinearMath math,
                                 bool round_x_to_bf16);
// Whether GroupedLinear takes round_x_to_bf16 for `w` in `num_groups` groups under `math` (x at a
// 16-byte aligned address): the warpgroup-MMA split-BF16 kernels run.
bool GroupedRoundsXToBf16(const DeviceWeight& w, int64_t num_groups, LinearMath math);
// Whether GroupedLinear's kSplitBf16 products of `w` in `num_groups` groups (16-byte aligned x)
// run on warpgroup MMAs: an sm_90a device (DEEPINFER_WGMMA not 0), FP8 weights with e8m0 scales
// in 16-byte aligned rows, R % 128 == 0, K % 64 == 0, more than one group.
bool GroupedSplitOnWarpgroupMma(const DeviceWeight& w, int64_t num_groups);

// ---- expert-grouped projection (routed MoE experts) ------------------------------------------
//
// For every expert e < num_experts and every row r in [offsets[e], offsets[e+1]) ∩ [0, rows_bound):
//   y[r, o] = Σ_k x[r, k]·W_e[o, k],  o < N,
// bit-identical to Linear on that expert's rows (the summation order above does not depend on the
// rows computed together). Rows outside every expert's range (in particular rows at or past
// offsets[num_experts]) and the columns past N are not written.
//   offsets  DEVICE int32 [num_experts + 1], non-decreasing, offsets[0] = 0,
//            offsets[num_experts] <= rows_bound (a range reaching past rows_bound is cut there).
//   weights  DEVICE array of num_experts DeviceWeight; every entry has the format, dense dtype,
//            out_features N and in_features K of `layout` and passes CheckWeight (the caller checks
//            this once when it builds the array; data pointers, strides and scale dtypes may differ
//            per expert). `layout` is a host copy of one of them (only its format, dtype, scale
//            dtype, N and K are read; under kSplitBf16 the layout's scale dtype picks the path, so
//            every expert's must match it for ExpertsLinear to equal Linear).
//   x        [rows_bound, K] f32, row stride ldx >= K; y: [rows_bound, N] f32, row stride ldy >= N.
//   scratch  DEVICE memory of ExpertsLinearScratchBytes(rows_bound, num_experts) bytes, 16-byte
//            aligned; overwritten.
// Nothing is read back to the host: every launch is sized from (rows_bound, num_experts, N, K) and
// the device's multiprocessor count, so the call can be captured in a CUDA graph. A first kernel cuts each expert's rows into tiles (up to
// 32 rows, the tiled GEMM's height; the last ≤ 16 rows of an expert go to the GEMV whose row count
// fits them) and lists them in `scratch`; then one kernel per tile kind (GEMV for ≤ 2, 4, 8 and 16
// rows, tiled GEMM for 17–32) walks its list with a fixed grid. rows_bound < 2^31,
// num_experts <= 2^24.
size_t ExpertsLinearScratchBytes(int64_t rows_bound, int64_t num_experts);
// plan_in_scratch: `scratch` already holds the tile lists of an earlier ExpertsLinear call with
// the same offsets (unchanged since), rows_bound, num_experts and path (the FP8-input path cuts
// 64-row tiles, the others 32), queued before this one on `stream` (the MoE's w3 and w2 after its
// w1): the first kernel is skipped.
// codes (DEVICE, 256-byte aligned, ExpertsLinearCodesBytes bytes; may be null): under kFp8Act on an
// sm_90a device, where x's rows are quantized once and every tile runs on warpgroup MMAs (FP8
// weights, FP4 weights with e8m0 scales, in_features % 128 == 0): the bits of Linear with scratch
// on the expert's rows. Without codes the mma.sync kernels run: the bits of Linear without scratch.
// folded (DEVICE, FoldedExpertsBytes bytes, written by FoldExperts; may be null): FP4 experts kept
// folded for the run; where the codes path runs, every tile reads the experts' folded codes there
// instead of converting nibbles (or pre-folding them into codes per call): the same bits.
// chunk_words (DEVICE, Fp4ChunkWordsBytes bytes, written by WriteFp4ChunkWords; may be null): read
// by the register-fed kernel of the FP4 experts' 1-16-row tiles instead of folding group exponents
// per item: the same bits.
// fp4_tiles (DEVICE, Fp4ExpertTilesBytes bytes, written by WriteFp4ExpertTiles; may be null): the
// experts' nibbles again as tiles, which that kernel then reads instead of their rows: the same bits.
void ExpertsLinear(const float* x, int64_t ldx, int64_t rows_bound, const int32_t* offsets, int64_t num_experts,
                   const DeviceWeight* weights, const DeviceWeight& layout, float* y, int64_t ldy, void* scratch,
                   cudaStream_t stream, LinearMath math = LinearMath::kSimtF32, bool plan_in_scratch = false,
                   void* codes = nullptr, size_t codes_bytes = 0, const void* folded = nullptr,
                   const void* chunk_words = nullptr, const void* fp4_tiles = nullptr, bool x_in_codes = false);
// Whether such a call (FP4 experts of `layout`, `rows_bound` rows, the codes scratch `codes` of
// codes_bytes, chunk words given or not, not kept folded) takes the FP4 experts on BF16 MMAs
// (DEEPINFER_FP4_BF16): then its x may come already in the codes scratch (x_in_codes), written by
// GatherQuantizeRowsBf16, and is not read from `x`. ExpertsLinear fails where x_in_codes is given
// and this is false.
bool ExpertsLinearTakesBf16X(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout, LinearMath math,
                             const void* codes, size_t codes_bytes, bool chunk_words);
// Whether such a call (not on BF16 MMAs: on the FP8-input warpgroup-MMA path, x act_quant'ed once
// into the codes scratch) may take its x already there as e4m3 codes and scales (x_in_codes),
// written by GatherQuantizeRows or SwiGluQuantizeRows; not under DEEPINFER_EXPERTS_X_CODES=0.
// `folded`: the experts are kept folded (FoldedExpertsBytes).
bool ExpertsLinearTakesFp8Codes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout,
                                LinearMath math, const void* codes, size_t codes_bytes, bool folded,
                                bool chunk_words);
// Tests only: DEEPINFER_EXPERTS_X_CODES on (1), off (0), or as the environment says (-1).
void SetExpertsXCodesForTesting(int mode);
// MoeGather (moe.h) and act_quant in one pass, for the call above (experts of `layout`): the codes
// scratch's row r < max_rows (r < *row_count where given) is act_quant of x row sorted_slots[r] /
// top_k, laid out as ExpertsLinear's act_quant lays out its rows (ExpertsPaddedRows(max_rows) rows;
// the FP4 order for FP4 experts), and row_weights[r] = expert_weights[sorted_slots[r]] (when given);
// other rows untouched. d: the experts' K.
void GatherQuantizeRows(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, const int32_t* row_count,
                        int64_t top_k, int64_t max_rows, const float* expert_weights, float* row_weights,
                        const DeviceWeight& layout, void* codes, size_t codes_bytes, cudaStream_t stream);
// ClampedSwiGlu (elementwise.h) of m rows act_quant'ed into the codes scratch as w2's call above
// reads them (experts of `layout`, K = n); g is not written.
void SwiGluQuantizeRows(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                        const float* row_weights, const int32_t* row_count, const DeviceWeight& layout, void* codes,
                        size_t codes_bytes, cudaStream_t stream);
// MoeGather (moe.h) and act_quant in one pass, for the call above: the codes scratch's row r <
// max_rows (r < *row_count where row_count, DEVICE int32, is given) is act_quant of x's row
// sorted_slots[r] / top_k as BF16 in the BF16 order ExpertsFp4Bf16Kernel reads, and row_weights[r] =
// expert_weights[sorted_slots[r]] (when row_weights is given); rows past the count or of a negative
// slot are untouched. d % 128 == 0; codes of at least ExpertsPaddedRows(max_rows) · d · 2 bytes.
void GatherQuantizeRowsBf16(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots,
                            const int32_t* row_count, int64_t top_k, int64_t max_rows, const float* expert_weights,
                            float* row_weights, void* codes, size_t codes_bytes, cudaStream_t stream);
// ClampedSwiGlu (elementwise.h: its values, bit for bit) and act_quant in one pass, for w2's call
// above: the codes scratch's row r < m (r < *row_count where row_count, DEVICE int32, is given) is
// act_quant of silu(min(g_r, limit)) · clamp(u_r) · row_weights[r] as BF16 in the BF16 order
// ExpertsFp4Bf16Kernel reads; g is not written, other rows are untouched. n % 128 == 0; g and u
// rows 16-byte aligned; codes of at least ExpertsPaddedRows(m) · n · 2 bytes.
void SwiGluQuantizeRowsBf16(const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n,
                            float limit, const float* row_weights, const int32_t* row_count, void* codes,
                            size_t codes_bytes, cudaStream_t stream);
// Whether the model takes it where w2's input goes to the BF16 experts kernel (DEEPINFER_SWIGLU_BF16:
// 0 or 1, read once; unset: on, the same bits as quantizing in the call; docs/performance.md,
// version 59).
bool SwiGluQuantizeRowsBf16On();
// Codes bytes ExpertsLinear can use for rows_bound rows of x (0 where no kernel uses any): x's
// codes and scales, and for FP4 experts with at least 64 rows per expert on average (prefill)
// room to pre-fold them (ExpertsLinearPreFoldCodesBytes; DEEPINFER_FP4_PREFOLD=0 or 1, read once,
// asks for never or always), unless the experts are kept folded (`folded`: x's codes alone).
size_t ExpertsLinearCodesBytes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout, LinearMath math,
                               bool folded = false);
// FP4 experts kept folded for the whole run (the option of docs/performance.md, version 21): each
// expert's pass-0 folded e4m3 codes [N, K], fold words and later-pass flags, as the per-call
// pre-fold writes them: about twice the experts' FP4 bytes. Bytes for `num_experts` experts of
// `layout` under `math`: 0 where ExpertsLinear would not read them (not FP4 with e8m0 scales on
// the warpgroup-MMA FP8-input path of this device).
size_t FoldedExpertsBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math);
// Writes them for the experts of `weights` (the device table, as ExpertsLinear's) into `out`
// (DEVICE, 256-byte aligned, FoldedExpertsBytes bytes). Synchronizes `stream` (load time).
void FoldExperts(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                 size_t bytes, cudaStream_t stream);
// Tests only: how many ExpertsLinear launches this process has run on experts kept folded.
uint64_t FoldedExpertsLaunchesForTesting();
// FP4 experts' chunk words for the register-fed kernel of their 1-16-row tiles: per expert, the
// pass-0 fold word of every (row, 128-column chunk) with its row scale, and each 64-row block's
// later-pass mask, written once at load so that each item copies them instead of folding its rows'
// group exponents: the same bits. 4 bytes per row and chunk (as many as the e8m0 scales: 1/16 of
// the FP4 bytes). Bytes for `num_experts` experts of `layout` under `math`: 0 where no kernel reads
// them (not FP4 with e8m0 scales on the warpgroup-MMA FP8-input path of this device, K over 8192)
// or DEEPINFER_FP4_CHUNK_WORDS=0 (read once).
size_t Fp4ChunkWordsBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math);
// Writes them for the experts of `weights` (the device table, as ExpertsLinear's) into `out`
// (DEVICE, 256-byte aligned, Fp4ChunkWordsBytes bytes). Synchronizes `stream` (load time).
void WriteFp4ChunkWords(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                        size_t bytes, cudaStream_t stream);
// FP4 experts' tiles for the register-fed kernel of their 1-16-row tiles: each expert's nibbles again,
// each warp's 16 rows of a 128-column chunk as one contiguous KiB (wgmma::rs::TileBytesOfExpert's
// layout: the rows padded to a multiple of 64 with zeros), so that a warp reads one range a chunk
// instead of 16 pieces of 64 bytes a row apart (docs/performance.md version 46: the row-major reads
// reach ~72% of the copy rate, the tiles ~100%). As many bytes as the experts' nibbles. Bytes for
// `num_experts` experts of `layout` under `math`: 0 where no kernel reads them (as
// Fp4ChunkWordsBytes) or DEEPINFER_EXPERTS_TILES is not 1 (read once; unset: off).
size_t Fp4ExpertTilesBytes(const DeviceWeight& layout, int64_t num_experts, LinearMath math);
// Writes them for the experts of `weights` (the device table, as ExpertsLinear's) into `out`
// (DEVICE, 256-byte aligned, Fp4ExpertTilesBytes bytes). Synchronizes `stream` (load time).
void WriteFp4ExpertTiles(const DeviceWeight* weights, const DeviceWeight& layout, int64_t num_experts, void* out,
                         size_t bytes, cudaStream_t stream);
// Whether FP4 experts of `layout` are rewritten chunk-major in place at load under `math`
// (DEEPINFER_EXPERTS_IN_PLACE, read once; unset or 1: on, 0: off): FP4 weights in rows without
// padding, K a multiple of 128, N of 64, whose products take the FP8-input warpgroup-MMA kernels
// (the only ones that read chunk-major nibbles; ExpertsLinear refuses them on any other path,
// Linear always).
bool Fp4ExpertsChunkMajorInPlace(const DeviceWeight& layout, LinearMath math);
// `w` (rows as stored) as its chunk-major rewrite describes it: data_row_stride 64 bytes,
// data_chunk_stride out_features · 64.
DeviceWeight ChunkMajorOf(const DeviceWeight& w);
// Rewrites the nibbles of experts[0 .. num_experts) (HOST array; each must pass
// Fp4ExpertsChunkMajorInPlace, one shape) chunk-major in place: chunk c of row r at byte
// (c · out_features + r) · 64, each 32-bit word sign-split (cpu::SignSplitWord). Their DeviceWeights
// then become ChunkMajorOf's (the caller's part).
// Synchronizes `stream` (load time).
void RewriteFp4ExpertsChunkMajor(const DeviceWeight* experts, int64_t num_experts, LinearMath math,
                                 cudaStream_t stream);
// Tests only: DEEPINFER_EXPERTS_IN_PLACE's switch on (1), off (0), or as the variable says (-1).
void SetExpertsInPlaceForTesting(int mode);
// Tests only: Fp4ExpertTilesBytes's switch on (1), off (0), or as DEEPINFER_EXPERTS_TILES says (-1,
// the default: off unless 1); and how many register-fed launches have read experts' tiles.
void SetFp4ExpertTilesForTesting(int mode);
uint64_t Fp4ExpertTilesLaunchesForTesting();
// Tests only: DEEPINFER_EXPERTS_TILES_SIGN_SPLIT's switch on (1), off (0), or as the variable says
// (-1, the default: on unless 0), set before the tiles are written; and how many register-fed
// launches have read tiles in the sign-split layout.
void SetFp4TilesSignSplitForTesting(int mode);
uint64_t Fp4TilesSignSplitLaunchesForTesting();
// Tests only: DEEPINFER_EXPERTS_TILES_CHUNK_MAJOR's switch on (1: chunk-major tiles), off (0:
// warp-major), or as the variable says (-1, the default: warp-major unless 1), set before the tiles
// are written.
void SetFp4TilesChunkMajorForTesting(int mode);
// Tests only: Fp4ChunkWordsBytes's switch on (1), off (0), or as DEEPINFER_FP4_CHUNK_WORDS says (-1,
// the default: on unless 0); and how many register-fed or in-block launches have read chunk words.
void SetFp4ChunkWordsForTesting(int mode);
uint64_t Fp4ChunkWordsLaunchesForTesting();
// Codes bytes with which ExpertsLinear pre-folds FP4 experts (0 where it cannot): x's codes, then
// per group of experts (up to 1 GiB, at least one expert) their pass-0 folded e4m3 codes [N, K]
// and fold words, written once per call by one kernel and read by the warpgroup-MMA tiles as FP8
// weights. The same bits as without (the same codes reach the same MMAs); ExpertsLinear
// pre-folds where ExpertsLinearCodesBytes's rule asks for it and its codes scratch holds x's codes
// and at least one expert, in groups of as many as it holds.
size_t ExpertsLinearPreFoldCodesBytes(int64_t rows_bound, int64_t num_experts, const DeviceWeight& layout,
                                      LinearMath math);

}  // namespace deepinfer::cuda
