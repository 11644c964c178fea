// Hardware ceilings of one GPU, measured in the run that reports against them: a large
// device-to-device copy and cuBLASLt GEMMs in BF16, FP8 e4m3 with per-tensor scales and FP8 e4m3
// with DeepSeek-style block scales. cuBLASLt is loaded with dlopen at first use
// ($DEEPINFER_CUBLASLT, else libcublasLt.so.13, else libcublasLt.so), so a binary runs where it is
// missing and the GEMM timings then carry the loader's error. The CUDA runtime is the project's
// (linked statically). In a build without CUDA every measurement throws "ceilings need the CUDA
// build".
//
// Every GEMM is a linear layer:
//   out[m, n] = Σ_k act[m, k] · W[n, k]        (out = act · Wᵀ)
//   act [m, k] row-major: m tokens of k input features
//   W   [n, k] row-major: n output features, as the checkpoint stores a weight
//   out [m, n] row-major, BF16 for every kind (accumulation and scaling in f32)
// In cuBLASLt's column-major terms this is D[n, m] = op(A)·B with A = W (k×n, ld k, transposed),
// B = act (k×m, ld k), D (n×m, ld n): the "TN" layout that FP8 on Hopper requires, used for all
// kinds. cuBLASLt's M is our n, its N our m.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::bench {

struct GemmShape {
  int64_t m = 0;  // tokens: rows of act and out
  int64_t n = 0;  // output features: rows of W, columns of out
  int64_t k = 0;  // input features: the reduction
};

enum class GemmKind {
  // act, W BF16.
  kBf16,
  // act, W e4m3 with one f32 scale each: out = s_act·s_W·Σ_k act·W.
  kFp8PerTensor,
  // act, W e4m3; W has one f32 scale per 128×128 block (BLK128x128_32F), act one per row and 128
  // columns (VEC128_32F): out[i, j] = Σ_k act[i, k]·s_act[i, k/128] · W[j, k]·s_W[j/128, k/128].
  // Needs n % 128 == 0 and k % 128 == 0 (whole blocks).
  kFp8BlockScaled,
};

// "bf16", "fp8_per_tensor", "fp8_block_scaled".
std::string_view GemmKindName(GemmKind kind);

// 2·m·n·k.
double GemmFlops(GemmShape shape);

// The allowed error of one output against its exact value `want` = Σ_k term_k (in double, from the
// decoded operands and scales), with `abs_sum` = Σ_k |term_k|:
//   2^-8·|want|     the final rounding to BF16 (at most half an ulp of 8 significant bits);
//   2^-9·abs_sum    the f32 accumulation (at most k·2^-24·abs_sum, 2^-11 at k = 8192) and Hopper's
//                   FP8 tensor-core sums, which keep about 14 bits between promotions to f32;
//   1e-30           a floor for outputs whose terms are all zero.
// A wrong scale or layout moves an output by a whole 128-term block sum, far above the bound.
double GemmTolerance(double want, double abs_sum);

// The bytes one call must move at least: act, W, out and the scales, each once.
double GemmOperandBytes(GemmKind kind, GemmShape shape);

struct GemmTiming {
  GemmKind kind = GemmKind::kBf16;
  GemmShape shape;
  double seconds_per_call = 0;     // mean over the timed calls (cudaEvents, after warm-up)
  double flops_per_s = 0;          // GemmFlops / seconds_per_call
  double operand_bytes_per_s = 0;  // GemmOperandBytes / seconds_per_call
  // Worst |got − want| / GemmTolerance over up to 64 outputs spread over out, from the first call
  // of the timed GEMM against a host reference in double; <= 1 passes.
  double check_ratio = 0;
  // cuBLASLt version and the algorithm its heuristic chose (id, tile, stages, split-K, cluster).
  std::string algo_note;
  // True when cuBLASLt loaded and has an algorithm for this kind and shape.
  bool available = false;
  // Why there is no timing: the loader's or cuBLASLt's status text, or a failed output check.
  // Empty iff the timing fields are valid.
  std::string error;
};

// One GEMM of `kind` at `shape` on random operands (fixed seeds): the first call's output is
// checked at sampled elements, then `iterations` calls are timed after warm-up calls. The calls
// are enqueued back to back from the host, so a GEMM shorter than cublasLtMatmul's own host cost
// (a few µs) measures that cost instead. cuBLASLt problems (library missing, no algorithm:
// block-scaled at m = 1 has none on Hopper) come back in `error`; CUDA runtime errors and invalid
// shapes throw deepinfer::Error.
GemmTiming TimeGemm(int device_index, GemmKind kind, GemmShape shape, int iterations);

// Host operands in the logical layouts above. Only the fields of the kind are read.
struct GemmOperands {
  std::vector<uint16_t> act_bf16;         // kBf16: [m, k] BF16 bits
  std::vector<uint16_t> weight_bf16;      // kBf16: [n, k] BF16 bits
  std::vector<uint8_t> act_e4m3;          // FP8 kinds: [m, k] e4m3 codes (NaN codes not allowed)
  std::vector<uint8_t> weight_e4m3;       // FP8 kinds: [n, k] e4m3 codes
  float act_scale = 1.f;                  // kFp8PerTensor
  float weight_scale = 1.f;               // kFp8PerTensor
  std::vector<float> act_block_scale;     // kFp8BlockScaled: [m, k/128] row-major
  std::vector<float> weight_block_scale;  // kFp8BlockScaled: [n/128, k/128] row-major (as shipped)
};

// One call through the code TimeGemm times (same descriptors, layouts, scale packing and
// algorithm choice) on uploaded operands; returns out [m, n] row-major, the BF16 values widened
// to float. Throws deepinfer::Error when cuBLASLt is missing or has no algorithm.
std::vector<float> RunGemm(int device_index, GemmKind kind, GemmShape shape, const GemmOperands& operands);

// cuBLASLt's layouts of the block scales on Hopper (A = W with BLK128x128_32F, B = act with
// VEC128_32F); padding elements are 0:
//   W:   k/128-major columns, one per 128 output features, each padded to a multiple of 4 floats:
//        s_W[nb, kb] at nb·Round4(k/128) + kb.
//   act: m-major (outer-dimension-major) columns, one per 128 input features, each padded to a
//        multiple of 4 floats: s_act[i, kb] at kb·Round4(m) + i.
// `logical` is the row-major tensor of GemmOperands.
std::vector<float> PackWeightBlockScales(const std::vector<float>& logical, int64_t n, int64_t k);
std::vector<float> PackActBlockScales(const std::vector<float>& logical, int64_t m, int64_t k);
// Round4(m), the leading dimension of the packed act scales.
int64_t ActBlockScaleLd(int64_t m);
// Round4(k/128), the leading dimension of the packed W scales.
int64_t WeightBlockScaleLd(int64_t k);

struct CopyTiming {
  size_t bytes = 0;        // size of one copy
  double seconds = 0;      // per copy: mean over the timed copies (cudaEvents, after a warm-up)
  double bytes_per_s = 0;  // 2·bytes / seconds: bytes read plus bytes written
};

// cudaMemcpyAsync device to device between two buffers of `bytes`, checked at both ends of the
// first copy, then `iterations` copies timed. Throws deepinfer::Error on CUDA errors.
CopyTiming TimeDeviceCopy(int device_index, size_t bytes, int iterations);

struct Ceilings {
  std::string device;    // the GPU's name
  CopyTiming copy;       // 2 GiB
  GemmTiming bf16;       // 8192³
  GemmTiming fp8;        // 8192³, per-tensor scales
  GemmTiming fp8_block;  // 8192³, block scales
};

// The copy and the three GEMMs above: well under a second of GPU time.
Ceilings MeasureCeilings(int device_index);

// A GEMM shape by the projection it stands for.
struct NamedGemmShape {
  std::string name;
  GemmShape shape;
};

// DeepSeek-V4-Flash's FP8 projections at a prefill of `tokens` tokens (wq_a, wq_b, wkv, wo_b, the
// shared expert's joined w1/w3 and its w2, the indexer's wq_b), then one routed expert's w1/w3 and
// w2 at `expert_rows` rows (a prefill of `tokens` routes tokens · 6 / 256 rows to an expert on
// average): what cuBLASLt's block-scaled FP8 GEMM reaches at the shapes the 8k prefill's linears
// run at, beside its 8192³ ceiling. tokens and expert_rows > 0.
std::vector<NamedGemmShape> FlashPrefillGemmShapes(int64_t tokens, int64_t expert_rows);

// DeepInfer's own FP8 product at `shape`, beside cuBLASLt's: cuda::Linear under kFp8Act with the
// scratch the model gives it (so x [m, k] f32 is quantized per 128 columns once, then the
// block-scaled GEMM: TmaLinearWsKernel past 64 rows on sm_90a), W [n, k] e4m3 with e8m0 scales per
// 128 × 128 block, y [m, n] f32. x holds e4m3 values with ±448 first in every 128-column block, so
// the quantization is exact (scale 1) and the first call is checked against double sums at
// sampled outputs with GemmTolerance; then `iterations` calls are timed after warm-up calls.
// flops_per_s as TimeGemm's; operand_bytes_per_s counts x and y in f32, W and its scale bytes. The
// shape needs k % 128 == 0; n any. Throws deepinfer::Error on CUDA errors; without the CUDA build
// it throws as the other measurements do.
GemmTiming TimeOwnFp8Linear(int device_index, GemmShape shape, int iterations);

nlohmann::json ToJson(const GemmTiming& t);
nlohmann::json ToJson(const CopyTiming& t);
nlohmann::json ToJson(const Ceilings& c);

}  // namespace deepinfer::bench
