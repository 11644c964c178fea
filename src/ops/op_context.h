// Where an op runs: the device its tensors live on and, for CUDA, the stream its kernels are
// queued on (in order, asynchronously). Passed explicitly to every op: there is no global
// "current device" or "current stream".
#pragma once

#include "tensor/tensor_view.h"

using cudaStream_t = struct CUstream_st*;

namespace deepinfer::ops {

// Per-op device timing for benchmarks (CUDA only): every op calls Begin before it queues its
// kernels on `stream` and End after; what it measures (events, scopes) is the profiler's business.
class OpProfiler {
 public:
  virtual ~OpProfiler() = default;
  virtual void Begin(const char* op, cudaStream_t stream) = 0;
  virtual void End(cudaStream_t stream) = 0;
  // The model names the part of the step that follows (a layer, the head); ops are grouped by it.
  virtual void SetScope(const char* scope) = 0;
};

struct OpContext {
  DeviceId device{};             // kCpu: host kernels, synchronous
  cudaStream_t stream = nullptr;  // CUDA only
  // CUDA only: run each op's host part (argument checks, workspace uploads into staging) but
  // queue nothing on the device. A captured CUDA graph's inputs are refilled this way before it
  // is replayed: the graph holds the kernels, the host part writes the step's data where the
  // graph's copies read it.
  bool record_only = false;
  OpProfiler* profiler = nullptr;  // CUDA only; null: no timing
  // CUDA only: linears with BF16 weights, or FP8 / FP4 weights with e8m0 scales, run on tensor
  // cores with the activations split into three BF16 parts (cuda::LinearMath::kSplitBf16:
  // exact products, f32 sums rounded differently from the SIMT kernels); false: f32 SIMT. Sparse
  // attention over rows exact in BF16 (AttentionRows::kExactInBf16) goes to tensor cores with it.
  bool tensor_core_linears = false;
  // CUDA only (Numerics::fast_prefill): the linears may take the kernels that sum in another order
  // than the batch-invariant one for speed (cuda::BatchVariantKernelsScope: big FP8 and grouped
  // BF16 products on cuBLASLt, the prefill's FP4 experts on BF16 MMAs), so a row's bits may depend
  // on its batch.
  bool fast_prefill = false;

  bool on_cuda() const { return device.type == DeviceType::kCuda; }
};

// The host context (CPU kernels).
inline const OpContext& HostContext() {
  static const OpContext host{};
  return host;
}

}  // namespace deepinfer::ops
