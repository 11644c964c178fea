// Row movement and attention row lists on the GPU (twins of kernels/cpu/rows.h). Pure data
// movement: every output is bit-exact against the CPU versions.
//
// Rows are addressed by float offsets from one base pointer (the V4 state buffer holds slots,
// paged blocks and the step's fresh KV rows in one allocation), so one int32 "row id" in units
// of the row width reaches any of them: row id = float offset / width.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/rows_plan.h"
#include "kernels/cpu/state_row.h"

namespace deepinfer::cuda {

// dst[i, :] = base[src_offsets[i] : + width] for i < n. dst: [n, width] with row stride ld_dst.
void GatherRows(const float* base, const int64_t* src_offsets, int64_t n, int64_t width, float* dst, int64_t ld_dst,
                cudaStream_t stream);

// base[dst_offsets[i] : + width] = src[i, :] for i < n; src row stride ld_src. Offsets must not
// overlap (the rows of one call are distinct).
void ScatterRows(const float* src, int64_t ld_src, int64_t n, int64_t width, float* base, const int64_t* dst_offsets,
                 cudaStream_t stream);

// cpu::PackRows on the device (its bytes exactly, NaNs included): row i of src [n, format.dim]
// (row stride ld_src) encoded at base + (dst_offsets ? dst_offsets[i] : first_offset + i·row_pitch()/4).
void PackRows(const cpu::PackedRowFormat& format, const float* src, int64_t ld_src, int64_t n, float* base,
              const int64_t* dst_offsets, int64_t first_offset, cudaStream_t stream);
// cpu::FillHashPackedRows on the device, the same bytes.
void FillHashPackedRows(const cpu::PackedRowFormat& format, const cpu::PackedRowRegions& regions, uint64_t seed,
                        float* base, cudaStream_t stream);

// Attention row lists of one layer for every token of the step (cpu::BuildAttentionRows has the
// contract; `plan` arrays are device pointers, `geometry` is plain values).
void BuildAttentionRows(const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry, int32_t* row_ids,
                        int32_t* counts, int64_t max_rows, int32_t* index_ids, int32_t* num_visible,
                        int32_t* num_candidates, int64_t max_index_rows, cudaStream_t stream);

// Appends the CSA rows the indexer chose (cpu::AppendSelectedRows has the contract).
void AppendSelectedRows(const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry, const int32_t* selected,
                        const int32_t* selected_counts, int64_t top_k, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows, cudaStream_t stream);

}  // namespace deepinfer::cuda
