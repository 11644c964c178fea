// Tie resolution for the GPU lightning indexer: reproduces the reference's choice among equal
// scores (torch's CPU top-k) where the GPU's own rule (lowest positions) may differ.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/select_like_torch.h"

namespace deepinfer::cuda {

// Runs after IndexerTopK with its outputs. For query m with v = num_visible[m] < top_k nothing
// can differ. Otherwise, when the k-th largest score equals some unselected visible score, the
// selection is redone as cpu::IndexerTopK does: cpu::SelectLikeTorch over the query's candidate
// queue of num_candidates[m] (>= v) entries — (scores[m, j], j) for j < v, (−inf, j) after — and
// the visible ones among its first min(top_k, num_candidates[m]) are written to selected[m] in
// ascending order, their number to counts[m]. Queries without such a tie are left as they are.
// scratch: max_candidates ScoredCandidate per query (max_candidates >= every num_candidates[m]).
// One block per query; the rare redo runs on one thread of it.
void IndexerTiesLikeTorch(const float* scores, int64_t max_keys, const int32_t* num_visible,
                          const int32_t* num_candidates, int64_t num_queries, int64_t top_k, int32_t* selected,
                          int32_t* counts, cpu::ScoredCandidate* scratch, int64_t max_candidates,
                          cudaStream_t stream);

}  // namespace deepinfer::cuda
