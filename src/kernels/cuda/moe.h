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

// ---- token ↔ expert permutation (pure data movement; bit-exact) ---------------------------
//
// A "slot" is (token t, choice j), numbered t·top_k + j. A token whose hash table names the same
// expert twice gets that expert once, through its first slot (cpu V4Model::Moe; the reference's
// index-put keeps one write per token): later repeats are dropped.

// Scratch bytes MoeAlign needs for `num_slots` slots and `num_experts` experts.
size_t MoeAlignScratchBytes(int64_t num_slots, int64_t num_experts);

// expert_ids [M, top_k] → expert_offsets [E + 1] (int32, exclusive prefix of per-expert row
// counts; offsets[E] = rows in all), sorted_slots [M·top_k] (rows 0 … offsets[E]−1: the slots of
// expert 0 in increasing slot order, then expert 1, …; the rest −1), slot_rows [M·top_k] (the
// row of each slot in sorted_slots, −1 for dropped repeats). Expert ids outside [0, E) are
// dropped too. Below kMoeAlignDeviceSlots slots one block; from there a count and a placement
// kernel over the device (one warp per expert). Deterministic; the outputs do not depend on the
// path.
inline constexpr int64_t kMoeAlignDeviceSlots = 256;
void MoeAlign(const int32_t* expert_ids, int64_t m, int64_t top_k, int64_t num_experts, int32_t* expert_offsets,
              int32_t* sorted_slots, int32_t* slot_rows, void* scratch, cudaStream_t stream);

// Route then MoeAlign (their outputs exactly), as one launch where DEEPINFER_ROUTE_ALIGN=1 and the
// step has at most 8 tokens (and E <= 1024, 2·E·M floats within 32 KiB); returns whether it was one
// launch. scratch: MoeAlignScratchBytes(M·top_k, E).
bool RouteAndAlign(const float* logits, int64_t m, const int32_t* token_ids, const DeviceRouterParams& params,
                   int32_t* expert_ids, float* expert_weights, int32_t* expert_offsets, int32_t* sorted_slots,
                   int32_t* slot_rows, void* scratch, cudaStream_t stream);
// Tests only: DEEPINFER_ROUTE_ALIGN on (1), off (0), or as the environment says (-1).
void SetRouteAlignForTesting(int mode);

// xe[r, :] = x[sorted_slots[r] / top_k, :] and row_weights[r] = expert_weights[sorted_slots[r]]
// for r < max_rows with sorted_slots[r] >= 0 (other rows untouched). x: [M, d] row stride ldx.
void MoeGather(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, int64_t max_rows, int64_t top_k,
               const float* expert_weights, float* xe, float* row_weights, cudaStream_t stream);
// The same for r < min(max_rows, *row_count) only, row_count a DEVICE int32 (null: no limit), e.g.
// expert_offsets[E] of MoeAlign: launched over the host bound max_rows (tokens · top_k), the row
// count never comes back to the host. Rows at or past the count are untouched.
void MoeGather(const float* x, int64_t ldx, int64_t d, const int32_t* sorted_slots, int64_t max_rows,
               const int32_t* row_count, int64_t top_k, const float* expert_weights, float* xe, float* row_weights,
               cudaStream_t stream);

// out[t, :] = Σ over t's kept slots in increasing expert id of ye[slot_rows[slot], :], then
// + shared[t, :] when shared is not null: the CPU's summation order, so equal inputs give
// identical bits. ye: [rows, d]; shared, out: [M, d] contiguous.
void MoeCombine(const float* ye, const int32_t* slot_rows, const int32_t* expert_ids, int64_t m, int64_t top_k,
                int64_t d, const float* shared, float* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
