// Row movement and the attention row lists of the V4 forward on the CPU (the reference for
// kernels/cuda/rows.h). See rows_plan.h for how rows are addressed.
#pragma once

#include <cstdint>

#include "kernels/cpu/rows_plan.h"

namespace deepinfer::cpu {

// dst[i, :] = base[src_offsets[i] : + width]; dst row stride ld_dst.
void GatherRows(const float* base, const int64_t* src_offsets, int64_t n, int64_t width, float* dst, int64_t ld_dst);
// base[dst_offsets[i] : + width] = src[i, :]; src row stride ld_src; destinations distinct.
void ScatterRows(const float* src, int64_t ld_src, int64_t n, int64_t width, float* base, const int64_t* dst_offsets);

// For every token t of the step (chunk b, position p), in row ids of row_floats units:
//   row_ids[t, 0 … counts[t]) = its raw window, positions max(0, p − window + 1) … p ascending:
//     a position of the chunk itself (>= start_pos) reads the fresh row of that token, an older
//     one the slot's ring; then, for ratio 128, compressed rows 0 … (p+1)/128 − 1.
// For ratio 4 also the indexer's candidates, in index_dim units: index_ids[t, r] = index row r
// for r < num_visible[t] = (p+1)/4, and num_candidates[t] = (p < E ? E : p + 1)/4 with E the
// prompt end (SequenceChunk::prompt_end, or the chunk's end when 0). Other layers: 0 and 0.
// max_rows / max_index_rows are the row strides of row_ids / index_ids.
void BuildAttentionRows(const StepRowsPlan& plan, const LayerRowGeometry& geometry, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows, int32_t* index_ids, int32_t* num_visible, int32_t* num_candidates,
                        int64_t max_index_rows);

// For every token t: appends the main rows of the selected compressed rows
// selected[t, 0 … selected_counts[t]) (candidate positions = compressed row numbers) to
// row_ids[t] after its counts[t] entries, and adds selected_counts[t] to counts[t].
void AppendSelectedRows(const StepRowsPlan& plan, const LayerRowGeometry& geometry, const int32_t* selected,
                        const int32_t* selected_counts, int64_t top_k, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows);

}  // namespace deepinfer::cpu
