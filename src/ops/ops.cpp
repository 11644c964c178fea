#include "ops/ops.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "ops/dispatch.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"

#if DEEPINFER_HAS_CUDA
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/hc.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/moe.h"
#endif

namespace deepinfer::ops {

namespace {

int64_t Rows(const TensorView& t) { return t.size(0); }

#if DEEPINFER_HAS_CUDA
cuda::DeviceWeight ToDevice(const LinearWeight& w) {
  cuda::DeviceWeight d;
  d.format = w.format == WeightFormat::kDense ? cuda::DeviceWeight::Format::kDense
             : w.format == WeightFormat::kFp8 ? cuda::DeviceWeight::Format::kFp8
                                              : cuda::DeviceWeight::Format::kFp4;
  d.dtype = w.data.dtype();
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  d.data = w.data.raw();
  d.data_row_stride = w.data.stride(0);
  if (!w.scale.empty()) {
    d.scale = w.scale.raw();
    d.scale_dtype = w.scale.dtype();
    d.scale_row_stride = w.scale.ndim() == 2 ? w.scale.stride(0) : w.scale.numel();
  }
  return w.chunk_major ? cuda::ChunkMajorOf(d) : d;
}

cuda::LinearMath MathOf(const OpContext& ctx, LinearInput input = LinearInput::kAsIs) {
  if (!ctx.tensor_core_linears) return cuda::LinearMath::kSimtF32;
  return input == LinearInput::kFp8Blocks ? cuda::LinearMath::kFp8Act : cuda::LinearMath::kSplitBf16;
}

cuda::HcParams ToDevice(const HcParams& p) {
  cuda::HcParams d;
  d.fn = p.fn.data<float>();
  d.base = p.base.data<float>();
  d.scale = p.scale.data<float>();
  d.sinkhorn_iters = p.sinkhorn_iters;
  d.hc_eps = p.hc_eps;
  d.norm_eps = p.norm_eps;
  return d;
}
#endif

// The CUDA path's shape check of y = x·W^T (the CPU kernels check their own).
void CheckLinearShapes(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.size(1) == w.in_features && y.size(1) == w.out_features &&
               x.size(0) == y.size(0),
           "linear: x {} y {} for a [{}, {}] weight", x.ShapeString(), y.ShapeString(), w.out_features,
           w.in_features);
}

}  // namespace

void Embedding(const OpContext& ctx, const TensorView& ids, const TensorView& table, const TensorView& y) {
  CheckDevice(ctx, "embedding", {&ids, &table, &y});
  DI_CHECK(ids.dtype() == DType::kI32 && ids.ndim() == 1, "embedding: ids must be I32 [M]");
  DI_ON_CUDA(ctx, "embedding",
             cuda::Embedding(ids.data<int32_t>(), ids.size(0), table.raw(), table.dtype(), table.size(0),
                             table.size(1), table.stride(0), y.data<float>(), y.stride(0), ctx.stream));
  cpu::Embedding(ids.data<int32_t>(), ids.size(0), table, y);
}

void RmsNorm(const OpContext& ctx, const TensorView& x, const TensorView& weight, float eps, const TensorView& y,
             bool bf16_out) {
  CheckDevice(ctx, "rms_norm", {&x, &weight, &y});
  DI_ON_CUDA(ctx, "rms_norm",
             cuda::RmsNorm(x.data<float>(), x.stride(0), Rows(x), x.size(1), weight.empty() ? nullptr : weight.raw(),
                           weight.dtype(), eps, y.data<float>(), y.stride(0), ctx.stream, bf16_out));
  cpu::RmsNorm(x, weight, eps, y);
  if (bf16_out) Bf16RoundRows(ctx, y, 0, y.size(1));
}

size_t LinearScratchBytes(const OpContext& ctx, int64_t rows, const LinearWeight& w, LinearInput input) {
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
  if (ctx.on_cuda()) return cuda::LinearScratchBytes(rows, ToDevice(w), MathOf(ctx, input));
#else
  (void)rows, (void)w, (void)input;
#endif
  (void)ctx;
  return 0;
}

void Linear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y,
            LinearInput input, const TensorView& scratch) {
  CheckDevice(ctx, "linear", {&x, &w.data, &y, &scratch});
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
  void* const scratch_raw = scratch.empty() ? nullptr : scratch.raw();
  const size_t scratch_bytes = scratch.empty() ? 0 : scratch.nbytes();
  const void* const tiles = w.tiles.empty() ? nullptr : w.tiles.raw();
#endif
  bool round_in_kernel = false;  // kBf16Values: the rounding of BF16 values is themselves
  if (input == LinearInput::kBf16 || input == LinearInput::kBf16Values) {
#if DEEPINFER_HAS_CUDA
    if (ctx.on_cuda()) {
      CheckLinearShapes(x, w, y);
      round_in_kernel = cuda::LinearRoundsXToBf16(x.data<float>(), x.stride(0), x.size(0), ToDevice(w), y.data<float>(),
                                                  y.stride(0), MathOf(ctx, input), scratch_raw, scratch_bytes, tiles);
    }
#endif
    if (!round_in_kernel && input == LinearInput::kBf16) Bf16RoundRows(ctx, x, 0, x.size(1));
  }
  // The profile names quantized (FP8 / FP4) and dense (BF16 / F32) weights apart: their kernels and
  // ceilings differ (bench/step_bench.cpp counts both as linear layers).
  DI_ON_CUDA(ctx, w.format == WeightFormat::kDense ? "dense_linear" : "linear", CheckLinearShapes(x, w, y);
             cuda::Linear(x.data<float>(), x.stride(0), x.size(0), ToDevice(w), y.data<float>(), y.stride(0),
                          ctx.stream, MathOf(ctx, input), scratch_raw, scratch_bytes, tiles, round_in_kernel));
  cpu::Linear(x, w, y);  // the same f32 math for every input (a kBf16 one rounded above)
}

size_t DenseTilesBytes(const OpContext& ctx, const LinearWeight& w) {
#if DEEPINFER_HAS_CUDA
  if (ctx.on_cuda() && w.format == WeightFormat::kDense) return cuda::DenseTilesBytes(ToDevice(w), MathOf(ctx));
#else
  (void)w;
#endif
  (void)ctx;
  return 0;
}

void WriteDenseTiles(const OpContext& ctx, const LinearWeight& w, const TensorView& out) {
  CheckDevice(ctx, "dense_tiles", {&w.data, &out});
  DI_CHECK(w.tiles.empty(), "dense tiles: the weight has tiles already");
  DI_ON_CUDA(ctx, "dense_tiles", cuda::WriteDenseTiles(ToDevice(w), out.raw(), out.nbytes(), ctx.stream));
  DI_THROW("dense tiles: a layout of the CUDA kernels; the CPU reads the weight as it is");
}

bool DenseTilesInPlace(const OpContext& ctx, const LinearWeight& w) {
#if DEEPINFER_HAS_CUDA
  if (ctx.on_cuda() && w.format == WeightFormat::kDense) {
    return cuda::DenseTilesInPlace(ToDevice(w), MathOf(ctx));
  }
#else
  (void)w;
#endif
  (void)ctx;
  return false;
}

void RewriteAsDenseTiles(const OpContext& ctx, LinearWeight& w) {
  CheckDevice(ctx, "dense_tiles", {&w.data});
  DI_CHECK(w.tiles.empty(), "dense tiles: the weight has tiles already");
  DI_CHECK(DenseTilesInPlace(ctx, w), "dense tiles: this weight's tiles do not go in place of its rows");
#if DEEPINFER_HAS_CUDA
  cuda::RewriteAsDenseTiles(ToDevice(w), ctx.stream);
  w.tiles = w.data;
#endif
}

size_t LinearsOfOneInputScratchBytes(const OpContext& ctx, int64_t rows, const std::vector<LinearProduct>& products) {
  size_t bytes = 0;
  for (const LinearProduct& product : products) {
    bytes = std::max(bytes, LinearScratchBytes(ctx, rows, *product.w, LinearInput::kAsIs));
  }
  return bytes;
}

void LinearsOfOneInput(const OpContext& ctx, const TensorView& x, const std::vector<LinearProduct>& products,
                       const TensorView& scratch, LinearInput input) {
  DI_CHECK(input == LinearInput::kAsIs || input == LinearInput::kBf16Values,
           "linears of one input: the input is as it is or BF16 values");
  for (const LinearProduct& product : products) {
    DI_CHECK(product.w != nullptr, "linears of one input: a null weight");
    CheckDevice(ctx, "linear", {&x, &product.w->data, &product.y, &scratch});
    CheckLinearShapes(x, *product.w, product.y);
  }
  const bool dense = std::all_of(products.begin(), products.end(),
                                 [](const LinearProduct& pr) { return pr.w->format == WeightFormat::kDense; });
#if DEEPINFER_HAS_CUDA
  std::vector<cuda::DeviceWeight> weights;  // reserved: outputs point into it
  std::vector<cuda::LinearOutput> outputs;
  if (ctx.on_cuda()) {
    weights.reserve(products.size());
    for (const LinearProduct& product : products) {
      weights.push_back(ToDevice(*product.w));
      outputs.push_back({&weights.back(), product.y.data<float>(), product.y.stride(0)});
    }
  }
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
#endif
  // Profiled as Linear names its products: dense (BF16 / F32) weights apart from quantized ones.
  DI_ON_CUDA(ctx, dense ? "dense_linear" : "linear",
             cuda::LinearsOfOneInput(x.data<float>(), x.stride(0), x.size(0), outputs.data(),
                                     static_cast<int>(outputs.size()), ctx.stream, MathOf(ctx, input),
                                     scratch.empty() ? nullptr : scratch.raw(), scratch.empty() ? 0 : scratch.nbytes(),
                                     input == LinearInput::kBf16Values));
  for (const LinearProduct& product : products) cpu::Linear(x, *product.w, product.y);
}

bool QuantizesFp8InputInKernel(const OpContext& ctx, const LinearWeight& w) {
#if DEEPINFER_HAS_CUDA
  if (ctx.on_cuda() && ctx.tensor_core_linears) return cuda::QuantizesFp8Input(ToDevice(w));
#endif
  (void)ctx;
  (void)w;
  return false;
}

size_t GroupedLinearScratchBytes(const OpContext& ctx, int64_t rows, const LinearWeight& w, int64_t num_groups,
                                 LinearInput input) {
#if DEEPINFER_HAS_CUDA
  if (ctx.on_cuda()) {
    return cuda::GroupedLinearScratchBytes(rows, num_groups, ToDevice(w), MathOf(ctx), input == LinearInput::kBf16);
  }
#else
  (void)rows, (void)w, (void)num_groups, (void)input;
#endif
  (void)ctx;
  return 0;
}

void GroupedLinear(const OpContext& ctx, const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y, LinearInput input, const TensorView& scratch) {
  DI_CHECK(input != LinearInput::kFp8Blocks, "grouped linear: no FP8-block input (its products are split-BF16)");
  CheckDevice(ctx, "grouped_linear", {&x, &w.data, &y, &scratch});
  DI_CHECK(x.is_contiguous() && y.is_contiguous() && x.ndim() == 3 && x.size(1) == num_groups,
           "grouped linear: x {} y {}", x.ShapeString(), y.ShapeString());
  bool round_in_kernel = false;
#if DEEPINFER_HAS_CUDA
  round_in_kernel = input == LinearInput::kBf16 && ctx.on_cuda() && reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
                    cuda::GroupedRoundsXToBf16(ToDevice(w), num_groups, MathOf(ctx));
#endif
  if (input == LinearInput::kBf16 && !round_in_kernel) {
    Bf16RoundRows(ctx, x.Reshape({x.size(0), x.size(1) * x.size(2)}), 0, x.size(1) * x.size(2));
  }
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
#endif
  DI_ON_CUDA(ctx, "grouped_linear",
             cuda::GroupedLinear(x.data<float>(), x.size(0), num_groups, ToDevice(w), y.data<float>(), ctx.stream,
                                 MathOf(ctx), round_in_kernel, scratch.empty() ? nullptr : scratch.raw(),
                                 scratch.empty() ? 0 : scratch.nbytes()));
  cpu::GroupedLinear(x, w, num_groups, y);
}

ExpertsWeight MakeExpertsWeight(const OpContext& ctx, std::vector<LinearWeight> experts, LinearInput input,
                                bool keep_folded) {
  ExpertsWeight w;
  w.experts = std::move(experts);
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const LinearWeight& x = w.experts[e];
    const LinearWeight& first = w.experts[0];
    DI_CHECK(x.format == first.format && x.data.dtype() == first.data.dtype() &&
                 x.out_features == first.out_features && x.in_features == first.in_features,
             "experts: expert {} is a {} [{}, {}] weight, expert 0 a {} [{}, {}] one", e, DTypeName(x.data.dtype()),
             x.out_features, x.in_features, DTypeName(first.data.dtype()), first.out_features, first.in_features);
    CheckDevice(ctx, "experts_weight", {&x.data, &x.scale});
  }
  if (ctx.on_cuda() && !w.experts.empty()) {
#if DEEPINFER_HAS_CUDA
    const cuda::LinearMath math = MathOf(ctx, input);
    std::vector<cuda::DeviceWeight> table;
    table.reserve(w.experts.size());
    for (const LinearWeight& x : w.experts) {
      table.push_back(ToDevice(x));
      cuda::CheckWeight(table.back());
    }
    // DEEPINFER_EXPERTS_IN_PLACE (unset or 1): the nibbles chunk-major in place, sign-split, so that
    // the kernels read each warp's rows of a chunk as one range, without a second copy.
    if (!keep_folded && cuda::Fp4ExpertsChunkMajorInPlace(table[0], math)) {
      cuda::RewriteFp4ExpertsChunkMajor(table.data(), static_cast<int64_t>(table.size()), math, ctx.stream);
      for (size_t e = 0; e < table.size(); ++e) {
        w.experts[e].chunk_major = true;
        table[e] = ToDevice(w.experts[e]);
      }
    }
    const size_t bytes = table.size() * sizeof(cuda::DeviceWeight);
    w.device_table = Buffer(bytes, ctx.device);
    CopyBytes(ctx, w.device_table.data(), table.data(), bytes);  // pageable source: staged before return
    const int64_t num_experts = static_cast<int64_t>(table.size());
    const auto* device_table = static_cast<const cuda::DeviceWeight*>(w.device_table.data());
    // A buffer of `size` bytes (none where 0) that `write` fills from the experts at load.
    const auto written = [&](Buffer& into, size_t size, auto write) {
      if (size == 0) return;
      into = Buffer(size, ctx.device);
      write(device_table, table[0], num_experts, into.data(), size, ctx.stream);
    };
    const size_t folded_bytes = keep_folded ? cuda::FoldedExpertsBytes(table[0], num_experts, math) : size_t{0};
    written(w.folded, folded_bytes, cuda::FoldExperts);
    if (folded_bytes == 0) {  // the folded codes replace what the nibbles' kernels read
      written(w.chunk_words, cuda::Fp4ChunkWordsBytes(table[0], num_experts, math), cuda::WriteFp4ChunkWords);
      written(w.fp4_tiles, cuda::Fp4ExpertTilesBytes(table[0], num_experts, math), cuda::WriteFp4ExpertTiles);
    }
#else
    NoKernel(ctx, "experts_weight");
#endif
  }
  return w;
}

size_t ExpertsLinearCodesBytes(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input) {
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
  if (ctx.on_cuda() && !w.experts.empty()) {
    return cuda::ExpertsLinearCodesBytes(rows_bound, static_cast<int64_t>(w.experts.size()), ToDevice(w.experts[0]),
                                         MathOf(ctx, input), w.folded.data() != nullptr);
  }
#else
  (void)rows_bound, (void)w, (void)input;
#endif
  (void)ctx;
  return 0;
}

bool ExpertsLinearTakesBf16X(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input,
                             const TensorView& codes) {
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
  if (ctx.on_cuda() && !w.experts.empty() && !codes.empty() && w.folded.data() == nullptr) {
    return cuda::ExpertsLinearTakesBf16X(rows_bound, static_cast<int64_t>(w.experts.size()), ToDevice(w.experts[0]),
                                         MathOf(ctx, input), codes.raw(), codes.nbytes(),
                                         w.chunk_words.data() != nullptr);
  }
#else
  (void)rows_bound, (void)w, (void)input, (void)codes;
#endif
  (void)ctx;
  return false;
}

namespace {

// The arguments of the gathers that write the experts' input into the codes: x f32 rows of d
// columns, I32 slots (their count the bound) and offsets [E+1], a row weight a slot.
struct GatherIntoCodesShape {
  int64_t d, bound, num_experts;
};
GatherIntoCodesShape CheckGatherIntoCodes(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots,
                                          const TensorView& offsets, const TensorView& expert_weights,
                                          const TensorView& codes, const TensorView& row_weights) {
  CheckDevice(ctx, "moe_gather", {&x, &sorted_slots, &offsets, &expert_weights, &codes, &row_weights});
  const GatherIntoCodesShape shape{x.ndim() == 2 ? x.size(1) : 0, sorted_slots.numel(), offsets.numel() - 1};
  DI_CHECK(x.ndim() == 2 && x.dtype() == DType::kF32 && x.stride(1) == 1, "moe_gather: x {} must be f32 rows",
           x.ShapeString());
  DI_CHECK(sorted_slots.dtype() == DType::kI32 && offsets.dtype() == DType::kI32 && shape.num_experts >= 0 &&
               row_weights.numel() >= shape.bound,
           "moe_gather: I32 slots and offsets [E+1], and {} row weights for {} slots", row_weights.numel(),
           shape.bound);
  return shape;
}

}  // namespace

void MoeGatherBf16(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots, const TensorView& offsets,
                   int64_t top_k, const TensorView& expert_weights, const TensorView& codes,
                   const TensorView& row_weights) {
  [[maybe_unused]] const auto [d, bound, num_experts] =  // read on CUDA only
      CheckGatherIntoCodes(ctx, x, sorted_slots, offsets, expert_weights, codes, row_weights);
  DI_ON_CUDA(ctx, "moe_gather",
             cuda::GatherQuantizeRowsBf16(x.data<float>(), x.stride(0), d, sorted_slots.data<int32_t>(),
                                          offsets.data<int32_t>() + num_experts, top_k, bound,
                                          expert_weights.data<float>(), row_weights.data<float>(), codes.raw(),
                                          codes.nbytes(), ctx.stream));
  DI_CHECK(false, "moe_gather: the BF16 rows in the codes are a GPU path");
}

bool ExpertsLinearTakesFp8Codes(const OpContext& ctx, int64_t rows_bound, const ExpertsWeight& w, LinearInput input,
                                const TensorView& codes) {
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
  if (ctx.on_cuda() && !w.experts.empty() && !codes.empty()) {
    return cuda::ExpertsLinearTakesFp8Codes(rows_bound, static_cast<int64_t>(w.experts.size()),
                                            ToDevice(w.experts[0]), MathOf(ctx, input), codes.raw(), codes.nbytes(),
                                            w.folded.data() != nullptr, w.chunk_words.data() != nullptr);
  }
#else
  (void)rows_bound, (void)w, (void)input, (void)codes;
#endif
  (void)ctx;
  return false;
}

void MoeGatherFp8Codes(const OpContext& ctx, const TensorView& x, const TensorView& sorted_slots,
                       const TensorView& offsets, int64_t top_k, const TensorView& expert_weights,
                       const ExpertsWeight& w, const TensorView& codes, const TensorView& row_weights) {
  [[maybe_unused]] const auto [d, bound, num_experts] =  // read on CUDA only
      CheckGatherIntoCodes(ctx, x, sorted_slots, offsets, expert_weights, codes, row_weights);
  DI_CHECK(!w.experts.empty(), "moe_gather: no experts to write the codes for");
  DI_ON_CUDA(ctx, "moe_gather",
             cuda::GatherQuantizeRows(x.data<float>(), x.stride(0), d, sorted_slots.data<int32_t>(),
                                      offsets.data<int32_t>() + num_experts, top_k, bound,
                                      expert_weights.data<float>(), row_weights.data<float>(),
                                      ToDevice(w.experts[0]), codes.raw(), codes.nbytes(), ctx.stream));
  DI_CHECK(false, "moe_gather: the e4m3 rows in the codes are a GPU path");
}

void ExpertsLinear(const OpContext& ctx, const TensorView& x, const TensorView& offsets, const ExpertsWeight& w,
                   const TensorView& y, const TensorView& scratch, LinearInput input, bool plan_in_scratch,
                   const TensorView& codes, bool x_in_codes) {
  (void)input;
  (void)plan_in_scratch;
  DI_CHECK(!x_in_codes || ctx.on_cuda(), "experts_linear: x in the codes is a GPU path");
  CheckDevice(ctx, "experts_linear", {&x, &offsets, &y, &scratch, &codes});
  const int64_t num_experts = offsets.numel() - 1, rows = x.size(0);
  DI_CHECK(offsets.dtype() == DType::kI32 && offsets.is_contiguous() &&
               num_experts == static_cast<int64_t>(w.experts.size()),
           "experts_linear: offsets {} for {} experts", offsets.ShapeString(), w.experts.size());
  if (num_experts == 0) return;
  const LinearWeight& first = w.experts[0];
  DI_CHECK(x.ndim() == 2 && y.ndim() == 2 && y.size(0) == rows && x.size(1) == first.in_features &&
               y.size(1) == first.out_features,
           "experts_linear: x {} y {} for [{}, {}] weights", x.ShapeString(), y.ShapeString(), first.out_features,
           first.in_features);
#if DEEPINFER_HAS_CUDA
  const cuda::BatchVariantKernelsScope batch_variant(ctx.fast_prefill);
#endif
  DI_ON_CUDA(ctx, "experts_linear",
             DI_CHECK(w.device_table.data() != nullptr && w.device_table.device() == ctx.device,
                      "experts_linear: the experts have no table on this device");
             DI_CHECK(scratch.nbytes() >= cuda::ExpertsLinearScratchBytes(rows, num_experts),
                      "experts_linear: scratch of {} bytes, {} needed", scratch.nbytes(),
                      cuda::ExpertsLinearScratchBytes(rows, num_experts));
             cuda::ExpertsLinear(x.data<float>(), x.stride(0), rows, offsets.data<int32_t>(), num_experts,
                                 static_cast<const cuda::DeviceWeight*>(w.device_table.data()), ToDevice(first),
                                 y.data<float>(), y.stride(0), scratch.raw(), ctx.stream, MathOf(ctx, input),
                                 plan_in_scratch, codes.empty() ? nullptr : codes.raw(),
                                 codes.empty() ? 0 : codes.nbytes(),
                                 MathOf(ctx, input) == cuda::LinearMath::kFp8Act ? w.folded.data() : nullptr,
                                 MathOf(ctx, input) == cuda::LinearMath::kFp8Act ? w.chunk_words.data() : nullptr,
                                 MathOf(ctx, input) == cuda::LinearMath::kFp8Act ? w.fp4_tiles.data() : nullptr,
                                 x_in_codes));
  const int32_t* off = offsets.data<int32_t>();
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t r0 = std::clamp<int64_t>(off[e], 0, rows), r1 = std::clamp<int64_t>(off[e + 1], r0, rows);
    if (r1 > r0) cpu::Linear(x.Slice(r0, r1), w.experts[e], y.Slice(r0, r1));
  }
}

size_t ExpertsLinearScratchBytes(int64_t rows_bound, int64_t num_experts) {
#if DEEPINFER_HAS_CUDA
  return cuda::ExpertsLinearScratchBytes(rows_bound, num_experts);
#else
  return 0;
#endif
}

RopeTable MakeRopeTable(int64_t rope_dim, double base, int64_t original_max_positions,
                        double factor, double beta_fast, double beta_slow) {
  return RopeTable{cpu::RopeInverseFrequencies(rope_dim, base, original_max_positions, factor,
                                               beta_fast, beta_slow),
                   TensorView()};
}

void Rope(const OpContext& ctx, const TensorView& x, const TensorView& positions, const RopeTable& table,
          bool inverse) {
  CheckDevice(ctx, "rope", {&x, &positions});
  DI_CHECK(x.ndim() == 3 && positions.dtype() == DType::kI64 && positions.numel() == x.size(0),
           "rope: x {} with {} positions", x.ShapeString(), positions.numel());
  DI_ON_CUDA(ctx, "rope",
             DI_CHECK(!table.device_inv_freq.empty(), "rope: the table has no device copy");
             cuda::Rope(x.data<float>(), x.size(0), x.size(1), x.size(2), x.stride(0), x.stride(1),
                        positions.data<int64_t>(), table.device_inv_freq.data<float>(),
                        static_cast<int64_t>(table.inv_freq.size()), inverse, ctx.stream));
  cpu::Rope(x, positions.data<int64_t>(), table.inv_freq, inverse);
}

void Fp8RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end, int64_t block,
                      const TensorView& row_count) {
  CheckDevice(ctx, "fp8_round_trip", {&x, &row_count});
  DI_CHECK(row_count.empty() || (row_count.dtype() == DType::kI32 && row_count.numel() == 1),
           "fp8_round_trip: row_count must be one I32");
  DI_CHECK(0 <= begin && begin <= end && end <= x.size(1) && block > 0,
           "fp8_round_trip: channels [{}, {}) in blocks of {} of rows of {}", begin, end, block, x.size(1));
  const int32_t* count = row_count.empty() ? nullptr : row_count.data<int32_t>();
  DI_ON_CUDA(ctx, "fp8_round_trip",
             cuda::Fp8RoundTripRows(x.data<float>(), x.stride(0), Rows(x), begin, end, block, count, ctx.stream));
  const int64_t rows = count != nullptr ? std::clamp<int64_t>(*count, 0, Rows(x)) : Rows(x);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::Fp8RoundTrip(x.data<float>() + r * x.stride(0) + begin, end - begin, block);
  }
}

void Bf16RoundRows(const OpContext& ctx, const TensorView& x, int64_t begin, int64_t end) {
  CheckDevice(ctx, "bf16_round", {&x});
  DI_CHECK(0 <= begin && begin <= end && end <= x.size(1), "bf16_round: channels [{}, {}) of rows of {}", begin, end,
           x.size(1));
  DI_ON_CUDA(ctx, "bf16_round", cuda::Bf16RoundRows(x.data<float>(), x.stride(0), Rows(x), begin, end, ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) cpu::Bf16Round(x.data<float>() + r * x.stride(0) + begin, end - begin);
}

void Fp4RoundTripRows(const OpContext& ctx, const TensorView& x, int64_t block) {
  CheckDevice(ctx, "fp4_round_trip", {&x});
  DI_ON_CUDA(ctx, "fp4_round_trip",
             cuda::Fp4RoundTripRows(x.data<float>(), x.stride(0), Rows(x), x.size(1), block, ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) {
    cpu::Fp4RoundTrip(x.data<float>() + r * x.stride(0), x.size(1), block);
  }
}

void HadamardRows(const OpContext& ctx, const TensorView& x) {
  CheckDevice(ctx, "hadamard", {&x});
  DI_ON_CUDA(ctx, "hadamard", cuda::HadamardRows(x.data<float>(), x.stride(0), Rows(x), x.size(1), ctx.stream));
  for (int64_t r = 0; r < Rows(x); ++r) cpu::Hadamard(x.data<float>() + r * x.stride(0), x.size(1));
}

void ApplyRowSteps(const OpContext& ctx, const TensorView& x, const RowSteps& steps) {
  DI_CHECK(x.ndim() == 3 && x.is_contiguous() && x.dtype() == DType::kF32,
           "row_steps: x {} must be contiguous F32 [M, H, n]", x.ShapeString());
  const int64_t n = x.size(2);
  DI_CHECK(steps.fp8_end >= 0 && steps.fp8_end <= n && steps.fp4_block >= 0 &&
               (steps.fp8_end == 0 || steps.fp8_block > 0),
           "row_steps: e4m3 channels [0, {}) in blocks of {}, e2m1 blocks of {}, of rows of {}", steps.fp8_end,
           steps.fp8_block, steps.fp4_block, n);
#if DEEPINFER_HAS_CUDA
  const bool fits = n <= cuda::kRowStepsMaxWidth && steps.fp8_block <= 128 && steps.fp4_block <= 128 &&
                    (steps.rope == nullptr || !steps.rope->device_inv_freq.empty());
  if (ctx.on_cuda() && fits && cuda::RowStepsOn()) {
    CheckDevice(ctx, "row_steps", {&x, &steps.norm_weight, &steps.positions});
    DI_CHECK(steps.rope == nullptr || (steps.positions.dtype() == DType::kI64 && steps.positions.numel() == x.size(0)),
             "row_steps: x {} with {} positions", x.ShapeString(), steps.positions.numel());
    cuda::RowStepsArgs a;
    a.norm = steps.norm;
    a.norm_weight = steps.norm_weight.empty() ? nullptr : steps.norm_weight.raw();
    a.norm_weight_dtype = steps.norm_weight.empty() ? DType::kF32 : steps.norm_weight.dtype();
    a.eps = steps.eps;
    if (steps.rope != nullptr) {
      a.positions = steps.positions.data<int64_t>();
      a.inv_freq = steps.rope->device_inv_freq.data<float>();
      a.rope_half = static_cast<int64_t>(steps.rope->inv_freq.size());
      a.rope_inverse = steps.rope_inverse;
    }
    a.hadamard = steps.hadamard;
    a.fp8_end = steps.fp8_end;
    a.fp8_block = steps.fp8_block;
    a.fp4_block = steps.fp4_block;
    DI_ON_CUDA(ctx, "row_steps",
               cuda::RowSteps(x.data<float>(), x.size(0), x.size(1), n, x.stride(0), x.stride(1), a, ctx.stream));
  }
#endif
  const TensorView rows = x.Reshape({x.size(0) * x.size(1), n});
  if (steps.norm) RmsNorm(ctx, rows, steps.norm_weight, steps.eps, rows);
  if (steps.rope != nullptr) Rope(ctx, x, steps.positions, *steps.rope, steps.rope_inverse);
  if (steps.hadamard) HadamardRows(ctx, rows);
  if (steps.fp8_end > 0) {
    Fp8RoundTripRows(ctx, rows, 0, steps.fp8_end, steps.fp8_block);
    Bf16RoundRows(ctx, rows, steps.fp8_end, n);
  }
  if (steps.fp4_block > 0) Fp4RoundTripRows(ctx, rows, steps.fp4_block);
}

void HcPre(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& a,
           const TensorView& post, const TensorView& comb) {
  CheckDevice(ctx, "hc_pre", {&x, &p.fn, &a, &post, &comb});
  DI_ON_CUDA(ctx, "hc_pre",
             DI_CHECK(x.is_contiguous() && post.is_contiguous() && comb.is_contiguous(), "hc_pre: layout");
             cuda::HcPre(x.data<float>(), x.size(0), x.size(1), x.size(2), ToDevice(p), a.data<float>(), a.stride(0),
                         post.data<float>(), comb.data<float>(), ctx.stream));
  cpu::HcPre(x, p, a, post, comb);
}

void HcPost(const OpContext& ctx, const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out) {
  CheckDevice(ctx, "hc_post", {&o, &x, &post, &comb, &x_out});
  DI_ON_CUDA(ctx, "hc_post",
             DI_CHECK(x.is_contiguous() && x_out.is_contiguous() && post.is_contiguous() && comb.is_contiguous(),
                      "hc_post: layout");
             cuda::HcPost(o.data<float>(), o.stride(0), x.data<float>(), post.data<float>(), comb.data<float>(),
                          x.size(0), x.size(1), x.size(2), x_out.data<float>(), ctx.stream));
  cpu::HcPost(o, x, post, comb, x_out);
}

void HcHead(const OpContext& ctx, const TensorView& x, const HcParams& p, const TensorView& y) {
  CheckDevice(ctx, "hc_head", {&x, &p.fn, &y});
  DI_ON_CUDA(ctx, "hc_head",
             DI_CHECK(x.is_contiguous(), "hc_head: layout");
             cuda::HcHead(x.data<float>(), x.size(0), x.size(1), x.size(2), ToDevice(p), y.data<float>(), y.stride(0),
                          ctx.stream));
  cpu::HcHead(x, p, y);
}

namespace {

void CheckRouteShapes(const TensorView& logits, const RouterParams& params, const TensorView& expert_ids,
                      const TensorView& expert_weights) {
  DI_CHECK(logits.ndim() == 2 && logits.size(1) == params.num_experts && logits.is_contiguous(),
           "route: logits {} for {} experts", logits.ShapeString(), params.num_experts);
  DI_CHECK(expert_ids.numel() == logits.size(0) * params.top_k && expert_weights.numel() == expert_ids.numel(),
           "route: outputs must hold {} × {} entries", logits.size(0), params.top_k);
}

#if DEEPINFER_HAS_CUDA
cuda::DeviceRouterParams ToDevice(const RouterParams& params) {
  cuda::DeviceRouterParams dp;
  dp.score = static_cast<cuda::RouterScoreFn>(params.score);
  dp.num_experts = params.num_experts;
  dp.top_k = params.top_k;
  dp.route_scale = params.route_scale;
  dp.normalize = params.normalize;
  dp.bias = params.bias;
  dp.tid2eid = params.tid2eid;
  dp.tid2eid_rows = params.tid2eid_rows;
  return dp;
}
#endif

}  // namespace

void Route(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids, const RouterParams& params,
           const TensorView& expert_ids, const TensorView& expert_weights) {
  CheckDevice(ctx, "route", {&logits, &token_ids, &expert_ids, &expert_weights});
  CheckRouteShapes(logits, params, expert_ids, expert_weights);
  DI_ON_CUDA(ctx, "route",
             cuda::Route(logits.data<float>(), logits.size(0), token_ids.empty() ? nullptr : token_ids.data<int32_t>(),
                         ToDevice(params), expert_ids.data<int32_t>(), expert_weights.data<float>(), ctx.stream));
  cpu::Route(logits.data<float>(), logits.size(0), token_ids.empty() ? nullptr : token_ids.data<int32_t>(), params,
             expert_ids.data<int32_t>(), expert_weights.data<float>());
}

void RouteAndAlign(const OpContext& ctx, const TensorView& logits, const TensorView& token_ids,
                   const RouterParams& params, const TensorView& expert_ids, const TensorView& expert_weights,
                   const TensorView& offsets, const TensorView& sorted_slots, const TensorView& slot_rows,
                   const TensorView& scratch) {
  if (!ctx.on_cuda() || ctx.profiler != nullptr) {
    Route(ctx, logits, token_ids, params, expert_ids, expert_weights);
    MoeAlign(ctx, expert_ids.Reshape({logits.size(0), params.top_k}), params.num_experts, offsets, sorted_slots,
             slot_rows, scratch);
    return;
  }
  CheckDevice(ctx, "route", {&logits, &token_ids, &expert_ids, &expert_weights, &offsets, &sorted_slots, &slot_rows,
                             &scratch});
  CheckRouteShapes(logits, params, expert_ids, expert_weights);
  DI_CHECK(offsets.numel() == params.num_experts + 1 && sorted_slots.numel() == expert_ids.numel() &&
               slot_rows.numel() == expert_ids.numel(),
           "route: offsets [{}] and {} slots for {} experts and {} slots", offsets.numel(), sorted_slots.numel(),
           params.num_experts, expert_ids.numel());
  DI_ON_CUDA(ctx, "route",
             cuda::RouteAndAlign(logits.data<float>(), logits.size(0),
                                 token_ids.empty() ? nullptr : token_ids.data<int32_t>(), ToDevice(params),
                                 expert_ids.data<int32_t>(), expert_weights.data<float>(), offsets.data<int32_t>(),
                                 sorted_slots.data<int32_t>(), slot_rows.data<int32_t>(), scratch.raw(), ctx.stream));
}

void ClampedSwiGlu(const OpContext& ctx, const TensorView& gate_inout, const TensorView& up, float limit,
                   const TensorView& row_weights, const TensorView& row_count) {
  CheckDevice(ctx, "swiglu", {&gate_inout, &up, &row_weights, &row_count});
  DI_CHECK(row_count.empty() || (row_count.dtype() == DType::kI32 && row_count.numel() == 1),
           "swiglu: row_count must be one I32");
  const int64_t n = gate_inout.size(1);
  const float* weights = row_weights.empty() ? nullptr : row_weights.data<float>();
  const int32_t* count = row_count.empty() ? nullptr : row_count.data<int32_t>();
  DI_ON_CUDA(ctx, "swiglu",
             cuda::ClampedSwiGlu(gate_inout.data<float>(), gate_inout.stride(0), up.data<float>(), up.stride(0),
                                 Rows(gate_inout), n, limit, weights, count, ctx.stream));
  const int64_t rows = count != nullptr ? std::clamp<int64_t>(*count, 0, Rows(gate_inout)) : Rows(gate_inout);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::ClampedSwiGlu(gate_inout.data<float>() + r * gate_inout.stride(0), up.data<float>() + r * up.stride(0), n,
                       limit, weights != nullptr ? weights[r] : 1.f);
  }
}

namespace {

// The arguments of the SwiGLUs that write w2's input into the codes.
void CheckSwiGluIntoCodes(const OpContext& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& row_weights, const TensorView& row_count, const TensorView& codes) {
  CheckDevice(ctx, "swiglu", {&gate, &up, &row_weights, &row_count, &codes});
  DI_CHECK(row_count.empty() || (row_count.dtype() == DType::kI32 && row_count.numel() == 1),
           "swiglu: row_count must be one I32");
  DI_CHECK(gate.ndim() == 2 && up.ndim() == 2 && gate.dtype() == DType::kF32 && up.dtype() == DType::kF32 &&
               up.size(0) == gate.size(0) && up.size(1) == gate.size(1) && gate.stride(1) == 1 && up.stride(1) == 1,
           "swiglu: gate {} and up {} must be f32 rows of one shape", gate.ShapeString(), up.ShapeString());
}

}  // namespace

void ClampedSwiGluFp8Codes(const OpContext& ctx, const TensorView& gate, const TensorView& up, float limit,
                           const TensorView& row_weights, const TensorView& row_count, const ExpertsWeight& w2,
                           const TensorView& codes) {
  CheckSwiGluIntoCodes(ctx, gate, up, row_weights, row_count, codes);
  DI_CHECK(!w2.experts.empty(), "swiglu: no experts to write the codes for");
  DI_ON_CUDA(ctx, "swiglu",
             cuda::SwiGluQuantizeRows(gate.data<float>(), gate.stride(0), up.data<float>(), up.stride(0), gate.size(0),
                                      gate.size(1), limit, row_weights.empty() ? nullptr : row_weights.data<float>(),
                                      row_count.empty() ? nullptr : row_count.data<int32_t>(),
                                      ToDevice(w2.experts[0]), codes.raw(), codes.nbytes(), ctx.stream));
  DI_CHECK(false, "swiglu: the e4m3 rows in the codes are a GPU path");
}

bool SwiGluWritesBf16Codes(const OpContext& ctx) {
#if DEEPINFER_HAS_CUDA
  if (ctx.on_cuda()) return cuda::SwiGluQuantizeRowsBf16On();
#endif
  (void)ctx;
  return false;
}

void ClampedSwiGluBf16(const OpContext& ctx, const TensorView& gate, const TensorView& up, float limit,
                       const TensorView& row_weights, const TensorView& row_count, const TensorView& codes) {
  CheckSwiGluIntoCodes(ctx, gate, up, row_weights, row_count, codes);
  DI_ON_CUDA(ctx, "swiglu",
             cuda::SwiGluQuantizeRowsBf16(gate.data<float>(), gate.stride(0), up.data<float>(), up.stride(0),
                                          gate.size(0), gate.size(1), limit,
                                          row_weights.empty() ? nullptr : row_weights.data<float>(),
                                          row_count.empty() ? nullptr : row_count.data<int32_t>(), codes.raw(),
                                          codes.nbytes(), ctx.stream));
  DI_CHECK(false, "swiglu: the BF16 rows in the codes are a GPU path");
}

}  // namespace deepinfer::ops
