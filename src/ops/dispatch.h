// Internal to src/ops: device checks and the CPU/CUDA dispatch macro shared by the op files.
#pragma once

#include <initializer_list>

#include "base/error.h"
#include "ops/op_context.h"

namespace deepinfer::ops {

// Every tensor an op touches lives where the context runs.
inline void CheckDevice(const OpContext& ctx, const char* op, std::initializer_list<const TensorView*> tensors) {
  for (const TensorView* t : tensors) {
    if (t->empty()) continue;
    DI_CHECK(t->device() == ctx.device, "op {}: a tensor on device {}:{} given to a context on {}:{}", op,
             static_cast<int>(t->device().type), t->device().index, static_cast<int>(ctx.device.type),
             ctx.device.index);
  }
}

[[noreturn]] inline void NoKernel(const OpContext& ctx, const char* op) {
  DI_THROW("op {}: no kernel for device type {} in this build{}", op, static_cast<int>(ctx.device.type),
           DEEPINFER_HAS_CUDA ? "" : " (configure with the 'cuda' preset for the CUDA backend)");
}

// Dispatch helper: the CPU branch, or the CUDA branch when compiled in.
#if DEEPINFER_HAS_CUDA
#define DI_ON_CUDA(ctx, op, ...)                                      \
  if ((ctx).on_cuda()) {                                              \
    if (!(ctx).record_only) {                                         \
      if ((ctx).profiler != nullptr) (ctx).profiler->Begin(op, (ctx).stream); \
      __VA_ARGS__;                                                    \
      if ((ctx).profiler != nullptr) (ctx).profiler->End((ctx).stream); \
    }                                                                 \
    return;                                                           \
  }
#else
#define DI_ON_CUDA(ctx, op, ...) \
  if ((ctx).on_cuda()) NoKernel(ctx, op);
#endif

inline void RequireHost(const OpContext& ctx, const char* op) {
  if (ctx.on_cuda()) NoKernel(ctx, op);
}

}  // namespace deepinfer::ops
