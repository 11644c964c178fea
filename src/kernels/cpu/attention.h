// CPU attention core of DeepSeek-V4 (dsv4-model.md §5.6): one query token, H heads, over a set of
// n key rows that are also the values (MQA with K = V), with a learned per-head sink logit that
// only enters the softmax denominator.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

// q: [H, d]; kv: [n, d] contiguous; sinks: [H]; out: [H, d].
// out[h] = Σ_j e^{s_hj − M} kv[j] / (Σ_j e^{s_hj − M} + e^{sink_h − M}),
// s_hj = scale · q[h]·kv[j], M = max(max_j s_hj, sink_h). n == 0 gives zeros.
// `scores` is caller scratch of H·n floats.
// bf16_inputs (the reference attention kernel's roundings, Numerics::bf16_attention_inputs): q[h]
// is rounded to BF16 (nearest even) in s_hj, and the numerator's e^{s_hj − M} to BF16 before it
// weights kv[j]; the denominator sums the unrounded e^{s_hj − M}. q itself is not written.
void AttentionWithSink(const float* q, int64_t num_heads, const float* kv, int64_t n, int64_t d,
                       const float* sinks, float scale, float* scores, float* out, bool bf16_inputs = false);

}  // namespace deepinfer::cpu
