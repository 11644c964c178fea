#include "kernels/cuda/cublaslt.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace deepinfer::cuda {

std::string CublasLtApi::StatusText(cublasStatus_t status) const {
  return fmt::format("{} ({})", GetStatusName(status), GetStatusString(status));
}

std::string CublasLtApi::Describe() const {
  return fmt::format("cuBLASLt {}.{}.{} ({})", version / 10000, version / 100 % 100, version % 100, path);
}

namespace {

template <typename Fn>
void Resolve(void* lib, const char* name, Fn* fn, std::string* first_missing) {
  void* symbol = dlsym(lib, name);
  if (symbol == nullptr && first_missing->empty()) *first_missing = name;
  *fn = reinterpret_cast<Fn>(symbol);
}

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
  void* lib = nullptr;
  std::string tried;
  for (const std::string& name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      r.api.path = name;
      break;
    }
    const char* why = dlerror();
    tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why != nullptr ? why : name.c_str());
  }
  if (lib == nullptr) {
    r.error = fmt::format("cannot load cuBLASLt ({}); set DEEPINFER_CUBLASLT to the library's path", tried);
    return r;
  }
  CublasLtApi& lt = r.api;
  std::string missing;
  Resolve(lib, "cublasLtCreate", &lt.Create, &missing);
  Resolve(lib, "cublasLtDestroy", &lt.Destroy, &missing);
  Resolve(lib, "cublasLtGetVersion", &lt.GetVersion, &missing);
  Resolve(lib, "cublasLtGetStatusName", &lt.GetStatusName, &missing);
  Resolve(lib, "cublasLtGetStatusString", &lt.GetStatusString, &missing);
  Resolve(lib, "cublasLtMatmulDescCreate", &lt.MatmulDescCreate, &missing);
  Resolve(lib, "cublasLtMatmulDescDestroy", &lt.MatmulDescDestroy, &missing);
  Resolve(lib, "cublasLtMatmulDescSetAttribute", &lt.MatmulDescSetAttribute, &missing);
  Resolve(lib, "cublasLtMatrixLayoutCreate", &lt.MatrixLayoutCreate, &missing);
  Resolve(lib, "cublasLtMatrixLayoutDestroy", &lt.MatrixLayoutDestroy, &missing);
  Resolve(lib, "cublasLtMatmulPreferenceCreate", &lt.MatmulPreferenceCreate, &missing);
  Resolve(lib, "cublasLtMatmulPreferenceDestroy", &lt.MatmulPreferenceDestroy, &missing);
  Resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &lt.MatmulPreferenceSetAttribute, &missing);
  Resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &lt.MatmulAlgoGetHeuristic, &missing);
  Resolve(lib, "cublasLtMatmulAlgoConfigGetAttribute", &lt.MatmulAlgoConfigGetAttribute, &missing);
  Resolve(lib, "cublasLtMatmul", &lt.Matmul, &missing);
  if (!missing.empty()) {
    r.error = fmt::format("{} lacks {}", lt.path, missing);
    return r;  // the handle stays open: harmless, and the error is final for the process
  }
  lt.version = lt.GetVersion();
  return r;
}

// ---- the block-scaled FP8 product -------------------------------------------------------------

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxPlans = 1024;  // past this many shapes the cache starts over

// One shape's cuBLASLt objects. The scale pointers are attributes of the descriptor, set on each
// call (under the module's lock) before cublasLtMatmul reads them.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::string algo_text;
  std::string error;  // why the shape has no plan (final for the process)
};

// Per device: the handle and the workspace (allocated on the first call outside a graph capture).
struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string error;
};

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t>;  // device, m, n, k, ldy, w_row_bytes

struct Module {
  std::mutex mu;
  std::map<int, DeviceState> devices;
  std::map<PlanKey, Plan> plans;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::string> last_algo;  // (m, n, k) -> text (tests)
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
T AlgoConfig(const CublasLtApi& lt, const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  lt.MatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  return value;
}

void DestroyPlan(const CublasLtApi& lt, Plan& plan) {
  if (plan.d != nullptr) lt.MatrixLayoutDestroy(plan.d);
  if (plan.b != nullptr) lt.MatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) lt.MatrixLayoutDestroy(plan.a);
  if (plan.desc != nullptr) lt.MatmulDescDestroy(plan.desc);
  plan = Plan{};
}

Plan MakePlan(const CublasLtApi& lt, cublasLtHandle_t handle, const BlockScaledFp8Product& p) {
  Plan plan;
  const auto fail = [&](cublasStatus_t status, const char* what) {
    if (status == CUBLAS_STATUS_SUCCESS) return false;
    plan.error = fmt::format("{}: {}", what, lt.StatusText(status));
    return true;
  };
  if (fail(lt.MatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) return plan;
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  if (fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, transa), "TRANSA") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, transb), "TRANSB") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode), "A_SCALE_MODE BLK128x128_32F") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode), "B_SCALE_MODE VEC128_32F") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(p.w_scales)),
           "A_SCALE_POINTER") ||
      fail(SetDesc(lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(p.x_scales)),
           "B_SCALE_POINTER")) {
    return plan;
  }
  const auto u64 = [](int64_t x) { return static_cast<uint64_t>(x); };
  // Column-major views: A = W as k × n (ld w_row_bytes), B = x as k × m (ld k), D = y as n × m (ld ldy).
  if (fail(lt.MatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, u64(p.k), u64(p.n), p.w_row_bytes), "layout A") ||
      fail(lt.MatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, u64(p.k), u64(p.m), p.k), "layout B") ||
      fail(lt.MatrixLayoutCreate(&plan.d, CUDA_R_32F, u64(p.n), u64(p.m), p.ldy), "layout D")) {
    return plan;
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
  if (fail(status, "cublasLtMatmulAlgoGetHeuristic")) return plan;
  if (count == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    plan.error = fmt::format("cuBLASLt ({}) has no block-scaled FP8 algorithm with f32 output for m={} n={} k={}",
                             lt.Describe(), p.m, p.n, p.k);
    return plan;
  }
  plan.algo = result.algo;
  plan.algo_text = fmt::format(
      "{}: algo {} tile {} stages {} split-K {} cluster {}, workspace {} B", lt.Describe(),
      AlgoConfig<int32_t>(lt, plan.algo, CUBLASLT_ALGO_CONFIG_ID),
      AlgoConfig<uint32_t>(lt, plan.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
      AlgoConfig<uint32_t>(lt, plan.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
      AlgoConfig<int32_t>(lt, plan.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
      AlgoConfig<uint16_t>(lt, plan.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), result.workspaceSize);
  return plan;
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

std::string RunBlockScaledFp8(const BlockScaledFp8Product& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.n % 128 != 0 || p.k % 128 != 0 || p.w_row_bytes % 16 != 0 ||
      p.ldy < p.n) {
    return fmt::format("block-scaled FP8: unsupported shape m={} n={} k={} w_row_bytes={} ldy={}", p.m, p.n, p.k,
                       p.w_row_bytes, p.ldy);
  }
  std::string error;
  const CublasLtApi* lt = GetCublasLt(&error);
  if (lt == nullptr) return error;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return "block-scaled FP8: cudaGetDevice failed";
  Module& module = TheModule();
  std::lock_guard<std::mutex> lock(module.mu);
  DeviceState& dev = module.devices[device];
  if (!dev.error.empty()) return dev.error;
  if (dev.workspace == nullptr) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      return "block-scaled FP8: the first call may not be inside a graph capture (its workspace is allocated then)";
    }
    if (const cublasStatus_t s = lt->Create(&dev.handle); s != CUBLAS_STATUS_SUCCESS) {
      dev.error = "cublasLtCreate: " + lt->StatusText(s);
      return dev.error;
    }
    if (cudaMalloc(&dev.workspace, kWorkspaceBytes) != cudaSuccess) {
      dev.workspace = nullptr;
      return fmt::format("block-scaled FP8: cannot allocate the {} MiB workspace", kWorkspaceBytes >> 20);
    }
  }
  const PlanKey key{device, p.m, p.n, p.k, p.ldy, p.w_row_bytes};
  auto it = module.plans.find(key);
  if (it == module.plans.end()) {
    if (module.plans.size() >= kMaxPlans) {
      for (auto& [unused, old] : module.plans) DestroyPlan(*lt, old);
      module.plans.clear();
    }
    it = module.plans.emplace(key, MakePlan(*lt, dev.handle, p)).first;
    module.last_algo[{p.m, p.n, p.k}] = it->second.error.empty() ? it->second.algo_text : it->second.error;
  }
  Plan& plan = it->second;
  if (!plan.error.empty()) return plan.error;
  const void* a_scale = p.w_scales;
  const void* b_scale = p.x_scales;
  if (SetDesc(*lt, plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale) != CUBLAS_STATUS_SUCCESS ||
      SetDesc(*lt, plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale) != CUBLAS_STATUS_SUCCESS) {
    return "block-scaled FP8: cannot set the scale pointers";
  }
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t status = lt->Matmul(dev.handle, plan.desc, &alpha, p.w_codes, plan.a, p.x_codes, plan.b, &beta,
                                           p.y, plan.d, p.y, plan.d, &plan.algo, dev.workspace, kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS) return "cublasLtMatmul: " + lt->StatusText(status);
  return {};
}

std::string BlockScaledFp8AlgoForTesting(int64_t m, int64_t n, int64_t k) {
  Module& module = TheModule();
  std::lock_guard<std::mutex> lock(module.mu);
  const auto it = module.last_algo.find({m, n, k});
  return it == module.last_algo.end() ? std::string() : it->second;
}

}  // namespace deepinfer::cuda
