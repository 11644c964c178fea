// CUDA build of the ceilings: memory, streams and events through the (static) CUDA runtime;
// cuBLASLt through dlopen, so the binary has no link-time dependency on it; DeepInfer's own FP8
// linear (TimeOwnFp8Linear) through cuda::Linear.
//
// cuBLASLt configuration, the same for TimeGemm and RunGemm (see ceilings.h for the layouts):
//   descriptor  CUBLAS_COMPUTE_32F, scale type CUDA_R_32F, alpha = 1, beta = 0 (host pointers),
//               TRANSA = T, TRANSB = N, FAST_ACCUM off (the default)
//   A = W       k×n, ld k, CUDA_R_16BF or CUDA_R_8F_E4M3
//   B = act     k×m, ld k, same type as A
//   C = D = out n×m, ld n, CUDA_R_16BF
//   kFp8PerTensor    A_SCALE_POINTER = &s_W, B_SCALE_POINTER = &s_act (SCALAR_32F, the default)
//   kFp8BlockScaled  A_SCALE_MODE = BLK128x128_32F, B_SCALE_MODE = VEC128_32F, the pointers to the
//                    packed scales (PackWeightBlockScales, PackActBlockScales)
//   algorithm   the heuristic's first result with a 32 MiB workspace
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <utility>

#include "base/error.h"
#include "bench/ceilings.h"
#include "bench/cuda_timing.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"
#include "bench/ceilings_fill.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/linear.h"
#include "tensor/dtype.h"

namespace deepinfer::bench {
namespace {

constexpr int64_t kBlock = 128;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kWarmupCalls = 3;

// ---- cuBLASLt, loaded once per process ------------------------------------------------------

// The loader lives with the engine's own cuBLASLt path (kernels/cuda/cublaslt.h).
using CublasLt = cuda::CublasLtApi;
using cuda::GetCublasLt;

// ---- CUDA runtime helpers -------------------------------------------------------------------

// Device memory on the device of the current call (TimeGemm / RunGemm / TimeDeviceCopy set it).
DeviceId Cuda(int device_index) { return DeviceId{DeviceType::kCuda, device_index}; }

// Copies `src` into all of `dst` and waits for the stream (so `src` may be a temporary).
template <typename T>
void Upload(const char* what, const Buffer& dst, const std::vector<T>& src, const CudaStream& stream) {
  DI_CHECK(src.size() * sizeof(T) == dst.size(), "{}: {} bytes given, the shape needs {}", what,
           src.size() * sizeof(T), dst.size());
  if (!src.empty()) {
    DI_BENCH_CUDA(cudaMemcpyAsync(dst.data(), src.data(), dst.size(), cudaMemcpyHostToDevice, stream.get()));
  }
  stream.Synchronize();
}

// `count` elements of T from `src` + `offset` elements (synchronous; call after the stream's work).
template <typename T>
std::vector<T> Download(const Buffer& src, size_t offset, size_t count) {
  DI_CHECK((offset + count) * sizeof(T) <= src.size(), "download past the buffer");
  std::vector<T> host(count);
  if (count > 0) {
    DI_BENCH_CUDA(cudaMemcpy(host.data(), src.as<T>() + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  return host;
}

// ---- one GEMM -----------------------------------------------------------------------------

size_t ElementBytes(GemmKind kind) { return kind == GemmKind::kBf16 ? 2 : 1; }

size_t Count(int64_t a, int64_t b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

void CheckShape(GemmKind kind, GemmShape s) {
  DI_CHECK(s.m > 0 && s.n > 0 && s.k > 0, "GEMM shape must be positive: m={} n={} k={}", s.m, s.n, s.k);
  if (kind == GemmKind::kFp8BlockScaled) {
    DI_CHECK(s.n % kBlock == 0 && s.k % kBlock == 0, "block-scaled GEMM needs n and k multiples of 128: n={} k={}", s.n,
             s.k);
  }
}

// The operands in device memory, in the layouts cuBLASLt reads (scales packed).
struct DeviceOperands {
  Buffer act, weight, out, act_scale, weight_scale;

  DeviceOperands(GemmKind kind, GemmShape s, DeviceId device)
      : act(Count(s.m, s.k) * ElementBytes(kind), device),
        weight(Count(s.n, s.k) * ElementBytes(kind), device),
        out(Count(s.m, s.n) * sizeof(uint16_t), device) {
    if (kind == GemmKind::kFp8PerTensor) {
      act_scale = Buffer(sizeof(float), device);
      weight_scale = Buffer(sizeof(float), device);
    } else if (kind == GemmKind::kFp8BlockScaled) {
      act_scale = Buffer(Count(ActBlockScaleLd(s.m), s.k / kBlock) * sizeof(float), device);
      weight_scale = Buffer(Count(WeightBlockScaleLd(s.k), s.n / kBlock) * sizeof(float), device);
    }
  }
};

// Uploads the scales of `kind` from their logical layouts (packing the block scales).
void UploadScales(GemmKind kind, GemmShape s, const GemmOperands& h, const DeviceOperands& d,
                  const CudaStream& stream) {
  if (kind == GemmKind::kFp8PerTensor) {
    Upload("act_scale", d.act_scale, std::vector<float>{h.act_scale}, stream);
    Upload("weight_scale", d.weight_scale, std::vector<float>{h.weight_scale}, stream);
  } else if (kind == GemmKind::kFp8BlockScaled) {
    Upload("act_block_scale", d.act_scale, PackActBlockScales(h.act_block_scale, s.m, s.k), stream);
    Upload("weight_block_scale", d.weight_scale, PackWeightBlockScales(h.weight_block_scale, s.n, s.k), stream);
  }
}

std::string KindConfig(GemmKind kind) {
  switch (kind) {
    case GemmKind::kBf16:
      return "A=W bf16, B=act bf16";
    case GemmKind::kFp8PerTensor:
      return "A=W e4m3 SCALAR_32F, B=act e4m3 SCALAR_32F";
    case GemmKind::kFp8BlockScaled:
      return "A=W e4m3 BLK128x128_32F, B=act e4m3 VEC128_32F";
  }
  return "?";
}

// One cuBLASLt matmul on fixed operands: the descriptors hold the scale pointers and the
// heuristic reads the operands' alignment, so the pointers are bound at construction.
class LtGemm {
 public:
  LtGemm(const CublasLt& lt, GemmKind kind, GemmShape s, const DeviceOperands& o, void* workspace)
      : lt_(lt), a_ptr_(o.weight.data()), b_ptr_(o.act.data()), d_ptr_(o.out.data()), workspace_(workspace) {
    note_ = fmt::format("{}; TN, {}, D=out bf16, compute 32F", lt.Describe(), KindConfig(kind));
    if (!Ok(lt.Create(&handle_), "cublasLtCreate")) return;
    if (!Ok(lt.MatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) return;
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    if (!SetDesc(CUBLASLT_MATMUL_DESC_TRANSA, transa) || !SetDesc(CUBLASLT_MATMUL_DESC_TRANSB, transb)) return;
    if (kind != GemmKind::kBf16) {
      const void* a_scale = o.weight_scale.data();
      const void* b_scale = o.act_scale.data();
      if (!SetDesc(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale) ||
          !SetDesc(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale)) {
        return;
      }
    }
    if (kind == GemmKind::kFp8BlockScaled) {
      const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      if (!SetDesc(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode) || !SetDesc(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode)) {
        return;
      }
    }
    const cudaDataType_t in = kind == GemmKind::kBf16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    const auto u64 = [](int64_t x) { return static_cast<uint64_t>(x); };
    if (!Ok(lt.MatrixLayoutCreate(&a_, in, u64(s.k), u64(s.n), s.k), "cublasLtMatrixLayoutCreate(A)") ||
        !Ok(lt.MatrixLayoutCreate(&b_, in, u64(s.k), u64(s.m), s.k), "cublasLtMatrixLayoutCreate(B)") ||
        !Ok(lt.MatrixLayoutCreate(&d_, CUDA_R_16BF, u64(s.n), u64(s.m), s.n), "cublasLtMatrixLayoutCreate(D)")) {
      return;
    }
    if (!Ok(lt.MatmulPreferenceCreate(&pref_), "cublasLtMatmulPreferenceCreate")) return;
    const uint64_t workspace_bytes = kWorkspaceBytes;
    if (!Ok(lt.MatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                            sizeof(workspace_bytes)),
            "cublasLtMatmulPreferenceSetAttribute")) {
      return;
    }
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    if (!Ok(lt.MatmulAlgoGetHeuristic(handle_, desc_, a_, b_, d_, d_, pref_, 1, &result, &count),
            "cublasLtMatmulAlgoGetHeuristic")) {
      return;
    }
    if (count == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
      error_ = "cublasLtMatmulAlgoGetHeuristic: no algorithm for this kind and shape";
      return;
    }
    algo_ = result.algo;
    note_ += "; " + DescribeAlgo(result);
  }

  ~LtGemm() {
    if (pref_ != nullptr) lt_.MatmulPreferenceDestroy(pref_);
    if (d_ != nullptr) lt_.MatrixLayoutDestroy(d_);
    if (b_ != nullptr) lt_.MatrixLayoutDestroy(b_);
    if (a_ != nullptr) lt_.MatrixLayoutDestroy(a_);
    if (desc_ != nullptr) lt_.MatmulDescDestroy(desc_);
    if (handle_ != nullptr) lt_.Destroy(handle_);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Empty when the GEMM can run; otherwise cuBLASLt's reason.
  const std::string& error() const { return error_; }
  // The library, the configuration and the chosen algorithm.
  const std::string& note() const { return note_; }

  // Enqueues one call on `stream`; returns cuBLASLt's failure as text, empty on success.
  std::string Run(cudaStream_t stream) const {
    DI_CHECK(error_.empty(), "LtGemm::Run without an algorithm: {}", error_);
    const float alpha = 1.f, beta = 0.f;
    const cublasStatus_t status = lt_.Matmul(handle_, desc_, &alpha, a_ptr_, a_, b_ptr_, b_, &beta, d_ptr_, d_, d_ptr_,
                                             d_, &algo_, workspace_, kWorkspaceBytes, stream);
    return status == CUBLAS_STATUS_SUCCESS ? std::string() : "cublasLtMatmul: " + lt_.StatusText(status);
  }

  // Run, throwing on failure (for calls after one that succeeded).
  void RunOrThrow(cudaStream_t stream) const {
    if (std::string e = Run(stream); !e.empty()) DI_THROW("{}", e);
  }

 private:
  bool Ok(cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return true;
    error_ = fmt::format("{}: {}", what, lt_.StatusText(status));
    return false;
  }

  template <typename T>
  bool SetDesc(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    return Ok(lt_.MatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
  }

  template <typename T>
  T AlgoConfig(cublasLtMatmulAlgoConfigAttributes_t attribute) const {
    T value{};
    size_t written = 0;
    lt_.MatmulAlgoConfigGetAttribute(&algo_, attribute, &value, sizeof(value), &written);
    return value;
  }

  std::string DescribeAlgo(const cublasLtMatmulHeuristicResult_t& r) const {
    return fmt::format("algo {} tile {} stages {} split-K {} cluster {}, workspace {} B, waves {:.2f}",
                       AlgoConfig<int32_t>(CUBLASLT_ALGO_CONFIG_ID), AlgoConfig<uint32_t>(CUBLASLT_ALGO_CONFIG_TILE_ID),
                       AlgoConfig<uint32_t>(CUBLASLT_ALGO_CONFIG_STAGES_ID),
                       AlgoConfig<int32_t>(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                       AlgoConfig<uint16_t>(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), r.workspaceSize, r.wavesCount);
  }

  const CublasLt& lt_;
  const void* a_ptr_;
  const void* b_ptr_;
  void* d_ptr_;
  void* workspace_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;
  cublasLtMatrixLayout_t b_ = nullptr;
  cublasLtMatrixLayout_t d_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::string error_;
  std::string note_;
};

// ---- TimeGemm's operands and output check ------------------------------------------------------

// Scales log-uniform in [1/4, 4]: neighbours differ, so a misplaced scale shows.
GemmOperands RandomScales(GemmKind kind, GemmShape s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> log2_scale(-2.f, 2.f);
  const auto draw = [&] { return std::exp2(log2_scale(rng)); };
  GemmOperands h;
  if (kind == GemmKind::kFp8PerTensor) {
    h.act_scale = draw();
    h.weight_scale = draw();
  } else if (kind == GemmKind::kFp8BlockScaled) {
    h.act_block_scale.resize(Count(s.m, s.k / kBlock));
    h.weight_block_scale.resize(Count(s.n / kBlock, s.k / kBlock));
    for (float& x : h.act_block_scale) x = draw();
    for (float& x : h.weight_block_scale) x = draw();
  }
  return h;
}

// Up to 8 indices spread over [0, n), first and last included.
std::vector<int64_t> SampleIndices(int64_t n) {
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < 8; ++t) idx.push_back(n == 1 ? 0 : t * (n - 1) / 7);
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

// Row `row` of an operand ([rows, k]) decoded to double, its scales applied. `block_scale` is the
// logical [rows or rows/128, k/128] tensor for kFp8BlockScaled (`block_rows` rows per scale row).
std::vector<double> DecodedRow(GemmKind kind, const Buffer& data, int64_t row, int64_t k, float tensor_scale,
                               const std::vector<float>& block_scale, int64_t block_rows) {
  std::vector<double> v(static_cast<size_t>(k));
  if (kind == GemmKind::kBf16) {
    const std::vector<uint16_t> bits = Download<uint16_t>(data, Count(row, k), static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) v[c] = Bf16ToF32(bits[c]);
    return v;
  }
  const std::vector<uint8_t> codes = Download<uint8_t>(data, Count(row, k), static_cast<size_t>(k));
  const int64_t kb = k / kBlock;
  for (int64_t c = 0; c < k; ++c) {
    const double scale = kind == GemmKind::kFp8PerTensor
                             ? tensor_scale
                             : block_scale[static_cast<size_t>(row / block_rows * kb + c / kBlock)];
    v[c] = static_cast<double>(E4m3ToF32(codes[c])) * scale;
  }
  return v;
}

// Worst |got − want| / GemmTolerance over sampled outputs of the GEMM that just ran.
double CheckSampledOutputs(GemmKind kind, GemmShape s, const DeviceOperands& d, const GemmOperands& scales) {
  const std::vector<int64_t> rows = SampleIndices(s.m), cols = SampleIndices(s.n);
  std::vector<std::vector<double>> w;
  for (int64_t j : cols) {
    w.push_back(DecodedRow(kind, d.weight, j, s.k, scales.weight_scale, scales.weight_block_scale, kBlock));
  }
  double worst = 0;
  for (int64_t i : rows) {
    const std::vector<double> a = DecodedRow(kind, d.act, i, s.k, scales.act_scale, scales.act_block_scale, 1);
    const std::vector<uint16_t> out = Download<uint16_t>(d.out, Count(i, s.n), static_cast<size_t>(s.n));
    for (size_t c = 0; c < cols.size(); ++c) {
      double want = 0, abs_sum = 0;
      for (int64_t t = 0; t < s.k; ++t) {
        const double term = a[t] * w[c][t];
        want += term;
        abs_sum += std::fabs(term);
      }
      const double got = Bf16ToF32(out[static_cast<size_t>(cols[c])]);
      const double ratio = std::isfinite(got) ? std::fabs(got - want) / GemmTolerance(want, abs_sum) : INFINITY;
      worst = std::max(worst, ratio);
    }
  }
  return worst;
}

// TimeOwnFp8Linear's check: worst |got − want| / GemmTolerance over sampled outputs of the call
// that just ran (W e4m3 with e8m0 scales, x and y f32).
double CheckOwnSampledOutputs(GemmShape s, const Buffer& x, const Buffer& w, const std::vector<uint8_t>& scales,
                              const Buffer& y) {
  const int64_t kb = s.k / kBlock;
  double worst = 0;
  for (const int64_t o : SampleIndices(s.n)) {
    const std::vector<uint8_t> codes = Download<uint8_t>(w, Count(o, s.k), static_cast<size_t>(s.k));
    for (const int64_t r : SampleIndices(s.m)) {
      const std::vector<float> xr = Download<float>(x, Count(r, s.k), static_cast<size_t>(s.k));
      double want = 0, abs_sum = 0;
      for (int64_t c = 0; c < s.k; ++c) {
        const double scale = std::ldexp(1.0, scales[static_cast<size_t>(o / kBlock * kb + c / kBlock)] - 127);
        const double term = static_cast<double>(xr[c]) * E4m3ToF32(codes[c]) * scale;
        want += term;
        abs_sum += std::fabs(term);
      }
      const double got = Download<float>(y, Count(r, s.n) + static_cast<size_t>(o), 1)[0];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / GemmTolerance(want, abs_sum) : INFINITY);
    }
  }
  return worst;
}

}  // namespace

GemmTiming TimeGemm(int device_index, GemmKind kind, GemmShape shape, int iterations) {
  CheckShape(kind, shape);
  DI_CHECK(iterations > 0, "iterations must be positive, got {}", iterations);
  GemmTiming t;
  t.kind = kind;
  t.shape = shape;
  const CublasLt* lt = GetCublasLt(&t.error);
  if (lt == nullptr) return t;
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const CudaStream stream(device_index);
  const DeviceOperands d(kind, shape, Cuda(device_index));
  const Buffer workspace(kWorkspaceBytes, Cuda(device_index));
  const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(kind);
  if (kind == GemmKind::kBf16) {
    DI_BENCH_CUDA(FillRandomBf16(d.act.as<uint16_t>(), Count(shape.m, shape.k), seed, stream.get()));
    DI_BENCH_CUDA(FillRandomBf16(d.weight.as<uint16_t>(), Count(shape.n, shape.k), seed + 1, stream.get()));
  } else {
    DI_BENCH_CUDA(FillRandomE4m3(d.act.as<uint8_t>(), Count(shape.m, shape.k), seed, stream.get()));
    DI_BENCH_CUDA(FillRandomE4m3(d.weight.as<uint8_t>(), Count(shape.n, shape.k), seed + 1, stream.get()));
  }
  const GemmOperands scales = RandomScales(kind, shape, seed);
  UploadScales(kind, shape, scales, d, stream);

  const LtGemm gemm(*lt, kind, shape, d, workspace.data());
  t.algo_note = gemm.note();
  t.error = gemm.error();
  if (t.error.empty()) t.error = gemm.Run(stream.get());
  if (!t.error.empty()) return t;
  stream.Synchronize();
  t.available = true;

  t.check_ratio = CheckSampledOutputs(kind, shape, d, scales);
  if (!(t.check_ratio <= 1.0)) {
    t.error = fmt::format("sampled outputs disagree with the host reference: worst error {:.3g} times the tolerance",
                          t.check_ratio);
    return t;
  }
  for (int i = 0; i < kWarmupCalls; ++i) gemm.RunOrThrow(stream.get());
  const double seconds = TimeOnStream(stream, [&] {
    for (int i = 0; i < iterations; ++i) gemm.RunOrThrow(stream.get());
  });
  t.seconds_per_call = seconds / iterations;
  t.flops_per_s = GemmFlops(shape) / t.seconds_per_call;
  t.operand_bytes_per_s = GemmOperandBytes(kind, shape) / t.seconds_per_call;
  return t;
}

std::vector<float> RunGemm(int device_index, GemmKind kind, GemmShape shape, const GemmOperands& h) {
  CheckShape(kind, shape);
  std::string error;
  const CublasLt* lt = GetCublasLt(&error);
  if (lt == nullptr) DI_THROW("{}", error);
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const CudaStream stream(device_index);
  const DeviceOperands d(kind, shape, Cuda(device_index));
  const Buffer workspace(kWorkspaceBytes, Cuda(device_index));
  if (kind == GemmKind::kBf16) {
    Upload("act_bf16", d.act, h.act_bf16, stream);
    Upload("weight_bf16", d.weight, h.weight_bf16, stream);
  } else {
    Upload("act_e4m3", d.act, h.act_e4m3, stream);
    Upload("weight_e4m3", d.weight, h.weight_e4m3, stream);
  }
  UploadScales(kind, shape, h, d, stream);
  const LtGemm gemm(*lt, kind, shape, d, workspace.data());
  if (!gemm.error().empty()) DI_THROW("{} ({})", gemm.error(), gemm.note());
  gemm.RunOrThrow(stream.get());
  stream.Synchronize();
  const std::vector<uint16_t> bits = Download<uint16_t>(d.out, 0, Count(shape.m, shape.n));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}

GemmTiming TimeOwnFp8Linear(int device_index, GemmShape shape, int iterations) {
  DI_CHECK(shape.m > 0 && shape.n > 0 && shape.k > 0 && shape.k % kBlock == 0,
           "TimeOwnFp8Linear: m, n, k must be positive and k a multiple of 128, got {}x{}x{}", shape.m, shape.n,
           shape.k);
  DI_CHECK(iterations > 0, "iterations must be positive, got {}", iterations);
  GemmTiming t;
  t.kind = GemmKind::kFp8BlockScaled;
  t.shape = shape;
  t.algo_note =
      "deepinfer cuda::Linear, kFp8Act with scratch: x f32 quantized per 128 columns in the call, W e4m3 with e8m0 "
      "128x128 block scales, y f32";
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const DeviceId dev = Cuda(device_index);
  const CudaStream stream(device_index);
  const int64_t scale_rows = (shape.n + kBlock - 1) / kBlock, scale_cols = shape.k / kBlock;
  const Buffer x(Count(shape.m, shape.k) * sizeof(float), dev);
  const Buffer w(Count(shape.n, shape.k), dev);
  const Buffer w_scale(Count(scale_rows, scale_cols), dev);
  const Buffer y(Count(shape.m, shape.n) * sizeof(float), dev);
  DI_BENCH_CUDA(FillRandomE4m3Floats(x.as<float>(), static_cast<size_t>(shape.m), static_cast<size_t>(shape.k),
                                     0x11ea7000u, stream.get()));
  DI_BENCH_CUDA(FillRandomE4m3(w.as<uint8_t>(), Count(shape.n, shape.k), 0x11ea7001u, stream.get()));
  // e8m0 bytes 124..130: block scales 2^-3 .. 2^3.
  std::vector<uint8_t> scales(Count(scale_rows, scale_cols));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(124 + (i * 2654435761u >> 7) % 7);
  Upload("w_scale", w_scale, scales, stream);

  cuda::DeviceWeight dw;
  dw.format = cuda::DeviceWeight::Format::kFp8;
  dw.scale_dtype = DType::kF8E8M0;
  dw.out_features = shape.n;
  dw.in_features = shape.k;
  dw.data = w.data();
  dw.data_row_stride = shape.k;
  dw.scale = w_scale.data();
  dw.scale_row_stride = scale_cols;
  const cuda::LinearMath math = cuda::LinearMath::kFp8Act;
  const size_t scratch_bytes = cuda::LinearScratchBytes(shape.m, dw, math);
  const Buffer scratch(std::max<size_t>(scratch_bytes, 1), dev);
  const auto call = [&] {
    cuda::Linear(x.as<float>(), shape.k, shape.m, dw, y.as<float>(), shape.n, stream.get(), math,
                 scratch_bytes > 0 ? scratch.data() : nullptr, scratch_bytes);
  };
  call();
  stream.Synchronize();
  t.available = true;
  t.check_ratio = CheckOwnSampledOutputs(shape, x, w, scales, y);
  if (!(t.check_ratio <= 1.0)) {
    t.error = fmt::format("sampled outputs disagree with the host reference: worst error {:.3g} times the tolerance",
                          t.check_ratio);
    return t;
  }
  for (int i = 0; i < kWarmupCalls; ++i) call();
  const double seconds = TimeOnStream(stream, [&] {
    for (int i = 0; i < iterations; ++i) call();
  });
  t.seconds_per_call = seconds / iterations;
  t.flops_per_s = GemmFlops(shape) / t.seconds_per_call;
  const double bytes = 4.0 * static_cast<double>(Count(shape.m, shape.k) + Count(shape.m, shape.n)) +
                       static_cast<double>(Count(shape.n, shape.k) + scales.size());
  t.operand_bytes_per_s = bytes / t.seconds_per_call;
  return t;
}

CopyTiming TimeDeviceCopy(int device_index, size_t bytes, int iterations) {
  DI_CHECK(bytes > 0 && iterations > 0, "copy of {} bytes, {} iterations", bytes, iterations);
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const CudaStream stream(device_index);
  const Buffer src(bytes, Cuda(device_index)), dst(bytes, Cuda(device_index));
  constexpr uint8_t kPattern = 0xa5;
  DI_BENCH_CUDA(cudaMemsetAsync(src.data(), kPattern, bytes, stream.get()));
  DI_BENCH_CUDA(cudaMemsetAsync(dst.data(), 0, bytes, stream.get()));
  const auto copy = [&] {
    DI_BENCH_CUDA(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  };
  copy();
  stream.Synchronize();
  const size_t probe = std::min<size_t>(bytes, 4096);
  for (size_t offset : {size_t{0}, bytes - probe}) {
    const std::vector<uint8_t> got = Download<uint8_t>(dst, offset, probe);
    DI_CHECK(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPattern; }),
             "device copy check failed at bytes [{}, {})", offset, offset + probe);
  }
  const double seconds = TimeOnStream(stream, [&] {
    for (int i = 0; i < iterations; ++i) copy();
  });
  CopyTiming c;
  c.bytes = bytes;
  c.seconds = seconds / iterations;
  c.bytes_per_s = 2.0 * static_cast<double>(bytes) / c.seconds;
  return c;
}

Ceilings MeasureCeilings(int device_index) {
  Ceilings c;
  cudaDeviceProp prop{};
  DI_BENCH_CUDA(cudaGetDeviceProperties(&prop, device_index));
  c.device = prop.name;
  c.copy = TimeDeviceCopy(device_index, size_t{2} << 30, 20);
  const GemmShape shape{8192, 8192, 8192};
  c.bf16 = TimeGemm(device_index, GemmKind::kBf16, shape, 50);
  c.fp8 = TimeGemm(device_index, GemmKind::kFp8PerTensor, shape, 50);
  c.fp8_block = TimeGemm(device_index, GemmKind::kFp8BlockScaled, shape, 50);
  return c;
}

}  // namespace deepinfer::bench
