// cuBLASLt, loaded at run time with dlopen (only its header is used at build time, so no binary
// links it and a machine without it still runs every other path), and the one product the engine
// asks of it: the block-scaled FP8 GEMM of DeepSeek's formats (weights e4m3 with 128 × 128
// scales, activations e4m3 with 1 × 128 scales), f32 out.
//
// Library: $DEEPINFER_CUBLASLT if set, else libcublasLt.so.13, else libcublasLt.so.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace deepinfer::cuda {

// The entry points DeepInfer calls, resolved from the loaded library.
struct CublasLtApi {
  std::string path;    // the name dlopen accepted
  size_t version = 0;  // cublasLtGetVersion(): major·10000 + minor·100 + patch
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtGetVersion) GetVersion = nullptr;
  decltype(&cublasLtGetStatusName) GetStatusName = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) MatmulAlgoConfigGetAttribute = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;

  // "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
  std::string StatusText(cublasStatus_t status) const;
  // "cuBLASLt 13.0.2 (libcublasLt.so.13)".
  std::string Describe() const;
};

// The process's cuBLASLt, loaded on the first call; nullptr with *error set (which library names
// were tried and why each failed, or the missing entry point) where it cannot be loaded.
const CublasLtApi* GetCublasLt(std::string* error);

// Row strides of the scale arrays cuBLASLt reads (its VEC128_32F and BLK128x128_32F modes): the
// activation's scales are [k / 128][BlockScaledActScaleLd(m)] (each 128-column block's m scales
// contiguous), the weight's [n / 128][BlockScaledWeightScaleLd(k)].
inline int64_t BlockScaledActScaleLd(int64_t m) { return (m + 3) / 4 * 4; }
inline int64_t BlockScaledWeightScaleLd(int64_t k) { return (k / 128 + 3) / 4 * 4; }

// y[r, o] = Σ_c x(r, c)·W(o, c) for r < m, o < n, where x(r, c) = x_codes[r, c]·x_scales[c / 128][r]
// and W(o, c) = w_codes[o, c]·w_scales[o / 128][c / 128], e4m3 codes; compute and y f32.
// k and n multiples of 128, every pointer 16-byte aligned, w_row_bytes a multiple of 16.
// cuBLASLt's own order of sums (the first algorithm its heuristic gives for the shape, with up to a
// 32 MiB workspace): not linear_wgmma.cuh's 512-column slices.
struct BlockScaledFp8Product {
  const uint8_t* x_codes = nullptr;  // [m][k], row stride k bytes
  const float* x_scales = nullptr;   // [k / 128][BlockScaledActScaleLd(m)]
  const uint8_t* w_codes = nullptr;  // [n][k], row stride w_row_bytes
  int64_t w_row_bytes = 0;
  const float* w_scales = nullptr;  // [n / 128][BlockScaledWeightScaleLd(k)]
  float* y = nullptr;               // [m][ldy]
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;
};

// What a Run* call did.
struct CublasLtResult {
  enum class Status : uint8_t {
    kEnqueued,
    kUnsupported,  // cuBLASLt has no algorithm for the shape (e.g. m not a multiple of 4); final per shape
    kFailed,       // cuBLASLt missing, a bad argument, a capture before the first call, a failed call
    kPlanned,      // Plan* only: the shape has a plan (made now or before), nothing enqueued
  };
  Status status = Status::kFailed;
  std::string why;  // empty when enqueued
};

// Enqueues the product on `stream` (on the current device); where it is not enqueued, nothing is.
// Plans (descriptors and the chosen algorithm) are cached per shape; calls from several threads
// are serialized. Measured (cuBLASLt 13.1, H100): m = 131 has no algorithm, m = 300 and 8,192 have.
CublasLtResult RunBlockScaledFp8(const BlockScaledFp8Product& p, cudaStream_t stream);
// Whether RunBlockScaledFp8 has an algorithm for p's shape (only the scale pointers read, for their
// alignment): kPlanned with the plan cached, else kUnsupported or kFailed as RunBlockScaledFp8 would
// answer. Not inside a graph capture before the device's first product (the workspace is allocated then).
CublasLtResult PlanBlockScaledFp8(const BlockScaledFp8Product& p, cudaStream_t stream);

// y_b[r, o] = Σ_c x_b[r, c]·W_b[o, c] (or y_b[r, o] + that sum, where `accumulate`) for each batch
// entry b < batch, r < m, o < n: x_b = x + b·x_batch_stride ([m][ldx] BF16), W_b = w +
// b·w_batch_stride ([n][w_row_elems] BF16), y_b = y + b·y_batch_stride ([m][ldy] f32); compute f32,
// in cuBLASLt's order of sums. Strides count elements.
struct Bf16BatchedProduct {
  const uint16_t* x = nullptr;
  int64_t ldx = 0, x_batch_stride = 0;
  const uint16_t* w = nullptr;
  int64_t w_row_elems = 0, w_batch_stride = 0;
  float* y = nullptr;
  int64_t ldy = 0, y_batch_stride = 0;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool accumulate = false;  // y_b += the product (cuBLASLt's beta 1) instead of y_b = it
};
CublasLtResult RunBf16Batched(const Bf16BatchedProduct& p, cudaStream_t stream);
// Whether RunBf16Batched has an algorithm for p's shape (the pointers unread): kPlanned with the
// plan cached, else kUnsupported or kFailed as RunBf16Batched would answer. Not inside a graph
// capture before the device's first product (the workspace is allocated then).
CublasLtResult PlanBf16Batched(const Bf16BatchedProduct& p, cudaStream_t stream);

}  // namespace deepinfer::cuda
