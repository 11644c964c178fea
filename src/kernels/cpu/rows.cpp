#include "kernels/cpu/rows.h"

#include <algorithm>
#include <cstring>

namespace deepinfer::cpu {

void GatherRows(const float* base, const int64_t* src_offsets, int64_t n, int64_t width, float* dst, int64_t ld_dst) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * ld_dst, base + src_offsets[i], width * sizeof(float));
}

void ScatterRows(const float* src, int64_t ld_src, int64_t n, int64_t width, float* base, const int64_t* dst_offsets) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(base + dst_offsets[i], src + i * ld_src, width * sizeof(float));
}

void BuildAttentionRows(const StepRowsPlan& plan, const LayerRowGeometry& g, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows, int32_t* index_ids, int32_t* num_visible, int32_t* num_candidates,
                        int64_t max_index_rows) {
  for (int64_t t = 0; t < plan.num_tokens; ++t) {
    const int64_t b = plan.token_seq[t];
    const SeqRowsInfo& s = plan.seqs[b];
    const int64_t p = plan.token_pos[t];
    int32_t* ids = row_ids + t * max_rows;
    int64_t n = 0;
    for (int64_t kp = std::max<int64_t>(0, p - g.window + 1); kp <= p; ++kp) {
      const int64_t off = kp >= s.start_pos ? g.fresh_base + (s.token_offset + kp - s.start_pos) * g.row_floats
                                            : RingRowOffset(g, s.slot, kp);
      ids[n++] = static_cast<int32_t>(off / g.row_floats);
    }
    const int64_t visible = g.ratio ? (p + 1) / g.ratio : 0;
    if (g.ratio == 128) {
      for (int64_t r = 0; r < visible; ++r) {
        ids[n++] = static_cast<int32_t>(MainRowOffset(plan, g, b, r) / g.row_floats);
      }
    }
    counts[t] = static_cast<int32_t>(n);
    if (index_ids == nullptr) continue;
    if (g.ratio == 4) {
      for (int64_t r = 0; r < visible; ++r) {
        index_ids[t * max_index_rows + r] = static_cast<int32_t>(IndexRowOffset(plan, g, b, r) / g.index_dim);
      }
      const int64_t end = s.prompt_end > 0 ? s.prompt_end : s.start_pos + s.num_tokens;
      num_visible[t] = static_cast<int32_t>(visible);
      num_candidates[t] = static_cast<int32_t>((p < end ? end : p + 1) / 4);
    } else {
      num_visible[t] = 0;
      num_candidates[t] = 0;
    }
  }
}

void AppendSelectedRows(const StepRowsPlan& plan, const LayerRowGeometry& g, const int32_t* selected,
                        const int32_t* selected_counts, int64_t top_k, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows) {
  for (int64_t t = 0; t < plan.num_tokens; ++t) {
    const int64_t b = plan.token_seq[t];
    int32_t* ids = row_ids + t * max_rows + counts[t];
    const int32_t k = selected_counts[t];
    for (int32_t i = 0; i < k; ++i) {
      ids[i] = static_cast<int32_t>(MainRowOffset(plan, g, b, selected[t * top_k + i]) / g.row_floats);
    }
    counts[t] += k;
  }
}

}  // namespace deepinfer::cpu
