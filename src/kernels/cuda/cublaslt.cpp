#include "kernels/cuda/cublaslt.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "base/dynamic_library.h"

namespace deepinfer::cuda {

std::string CublasLtApi::StatusText(cublasStatus_t status) const {
  return fmt::format("{} ({})", GetStatusName(status), GetStatusString(status));
}

std::string CublasLtApi::Describe() const {
  return fmt::format("cuBLASLt {}.{}.{} ({})", version / 10000, version / 100 % 100, version % 100, path);
}

namespace {

struct LoadedCublasLt {
  CublasLtApi api;
  std::string error;  // empty when loaded
};

LoadedCublasLt LoadCublasLt() {
  LoadedCublasLt r;
  std::vector<std::string> names;
  if (const char* env = std::getenv("DEEPINFER_CUBLASLT"); env != nullptr && *env != '\0') names.emplace_back(env);
  names.emplace_back("libcublasLt.so.13");
  names.emplace_back("libcublasLt.so");
  const OpenedLibrary opened = OpenFirstLibrary(names);
  void* lib = opened.handle;
  if (lib == nullptr) {
    r.error = fmt::format("cannot load cuBLASLt ({}); set DEEPINFER_CUBLASLT to the library's path", opened.tried);
    return r;
  }
  r.api.path = opened.path;
  CublasLtApi& lt = r.api;
  std::string missing;
  ResolveSymbol(lib, "cublasLtCreate", &lt.Create, &missing);
  ResolveSymbol(lib, "cublasLtDestroy", &lt.Destroy, &missing);
  ResolveSymbol(lib, "cublasLtGetVersion", &lt.GetVersion, &missing);
  ResolveSymbol(lib, "cublasLtGetStatusName", &lt.GetStatusName, &missing);
  ResolveSymbol(lib, "cublasLtGetStatusString", &lt.GetStatusString, &missing);
  ResolveSymbol(lib, "cublasLtMatmulDescCreate", &lt.MatmulDescCreate, &missing);
  ResolveSymbol(lib, "cublasLtMatmulDescDestroy", &lt.MatmulDescDestroy, &missing);
  ResolveSymbol(lib, "cublasLtMatmulDescSetAttribute", &lt.MatmulDescSetAttribute, &missing);
  ResolveSymbol(lib, "cublasLtMatrixLayoutCreate", &lt.MatrixLayoutCreate, &missing);
  ResolveSymbol(lib, "cublasLtMatrixLayoutDestroy", &lt.MatrixLayoutDestroy, &missing);
  ResolveSymbol(lib, "cublasLtMatrixLayoutSetAttribute", &lt.MatrixLayoutSetAttribute, &missing);
  ResolveSymbol(lib, "cublasLtMatmulPreferenceCreate", &lt.MatmulPreferenceCreate, &missing);
  ResolveSymbol(lib, "cublasLtMatmulPreferenceDestroy", &lt.MatmulPreferenceDestroy, &missing);
  ResolveSymbol(lib, "cublasLtMatmulPreferenceSetAttribute", &lt.MatmulPreferenceSetAttribute, &missing);
  ResolveSymbol(lib, "cublasLtMatmulAlgoGetHeuristic", &lt.MatmulAlgoGetHeuristic, &missing);
  ResolveSymbol(lib, "cublasLtMatmulAlgoConfigGetAttribute", &lt.MatmulAlgoConfigGetAttribute, &missing);
  ResolveSymbol(lib, "cublasLtMatmul", &lt.Matmul, &missing);
  if (!missing.empty()) {
    r.error = fmt::format("{} lacks {}", lt.path, missing);
    return r;  // the handle stays open: harmless, and the error is final for the process
  }
  lt.version = lt.GetVersion();
  return r;
}

// ---- the products -------------------------------------------------------------------------------

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxPlans = 1024;  // past this many shapes the cache starts over

// One product's shape in cuBLASLt's column-major terms: A = W as k × n (ld lda), B = x as k × m
// (ld ldb), D = y as n × m (ld ldd), `batch` of them `stride_*` elements apart.
struct Spec {
  bool block_scaled = false;  // A, B e4m3 with BLK128x128 / VEC128 f32 scales; else BF16
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;

  auto Key(int device) const {
    return std::make_tuple(device, block_scaled, m, n, k, lda, ldb, ldd, batch, stride_a, stride_b, stride_d);
  }
};

// One shape's cuBLASLt objects. The scale pointers are attributes of the descriptor, set on each
// call (under the module's lock) before cublasLtMatmul reads them.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::string error;         // why the shape has no plan (final for the process)
  bool unsupported = false;  // the error is the heuristic's: no algorithm for the shape
};

// Per device: the handle and the workspace (allocated on the first call outside a graph capture).
struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string error;
};

struct Module {
  std::mutex mu;
  std::map<int, DeviceState> devices;
  std::map<decltype(Spec{}.Key(0)), Plan> plans;
};

Module& TheModule() {
  static Module* const module = new Module;  // never destroyed: plans may be used until exit
  return *module;
}

template <typename T>
cublasStatus_t SetDesc(const CublasLtApi& lt, cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                       const T& value) {
  return lt.MatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
}

template <typename T>
cublasStatus_t SetLayout(const CublasLtApi& lt, cublasLtMatrixLayout_t layout,
                         cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
  return lt.MatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value));
}

void DestroyPlan(const CublasLtApi& lt, Plan& plan) {
  if (plan.d != nullptr) lt.MatrixLayoutDestroy(plan.d);
  if (plan.b != nullptr) lt.MatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) lt.MatrixLayoutDestroy(plan.a);
  if (plan.desc != nullptr) lt.MatmulDescDestroy(plan.desc);
  plan = Plan{};
}

// scales: A's and B's scale pointers (block-scaled only; the heuristic may read their alignment).
Plan MakePlan(const CublasLtApi& lt, cublasLtHandle_t handle, const Spec& s, const void* a_scale,
              const void* b_scale) {
  Plan plan;
  const auto fail = [&](cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return false;
    plan.error = fmt::format("{}: {}", what, lt.StatusText(status));
    return true;
  };
  if (fail(lt.MatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) return plan;
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  if (fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa), "TRANSA") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb), "TRANSB")) {
    return plan;
  }
  if (s.block_scaled) {
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode), "A_SCALE_MODE BLK128x128_32F") ||
        fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode), "B_SCALE_MODE VEC128_32F") ||
        fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale), "A_SCALE_POINTER") ||
        fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale), "B_SCALE_POINTER")) {
      return plan;
    }
  }
  const cudaDataType_t in = s.block_scaled ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const auto u64 = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (fail(lt.MatrixLayoutCreate(&plan.a, in, u64(s.k), u64(s.n), s.lda), "layout A") ||
      fail(lt.MatrixLayoutCreate(&plan.b, in, u64(s.k), u64(s.m), s.ldb), "layout B") ||
      fail(lt.MatrixLayoutCreate(&plan.d, CUDA_R_32F, u64(s.n), u64(s.m), s.ldd), "layout D")) {
    return plan;
  }
  if (s.batch > 1) {
    const int32_t count = static_cast<int32_t>(s.batch);
    if (fail(SetLayout(lt, plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count), "batch count A") ||
        fail(SetLayout(lt, plan.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count), "batch count B") ||
        fail(SetLayout(lt, plan.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count), "batch count D") ||
        fail(SetLayout(lt, plan.a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, s.stride_a), "batch stride A") ||
        fail(SetLayout(lt, plan.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, s.stride_b), "batch stride B") ||
        fail(SetLayout(lt, plan.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, s.stride_d), "batch stride D")) {
      return plan;
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  if (fail(lt.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return plan;
  const uint64_t workspace_bytes = kWorkspaceBytes;
  cublasStatus_t status = lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof(workspace_bytes));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = lt.MatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &count);
  }
  lt.MatmulPreferenceDestroy(pref);
  if (fail(status, "cublasLtMatmulAlgoGetHeuristic")) {
    plan.unsupported = status == CUBLAS_STATUS_NOT_SUPPORTED;
    return plan;
  }
  if (count == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    plan.unsupported = true;
    plan.error = fmt::format("cuBLASLt ({}) has no {} algorithm with f32 output for m={} n={} k={} batch={}",
                             lt.Describe(), s.block_scaled ? "block-scaled FP8" : "BF16", s.m, s.n, s.k, s.batch);
    return plan;
  }
  plan.algo = result.algo;
  return plan;
}

// Enqueues the product of `s` (see Spec) on `stream`: its plan found or made, the scale pointers
// set (block-scaled), then cublasLtMatmul with alpha 1 and `beta` (0, or 1 to add into d). With
// plan_only, returns kPlanned once the plan exists, enqueuing nothing.
CublasLtResult Enqueue(const Spec& s, const void* a, const void* b, float* d, const void* a_scale,
                       const void* b_scale, cudaStream_t stream, float beta = 0.f, bool plan_only = false) {
  using Status = CublasLtResult::Status;
  const auto failed = [](std::string why) { return CublasLtResult{Status::kFailed, std::move(why)}; };
  std::string error;
  const CublasLtApi* lt = GetCublasLt(&error);
  if (lt == nullptr) return failed(error);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return failed("cuBLASLt product: cudaGetDevice failed");
  Module& module = TheModule();
  std::lock_guard<std::mutex> lock(module.mu);
  DeviceState& dev = module.devices[device];
  if (!dev.error.empty()) return failed(dev.error);
  if (dev.workspace == nullptr) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      return failed("cuBLASLt product: the first call may not be inside a graph capture (it allocates the workspace)");
    }
    if (dev.handle == nullptr) {
      if (const cublasStatus_t st = lt->Create(&dev.handle); st != CUBLAS_STATUS_SUCCESS) {
        dev.error = "cublasLtCreate: " + lt->StatusText(st);
        return failed(dev.error);
      }
    }
    if (cudaMalloc(&dev.workspace, kWorkspaceBytes) != cudaSuccess) {
      dev.workspace = nullptr;
      return failed(fmt::format("cuBLASLt product: cannot allocate the {} MiB workspace", kWorkspaceBytes >> 20));
    }
  }
  const auto key = s.Key(device);
  auto it = module.plans.find(key);
  if (it == module.plans.end()) {
    if (module.plans.size() >= kMaxPlans) {
      for (auto& [unused, old] : module.plans) DestroyPlan(*lt, old);
      module.plans.clear();
    }
    it = module.plans.emplace(key, MakePlan(*lt, dev.handle, s, a_scale, b_scale)).first;
  }
  Plan& plan = it->second;
  if (!plan.error.empty()) return {plan.unsupported ? Status::kUnsupported : Status::kFailed, plan.error};
  if (plan_only) return {Status::kPlanned, {}};
  if (s.block_scaled) {
    const bool set = SetDesc(*lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale) == CUBLAS_STATUS_SUCCESS &&
                     SetDesc(*lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale) == CUBLAS_STATUS_SUCCESS;
    if (!set) return failed("cuBLASLt product: cannot set the scale pointers");
  }
  const float alpha = 1.f;
  const cublasStatus_t status = lt->Matmul(dev.handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d,
                                           plan.d, &plan.algo, dev.workspace, kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS) return failed("cublasLtMatmul: " + lt->StatusText(status));
  return {Status::kEnqueued, {}};
}

}  // namespace

const CublasLtApi* GetCublasLt(std::string* error) {
  static const LoadedCublasLt loaded = LoadCublasLt();
  if (!loaded.error.empty()) {
    *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}


namespace {

// Why RunBlockScaledFp8 cannot take p's arguments; empty where it can.
std::string BlockScaledArgumentsError(const BlockScaledFp8Product& p) {
  if (p.m > 0 && p.n > 0 && p.k > 0 && p.n % 128 == 0 && p.k % 128 == 0 && p.w_row_bytes % 16 == 0 && p.ldy >= p.n) {
    return {};
  }
  return fmt::format("block-scaled FP8: unsupported arguments m={} n={} k={} w_row_bytes={} ldy={}", p.m, p.n, p.k,
                     p.w_row_bytes, p.ldy);
}

Spec BlockScaledSpec(const BlockScaledFp8Product& p) {
  Spec s;
  s.block_scaled = true;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.lda = p.w_row_bytes;
  s.ldb = p.k;
  s.ldd = p.ldy;
  return s;
}

// Why RunBf16Batched cannot take p's arguments; empty where it can.
std::string Bf16BatchedArgumentsError(const Bf16BatchedProduct& p) {
  if (p.m > 0 && p.n > 0 && p.k > 0 && p.batch > 0 && p.ldx >= p.k && p.w_row_elems >= p.k && p.ldy >= p.n) return {};
  return fmt::format("BF16 batched: unsupported arguments m={} n={} k={} batch={} ldx={} ldw={} ldy={}", p.m, p.n, p.k,
                     p.batch, p.ldx, p.w_row_elems, p.ldy);
}

Spec Bf16BatchedSpec(const Bf16BatchedProduct& p) {
  Spec s;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.lda = p.w_row_elems;
  s.ldb = p.ldx;
  s.ldd = p.ldy;
  s.batch = p.batch;
  s.stride_a = p.w_batch_stride;
  s.stride_b = p.x_batch_stride;
  s.stride_d = p.y_batch_stride;
  return s;
}

}  // namespace

CublasLtResult PlanBlockScaledFp8(const BlockScaledFp8Product& p, cudaStream_t stream) {
  if (std::string why = BlockScaledArgumentsError(p); !why.empty()) return {CublasLtResult::Status::kFailed, why};
  return Enqueue(BlockScaledSpec(p), nullptr, nullptr, nullptr, p.w_scales, p.x_scales, stream, 0.f, true);
}

CublasLtResult RunBlockScaledFp8(const BlockScaledFp8Product& p, cudaStream_t stream) {
  if (std::string why = BlockScaledArgumentsError(p); !why.empty()) return {CublasLtResult::Status::kFailed, why};
  return Enqueue(BlockScaledSpec(p), p.w_codes, p.x_codes, p.y, p.w_scales, p.x_scales, stream);
}

CublasLtResult PlanBf16Batched(const Bf16BatchedProduct& p, cudaStream_t stream) {
  if (std::string why = Bf16BatchedArgumentsError(p); !why.empty()) return {CublasLtResult::Status::kFailed, why};
  return Enqueue(Bf16BatchedSpec(p), nullptr, nullptr, nullptr, nullptr, nullptr, stream, 0.f, true);
}

CublasLtResult RunBf16Batched(const Bf16BatchedProduct& p, cudaStream_t stream) {
  if (std::string why = Bf16BatchedArgumentsError(p); !why.empty()) return {CublasLtResult::Status::kFailed, why};
  return Enqueue(Bf16BatchedSpec(p), p.w, p.x, p.y, nullptr, nullptr, stream, p.accumulate ? 1.f : 0.f);
}

}  // namespace deepinfer::cuda
