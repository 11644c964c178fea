// CPU mixture-of-experts pieces of DeepSeek-V4 (dsv4-model.md §7): the router and the clamped
// SwiGLU activation. Expert and shared-expert projections are Linear calls.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

enum class RouterScore { kSqrtSoftplus, kSigmoid, kSoftmax };

struct RouterParams {
  RouterScore score = RouterScore::kSqrtSoftplus;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  float route_scale = 1.f;
  bool normalize = true;            // divide the selected weights by their sum (not for softmax)
  const float* bias = nullptr;      // [E] selection-only bias, or nullptr
  const int64_t* tid2eid = nullptr; // [vocab, top_k] hash table (hash layers), or nullptr
  int64_t tid2eid_rows = 0;
};

// logits: [M, E] (the fp32 gate product). For each token m writes top_k expert ids and weights:
// score-routed: ids = top_k of p + bias; hash: ids = tid2eid[token_ids[m]].
// weights = p[ids] (normalized unless softmax) · route_scale, with p the unbiased score.
void Route(const float* logits, int64_t m, const int32_t* token_ids, const RouterParams& params,
           int32_t* expert_ids, float* expert_weights);

// h[i] = silu(min(g[i], limit)) · clamp(u[i], −limit, limit) · weight, in place into g.
// limit <= 0 disables the clamp.
void ClampedSwiGlu(float* g, const float* u, int64_t n, float limit, float weight);

}  // namespace deepinfer::cpu
