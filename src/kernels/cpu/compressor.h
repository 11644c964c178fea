// The V4 KV compressor on the CPU (dsv4-model.md §5.4, §6.1): pools every `ratio` tokens into one
// row by a per-channel softmax over gate scores. ratio 4 (CSA and the indexer) uses overlapping
// windows of 8 (the previous window's A halves + this window's B halves); ratio 128 (HCA) does
// not overlap.
//
// Per-sequence partial state (the reference layout), fp32:
//   kv_state, score_state: [slots, width], slots = coff·ratio, width = coff·dim, coff = 2 if
//   overlapping else 1. Scores are stored with `ape` already added; empty slots hold −inf (and
//   kv 0). Overlapping: slots [0, ratio) hold the previous window, [ratio, 2·ratio) the current.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct CompressorShape {
  int64_t ratio = 4;
  int64_t dim = 0;  // output row width
  bool overlap() const { return ratio == 4; }
  int64_t coff() const { return overlap() ? 2 : 1; }
  int64_t width() const { return coff() * dim; }   // projection width
  int64_t slots() const { return coff() * ratio; }
  int64_t state_floats() const { return slots() * width(); }  // per state tensor
};

// kv_state ← 0, score_state ← −inf.
void CompressorReset(const CompressorShape& shape, float* kv_state, float* score_state);

// Feeds tokens at positions pos0 … pos0+n−1 (projections kv, score: [n, width], score without
// ape; ape: [ratio, width]) through the state. Each completed window emits one pooled row:
// rows_out[j] ([dim]) is row number row_index_out[j] = (p + 1)/ratio − 1 for the closing
// position p. Returns the number of rows emitted (≤ n/ratio + 1).
int64_t CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv,
                          const float* score, int64_t n, int64_t pos0, float* kv_state,
                          float* score_state, float* rows_out, int64_t* row_index_out);

}  // namespace deepinfer::cpu
