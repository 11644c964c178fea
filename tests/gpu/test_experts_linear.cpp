// cuda::ExpertsLinear (the routed experts' grouped projection) against cuda::Linear on each expert's
// rows (bit for bit: same summation order) and against cpu::Linear (the order bound of
// test_linear.cpp), for every weight format, odd and Flash-sized shapes, empty experts, rows past
// the device count; the device-count variants of MoeGather and ClampedSwiGlu; and ops::ExpertsLinear
// on both backends.
#include "kernels/cuda/linear.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/linear_test_util.h"
#include "kernels/cpu/fp4_fold.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/moe.h"
#include "ops/ops.h"
#include "tensor/linear_weight.h"

namespace deepinfer::test {
namespace {

constexpr uint32_t kSentinel = 0xffffffffu;  // bits of the memory nothing may write

// E expert weights [N, K] of one format, cut at distinct offsets from one random pool: every expert
// has its own pointer and its own values, and every fifth one starts off the vector-load alignment.
// `pad` stored elements follow each row. Expert e's data starts data_step·e (+1 for every fifth)
// stored elements in, its scales scale_step·e.
// e8m0_range: {lo, hi} draws e8m0 scales uniformly in [lo, hi] instead of the spec's usual range
// ({0, 0}: the usual one).
class ExpertPool {
 public:
  // misalign_fifth: every fifth expert's data one element past its step (byte loads for FP4).
  ExpertPool(const Spec& spec, int64_t experts, int64_t n, int64_t k, uint64_t seed, int64_t pad = 0,
             int64_t data_step = 28, int64_t scale_step = 3, std::pair<uint8_t, uint8_t> e8m0_range = {0, 0},
             bool misalign_fifth = true)
      : spec_(spec),
        experts_(experts),
        n_(n),
        k_(k),
        data_step_(data_step),
        scale_step_(scale_step),
        misalign_fifth_(misalign_fifth) {
    const WeightStorage storage = StorageFor(spec, n, k, pad);
    cols_ = storage.cols;
    scale_rows_ = storage.scale_rows;
    scale_cols_ = storage.scale_cols;
    data_ = RandomWeightData(spec, static_cast<size_t>(DataOffset(experts - 1) + n * cols_), seed);
    const size_t scales = static_cast<size_t>(ScaleOffset(experts - 1) + scale_rows_ * scale_cols_);
    if (e8m0_range.second > 0 && spec.scale_dtype == DType::kF8E8M0) {
      scale_ = RandomE8m0(scales, seed + 1, e8m0_range.first, e8m0_range.second);
    } else {
      scale_ = RandomWeightScales(spec, scales, seed + 1);
    }
    d_data_.emplace(data_);
    d_scale_.emplace(scale_);
    std::vector<cuda::DeviceWeight> table;
    for (int64_t e = 0; e < experts; ++e) {
      table.push_back(Device(e));
      cuda::CheckWeight(table.back());
    }
    d_table_.emplace(table);
  }

  int64_t experts() const { return experts_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const char* name() const { return spec_.name; }
  const cuda::DeviceWeight* table() const { return d_table_->get(); }

  // Expert e's weight in host memory (for the CPU).
  LinearWeight View(int64_t e) {
    LinearWeight w;
    w.format = spec_.format;
    w.out_features = n_;
    w.in_features = k_;
    w.data = TensorView(data_.data() + DataOffset(e) * DTypeSize(spec_.dtype), spec_.dtype, {n_, cols_});
    if (spec_.format != WeightFormat::kDense) {
      w.scale = TensorView(scale_.data() + ScaleOffset(e) * DTypeSize(spec_.scale_dtype), spec_.scale_dtype,
                           {scale_rows_, scale_cols_});
    }
    return w;
  }

  // Expert e's weight in device memory.
  cuda::DeviceWeight Device(int64_t e) const {
    cuda::DeviceWeight w;
    w.format = DeviceFormat(spec_.format);
    w.dtype = spec_.dtype;
    w.scale_dtype = spec_.scale_dtype;
    w.out_features = n_;
    w.in_features = k_;
    w.data = d_data_->get() + DataOffset(e) * DTypeSize(spec_.dtype);
    w.data_row_stride = cols_;
    if (spec_.format != WeightFormat::kDense) {
      w.scale = d_scale_->get() + ScaleOffset(e) * DTypeSize(spec_.scale_dtype);
      w.scale_row_stride = scale_cols_;
    }
    return w;
  }

 private:
  // In stored elements.
  int64_t DataOffset(int64_t e) const { return data_step_ * e + (misalign_fifth_ && e % 5 == 4 ? 1 : 0); }
  int64_t ScaleOffset(int64_t e) const { return scale_step_ * e; }

  Spec spec_;
  int64_t experts_, n_, k_, data_step_, scale_step_, cols_ = 0, scale_rows_ = 0, scale_cols_ = 0;
  bool misalign_fifth_;
  std::vector<uint8_t> data_, scale_;
  std::optional<DeviceArray<uint8_t>> d_data_, d_scale_;
  std::optional<DeviceArray<cuda::DeviceWeight>> d_table_;
};

std::vector<int32_t> Offsets(const std::vector<int32_t>& counts) {
  std::vector<int32_t> off(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

// Runs ExpertsLinear over rows_bound rows of x (row stride ldx) with the given per-expert row
// counts and checks: (1) y equals cuda::Linear run on each expert's rows bit for bit, including
// the memory neither may write (y prefilled with a sentinel: rows at or past offsets[E], columns
// past N); (2) the experts in `cpu_experts` (all when empty) against cpu::Linear within the order
// bound. pre_fold_group > 0: codes scratch with room to pre-fold that many FP4 experts at a time
// (ExpertsLinearPreFoldCodesBytes; the groups' kernels then run, with Linear's bits still).
// folded: the FP4 experts kept folded (cuda::FoldExperts) and read as such. chunk_words: the FP4
// experts' chunk words (cuda::WriteFp4ChunkWords) given to the register-fed kernel. tiles: the FP4
// experts' tiles (cuda::WriteFp4ExpertTiles) given too. linear_bits = false: (1) checks only the memory
// neither may write (the FP4 experts on BF16 MMAs sum in another order than Linear).
void CheckExperts(ExpertPool& pool, const std::vector<int32_t>& counts, int64_t rows_bound, int64_t ldx, int64_t ldy,
                  uint64_t seed, std::vector<int64_t> cpu_experts = {}, int64_t pre_fold_group = 0,
                  bool folded = false, bool chunk_words = false, bool tiles = false, bool linear_bits = true) {
  const int64_t num_experts = pool.experts(), n = pool.n(), k = pool.k();
  ASSERT_EQ(static_cast<int64_t>(counts.size()), num_experts);
  const std::vector<int32_t> off = Offsets(counts);
  ASSERT_LE(off.back(), rows_bound);
  const std::string what = std::string(pool.name()) + " E=" + std::to_string(num_experts) + " [" +
                           std::to_string(k) + " -> " + std::to_string(n) + "] rows " + std::to_string(off.back()) +
                           "/" + std::to_string(rows_bound) + " ldx=" + std::to_string(ldx) +
                           " ldy=" + std::to_string(ldy);
  SCOPED_TRACE(what);

  std::vector<float> xs = RandomFloats(static_cast<size_t>(rows_bound * ldx), seed);
  RoundForFp8Act(xs, rows_bound, k, ldx);
  DeviceArray<float> dx(xs);
  DeviceArray<int32_t> doff(off);
  DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(rows_bound, num_experts));
  DeviceArray<float> dy(static_cast<size_t>(rows_bound * ldy)), dref(static_cast<size_t>(rows_bound * ldy));
  dy.Fill(0xff);
  dref.Fill(0xff);
  // With the codes scratch where the path can use one (the FP8-input path on warpgroup MMAs, every
  // tile); Linear below then gets its scratch too, so both run the warpgroup MMAs (whose sums round
  // differently from the mma.sync kernels').
  const size_t codes_bytes =
      pre_fold_group > 0
          ? cuda::ExpertsLinearPreFoldCodesBytes(rows_bound, pre_fold_group, pool.Device(0), TestLinearMath())
          : cuda::ExpertsLinearCodesBytes(rows_bound, num_experts, pool.Device(0), TestLinearMath(), folded);
  DeviceArray<uint8_t> codes(codes_bytes);
  const size_t folded_bytes = folded ? cuda::FoldedExpertsBytes(pool.Device(0), num_experts, TestLinearMath()) : 0;
  ASSERT_EQ(folded, folded_bytes > 0) << "FoldedExpertsBytes";
  DeviceArray<uint8_t> folded_codes(folded_bytes);
  if (folded) cuda::FoldExperts(pool.table(), pool.Device(0), num_experts, folded_codes.get(), folded_bytes, nullptr);
  const size_t words_bytes =
      chunk_words ? cuda::Fp4ChunkWordsBytes(pool.Device(0), num_experts, TestLinearMath()) : size_t{0};
  ASSERT_EQ(chunk_words, words_bytes > 0) << "Fp4ChunkWordsBytes";
  DeviceArray<uint8_t> words(words_bytes);
  if (chunk_words) {
    cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), num_experts, words.get(), words_bytes, nullptr);
  }
  const size_t tiles_bytes = tiles ? cuda::Fp4ExpertTilesBytes(pool.Device(0), num_experts, TestLinearMath()) : 0;
  ASSERT_EQ(tiles, tiles_bytes > 0) << "Fp4ExpertTilesBytes";
  DeviceArray<uint8_t> expert_tiles(tiles_bytes);
  if (tiles) {
    expert_tiles.Fill(0xa5);  // every byte the kernel reads must be written
    cuda::WriteFp4ExpertTiles(pool.table(), pool.Device(0), num_experts, expert_tiles.get(), tiles_bytes, nullptr);
  }
  cuda::ExpertsLinear(dx.get(), ldx, rows_bound, doff.get(), num_experts, pool.table(), pool.Device(0), dy.get(), ldy,
                      scratch.get(), nullptr, TestLinearMath(), false, codes.get(), codes_bytes,
                      folded ? folded_codes.get() : nullptr, chunk_words ? words.get() : nullptr,
                      tiles ? expert_tiles.get() : nullptr);
  // BF16 experts keep the mma.sync kernels' order; Linear's BF16 products on warpgroup MMAs
  // (DenseSplitKernel) sum in another, so the reference takes the mma.sync kernels too.
  ScopedDenseSplit mma_sync_for_bf16(0);
  for (int64_t e = 0; e < num_experts; ++e) {
    const size_t linear_bytes =
        codes_bytes == 0 ? 0 : cuda::LinearScratchBytes(counts[e], pool.Device(e), TestLinearMath());
    DeviceArray<uint8_t> linear_scratch(linear_bytes);
    cuda::Linear(dx.get() + off[e] * ldx, ldx, counts[e], pool.Device(e), dref.get() + off[e] * ldy, ldy, nullptr,
                 TestLinearMath(), linear_scratch.get(), linear_bytes);
  }
  const std::vector<float> y = dy.ToHost();
  const std::vector<uint32_t> y_bits = Bits(y);
  if (linear_bits) EXPECT_TRUE(AllEqual(y_bits, Bits(dref.ToHost()), "ExpertsLinear vs Linear per expert"));
  bool untouched = true;
  for (int64_t r = 0; r < rows_bound; ++r) {
    for (int64_t o = r < off.back() ? n : 0; o < ldy; ++o) untouched = untouched && y_bits[r * ldy + o] == kSentinel;
  }
  EXPECT_TRUE(untouched) << "a row at or past offsets[E] or a column past N was written";

  if (cpu_experts.empty()) {
    cpu_experts.resize(static_cast<size_t>(num_experts));
    std::iota(cpu_experts.begin(), cpu_experts.end(), 0);
  }
  for (const int64_t e : cpu_experts) {
    const int64_t m = counts[e];
    if (m == 0) continue;
    std::vector<float> x(static_cast<size_t>(m * k)), xabs(x.size());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) x[r * k + i] = xs[(off[e] + r) * ldx + i];
    }
    for (size_t i = 0; i < x.size(); ++i) xabs[i] = std::fabs(x[i]);
    const LinearWeight w = pool.View(e);
    std::vector<float> want(static_cast<size_t>(m * n)), sabs(want.size()), got(want.size());
    cpu::Linear(TensorView(x.data(), DType::kF32, {m, k}), w, TensorView(want.data(), DType::kF32, {m, n}));
    std::vector<float> wabs = AbsDense(w);
    LinearWeight dense;
    dense.out_features = n;
    dense.in_features = k;
    dense.data = TensorView(wabs.data(), DType::kF32, {n, k});
    cpu::Linear(TensorView(xabs.data(), DType::kF32, {m, k}), dense, TensorView(sabs.data(), DType::kF32, {m, n}));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t o = 0; o < n; ++o) got[r * n + o] = y[(off[e] + r) * ldy + o];
    }
    EXPECT_TRUE(WithinOrderBound(got, want, sabs, k, "expert " + std::to_string(e) + " vs cpu::Linear"));
  }
}

// Per-expert row counts of `tokens` tokens each routed to top_k distinct experts at random.
std::vector<int32_t> RandomRouting(int64_t tokens, int64_t top_k, int64_t num_experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> counts(static_cast<size_t>(num_experts), 0), pool(static_cast<size_t>(num_experts));
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      std::swap(pool[j], pool[j + rng() % (num_experts - j)]);
      ++counts[pool[j]];
    }
  }
  return counts;
}

// Counts 0–50 exercise every tile kind: 1–16 rows (the four GEMV kinds), 17–32 (one tiled tile),
// 33 = 32 + 1 and 40 = 32 + 8 (a full tile, then the rest as a GEMV tile), 50 = 32 + 18 (two
// tiled tiles).
const std::vector<int32_t> kMixedCounts = {0, 1, 3, 0, 17, 40, 2, 12, 33, 50, 6};

// A pool of kMixedCounts experts of `spec` [k -> n] (`pad` stored elements after each row),
// checked with the first `layouts` of: contiguous with no spare rows; strided, misaligned, with
// spare rows; strided with 16-byte aligned rows. Seeds: ++seed for the pool and per check.
// data_step, scale_step: ExpertPool's.
void CheckMixedCounts(const Spec& spec, int64_t n, int64_t k, int64_t pad, int layouts, uint64_t& seed,
                      int64_t data_step = 28, int64_t scale_step = 3) {
  ExpertPool pool(spec, static_cast<int64_t>(kMixedCounts.size()), n, k, ++seed, pad, data_step, scale_step);
  const int64_t rows = Offsets(kMixedCounts).back();
  CheckExperts(pool, kMixedCounts, rows, k, n, ++seed);
  if (layouts > 1) CheckExperts(pool, kMixedCounts, rows + 7, k + 5, n + 3, ++seed);
  if (layouts > 2) CheckExperts(pool, kMixedCounts, rows + 1, k + 4, n + 7, ++seed);
}

// 64 tokens × top-6 of 256 experts (routing seed `seed`; at sanitizer sizes 16 tokens, still
// mostly the 1–2-row decode kind: racecheck of 64 took 241 s and 131.5 GB of host memory),
// routed experts' w1/w3 [4096 -> 2048] and w2 [2048 -> 4096]; the CPU checks six experts, the
// per-expert Linear all of them.
void CheckDecodeFlash(uint64_t seed) {
  const int64_t tokens = SanitizerSizes() ? 16 : 64;
  const std::vector<int32_t> counts = RandomRouting(tokens, 6, 256, seed);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}}) {
    ExpertPool pool(kFp4, 256, n, k, seed + 1 + static_cast<uint64_t>(n));
    std::vector<int64_t> sample;
    for (int64_t e = 0; e < 256 && sample.size() < 6; e += 37) sample.push_back(e);
    CheckExperts(pool, counts, tokens * 6, k, n, seed + 2 + static_cast<uint64_t>(n), sample);
  }
}

// The prefill's FP4 expert kernels for the scope: in-block, converted in the MMA warpgroups'
// registers (two units), TMA-fed from 64 tokens and warp-specialized, one converted tile per token
// tile (no tile pairs).
struct ScopedFp4RegistersTma {
  ScopedFp4InBlock converted{1, 2};
  ScopedFp4InBlockRegisters registers{1};
  ScopedTmaKernels tma{1, 64};
  ScopedTmaWarpSpecialized ws{1};
  ScopedFp4TilePairs pairs{0};
};

TEST(CudaExpertsLinear, AllFormatsOddShapes) {
  DI_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Spec& spec : kAllSpecs) {
    // [320 -> 200]: off the 128/256 grids, aligned rows; [96|100 -> 130]: K not a multiple of 8
    // (FP4 needs 32) and padded rows (scalar loads).
    const int64_t small_k = spec.format == WeightFormat::kFp4 ? 96 : 100;
    CheckMixedCounts(spec, 200, 320, 0, 3, seed);
    CheckMixedCounts(spec, 130, small_k, 3, 3, seed);
  }
}

// The FP4 GEMV's 16-byte path (GemvBlockWideFp4: super-slabs of 1024 columns) where it applies,
// with e8m0 and f32 scales: K = 1152 (a full super-slab, then one slab of the next), K = 384 (a
// part of one), N = 203 (a warp's second row past N). Every fifth expert starts off the 4-byte
// alignment and takes version 2's path, with the same bits; the others start 16-byte aligned
// (data every 32 bytes, scales every 4 elements).
TEST(CudaExpertsLinear, Fp4SixteenByteCopies) {
  DI_REQUIRE_GPU();
  uint64_t seed = 500;
  const Spec fp4_f32{"fp4-f32", WeightFormat::kFp4, DType::kFP4E2M1x2, DType::kF32};
  for (const Spec& spec : {kFp4, fp4_f32}) {
    CheckMixedCounts(spec, 203, 1152, 0, 3, seed, 32, 4);
    CheckMixedCounts(spec, 203, 384, 0, 1, seed, 32, 4);
  }
}

TEST(CudaExpertsLinear, EmptyExpertsOneExpertAndSingleRows) {
  DI_REQUIRE_GPU();
  uint64_t seed = 300;
  for (const Spec& spec : {kF32, kBf16, kFp8E8m0, kFp4}) {
    const int64_t k = spec.format == WeightFormat::kFp4 ? 64 : 72;
    ExpertPool pool(spec, 5, 40, k, ++seed);
    CheckExperts(pool, {0, 0, 77, 0, 0}, 80, k, 40, ++seed);  // one expert holds every row
    CheckExperts(pool, {0, 0, 0, 0, 0}, 10, k, 40, ++seed);   // no rows at all: y untouched
    CheckExperts(pool, {0, 0, 0, 0, 1}, 1, k, 40, ++seed);    // one row, last expert
    CheckExperts(pool, {1, 1, 1, 1, 1}, 9, k, 40, ++seed);    // decode-like: one row each
  }
}

TEST(CudaExpertsLinear, EveryCountUpTo40) {
  DI_REQUIRE_GPU();
  // Expert e holds e rows: every GEMV row count, every tiled height and the boundaries between them.
  std::vector<int32_t> counts(41);
  std::iota(counts.begin(), counts.end(), 0);
  ExpertPool pool(kFp8E8m0, 41, 72, 600, 7);
  CheckExperts(pool, counts, Offsets(counts).back() + 3, 600, 72, 8);
}

TEST(CudaExpertsLinear, DecodeFlash) {
  DI_REQUIRE_GPU();
  CheckDecodeFlash(11);
}

TEST(CudaExpertsLinear, PrefillFlash) {
  DI_REQUIRE_GPU();
  // 2048 tokens × top-6 of 256 experts (~48 rows each: full tiles and remainders of every kind;
  // at sanitizer sizes 512 tokens, ~12 rows each); the CPU checks three experts, the per-expert
  // Linear all of them.
  const int64_t tokens = SanitizerSizes() ? 512 : 2048;
  const std::vector<int32_t> counts = RandomRouting(tokens, 6, 256, 21);
  ExpertPool pool(kFp4, 256, 2048, 4096, 22);
  const int64_t busiest = std::max_element(counts.begin(), counts.end()) - counts.begin();
  CheckExperts(pool, counts, tokens * 6 + 5, 4096, 2048, 23, {0, busiest, 255});
}

// The tensor-core path: ExpertsLinear still equals Linear (now also on tensor cores) bit for bit
// on every tile kind, and both stay within the order bound of the CPU.
TEST(CudaExpertsLinearMma, AllFormatsAndEveryCount) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  uint64_t seed = 3100;
  for (const Spec& spec : {kBf16, kFp8E8m0, kFp4, kF32}) {
    const int64_t small_k = spec.format == WeightFormat::kFp4 ? 96 : 100;
    CheckMixedCounts(spec, 200, 320, 0, 2, seed);
    CheckMixedCounts(spec, 130, small_k, 3, 2, seed);
  }
  std::vector<int32_t> counts(41);
  std::iota(counts.begin(), counts.end(), 0);
  ExpertPool pool(kFp8E8m0, 41, 72, 1100, 3200);
  CheckExperts(pool, counts, Offsets(counts).back() + 3, 1100, 72, 3201);
}

TEST(CudaExpertsLinearMma, DecodeFlash) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kSplitBf16);
  CheckDecodeFlash(3300);
}

// K % 128 == 0 on an sm_90a device: every tile (1-64 rows) runs on warpgroup MMAs
// (linear_wgmma.cuh) and must give the bits of Linear's warpgroup-MMA path on the expert's rows,
// for FP8 (both scale dtypes) and FP4 weights, partial weight tiles (N = 200), weight rows that
// are not 16-byte aligned (every fifth expert), rows of x that allow no float4 loads, and tiles
// that end inside the next expert's rows or at the row bound.
TEST(CudaExpertsLinearFp8, WarpgroupMmaTiles) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  uint64_t seed = 4700;
  const std::vector<int32_t> counts = {70, 130, 5, 64, 0, 200, 17, 33, 1};
  for (const Spec& spec : {kFp8E8m0, kFp8F32, kFp4}) {
    ExpertPool pool(spec, static_cast<int64_t>(counts.size()), 200, 1024, ++seed);
    // Codes scratch exactly where the warpgroup MMAs run (else, e.g. DEEPINFER_WGMMA=0, the tiles
    // below run mma.sync and are checked the same way).
    const size_t codes_bytes =
        cuda::ExpertsLinearCodesBytes(600, pool.experts(), pool.Device(0), cuda::LinearMath::kFp8Act);
    ASSERT_EQ(codes_bytes > 0, cuda::Fp8ActOnWarpgroupMma()) << spec.name;
    CheckExperts(pool, counts, Offsets(counts).back(), 1024, 200, ++seed);
    CheckExperts(pool, counts, Offsets(counts).back() + 7, 1024 + 5, 203, ++seed);
  }
}

TEST(CudaExpertsLinearFp8, EveryTileKindAndDecodeFlash) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  uint64_t seed = 4500;
  for (const Spec& spec : {kFp8E8m0, kFp4}) {
    CheckMixedCounts(spec, 200, spec.format == WeightFormat::kFp4 ? 1088 : 1100, 0, 2, seed);
  }
  // 64-row tiles on this path: full tiles, then rests of every kind.
  const std::vector<int32_t> long_counts = {70, 130, 5, 64, 0, 200, 17};
  ExpertPool long_pool(kFp8E8m0, static_cast<int64_t>(long_counts.size()), 96, 1100, 4550);
  CheckExperts(long_pool, long_counts, Offsets(long_counts).back(), 1100, 96, 4551);
  const std::vector<int32_t> counts = RandomRouting(64, 6, 256, 4600);
  ExpertPool pool(kFp4, 256, 2048, 4096, 4601);
  CheckExperts(pool, counts, 64 * 6, 4096, 2048, 4602, {0, 37, 74});
}

// FP4 group scales over 18 binades: chunks whose rows need later passes of folded codes
// (linear_wgmma.cuh, FoldPass), in tiles of every kind, equal Linear's bits per expert and stay
// within the order bound of the CPU.
TEST(CudaExpertsLinearFp8, Fp4ScalesAcrossManyBinades) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 64, 17, 200};
  uint64_t seed = 4800;
  // 1, 2, 6, 7 and 8 chunks: fewer chunks than the kernel's 4 cp.async stages, and more.
  for (const int64_t k : {int64_t{128}, int64_t{256}, int64_t{768}, int64_t{896}, int64_t{1024}}) {
    ExpertPool pool(kFp4, static_cast<int64_t>(counts.size()), 200, k, ++seed, 0, 28, 3, {110, 128});
    CheckExperts(pool, counts, Offsets(counts).back() + 3, k, 200, ++seed);
  }
}

// Whether DEEPINFER_FP4_PREFOLD=1 (gpu-run.sh's pre-fold rerun) pre-folds the FP4 experts at every
// row count, so that the register-fed kernels never run.
bool Fp4PreFoldAlways() {
  const char* v = std::getenv("DEEPINFER_FP4_PREFOLD");
  return v != nullptr && std::string(v) == "1";
}

// The FP4 experts' tiles of 1-8 and 9-16 rows on the register-fed kernel (linear_wgmma_rs.cuh): its
// products equal Linear's bits per expert (and the CPU's order bound):
// - every tile kind (the larger tiles on their own kernels), N = 200 (a partial 64-row item);
// - expert weights and scales at offsets that allow 4-byte copies, and (the pool's default steps)
//   at offsets that do not (byte loads);
// - group scales over 18 binades (later passes) at 1, 2, 6, 7 and 8 chunks (fewer than the ring's
//   stages and more; odd and even counts end on either accumulator);
// - a decode routing of the Flash experts, w1/w3 [4096 -> 2048] and w2 [2048 -> 4096];
// - each case with the items folding their rows' group exponents and with the chunk words and
//   later-pass masks written at load (cuda::WriteFp4ChunkWords).
TEST(CudaExpertsLinearFp8, RegisterFedSmallTilesEqualLinear) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  if (Fp4PreFoldAlways()) GTEST_SKIP() << "DEEPINFER_FP4_PREFOLD=1: every row count pre-folded";
  ScopedExpertsRegisterA register_fed(1);
  ScopedFp4ChunkWords words_on(1);
  const uint64_t launches8 = cuda::ExpertsRegisterALaunchesForTesting(8);
  const uint64_t launches16 = cuda::ExpertsRegisterALaunchesForTesting(16);
  const uint64_t word_launches = cuda::Fp4ChunkWordsLaunchesForTesting();
  uint64_t seed = 5100;
  // Each case twice: the items fold their rows' group exponents, then copy the chunk words written
  // at load (cuda::WriteFp4ChunkWords): Linear's bits both ways.
  for (const bool words : {false, true}) {
    SCOPED_TRACE(words ? "chunk words" : "exponents folded per item");
    for (const auto& [data_step, scale_step] : {std::pair<int64_t, int64_t>{32, 4}, {28, 3}}) {
      ExpertPool pool(kFp4, static_cast<int64_t>(kMixedCounts.size()), 200, 1024, ++seed, 0, data_step, scale_step);
      CheckExperts(pool, kMixedCounts, Offsets(kMixedCounts).back() + 5, 1024, 200, ++seed, {}, 0, false, words);
    }
    const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 64, 17, 200, 3, 8};
    for (const int64_t k : {int64_t{128}, int64_t{256}, int64_t{768}, int64_t{896}, int64_t{1024}}) {
      ExpertPool pool(kFp4, static_cast<int64_t>(counts.size()), 200, k, ++seed, 0, 32, 4, {110, 128});
      CheckExperts(pool, counts, Offsets(counts).back() + 3, k, 200, ++seed, {}, 0, false, words);
    }
    // 256 tokens: ~6 rows an expert, 9-16 for about one in seven (16-token tiles).
    const int64_t tokens = SanitizerSizes() ? 16 : 256;
    const std::vector<int32_t> decode = RandomRouting(tokens, 6, 256, 5200);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}}) {
      ExpertPool pool(kFp4, 256, n, k, 5201 + static_cast<uint64_t>(n), 0, 32, 4);
      CheckExperts(pool, decode, tokens * 6, k, n, 5202 + static_cast<uint64_t>(n), {0, 37, 74}, 0, false, words);
    }
  }
  EXPECT_GT(cuda::ExpertsRegisterALaunchesForTesting(8), launches8) << "the 8-token register-fed kernel never ran";
  EXPECT_GT(cuda::ExpertsRegisterALaunchesForTesting(16), launches16) << "the 16-token register-fed kernel never ran";
  EXPECT_GT(cuda::Fp4ChunkWordsLaunchesForTesting(), word_launches) << "no register-fed launch read chunk words";
}

// FP4 experts' tiles (DEEPINFER_EXPERTS_TILES: each warp's 16 rows of a chunk one contiguous KiB,
// written once): the register-fed kernel of the 1-16-row tiles reads them with Linear's bits per
// expert, with chunk words and without; N = 200 and 40 (items past the last row: the tiles' zero
// rows); weight rows 16-byte aligned and not (the writer's byte loads); the Flash decode routing at
// 256 tokens, w1/w3 and w2; the tiles' words sign-split and as stored, the tiles warp-major and
// chunk-major. Each call checks that the tiles were read, in the word layout asked for.
TEST(CudaExpertsLinearFp8, RegisterFedTilesEqualLinear) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  if (Fp4PreFoldAlways()) GTEST_SKIP() << "DEEPINFER_FP4_PREFOLD=1: every row count pre-folded";
  ScopedExpertsRegisterA register_fed(1);
  const ScopedSwitch<cuda::SetFp4ExpertTilesForTesting> tiles_on(1);
  // Each case with the tiles' words in the sign-split layout (DEEPINFER_EXPERTS_TILES_SIGN_SPLIT, the
  // default), then as stored; warp-major (the default), then sign-split words chunk-major.
  for (const auto& [sign_split, chunk_major] : {std::pair<int, int>{1, 0}, {0, 0}, {1, 1}}) {
    SCOPED_TRACE(testing::Message() << (sign_split != 0 ? "sign-split words" : "words as stored")
                                    << (chunk_major != 0 ? ", chunk-major" : ", warp-major"));
    const ScopedSwitch<cuda::SetFp4TilesSignSplitForTesting> split_switch(sign_split);
    const ScopedSwitch<cuda::SetFp4TilesChunkMajorForTesting> order_switch(chunk_major);
    const auto check_tiles = [sign_split](ExpertPool& pool, const std::vector<int32_t>& counts, int64_t rows_bound,
                                          int64_t ldx, int64_t ldy, uint64_t seed, bool words,
                                          std::vector<int64_t> cpu_experts = {}) {
      const ScopedFp4ChunkWords chunk_words(words ? 1 : 0);
      const uint64_t before = cuda::Fp4ExpertTilesLaunchesForTesting();
      const uint64_t split_before = cuda::Fp4TilesSignSplitLaunchesForTesting();
      CheckExperts(pool, counts, rows_bound, ldx, ldy, seed, std::move(cpu_experts), 0, false, words, true);
      EXPECT_GT(cuda::Fp4ExpertTilesLaunchesForTesting(), before) << "no launch read the tiles";
      if (sign_split != 0) {
        EXPECT_GT(cuda::Fp4TilesSignSplitLaunchesForTesting(), split_before) << "no launch read sign-split tiles";
      } else {
        EXPECT_EQ(cuda::Fp4TilesSignSplitLaunchesForTesting(), split_before) << "sign-split tiles with the switch off";
      }
    };
    uint64_t seed = 5700;
    const std::vector<int32_t> counts = {1, 16, 0, 9, 3, 8, 14, 2};
    for (const bool words : {true, false}) {
      SCOPED_TRACE(words ? "with chunk words" : "without chunk words");
      for (const auto& [data_step, scale_step] : {std::pair<int64_t, int64_t>{32, 4}, {28, 3}}) {
        for (const int64_t n : {int64_t{200}, int64_t{40}}) {
          ExpertPool pool(kFp4, static_cast<int64_t>(counts.size()), n, 1024, ++seed, 0, data_step, scale_step,
                          {110, 128});
          check_tiles(pool, counts, Offsets(counts).back() + 5, 1024, n, ++seed, words);
        }
      }
    }
    const int64_t tokens = SanitizerSizes() ? 16 : 256;
    const std::vector<int32_t> decode = RandomRouting(tokens, 6, 256, 5750);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}}) {
      SCOPED_TRACE(testing::Message() << "decode [" << k << " -> " << n << "]");
      ExpertPool pool(kFp4, 256, n, k, 5751 + static_cast<uint64_t>(n), 0, 32, 4);
      check_tiles(pool, decode, tokens * 6, k, n, 5752 + static_cast<uint64_t>(n), true, {0, 37, 74});
    }
  }
}

// ExpertsLinear over `table` (device DeviceWeights of `layout`'s shape) on rows_bound rows of x
// (RoundForFp8Act'ed, row stride k) with the experts' row counts, on the FP8-input path with its
// codes scratch (pre_fold_group > 0: room to pre-fold that many experts at a time) and the chunk
// words where asked: y's bits (row stride n, a sentinel where nothing may write).
std::vector<uint32_t> ExpertsBits(const cuda::DeviceWeight* table, const cuda::DeviceWeight& layout,
                                  int64_t num_experts, const std::vector<int32_t>& counts, int64_t rows_bound,
                                  uint64_t seed, bool chunk_words, int64_t pre_fold_group) {
  const int64_t n = layout.out_features, k = layout.in_features;
  std::vector<float> xs = RandomFloats(static_cast<size_t>(rows_bound * k), seed);
  RoundForFp8Act(xs, rows_bound, k, k);
  DeviceArray<float> dx(xs);
  DeviceArray<int32_t> doff(Offsets(counts));
  DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(rows_bound, num_experts));
  DeviceArray<float> dy(static_cast<size_t>(rows_bound * n));
  dy.Fill(0xff);
  const size_t codes_bytes =
      pre_fold_group > 0 ? cuda::ExpertsLinearPreFoldCodesBytes(rows_bound, pre_fold_group, layout, TestLinearMath())
                         : cuda::ExpertsLinearCodesBytes(rows_bound, num_experts, layout, TestLinearMath(), false);
  DeviceArray<uint8_t> codes(codes_bytes);
  const size_t words_bytes = chunk_words ? cuda::Fp4ChunkWordsBytes(layout, num_experts, TestLinearMath()) : 0;
  EXPECT_EQ(chunk_words, words_bytes > 0) << "Fp4ChunkWordsBytes";
  DeviceArray<uint8_t> words(words_bytes);
  if (words_bytes > 0) cuda::WriteFp4ChunkWords(table, layout, num_experts, words.get(), words_bytes, nullptr);
  cuda::ExpertsLinear(dx.get(), k, rows_bound, doff.get(), num_experts, table, layout, dy.get(), n, scratch.get(),
                      nullptr, TestLinearMath(), false, codes.get(), codes_bytes, nullptr,
                      words_bytes > 0 ? words.get() : nullptr);
  return Bits(dy.ToHost());
}

// FP4 experts rewritten chunk-major in place, their words sign-split (DEEPINFER_EXPERTS_IN_PLACE:
// cuda::RewriteFp4ExpertsChunkMajor) give the bits of the same experts in rows, on every kernel of
// the FP8-input path that reads nibbles: the register-fed 8- and 16-token tiles, which read them as
// sign-split tiles (a decode routing at the Flash experts' shapes, w1/w3 [4096 -> 2048] and w2
// [2048 -> 4096]), the 64-row tiles and the prefill's TMA-fed kernels, the BF16 fast-prefill one
// among them (below); with and without chunk words; N = 192 (a partial 128-row block), group scales
// over 18 binades (later passes from the nibbles). N must be a multiple of 64; the paths that read
// rows refuse chunk-major experts.
TEST(CudaExpertsLinearFp8, ChunkMajorInPlaceEqualsRows) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  const ScopedSwitch<cuda::SetExpertsInPlaceForTesting> in_place(1);
  // Two pools of the same bytes: the second rewritten chunk-major.
  const auto check = [](int64_t experts, int64_t n, int64_t k, const std::vector<int32_t>& counts, int64_t rows_bound,
                        uint64_t seed, std::pair<uint8_t, uint8_t> e8m0, int64_t pre_fold_group) {
    SCOPED_TRACE(testing::Message() << "E=" << experts << " [" << k << " -> " << n << "] rows " << rows_bound
                                    << (pre_fold_group > 0 ? ", pre-folded" : ""));
    ExpertPool rows(kFp4, experts, n, k, seed, 0, n * k / 2, 4, e8m0, false);
    ExpertPool moved(kFp4, experts, n, k, seed, 0, n * k / 2, 4, e8m0, false);
    std::vector<cuda::DeviceWeight> host;
    for (int64_t e = 0; e < experts; ++e) host.push_back(moved.Device(e));
    ASSERT_TRUE(cuda::Fp4ExpertsChunkMajorInPlace(host[0], TestLinearMath()));
    cuda::RewriteFp4ExpertsChunkMajor(host.data(), experts, TestLinearMath(), nullptr);
    for (cuda::DeviceWeight& w : host) w = cuda::ChunkMajorOf(w);
    EXPECT_FALSE(cuda::Fp4ExpertsChunkMajorInPlace(host[0], TestLinearMath())) << "rewritten twice";
    DeviceArray<cuda::DeviceWeight> table(host);
    for (const bool words : {true, false}) {
      SCOPED_TRACE(words ? "chunk words" : "no chunk words");
      const std::vector<uint32_t> want =
          ExpertsBits(rows.table(), rows.Device(0), experts, counts, rows_bound, seed + 7, words, pre_fold_group);
      const std::vector<uint32_t> got =
          ExpertsBits(table.get(), host[0], experts, counts, rows_bound, seed + 7, words, pre_fold_group);
      EXPECT_TRUE(AllEqual(got, want, "chunk-major experts vs rows"));
    }
  };
  // 64 tokens over 64 experts: ~6 rows an expert, as 256 tokens over Flash's 256.
  const int64_t tokens = SanitizerSizes() ? 16 : 64;
  const std::vector<int32_t> decode = RandomRouting(tokens, 6, 64, 6100);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}}) {
    const uint64_t tiles = cuda::Fp4ExpertTilesLaunchesForTesting();
    const uint64_t split = cuda::Fp4TilesSignSplitLaunchesForTesting();
    check(64, n, k, decode, tokens * 6, 6101 + static_cast<uint64_t>(n), {0, 0}, 0);
    // Two calls (with and without chunk words) of the rows and two of the experts read as tiles.
    EXPECT_GE(cuda::Fp4ExpertTilesLaunchesForTesting(), tiles + 2) << "the register-fed kernel on the tiles";
    EXPECT_EQ(cuda::Fp4TilesSignSplitLaunchesForTesting() - split, cuda::Fp4ExpertTilesLaunchesForTesting() - tiles)
        << "every tiles launch on sign-split words";
  }
  const std::vector<int32_t> mixed = {1, 16, 0, 9, 70, 130, 200, 3, 64, 17};
  check(10, 192, 1024, mixed, Offsets(mixed).back() + 5, 6110, {110, 128}, 0);
  check(10, 192, 128, mixed, Offsets(mixed).back(), 6111, {110, 128}, 0);
  // Prefill rows (~200 an expert) on each TMA-fed kernel that reads nibbles, each asserted to run:
  // converted in the MMA warpgroups' registers (chunk words; without them the in-block kernel),
  // one converted tile for two token tiles, converted in the blocks, and pre-folded per call at 64-
  // and 128-token tiles (a group of 3 experts' codes scratch).
  if (cuda::TmaKernelsAvailable()) {
    const std::vector<int32_t> prefill = {300, 210, 0, 190, 250, 1, 280, 230};
    const int64_t bound = Offsets(prefill).back();
    ScopedTmaKernels tma(1, 64);
    {
      ScopedFp4InBlock converted(1, 2);
      ScopedFp4InBlockRegisters registers(1);
      const uint64_t rs = cuda::Fp4InBlockRegistersLaunchesForTesting(), blocks = cuda::Fp4InBlockLaunchesForTesting();
      check(8, 256, 1024, prefill, bound, 6120, {110, 128}, 0);
      EXPECT_GT(cuda::Fp4InBlockRegistersLaunchesForTesting(), rs) << "the register-fed prefill kernel did not run";
      EXPECT_GT(cuda::Fp4InBlockLaunchesForTesting(), blocks) << "the in-block kernel did not run (no chunk words)";
      ScopedFp4TilePairs pairs(1);
      const uint64_t pair_launches = cuda::Fp4TilePairsLaunchesForTesting();
      check(8, 192, 1024, prefill, bound, 6121, {110, 128}, 0);
      EXPECT_GT(cuda::Fp4TilePairsLaunchesForTesting(), pair_launches) << "the tile-pair kernel did not run";
    }
    for (const int tile_tokens : {104, 208}) {  // the BF16 fast prefill (chunk words select it)
      ScopedFp4RegistersTma prefill_kernels;
      ScopedFp4Bf16 bf16(1, tile_tokens);
      const uint64_t launches = cuda::Fp4Bf16LaunchesForTesting();
      check(8, 192, 1024, prefill, bound, 6125 + static_cast<uint64_t>(tile_tokens), {110, 128}, 0);
      EXPECT_GT(cuda::Fp4Bf16LaunchesForTesting(), launches) << "the BF16 kernel did not run";
    }
    for (const int tile_tokens : {64, 128}) {
      ScopedFp4InBlock pre_folded(0);
      ScopedTmaKernels tokens_of(1, tile_tokens);
      const uint64_t launches = cuda::TmaLaunchesForTesting(), blocks = cuda::Fp4InBlockLaunchesForTesting();
      check(8, 192, 1024, prefill, bound, 6122 + static_cast<uint64_t>(tile_tokens), {110, 128}, 3);
      EXPECT_GT(cuda::TmaLaunchesForTesting(), launches) << "the pre-folded TMA kernel did not run";
      EXPECT_EQ(cuda::Fp4InBlockLaunchesForTesting(), blocks) << "converted in the blocks, not pre-folded";
    }
  }

  // No rewrite where N is no multiple of 64; the rows' kernels refuse them: f32 SIMT math, and
  // Linear on any path.
  EXPECT_FALSE(cuda::Fp4ExpertsChunkMajorInPlace(ExpertPool(kFp4, 1, 200, 256, 6129, 0, 200 * 128, 4, {0, 0}, false)
                                                     .Device(0),
                                                 TestLinearMath()));
  ExpertPool pool(kFp4, 2, 64, 256, 6130, 0, 64 * 128, 4, {0, 0}, false);
  std::vector<cuda::DeviceWeight> host = {pool.Device(0), pool.Device(1)};
  cuda::RewriteFp4ExpertsChunkMajor(host.data(), 2, TestLinearMath(), nullptr);
  for (cuda::DeviceWeight& w : host) w = cuda::ChunkMajorOf(w);
  DeviceArray<cuda::DeviceWeight> table(host);
  DeviceArray<float> x(static_cast<size_t>(4 * 256)), y(static_cast<size_t>(4 * 64));
  x.Fill(0);
  DeviceArray<int32_t> off(std::vector<int32_t>{0, 2, 4});
  DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(4, 2));
  EXPECT_THROW(cuda::ExpertsLinear(x.get(), 256, 4, off.get(), 2, table.get(), host[0], y.get(), 64, scratch.get(),
                                   nullptr, cuda::LinearMath::kSimtF32),
               std::exception);
  EXPECT_THROW(cuda::Linear(x.get(), 256, 4, host[0], y.get(), 64, nullptr, TestLinearMath()), std::exception);
  cuda::DeviceWeight bad = host[0];
  bad.data_chunk_stride = 64 * 64 - 16;  // under a chunk's rows
  EXPECT_THROW(cuda::CheckWeight(bad), std::exception);
}

// FP4 experts pre-folded once per call (ExpertsLinearPreFoldCodesBytes): the bits of Linear's FP4
// kernel, which folds per chunk in shared memory, on every tile kind; in groups of 1, 3 and all 8
// experts (the group kernels skip the other experts' tiles); with group scales over 18 binades
// (later passes from the nibbles), N = 200 (a partial 128-row block), weight rows that are not
// 16-byte aligned (every fifth expert: byte loads), x rows that allow no float4 loads; 1, 2, 3, 7
// and 8 chunks (odd counts end on the other of the pipelined block's two accumulators). The 491
// rows are 61 per expert, under the 64 from which ExpertsLinear pre-folds; a row bound of 520 (65
// per expert) asks for it.
TEST(CudaExpertsLinearFp8, PreFoldedFp4EqualsLinear) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 64, 17, 200};
  const int64_t experts = static_cast<int64_t>(counts.size()), rows = Offsets(counts).back(), bound = 520;
  ASSERT_EQ(rows, 491);
  uint64_t seed = 5300;
  for (const int64_t k : {int64_t{128}, int64_t{256}, int64_t{384}, int64_t{896}, int64_t{1024}}) {
    for (const bool wide_scales : {false, true}) {
      const std::pair<uint8_t, uint8_t> e8m0 = wide_scales ? std::pair<uint8_t, uint8_t>{110, 128}
                                                           : std::pair<uint8_t, uint8_t>{0, 0};
      ExpertPool pool(kFp4, experts, 200, k, ++seed, 0, 28, 3, e8m0);
      if (std::getenv("DEEPINFER_FP4_PREFOLD") == nullptr) {
        const auto codes = [&](int64_t b) {
          return cuda::ExpertsLinearCodesBytes(b, experts, pool.Device(0), cuda::LinearMath::kFp8Act);
        };
        EXPECT_LT(codes(rows), cuda::ExpertsLinearPreFoldCodesBytes(rows, experts, pool.Device(0),
                                                                    cuda::LinearMath::kFp8Act));
        EXPECT_EQ(codes(bound), cuda::ExpertsLinearPreFoldCodesBytes(bound, experts, pool.Device(0),
                                                                     cuda::LinearMath::kFp8Act));
      }
      for (const int64_t group : {int64_t{1}, int64_t{3}, experts}) {
        SCOPED_TRACE(testing::Message() << "group of " << group << (wide_scales ? ", 18 binades" : ""));
        CheckExperts(pool, counts, bound, k, 200, ++seed, {}, group);
        if (group == 3) CheckExperts(pool, counts, bound, k + 5, 203, ++seed, {0, 2, 7}, group);
      }
    }
  }
}

// FP4 experts kept folded for the run (cuda::FoldExperts, --fold-fp4-experts): every tile, at
// decode and prefill row counts, reads the folded codes instead of converting nibbles, with
// Linear's bits per expert; group scales across 18 binades bring the later passes in. The folded
// buffer exists only for FP4 experts on the FP8-input warpgroup-MMA path.
TEST(CudaExpertsLinearFp8, FoldedExpertsEqualLinear) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  const std::vector<std::vector<int32_t>> routings = {{1, 0, 2, 1, 0, 1, 1, 0}, {70, 1, 130, 0, 9, 64, 17, 200}};
  uint64_t seed = 5700;
  for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
    for (const bool wide_scales : {false, true}) {
      const std::pair<uint8_t, uint8_t> e8m0 = wide_scales ? std::pair<uint8_t, uint8_t>{110, 128}
                                                           : std::pair<uint8_t, uint8_t>{0, 0};
      ExpertPool pool(kFp4, 8, 200, k, ++seed, 0, 28, 3, e8m0);
      for (const std::vector<int32_t>& counts : routings) {
        SCOPED_TRACE(testing::Message() << "folded, " << Offsets(counts).back() << " rows"
                                        << (wide_scales ? ", 18 binades" : ""));
        CheckExperts(pool, counts, Offsets(counts).back() + 13, k, 203, ++seed, {}, 0, true);
      }
    }
  }
  ExpertPool fp8(kFp8E8m0, 4, 256, 256, ++seed);
  EXPECT_EQ(cuda::FoldedExpertsBytes(fp8.Device(0), 4, cuda::LinearMath::kFp8Act), 0u) << "FP8 experts";
  ExpertPool fp4(kFp4, 4, 256, 256, ++seed);
  EXPECT_EQ(cuda::FoldedExpertsBytes(fp4.Device(0), 4, cuda::LinearMath::kSplitBf16), 0u) << "split-BF16 math";
  EXPECT_GT(cuda::FoldedExpertsBytes(fp4.Device(0), 4, cuda::LinearMath::kFp8Act), 4u * 256 * 256) << "FP8 act";
}

// The pre-folded experts on the TMA-fed kernel (DEEPINFER_TMA_EXPERTS's kernel, forced on) on
// tiles of 64 tokens and of 128 (the plan then cut in 128-row tiles): the same codes and adds, so
// Linear's bits per expert; the cases of PreFoldedFp4EqualsLinear at 1, 3 and 8 chunks (fewer, as
// many as and more loads than the rings' 5, 6 or 8 stages over a block's items), later passes
// included; 130 and 200 rows make full and partial 96- and 128-row tiles. Both forms of the
// pre-folded kernel: thread 0 issuing the copies in its MMA loop, and warp-specialized (a producer
// warpgroup; later passes on a named barrier of the MMA warpgroups); and the experts converted in
// the blocks (ExpertsFp4InBlockKernel: each pass a load of its ring; 1 or 2 units side by side;
// pass 0 from the fold words it works out and from the chunk words written at load).
TEST(CudaExpertsLinearFp8, PreFoldedTmaFp4EqualsLinear) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 64, 17, 200};
  const int64_t experts = static_cast<int64_t>(counts.size()), bound = 520;
  uint64_t seed = 5350;
  // {converted in the blocks, 1 or 2 units side by side (0: pre-folded), tile tokens, warp-specialized}
  for (const auto& [in_block, tokens, warp_specialized] : std::vector<std::tuple<int, int, int>>{
           {0, 64, 0}, {0, 64, 1}, {0, 128, 0}, {0, 128, 1}, {1, 64, 1}, {2, 64, 1}}) {
    ScopedFp4InBlock converted(in_block > 0 ? 1 : 0, in_block);
    ScopedFp4InBlockRegisters shared_tile(0);  // the converting warpgroup's kernel, chunk words or not
    ScopedTmaKernels tma(1, tokens);
    ScopedTmaWarpSpecialized ws(warp_specialized);
    const uint64_t ws_launches = cuda::TmaWarpSpecializedLaunchesForTesting();
    const uint64_t in_block_launches = cuda::Fp4InBlockLaunchesForTesting();
    for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
      for (const bool wide_scales : {false, true}) {
        const std::pair<uint8_t, uint8_t> e8m0 = wide_scales ? std::pair<uint8_t, uint8_t>{110, 128}
                                                             : std::pair<uint8_t, uint8_t>{0, 0};
        ExpertPool pool(kFp4, experts, 200, k, ++seed, 0, 28, 3, e8m0);
        for (const int64_t group : {int64_t{1}, int64_t{3}, experts}) {
          SCOPED_TRACE(testing::Message() << (in_block > 0 ? "converted in the blocks, " : "pre-folded, ")
                                          << (in_block > 0 ? std::to_string(in_block) + " units at once" : "")
                                          << ", TMA at " << tokens << " tokens, group of " << group
                                          << (wide_scales ? ", 18 binades" : ""));
          const uint64_t launches = cuda::TmaLaunchesForTesting();
          CheckExperts(pool, counts, bound, k, 200, ++seed, {}, group);
          EXPECT_GT(cuda::TmaLaunchesForTesting(), launches) << "the TMA kernel did not run";
          if (group == 3) CheckExperts(pool, counts, bound, k + 5, 203, ++seed, {0, 2, 7}, group);
        }
        if (in_block > 0) {  // pass 0 from the chunk words written at load (the model's case)
          SCOPED_TRACE(testing::Message() << "converted in the blocks from chunk words, " << in_block
                                          << " units at once" << (wide_scales ? ", 18 binades" : ""));
          const uint64_t word_launches = cuda::Fp4ChunkWordsLaunchesForTesting();
          CheckExperts(pool, counts, bound, k, 200, ++seed, {}, 0, false, /*chunk_words=*/true);
          EXPECT_GT(cuda::Fp4ChunkWordsLaunchesForTesting(), word_launches) << "no launch read chunk words";
        }
      }
    }
    EXPECT_EQ(cuda::TmaWarpSpecializedLaunchesForTesting() > ws_launches, warp_specialized == 1)
        << tokens << " tokens";
    EXPECT_EQ(cuda::Fp4InBlockLaunchesForTesting() > in_block_launches, in_block > 0) << "in the blocks";
  }
  // Converted in the MMA warpgroups' registers (ExpertsFp4RegistersTmaKernel), which takes the
  // chunk words written at load; without them the in-block kernel runs instead. Its up-shifted
  // warps (the row scales once a slice) on and off; the e8m0 scales drawn from the usual 11
  // binades (some slices up-shifted), 18 (few) or 6 (every slice: no later pass, tops within 6).
  ScopedFp4InBlock converted(1, 2);
  ScopedFp4InBlockRegisters registers(1);
  ScopedTmaKernels tma(1, 64);
  ScopedTmaWarpSpecialized ws(1);
  {
    ScopedFp4TilePairs pairs(0);
    for (const int slice_scale : {1, 0}) {
      ScopedFp4SliceScale scoped_slice_scale(slice_scale);
      for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
        for (const std::pair<uint8_t, uint8_t> e8m0 : {std::pair<uint8_t, uint8_t>{0, 0}, {110, 128}, {121, 126}}) {
          ExpertPool pool(kFp4, experts, 200, k, ++seed, 0, 28, 3, e8m0);
          SCOPED_TRACE(testing::Message() << "converted in registers, K " << k << ", e8m0 " << int{e8m0.first} << "-"
                                          << int{e8m0.second} << ", slice scales " << slice_scale);
          const uint64_t rs_launches = cuda::Fp4InBlockRegistersLaunchesForTesting();
          CheckExperts(pool, counts, bound, k, 200, ++seed, {}, 0, false, /*chunk_words=*/true);
          EXPECT_GT(cuda::Fp4InBlockRegistersLaunchesForTesting(), rs_launches)
              << "the register-fed kernel did not run";
          const uint64_t after = cuda::Fp4InBlockRegistersLaunchesForTesting();
          if (e8m0.first == 0) {
            CheckExperts(pool, counts, bound, k, 200, ++seed, {}, 0);
            EXPECT_EQ(cuda::Fp4InBlockRegistersLaunchesForTesting(), after) << "it ran without chunk words";
          }
        }
      }
    }
  }
  // One converted weight tile for two 104-token tiles (ExpertsFp4TilePairKernel), from the chunk
  // words: the counts make pairs of one token tile (70, 1, 9, 17, 64), of two (130, 200) and none;
  // 200 weight rows are three full 64-row items and one of 8; later passes over 18 binades.
  ScopedFp4TilePairs pairs(1);
  for (const int slice_scale : {1, 0}) {
    ScopedFp4SliceScale scoped_slice_scale(slice_scale);
    for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
      for (const std::pair<uint8_t, uint8_t> e8m0 : {std::pair<uint8_t, uint8_t>{0, 0}, {110, 128}, {121, 126}}) {
        ExpertPool pool(kFp4, experts, 200, k, ++seed, 0, 28, 3, e8m0);
        SCOPED_TRACE(testing::Message() << "tile pairs, K " << k << ", e8m0 " << int{e8m0.first} << "-"
                                        << int{e8m0.second} << ", slice scales " << slice_scale);
        const uint64_t pair_launches = cuda::Fp4TilePairsLaunchesForTesting();
        const uint64_t rs_launches = cuda::Fp4InBlockRegistersLaunchesForTesting();
        CheckExperts(pool, counts, bound, k, 200, ++seed, {}, 0, false, /*chunk_words=*/true);
        EXPECT_GT(cuda::Fp4TilePairsLaunchesForTesting(), pair_launches) << "the tile-pair kernel did not run";
        EXPECT_EQ(cuda::Fp4InBlockRegistersLaunchesForTesting(), rs_launches) << "the register-fed kernel ran";
        CheckExperts(pool, counts, bound, k + 5, 203, ++seed, {0, 2, 7}, 0, false, /*chunk_words=*/true);
      }
    }
  }
}

// The FP4 experts on BF16 MMAs with their scales folded (ExpertsFp4Bf16Kernel, DEEPINFER_FP4_BF16):
// every output within the order bound of cpu::Linear's (the exact products of the act_quant'ed x and
// the weight, summed in another order), on 104- and 208-token tiles, over K of 1, 3 and 8 chunks,
// experts of 0-200 rows (one tile, two, and 105 = 104 + 1), weight rows past a 64-row block, strided
// x and y, and e8m0 scales from the usual range, 18 binades and the largest bytes the kernel takes
// (120-128). The chunk words only select the path.
TEST(CudaExpertsLinearFp8, Fp4Bf16WithinTheOrderBound) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 104, 17, 200, 105};
  const int64_t experts = static_cast<int64_t>(counts.size()), bound = 650;
  ScopedFp4RegistersTma prefill_kernels;
  uint64_t seed = 5750;
  for (const int tokens : {104, 208}) {
    ScopedFp4Bf16 bf16(1, tokens);
    for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
      for (const std::pair<uint8_t, uint8_t> e8m0 : {std::pair<uint8_t, uint8_t>{0, 0}, {110, 128}, {120, 128}}) {
        ExpertPool pool(kFp4, experts, 200, k, ++seed, 0, 28, 3, e8m0);
        SCOPED_TRACE(testing::Message() << "BF16 MMAs on " << tokens << "-token tiles, K " << k << ", e8m0 "
                                        << int{e8m0.first} << "-" << int{e8m0.second});
        const uint64_t launches = cuda::Fp4Bf16LaunchesForTesting();
        const uint64_t rs_launches = cuda::Fp4InBlockRegistersLaunchesForTesting();
        CheckExperts(pool, counts, bound, k, 200, ++seed, {}, 0, false, /*chunk_words=*/true, false,
                     /*linear_bits=*/false);
        EXPECT_GT(cuda::Fp4Bf16LaunchesForTesting(), launches) << "the BF16 kernel did not run";
        EXPECT_EQ(cuda::Fp4InBlockRegistersLaunchesForTesting(), rs_launches) << "the register-fed kernel ran";
        CheckExperts(pool, counts, bound, k + 5, 203, ++seed, {0, 2, 7, 8}, 0, false, /*chunk_words=*/true, false,
                     /*linear_bits=*/false);
      }
    }
  }
}

// Each of `tokens` tokens routed to `top_k` distinct experts of `experts` at random (seeded): its
// slots t·top_k + j sorted by expert, stable, as MoeAlign sorts them, and each expert's count.
struct RoutedSlots {
  std::vector<int32_t> sorted_slots, counts;
};
RoutedSlots RouteTokens(int64_t tokens, int64_t top_k, int64_t experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int32_t, int32_t>> by_expert;  // (expert, slot)
  std::vector<int32_t> pool_ids(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool_ids.begin(), pool_ids.end(), 0);
    for (int64_t j = 0; j < top_k; ++j) {
      std::swap(pool_ids[j], pool_ids[j + rng() % (experts - j)]);
      by_expert.emplace_back(pool_ids[j], static_cast<int32_t>(t * top_k + j));
    }
  }
  std::stable_sort(by_expert.begin(), by_expert.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  RoutedSlots r;
  r.counts.assign(static_cast<size_t>(experts), 0);
  for (const auto& [e, slot] : by_expert) {
    r.sorted_slots.push_back(slot);
    ++r.counts[e];
  }
  return r;
}

// MoeGather's rows on the host: row r of the result is token sorted_slots[r] / top_k's row of x
// (rows of k floats).
std::vector<float> GatheredRows(const std::vector<float>& x, const std::vector<int32_t>& sorted_slots, int64_t top_k,
                                int64_t k) {
  std::vector<float> xe(sorted_slots.size() * static_cast<size_t>(k));
  for (size_t r = 0; r < sorted_slots.size(); ++r) {
    std::copy_n(x.begin() + (sorted_slots[r] / top_k) * k, k, xe.begin() + static_cast<int64_t>(r) * k);
  }
  return xe;
}

// The gather that writes the BF16 kernel's x itself (cuda::GatherQuantizeRowsBf16, the MoE's
// x_in_codes) gives the bits of the gathered f32 rows quantized inside ExpertsLinear, and
// MoeGather's row weights: 200 tokens routed top-3 over 9 FP4 experts (above 64 rows an expert, so
// the in-block kernels run), K of 3 and 8 chunks, both tile sizes. Without the switch the query is
// false and a call that says x is in the codes fails.
TEST(CudaExpertsLinearFp8, GatheredBf16RowsGiveTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  ScopedFp4RegistersTma prefill_kernels;
  constexpr int64_t kTokens = 200, kTopK = 3, kExperts = 9, kN = 200;
  const int64_t bound = kTokens * kTopK;
  const RoutedSlots routed = RouteTokens(kTokens, kTopK, kExperts, 5901);
  const std::vector<int32_t>& sorted_slots = routed.sorted_slots;
  const std::vector<int32_t> off = Offsets(routed.counts);
  const std::vector<float> expert_weights = RandomFloats(static_cast<size_t>(bound), 5902);
  DeviceArray<int32_t> dslots(sorted_slots), doff(off);
  DeviceArray<float> dweights(expert_weights);
  uint64_t seed = 5910;
  for (const int tokens : {208, 104}) {
    for (const int64_t k : {int64_t{384}, int64_t{1024}}) {
      SCOPED_TRACE(testing::Message() << tokens << "-token tiles, K " << k);
      ExpertPool pool(kFp4, kExperts, kN, k, ++seed);
      const std::vector<float> x = RandomFloats(static_cast<size_t>(kTokens * k), ++seed);
      const std::vector<float> xe = GatheredRows(x, sorted_slots, kTopK, k);
      DeviceArray<float> dx(x), dxe(xe), dy_in(static_cast<size_t>(bound * kN)), dy_codes(dy_in.size());
      DeviceArray<float> drow_weights(static_cast<size_t>(bound));
      DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(bound, kExperts));
      const size_t codes_bytes =
          cuda::ExpertsLinearCodesBytes(bound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act);
      DeviceArray<uint8_t> codes(codes_bytes);
      const size_t words_bytes = cuda::Fp4ChunkWordsBytes(pool.Device(0), kExperts, cuda::LinearMath::kFp8Act);
      DeviceArray<uint8_t> words(words_bytes);
      cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), kExperts, words.get(), words_bytes, nullptr);
      auto run = [&](float* y, bool x_in_codes) {
        cuda::ExpertsLinear(dxe.get(), k, bound, doff.get(), kExperts, pool.table(),
                            pool.Device(0), y, kN, scratch.get(), nullptr, cuda::LinearMath::kFp8Act, false,
                            codes.get(), codes_bytes, nullptr, words.get(), nullptr, x_in_codes);
      };
      {
        ScopedFp4Bf16 off_switch(0);
        ScopedExpertsXCodes no_fp8_codes(0);  // nor e4m3 codes (the label may run with DEEPINFER_EXPERTS_X_CODES=1)
        EXPECT_FALSE(cuda::ExpertsLinearTakesBf16X(bound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act,
                                                   codes.get(), codes_bytes, true));
        EXPECT_ANY_THROW(run(dy_codes.get(), true)) << "x in the codes without the BF16 kernel";
      }
      ScopedFp4Bf16 bf16(1, tokens);
      ASSERT_TRUE(cuda::ExpertsLinearTakesBf16X(bound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act,
                                                codes.get(), codes_bytes, true));
      const uint64_t launches = cuda::Fp4Bf16LaunchesForTesting();
      run(dy_in.get(), false);
      cuda::GatherQuantizeRowsBf16(dx.get(), k, k, dslots.get(), doff.get() + kExperts, kTopK, bound, dweights.get(),
                                   drow_weights.get(), codes.get(), codes_bytes, nullptr);
      run(dy_codes.get(), true);
      EXPECT_EQ(cuda::Fp4Bf16LaunchesForTesting(), launches + 2) << "both calls on the BF16 kernel";
      EXPECT_TRUE(AllEqual(Bits(dy_codes.ToHost()), Bits(dy_in.ToHost()), "x gathered into the codes vs quantized"));
      const std::vector<float> row_weights = drow_weights.ToHost();
      for (int64_t r = 0; r < bound; ++r) {
        ASSERT_EQ(row_weights[r], expert_weights[sorted_slots[r]]) << "row weight " << r;
      }
    }
  }
}

// DEEPINFER_EXPERTS_X_CODES: the gather and the SwiGLU that write the experts' e4m3 codes themselves
// (cuda::GatherQuantizeRows, cuda::SwiGluQuantizeRows) give the bits of the f32 rows quantized
// inside ExpertsLinear, at decode sizes (1 and 24 tokens routed top-6 over 16 experts: the 8- and
// 16-token kernels), FP4 experts (the FP4 order, chunk words) and FP8 ones, K of 3 and 8 chunks,
// the clamp on; MoeGather's row weights. Without the switch the query is false.
TEST(CudaExpertsLinearFp8, Fp8CodesFromTheGatherAndSwiGluGiveTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no warpgroup MMAs on this device";
  constexpr int64_t kTopK = 6, kExperts = 16, kN = 200;
  uint64_t seed = 6100;
  for (const int64_t tokens : {int64_t{1}, int64_t{24}}) {
    const int64_t bound = tokens * kTopK;
    const RoutedSlots routed = RouteTokens(tokens, kTopK, kExperts, seed + static_cast<uint64_t>(tokens));
    const std::vector<int32_t>& sorted_slots = routed.sorted_slots;
    DeviceArray<int32_t> dslots(sorted_slots), doff(Offsets(routed.counts));
    const std::vector<float> expert_weights = RandomFloats(static_cast<size_t>(bound), ++seed);
    DeviceArray<float> dweights(expert_weights);
    for (const Spec& spec : {kFp4, kFp8E8m0}) {
      for (const int64_t k : {int64_t{384}, int64_t{1024}}) {
        SCOPED_TRACE(testing::Message() << tokens << " tokens, " << spec.name << ", K " << k);
        ExpertPool pool(spec, kExperts, kN, k, ++seed);
        const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens * k), ++seed);
        const std::vector<float> xe = GatheredRows(x, sorted_slots, kTopK, k);
        std::vector<float> gate = RandomFloats(static_cast<size_t>(bound * k), ++seed);
        for (float& v : gate) v *= 12.f;  // past the clamp
        const std::vector<float> up = RandomFloats(static_cast<size_t>(bound * k), ++seed);
        DeviceArray<float> dx(x), dxe(xe), dg_f32(gate), dg_codes(gate), du(up);
        DeviceArray<float> dy_f32(static_cast<size_t>(bound * kN)), dy_codes(dy_f32.size());
        DeviceArray<float> drow_weights(static_cast<size_t>(bound));
        DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(bound, kExperts));
        const size_t codes_bytes =
            cuda::ExpertsLinearCodesBytes(bound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act);
        DeviceArray<uint8_t> codes(codes_bytes);
        const size_t words_bytes = cuda::Fp4ChunkWordsBytes(pool.Device(0), kExperts, cuda::LinearMath::kFp8Act);
        std::optional<DeviceArray<uint8_t>> words;
        if (words_bytes > 0) {
          words.emplace(words_bytes);
          cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), kExperts, words->get(), words_bytes, nullptr);
        }
        const void* words_ptr = words ? words->get() : nullptr;
        auto run = [&](const float* in, float* y, bool x_in_codes) {
          dy_f32.Fill(0xff);
          dy_codes.Fill(0xff);
          cuda::ExpertsLinear(in, k, bound, doff.get(), kExperts, pool.table(), pool.Device(0), y, kN, scratch.get(),
                              nullptr, cuda::LinearMath::kFp8Act, false, codes.get(), codes_bytes, nullptr, words_ptr,
                              nullptr, x_in_codes);
        };
        auto takes = [&] {
          return cuda::ExpertsLinearTakesFp8Codes(bound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act,
                                                  codes.get(), codes_bytes, false, words_ptr != nullptr);
        };
        {
          ScopedExpertsXCodes off(0);
          EXPECT_FALSE(takes());
        }
        ScopedExpertsXCodes on(1);
        ASSERT_TRUE(takes());
        // w1/w3's input: the gathered f32 rows, against the gather into the codes.
        run(dxe.get(), dy_f32.get(), false);
        const std::vector<float> y_rows = dy_f32.ToHost();
        cuda::GatherQuantizeRows(dx.get(), k, k, dslots.get(), doff.get() + kExperts, kTopK, bound, dweights.get(),
                                 drow_weights.get(), pool.Device(0), codes.get(), codes_bytes, nullptr);
        run(dxe.get(), dy_codes.get(), true);
        EXPECT_TRUE(AllEqual(Bits(dy_codes.ToHost()), Bits(y_rows), "x gathered into the codes vs quantized"));
        const std::vector<float> row_weights = drow_weights.ToHost();
        for (int64_t r = 0; r < bound; ++r) {
          ASSERT_EQ(row_weights[r], expert_weights[sorted_slots[r]]) << "row weight " << r;
        }
        // w2's input: ClampedSwiGlu's f32 rows, against the SwiGLU into the codes.
        cuda::ClampedSwiGlu(dg_f32.get(), k, du.get(), k, bound, k, 7.f, drow_weights.get(), doff.get() + kExperts,
                            nullptr);
        run(dg_f32.get(), dy_f32.get(), false);
        const std::vector<float> y_swiglu = dy_f32.ToHost();
        cuda::SwiGluQuantizeRows(dg_codes.get(), k, du.get(), k, bound, k, 7.f, drow_weights.get(),
                                 doff.get() + kExperts, pool.Device(0), codes.get(), codes_bytes, nullptr);
        run(dg_codes.get(), dy_codes.get(), true);
        EXPECT_TRUE(AllEqual(Bits(dy_codes.ToHost()), Bits(y_swiglu), "SwiGLU into the codes vs f32 rows"));
        EXPECT_TRUE(AllEqual(Bits(dg_codes.ToHost()), Bits(gate), "the gate rows stay unwritten"));
      }
    }
  }
}

// ExpertsFp4Bf16Kernel<208>'s narrow tiles (at most 104 rows: m64n104k16 on their first 104 tokens,
// DEEPINFER_FP4_BF16_NARROW) give the bits of the 104-token kernel's tiles, as its wide ones do:
// experts of 230 rows (a 22-row narrow tail), 312 (208 + 104), 1, 60, 104 and 105 rows, 0, 208 and 209
// (a 1-row tail), K of 1, 3 and 8 chunks, 200 weight rows (a partial 64-row block); every row of y
// written.
TEST(CudaExpertsLinearFp8, Fp4Bf16NarrowTilesGiveTheBitsOf104TokenTiles) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  ScopedFp4RegistersTma prefill_kernels;
  const std::vector<int32_t> counts = {230, 1, 104, 105, 312, 0, 208, 209, 60};
  const std::vector<int32_t> off = Offsets(counts);
  const int64_t experts = static_cast<int64_t>(counts.size()), bound = off.back(), n = 200;
  DeviceArray<int32_t> doff(off);
  uint64_t seed = 5990;
  for (const int64_t k : {int64_t{128}, int64_t{384}, int64_t{1024}}) {
    SCOPED_TRACE(testing::Message() << "K " << k);
    ExpertPool pool(kFp4, experts, n, k, ++seed);
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(bound * k), ++seed));
    DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(bound, experts));
    const size_t codes_bytes = cuda::ExpertsLinearCodesBytes(bound, experts, pool.Device(0), cuda::LinearMath::kFp8Act);
    DeviceArray<uint8_t> codes(codes_bytes);
    const size_t words_bytes = cuda::Fp4ChunkWordsBytes(pool.Device(0), experts, cuda::LinearMath::kFp8Act);
    DeviceArray<uint8_t> words(words_bytes);
    cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), experts, words.get(), words_bytes, nullptr);
    // y filled with NaN first: a row the kernel leaves unwritten fails the comparison.
    auto run = [&](int tokens, int narrow) {
      ScopedFp4Bf16 bf16(1, tokens);
      cuda::SetFp4Bf16NarrowForTesting(narrow);
      DeviceArray<float> dy(static_cast<size_t>(bound * n));
      dy.Fill(0xff);  // every float a NaN
      const uint64_t launches = cuda::Fp4Bf16LaunchesForTesting();
      cuda::ExpertsLinear(dx.get(), k, bound, doff.get(), experts, pool.table(), pool.Device(0), dy.get(), n,
                          scratch.get(), nullptr, cuda::LinearMath::kFp8Act, false, codes.get(), codes_bytes,
                          nullptr, words.get(), nullptr, false);
      cuda::SetFp4Bf16NarrowForTesting(-1);
      EXPECT_EQ(cuda::Fp4Bf16LaunchesForTesting(), launches + 1) << "the BF16 kernel did not run";
      return dy.ToHost();
    };
    const std::vector<float> y104 = run(104, 1);
    for (const float v : y104) ASSERT_FALSE(std::isnan(v)) << "a row the 104-token tiles left unwritten";
    EXPECT_TRUE(AllEqual(Bits(run(208, 1)), Bits(y104), "208-token tiles, narrow ones on n104, vs 104-token tiles"));
    EXPECT_TRUE(AllEqual(Bits(run(208, 0)), Bits(y104), "208-token tiles, all on n208, vs 104-token tiles"));
  }
}

// The SwiGLU writing w2's input into the codes (cuda::SwiGluQuantizeRowsBf16, under the BF16
// experts) gives the bits of ClampedSwiGlu's f32 rows quantized inside ExpertsLinear: the clamp on
// and off, every row routed and only the first 500 (the row count read on the device), K of 3 and
// 8 chunks, 208- and 104-token tiles; the gate rows stay unwritten.
TEST(CudaExpertsLinearFp8, SwiGluBf16RowsGiveTheSameBits) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::TmaKernelsAvailable()) GTEST_SKIP() << "no sm_90a code or tensor-map encoder for this device";
  ScopedFp4RegistersTma prefill_kernels;
  constexpr int64_t kExperts = 9, kN = 200, kBound = 600;
  uint64_t seed = 5960;
  for (const int tokens : {208, 104}) {
    for (const int64_t k : {int64_t{384}, int64_t{1024}}) {
      for (const float limit : {7.f, 0.f}) {
        for (const int32_t routed : {int32_t{600}, int32_t{500}}) {
          SCOPED_TRACE(testing::Message() << tokens << "-token tiles, K " << k << ", limit " << limit << ", "
                                          << routed << " rows routed");
          ExpertPool pool(kFp4, kExperts, kN, k, ++seed);
          // Rows past offsets[E] (the count the SwiGLU reads on the device) are routed to no expert.
          const std::vector<int32_t> off =
              Offsets(routed == 600 ? std::vector<int32_t>{90, 0, 70, 120, 41, 59, 100, 30, 90}
                                    : std::vector<int32_t>{90, 0, 70, 120, 41, 59, 100, 20, 0});
          std::vector<float> gate = RandomFloats(static_cast<size_t>(kBound * k), ++seed);
          for (float& v : gate) v *= 12.f;  // past the clamp
          const std::vector<float> up = RandomFloats(static_cast<size_t>(kBound * k), ++seed);
          const std::vector<float> weights = RandomFloats(static_cast<size_t>(kBound), ++seed);
          DeviceArray<int32_t> doff(off);
          DeviceArray<float> dg_f32(gate), dg_codes(gate), du(up), dw(weights);
          DeviceArray<float> dy_f32(static_cast<size_t>(kBound * kN)), dy_codes(dy_f32.size());
          dy_f32.Fill(0);
          dy_codes.Fill(0);
          DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(kBound, kExperts));
          const size_t codes_bytes =
              cuda::ExpertsLinearCodesBytes(kBound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act);
          DeviceArray<uint8_t> codes(codes_bytes);
          const size_t words_bytes = cuda::Fp4ChunkWordsBytes(pool.Device(0), kExperts, cuda::LinearMath::kFp8Act);
          DeviceArray<uint8_t> words(words_bytes);
          cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), kExperts, words.get(), words_bytes, nullptr);
          ScopedFp4Bf16 bf16(1, tokens);
          ASSERT_TRUE(cuda::ExpertsLinearTakesBf16X(kBound, kExperts, pool.Device(0), cuda::LinearMath::kFp8Act,
                                                    codes.get(), codes_bytes, true));
          auto run = [&](const float* x, float* y, bool x_in_codes) {
            cuda::ExpertsLinear(x, k, kBound, doff.get(), kExperts, pool.table(), pool.Device(0), y, kN,
                                scratch.get(), nullptr, cuda::LinearMath::kFp8Act, false, codes.get(), codes_bytes,
                                nullptr, words.get(), nullptr, x_in_codes);
          };
          cuda::ClampedSwiGlu(dg_f32.get(), k, du.get(), k, kBound, k, limit, dw.get(), doff.get() + kExperts,
                              nullptr);
          run(dg_f32.get(), dy_f32.get(), false);
          cuda::SwiGluQuantizeRowsBf16(dg_codes.get(), k, du.get(), k, kBound, k, limit, dw.get(),
                                       doff.get() + kExperts, codes.get(), codes_bytes, nullptr);
          run(dg_codes.get(), dy_codes.get(), true);
          EXPECT_TRUE(AllEqual(Bits(dy_codes.ToHost()), Bits(dy_f32.ToHost()), "SwiGLU into the codes vs f32 rows"));
          EXPECT_TRUE(AllEqual(Bits(dg_codes.ToHost()), Bits(gate), "the gate rows stay unwritten"));
        }
      }
    }
  }
}

// The chunk words written at load carry, per row and chunk, pass 0's shifts (bits 0-15) and the
// row's up-shift in its slice (bits 16-19), as cpu::FirstFoldPassWord and cpu::SliceUpShift give
// them from the weight's e8m0 scales: at K of 3 chunks (one partial slice), 8 (two slices) and 10,
// with scales over 6 binades (every slice up-shifted, shifts 0-5) and the usual 11.
TEST(CudaExpertsLinearFp8, Fp4ChunkWordsHoldSliceUpShifts) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no warpgroup MMAs on this device";
  const int64_t experts = 3, n = 70;
  uint64_t seed = 5370;
  for (const int64_t k : {int64_t{384}, int64_t{1024}, int64_t{1280}}) {
    for (const std::pair<uint8_t, uint8_t> e8m0 : {std::pair<uint8_t, uint8_t>{121, 126}, {0, 0}}) {
      SCOPED_TRACE(testing::Message() << "K " << k << ", e8m0 " << int{e8m0.first} << "-" << int{e8m0.second});
      ExpertPool pool(kFp4, experts, n, k, ++seed, 0, 28, 3, e8m0);
      const size_t bytes = cuda::Fp4ChunkWordsBytes(pool.Device(0), experts, TestLinearMath());
      ASSERT_GT(bytes, 0u);
      DeviceArray<uint32_t> words(bytes / 4);
      cuda::WriteFp4ChunkWords(pool.table(), pool.Device(0), experts, words.get(), bytes, nullptr);
      const std::vector<uint32_t> got = words.ToHost();
      const int64_t chunks = k / 128, stride = static_cast<int64_t>(bytes / 4) / experts;
      int up_shifted = 0, not_up_shifted = 0, raised = 0;
      for (int64_t e = 0; e < experts; ++e) {
        const TensorView scale = pool.View(e).scale;
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
            const int count = static_cast<int>(std::min<int64_t>(4, chunks - c0));
            uint32_t folds[4];
            for (int j = 0; j < count; ++j) {
              const uint8_t* s = scale.data<uint8_t>() + r * scale.stride(0) + 4 * (c0 + j);
              const int ex[4] = {s[0], s[1], s[2], s[3]};
              folds[j] = cpu::FirstFoldPassWord(ex);
            }
            for (int j = 0; j < count; ++j) {
              const uint32_t word = got[static_cast<size_t>(e * stride + r * chunks + c0 + j)];
              const uint32_t up = cpu::SliceUpShift(folds, count, j);
              ASSERT_EQ(word & 0xffffu, folds[j] & 0xffffu) << "expert " << e << " row " << r << " chunk " << c0 + j;
              ASSERT_EQ((word >> 16) & 0xfu, up) << "expert " << e << " row " << r << " chunk " << c0 + j;
              up_shifted += up != cpu::kSliceNoUpShift ? 1 : 0;
              not_up_shifted += up == cpu::kSliceNoUpShift ? 1 : 0;
              raised += up != cpu::kSliceNoUpShift && up > 0 ? 1 : 0;
            }
          }
        }
      }
      if (e8m0.first == 121) {
        EXPECT_EQ(not_up_shifted, 0) << "tops within 6 binades and no later pass: every slice up-shifted";
        if (k > 384) EXPECT_GT(raised, 0) << "no chunk raised";
      } else {
        EXPECT_GT(up_shifted, 0);
        EXPECT_GT(not_up_shifted, 0);
      }
    }
  }
}

// The experts' kernels quantize x themselves (the model then skips its act_quant pass:
// V4Model::ActQuantInKernels): an unrounded x gives the bits of the same x rounded by the CPU's
// act_quant, on every kFp8Act path: the mma.sync kernels (no codes scratch; K of whole and partial
// 128-column blocks), the warpgroup MMAs with x quantized once (a row bound of 40 per expert), and
// for FP4 the pre-folded experts (65 per expert, where ExpertsLinearCodesBytes asks for the
// pre-fold room), also TMA-fed at 64- and 128-token tiles; with blocks whose second act_quant
// halves the scale (HalvingScaleBlocks).
TEST(CudaExpertsLinearFp8, QuantizesInTheKernelLikeTheRoundTrip) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  const std::vector<int32_t> counts = {70, 1, 130, 0, 9, 64, 17, 2};
  const int64_t experts = static_cast<int64_t>(counts.size()), n = 96;
  const std::vector<int32_t> off = Offsets(counts);
  ASSERT_EQ(off.back(), 293);
  DeviceArray<int32_t> doff(off);
  uint64_t seed = 5400;
  for (const Spec& spec : {kFp8E8m0, kFp4}) {
    for (const int64_t k : {int64_t{1024}, int64_t{1088}}) {
      ExpertPool pool(spec, experts, n, k, ++seed);
      constexpr int64_t kMaxBound = 520;
      const Fp8ActInputs inputs = MakeFp8ActInputs(kMaxBound, k, ++seed);
      const DeviceArray<float> dx(inputs.raw), dr(inputs.rounded);
      for (const int64_t bound : {int64_t{0}, int64_t{320}, kMaxBound}) {  // 0: 320 rows, no codes
        // The warpgroup MMAs take K % 128 == 0 (elsewhere the codes scratch is empty).
        if (bound > 0 && (k % 128 != 0 || !cuda::Fp8ActOnWarpgroupMma())) continue;
        const int64_t rows_bound = bound == 0 ? 320 : bound;
        const size_t codes_bytes =
            bound == 0 ? 0 : cuda::ExpertsLinearCodesBytes(rows_bound, experts, pool.Device(0), TestLinearMath());
        if (bound > 0) ASSERT_GT(codes_bytes, 0u);
        const bool tma = bound == kMaxBound && spec.format == WeightFormat::kFp4 && cuda::TmaKernelsAvailable();
        for (const int tokens : tma ? std::vector<int>{0, 64, 128} : std::vector<int>{0}) {
          std::optional<ScopedTmaKernels> scoped;
          if (tokens > 0) scoped.emplace(1, tokens);
          auto run = [&](const DeviceArray<float>& in) {
            DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(rows_bound, experts));
            DeviceArray<uint8_t> codes(codes_bytes);
            DeviceArray<float> dy(static_cast<size_t>(rows_bound * n));
            dy.Fill(0xff);
            cuda::ExpertsLinear(in.get(), k, rows_bound, doff.get(), experts, pool.table(), pool.Device(0), dy.get(),
                                n, scratch.get(), nullptr, TestLinearMath(), false, codes.get(), codes_bytes);
            return dy.ToHost();
          };
          const std::string what = std::string(spec.name) + " K=" + std::to_string(k) + " rows bound " +
                                   std::to_string(rows_bound) + (bound == 0 ? ", no codes" : "") +
                                   (tokens > 0 ? ", TMA-fed at " + std::to_string(tokens) : "");
          EXPECT_TRUE(AllEqual(Bits(run(dx)), Bits(run(dr)), what));
        }
      }
    }
  }
}

// At prefill sizes (3,072 tokens × top-6 of 256 experts, 72 rows per expert on average)
// ExpertsLinearCodesBytes asks for the pre-fold room itself (3 groups of at most 124 experts of
// [4096 -> 2048], 8.25 MiB each with their fold words): the bits of Linear per expert. At
// sanitizer sizes 683 tokens over 64 experts (64 rows per expert, the fewest that ask; one group).
TEST(CudaExpertsLinearFp8, PreFoldedPrefillFlash) {
  DI_REQUIRE_GPU();
  ScopedLinearMath math(cuda::LinearMath::kFp8Act);
  if (!cuda::Fp8ActOnWarpgroupMma()) GTEST_SKIP() << "no sm_90a code for this device";
  const int64_t tokens = SanitizerSizes() ? 683 : 3072, experts = SanitizerSizes() ? 64 : 256;
  const std::vector<int32_t> counts = RandomRouting(tokens, 6, experts, 5400);
  ExpertPool pool(kFp4, experts, 2048, 4096, 5401);
  const auto codes = [&](int64_t rows) {
    return cuda::ExpertsLinearCodesBytes(rows, experts, pool.Device(0), cuda::LinearMath::kFp8Act);
  };
  if (std::getenv("DEEPINFER_FP4_PREFOLD") == nullptr) {
    EXPECT_EQ(codes(tokens * 6),
              cuda::ExpertsLinearPreFoldCodesBytes(tokens * 6, experts, pool.Device(0), cuda::LinearMath::kFp8Act));
    EXPECT_GT(codes(tokens * 6), codes(1) + static_cast<size_t>(std::min<int64_t>(experts, 100)) * (size_t{8} << 20))
        << "room for at least 100 experts' (or all) 8 MiB of codes";
  }
  const int64_t busiest = std::max_element(counts.begin(), counts.end()) - counts.begin();
  CheckExperts(pool, counts, tokens * 6, 4096, 2048, 5402, {busiest, experts - 1});
  if (cuda::TmaKernelsAvailable()) {  // and on the TMA-fed kernels (32 chunks per item): pre-folded at
    // both tile sizes, converted in the blocks 1 and 2 units at once (from the fold words and from
    // the chunk words written at load)
    // {units converted at once (0: pre-folded), pre-folded tile tokens, seed}
    for (const auto& [units, tile_tokens, seed] :
         std::vector<std::tuple<int, int, uint64_t>>{{0, 64, 5467}, {0, 128, 5531}, {1, 64, 5404}, {2, 64, 5405}}) {
      ScopedFp4InBlock converted(units > 0 ? 1 : 0, units);
      ScopedFp4InBlockRegisters shared_tile(0);  // the converting warpgroup's kernel, chunk words or not
      ScopedTmaKernels tma(1, tile_tokens);
      SCOPED_TRACE(testing::Message() << (units > 0 ? "converted in the blocks, units at once: " : "pre-folded at ")
                                      << (units > 0 ? units : tile_tokens));
      const uint64_t launches = cuda::TmaLaunchesForTesting(), in_blocks = cuda::Fp4InBlockLaunchesForTesting();
      CheckExperts(pool, counts, tokens * 6, 4096, 2048, seed, {busiest});
      if (units > 0) {  // and with the chunk words written at load, as the model runs it
        const uint64_t word_launches = cuda::Fp4ChunkWordsLaunchesForTesting();
        CheckExperts(pool, counts, tokens * 6, 4096, 2048, seed + 100, {busiest}, 0, false, /*chunk_words=*/true);
        EXPECT_GT(cuda::Fp4ChunkWordsLaunchesForTesting(), word_launches) << "no launch read chunk words";
      }
      EXPECT_GT(cuda::TmaLaunchesForTesting(), launches) << "the TMA kernel did not run";
      EXPECT_EQ(cuda::Fp4InBlockLaunchesForTesting() > in_blocks, units > 0);
    }
    // converted in the MMA warpgroups' registers, and one tile for two token tiles, from the chunk words
    ScopedFp4InBlock converted(1, 2);
    ScopedFp4InBlockRegisters registers(1);
    ScopedTmaKernels tma(1, 64);
    for (const int pairs : {0, 1}) {
      ScopedFp4TilePairs scoped_pairs(pairs);
      SCOPED_TRACE(pairs == 1 ? "tile pairs" : "converted in registers");
      const uint64_t rs_launches = cuda::Fp4InBlockRegistersLaunchesForTesting();
      const uint64_t pair_launches = cuda::Fp4TilePairsLaunchesForTesting();
      CheckExperts(pool, counts, tokens * 6, 4096, 2048, 5606 + pairs, {busiest}, 0, false, /*chunk_words=*/true);
      EXPECT_EQ(cuda::Fp4InBlockRegistersLaunchesForTesting() > rs_launches, pairs == 0);
      EXPECT_EQ(cuda::Fp4TilePairsLaunchesForTesting() > pair_launches, pairs == 1);
    }
  }
}

// The MoE's w3 and w2 reuse the tile lists w1 left in the scratch (plan_in_scratch): the same
// bits as planning again, on both the SIMT and the tensor-core paths.
TEST(CudaExpertsLinear, PlanInScratchIsReused) {
  DI_REQUIRE_GPU();
  for (const cuda::LinearMath math :
       {cuda::LinearMath::kSimtF32, cuda::LinearMath::kSplitBf16, cuda::LinearMath::kFp8Act}) {
    const std::vector<int32_t> counts = kMixedCounts;
    const std::vector<int32_t> off = Offsets(counts);
    const int64_t experts = static_cast<int64_t>(counts.size()), rows = off.back() + 2;
    ExpertPool first(kFp8E8m0, experts, 200, 320, 5100), second(kFp4, experts, 96, 256, 5101);
    DeviceArray<float> dx(RandomFloats(static_cast<size_t>(rows * 320), 5102));
    DeviceArray<int32_t> doff(off);
    DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(rows, experts));
    DeviceArray<float> y1(static_cast<size_t>(rows * 200)), y2(static_cast<size_t>(rows * 96)),
        y2_fresh(static_cast<size_t>(rows * 96));
    y2.Fill(0xff);
    y2_fresh.Fill(0xff);
    cuda::ExpertsLinear(dx.get(), 320, rows, doff.get(), experts, first.table(), first.Device(0), y1.get(), 200,
                        scratch.get(), nullptr, math);
    cuda::ExpertsLinear(dx.get(), 320, rows, doff.get(), experts, second.table(), second.Device(0), y2.get(), 96,
                        scratch.get(), nullptr, math, /*plan_in_scratch=*/true);
    DeviceArray<uint8_t> other_scratch(cuda::ExpertsLinearScratchBytes(rows, experts));
    cuda::ExpertsLinear(dx.get(), 320, rows, doff.get(), experts, second.table(), second.Device(0), y2_fresh.get(), 96,
                        other_scratch.get(), nullptr, math);
    EXPECT_TRUE(AllEqual(Bits(y2.ToHost()), Bits(y2_fresh.ToHost()), "reused plan vs a fresh plan"));
    // The lists really come from the scratch: with its five tile counts (the first 20 bytes,
    // linear.cu's header) zeroed, a call that reuses the plan computes nothing.
    DI_CUDA_CHECK(cudaMemset(scratch.get(), 0, 5 * sizeof(int32_t)), "cudaMemset");
    DeviceArray<float> y3(static_cast<size_t>(rows * 96));
    y3.Fill(0xff);
    cuda::ExpertsLinear(dx.get(), 320, rows, doff.get(), experts, second.table(), second.Device(0), y3.get(), 96,
                        scratch.get(), nullptr, math, /*plan_in_scratch=*/true);
    EXPECT_TRUE(AllEqual(Bits(y3.ToHost()), std::vector<uint32_t>(static_cast<size_t>(rows * 96), kSentinel),
                         "nothing computed from an emptied plan"));
  }
}

TEST(CudaExpertsLinear, RejectsBadArguments) {
  DI_REQUIRE_GPU();
  ExpertPool pool(kBf16, 2, 8, 16, 1);
  DeviceArray<float> dx(RandomFloats(64, 2));
  DeviceArray<float> dy(64);
  DeviceArray<int32_t> doff(std::vector<int32_t>{0, 1, 2});
  DeviceArray<uint8_t> scratch(cuda::ExpertsLinearScratchBytes(2, 2) + 16);
  EXPECT_ANY_THROW(cuda::ExpertsLinear(dx.get(), 15, 2, doff.get(), 2, pool.table(), pool.Device(0), dy.get(), 8,
                                       scratch.get(), nullptr));  // ldx < K
  EXPECT_ANY_THROW(cuda::ExpertsLinear(dx.get(), 16, 2, doff.get(), 2, pool.table(), pool.Device(0), dy.get(), 8,
                                       scratch.get() + 4, nullptr));  // misaligned scratch
  EXPECT_ANY_THROW(cuda::ExpertsLinear(dx.get(), 16, 2, doff.get(), 2, nullptr, pool.Device(0), dy.get(), 8,
                                       scratch.get(), nullptr));  // no weights
  cuda::DeviceWeight bad = pool.Device(0);
  bad.data_row_stride = 15;
  EXPECT_ANY_THROW(cuda::CheckWeight(bad));
}

// ---- device-count MoeGather / ClampedSwiGlu ----------------------------------------------------

TEST(CudaMoeCounted, GatherStopsAtTheDeviceCount) {
  DI_REQUIRE_GPU();
  // Every row names a valid slot, so only the count can stop the gather.
  const int64_t m = 300, k = 6, d = 96, bound = m * k;
  std::vector<int32_t> slots(static_cast<size_t>(bound));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(5));
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * d), 6), w = RandomFloats(bound, 7, 0.f, 1.f);
  DeviceArray<int32_t> dslots(slots);
  DeviceArray<float> dx(x), dw(w);
  for (const int32_t count : {0, 1, 1000, static_cast<int32_t>(bound)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    DeviceArray<int32_t> dcount(std::vector<int32_t>{count});
    DeviceArray<float> dxe(static_cast<size_t>(bound * d)), drw(static_cast<size_t>(bound));
    dxe.Fill(0xff);
    drw.Fill(0xff);
    cuda::MoeGather(dx.get(), d, d, dslots.get(), bound, dcount.get(), k, dw.get(), dxe.get(), drw.get(), nullptr);
    std::vector<float> want_xe(static_cast<size_t>(bound * d)), want_rw(static_cast<size_t>(bound));
    std::memset(want_xe.data(), 0xff, want_xe.size() * 4);
    std::memset(want_rw.data(), 0xff, want_rw.size() * 4);
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(&want_xe[r * d], &x[(slots[r] / k) * d], d * 4);
      want_rw[r] = w[slots[r]];
    }
    EXPECT_TRUE(AllEqual(Bits(dxe.ToHost()), Bits(want_xe), "gathered rows"));
    EXPECT_TRUE(AllEqual(Bits(drw.ToHost()), Bits(want_rw), "row weights"));
  }
}

TEST(CudaMoeCounted, SwiGluStopsAtTheDeviceCount) {
  DI_REQUIRE_GPU();
  // [50, 2048] (Flash moe_inter_dim) and [70000, 3] (more rows than one grid dimension holds).
  for (const auto& [m, n, count] : {std::tuple<int64_t, int64_t, int32_t>{50, 2048, 37}, {70000, 3, 69999}}) {
    SCOPED_TRACE("m " + std::to_string(m));
    const std::vector<float> g = RandomFloats(static_cast<size_t>(m * n), 9, -12.f, 12.f);
    const std::vector<float> u = RandomFloats(static_cast<size_t>(m * n), 10, -12.f, 12.f);
    const std::vector<float> w = RandomFloats(static_cast<size_t>(m), 11, 0.f, 1.f);
    DeviceArray<float> du(u), dw(w), dg_all(g), dg(g);
    DeviceArray<int32_t> dcount(std::vector<int32_t>{count});
    cuda::ClampedSwiGlu(dg_all.get(), n, du.get(), n, m, n, 10.f, dw.get(), nullptr);
    cuda::ClampedSwiGlu(dg.get(), n, du.get(), n, m, n, 10.f, dw.get(), dcount.get(), nullptr);
    const std::vector<float> all = dg_all.ToHost(), got = dg.ToHost();
    std::vector<float> want_bits = all;  // rows below the count as the uncounted kernel, the rest as given
    std::copy(g.begin() + count * n, g.end(), want_bits.begin() + count * n);
    EXPECT_TRUE(AllEqual(Bits(got), Bits(want_bits), "counted vs uncounted"));
    std::vector<float> want = g;
    for (int64_t r = 0; r < count; ++r) cpu::ClampedSwiGlu(want.data() + r * n, u.data() + r * n, n, 10.f, w[r]);
    // expf and the host's exp differ by ≤ 1–2 ulp; the products add a few more (test_elementwise.cpp).
    EXPECT_TRUE(AllClose(got, want, 1e-6f, 1e-6f, "counted vs cpu"));
  }
}

// ---- ops::ExpertsLinear on both backends --------------------------------------------------------

TEST(OpsExpertsLinear, CudaAndCpuThroughTheOps) {
  DI_REQUIRE_GPU();
  const ops::OpContext gpu{DeviceId{DeviceType::kCuda, 0}, nullptr};
  const ops::OpContext& cpu_ctx = ops::HostContext();
  const int64_t n = 72, k = 96, ldx = k;  // ops take [rows, K] views (the kernels tests cover strided x)
  ExpertPool pool(kFp4, static_cast<int64_t>(kMixedCounts.size()), n, k, 31);
  const std::vector<int32_t> off = Offsets(kMixedCounts);
  const int64_t num_experts = pool.experts(), rows = off.back() + 4;
  std::vector<float> xs = RandomFloats(static_cast<size_t>(rows * ldx), 32);
  std::vector<int32_t> host_off = off;

  // CPU: the op loops cpu::Linear over the experts' rows.
  std::vector<LinearWeight> host_experts, device_experts;
  std::vector<DeviceArray<uint8_t>> copies;
  for (int64_t e = 0; e < num_experts; ++e) host_experts.push_back(pool.View(e));
  std::vector<float> y_cpu(static_cast<size_t>(rows * n), 0.f);
  const TensorView x_host(xs.data(), DType::kF32, {rows, ldx});
  ops::ExpertsLinear(cpu_ctx, x_host, TensorView(host_off.data(), DType::kI32, {num_experts + 1}),
                     ops::MakeExpertsWeight(cpu_ctx, host_experts), TensorView(y_cpu.data(), DType::kF32, {rows, n}),
                     TensorView());

  // CUDA: each expert's data and scale copied to the device as its own allocation.
  for (const LinearWeight& hw : host_experts) {
    LinearWeight dw = hw;
    copies.emplace_back(std::vector<uint8_t>(static_cast<uint8_t*>(hw.data.raw()),
                                             static_cast<uint8_t*>(hw.data.raw()) + hw.data.nbytes()));
    dw.data = TensorView(copies.back().get(), hw.data.dtype(), {hw.data.size(0), hw.data.size(1)}, gpu.device);
    copies.emplace_back(std::vector<uint8_t>(static_cast<uint8_t*>(hw.scale.raw()),
                                             static_cast<uint8_t*>(hw.scale.raw()) + hw.scale.nbytes()));
    dw.scale = TensorView(copies.back().get(), hw.scale.dtype(), {hw.scale.size(0), hw.scale.size(1)}, gpu.device);
    device_experts.push_back(dw);
  }
  const ops::ExpertsWeight table = ops::MakeExpertsWeight(gpu, device_experts);
  DeviceArray<float> dx(xs), dy(static_cast<size_t>(rows * n));
  DeviceArray<int32_t> doff(off);
  DeviceArray<uint8_t> scratch(ops::ExpertsLinearScratchBytes(rows, num_experts));
  dy.Fill(0xff);
  ops::ExpertsLinear(gpu, TensorView(dx.get(), DType::kF32, {rows, ldx}, gpu.device),
                     TensorView(doff.get(), DType::kI32, {num_experts + 1}, gpu.device), table,
                     TensorView(dy.get(), DType::kF32, {rows, n}, gpu.device),
                     TensorView(scratch.get(), DType::kI8, {static_cast<int64_t>(scratch.size())}, gpu.device));
  const std::vector<float> y_gpu = dy.ToHost();

  // Each backend equals its Linear on every expert's rows bit for bit; the rows past offsets[E]
  // stay as they were (0 on the CPU, the sentinel on the GPU).
  std::vector<float> want_cpu(y_cpu.size(), 0.f);
  DeviceArray<float> dref(static_cast<size_t>(rows * n));
  dref.Fill(0xff);
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t r0 = off[e], m = kMixedCounts[e];
    if (m == 0) continue;
    cpu::Linear(x_host.Slice(r0, r0 + m), host_experts[e], TensorView(want_cpu.data() + r0 * n, DType::kF32, {m, n}));
    cuda::Linear(dx.get() + r0 * ldx, ldx, m, pool.Device(e), dref.get() + r0 * n, n, nullptr);
  }
  EXPECT_TRUE(AllEqual(Bits(y_cpu), Bits(want_cpu), "ops cpu vs cpu::Linear per expert"));
  EXPECT_TRUE(AllEqual(Bits(y_gpu), Bits(dref.ToHost()), "ops cuda vs cuda::Linear per expert"));
}

}  // namespace
}  // namespace deepinfer::test
