// The V4 lightning indexer's scoring and top-k on the CPU (dsv4-model.md §5.5).
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// For one query: score[j] = Σ_h weights[h] · ReLU(q[h] · keys[j]) for the `num_visible` key rows;
// candidates num_visible … num_candidates−1 exist but are not visible to this query and score
// −inf. Selects k = min(top_k, num_candidates) candidates with the largest scores and writes the
// visible ones among them to `selected` (in no particular order); returns how many.
//
// Ties: ReLU makes exactly equal scores common (every head's product negative gives 0), and the
// reference takes whichever tied rows torch.topk returns. To reproduce its choice this runs the
// same selection torch's CPU top-k runs over the same candidate row: a partial sort when
// k·64 <= num_candidates, else an nth_element, on (score, index) pairs in index order ordered by
// score alone (select_like_torch.h, checked against std::partial_sort / std::nth_element).
// q: [H, dk]; keys: [num_visible, dk] contiguous; scratch: H·num_visible floats.
int64_t IndexerTopK(const float* q, const float* weights, int64_t num_heads, int64_t head_dim,
                    const float* keys, int64_t num_visible, int64_t num_candidates, int64_t top_k,
                    float* scratch, int32_t* selected);

}  // namespace deepinfer::cpu
