// KernelTrace on CUPTI's activity API, dlopen'ed: the binary has no link-time dependency on it.
#include <cupti_activity.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/demangle.h"
#include "base/dynamic_library.h"
#include "base/error.h"
#include "bench/kernel_trace.h"

namespace deepinfer::bench {
namespace {

struct CuptiApi {
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
      nullptr;
  CUptiResult (*ActivityFlushAll)(uint32_t) = nullptr;
  CUptiResult (*ActivityGetNextRecord)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*GetResultString)(CUptiResult, const char**) = nullptr;
  std::string path;
};

// CUPTI, loaded once: DEEPINFER_CUPTI, else libcupti.so.13 on the loader's path, else the CUDA
// toolkit's copies. Throws naming what it tried.
const CuptiApi& Cupti() {
  static const CuptiApi api = [] {
    std::vector<std::string> names;
    if (const char* env = std::getenv("DEEPINFER_CUPTI"); env != nullptr && *env != '\0') names.emplace_back(env);
    for (const char* name : {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13",
                             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                             "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13"}) {
      names.emplace_back(name);
    }
    const OpenedLibrary opened = OpenFirstLibrary(names);
    void* lib = opened.handle;
    DI_CHECK(lib != nullptr, "cannot load CUPTI ({}); set DEEPINFER_CUPTI to libcupti.so.13's path", opened.tried);
    CuptiApi a;
    a.path = opened.path;
    std::string missing;
    ResolveSymbol(lib, "cuptiActivityEnable", &a.ActivityEnable, &missing);
    ResolveSymbol(lib, "cuptiActivityDisable", &a.ActivityDisable, &missing);
    ResolveSymbol(lib, "cuptiActivityRegisterCallbacks", &a.ActivityRegisterCallbacks, &missing);
    ResolveSymbol(lib, "cuptiActivityFlushAll", &a.ActivityFlushAll, &missing);
    ResolveSymbol(lib, "cuptiActivityGetNextRecord", &a.ActivityGetNextRecord, &missing);
    ResolveSymbol(lib, "cuptiGetResultString", &a.GetResultString, &missing);
    DI_CHECK(missing.empty(), "{} has no {}", a.path, missing);
    return a;
  }();
  return api;
}

void Check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  if (Cupti().GetResultString(result, &text) != CUPTI_SUCCESS) text = nullptr;
  DI_THROW("CUPTI {}: {} ({})", what, text != nullptr ? text : "unknown error", static_cast<int>(result));
}

// The records of the trace in progress, appended by CUPTI's buffer-completed callback (which may
// run on a thread of CUPTI's).
std::mutex g_mutex;
std::vector<TracedKernel> g_kernels;
bool g_tracing = false;

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// The activity kinds a trace records: kernels, and the copies and memsets between them (a graph's
// upload nodes), which take a place on the timeline without being kernels.
constexpr CUpti_ActivityKind kTracedKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                               CUPTI_ACTIVITY_KIND_MEMSET};

const char* CopyDirection(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
  }
}

// A copy or memset as a record of the trace: its name in brackets with its bytes, grid 0,0,0.
TracedKernel CopyRecord(std::string name, uint64_t start, uint64_t end, uint32_t stream) {
  TracedKernel t;
  t.name = std::move(name);
  t.start_ns = start;
  t.end_ns = end;
  t.stream = stream;
  return t;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<TracedKernel> kernels;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && Cupti().ActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      kernels.push_back(CopyRecord(fmt::format("[memcpy {} {} B]", CopyDirection(c->copyKind), c->bytes), c->start,
                                   c->end, c->streamId));
      continue;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      kernels.push_back(CopyRecord(fmt::format("[memset {} B]", m->bytes), m->start, m->end, m->streamId));
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    // Later CUPTI versions append fields to this record, so the header's version reads them.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    TracedKernel t;
    t.name = Demangled(k->name);
    t.start_ns = k->start;
    t.end_ns = k->end;
    t.stream = k->streamId;
    t.grid[0] = k->gridX, t.grid[1] = k->gridY, t.grid[2] = k->gridZ;
    t.block[0] = k->blockX, t.block[1] = k->blockY, t.block[2] = k->blockZ;
    kernels.push_back(std::move(t));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_kernels.insert(g_kernels.end(), std::make_move_iterator(kernels.begin()), std::make_move_iterator(kernels.end()));
}

class CuptiKernelTrace final : public KernelTrace {
 public:
  ~CuptiKernelTrace() override {
    if (!stopped_) {
      try {
        Stop();
      } catch (...) {
      }
    }
  }
  std::vector<TracedKernel> Stop() override {
    DI_CHECK(!stopped_, "a kernel trace stopped twice");
    stopped_ = true;
    Check(Cupti().ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    for (const CUpti_ActivityKind kind : kTracedKinds) Check(Cupti().ActivityDisable(kind), "disable");
    std::lock_guard<std::mutex> lock(g_mutex);
    g_tracing = false;
    return std::exchange(g_kernels, {});
  }

 private:
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::Start() {
  static std::once_flag registered;
  std::call_once(registered, [] { Check(Cupti().ActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register"); });
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    DI_CHECK(!g_tracing, "a kernel trace is already recording");
    g_tracing = true;
    g_kernels.clear();
  }
  for (const CUpti_ActivityKind kind : kTracedKinds) {
    const CUptiResult enabled = Cupti().ActivityEnable(kind);
    if (enabled != CUPTI_SUCCESS) {
      for (const CUpti_ActivityKind other : kTracedKinds) Cupti().ActivityDisable(other);
      std::lock_guard<std::mutex> lock(g_mutex);
      g_tracing = false;
    }
    Check(enabled, "enable activity records");
  }
  return std::make_unique<CuptiKernelTrace>();
}

}  // namespace deepinfer::bench
