// CUDA router of the V4 MoE, twin of cpu::Route (src/kernels/cpu/moe.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

enum class RouterScoreFn : uint8_t { kSqrtSoftplus, kSigmoid, kSoftmax };

struct DeviceRouterParams {
  RouterScoreFn score = RouterScoreFn::kSqrtSoftplus;
  int64_t num_experts = 0;  // <= 1024
  int64_t top_k = 0;        // <= 32
  float route_scale = 1.f;
  bool normalize = true;             // divide by the sum of the selected weights (not for softmax)
  const float* bias = nullptr;       // device [E] selection-only bias, or null
  const int64_t* tid2eid = nullptr;  // device [rows, top_k] hash table, or null
  int64_t tid2eid_rows = 0;
};

// logits [M, E] f32 (row stride E) → expert_ids [M, top_k] int32, expert_weights [M, top_k] f32.
// Score-routed: the top_k of p + bias, ties to the lower expert id, in descending order; hash:
// ids = tid2eid[token_ids[m]] (an id outside the table writes −1 and NaN weights: the host
// validates token ids). weights = p[ids] (normalized in id order unless softmax) · route_scale.
void Route(const float* logits, int64_t m, const int32_t* token_ids, const DeviceRouterParams& params,
           int32_t* expert_ids, float* expert_weights, cudaStream_t stream);

}  // namespace deepinfer::cuda
