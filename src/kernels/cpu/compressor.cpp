#include "kernels/cpu/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace deepinfer::cpu {

void CompressorReset(const CompressorShape& shape, float* kv_state, float* score_state) {
  const int64_t n = shape.state_floats();
  std::fill(kv_state, kv_state + n, 0.f);
  std::fill(score_state, score_state + n, -std::numeric_limits<float>::infinity());
}

namespace {

// Pools `count` (kv, score) candidates per channel: out[c] = Σ_s softmax_s(score[s][c]) kv[s][c].
// kv_at(s) / score_at(s) return the candidate rows, already offset to the channel range.
template <typename KvAt, typename ScoreAt>
void PoolChannels(int64_t count, int64_t dim, KvAt kv_at, ScoreAt score_at, float* out) {
  for (int64_t c = 0; c < dim; ++c) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < count; ++s) mx = std::max(mx, score_at(s)[c]);
    float sum = 0.f;
    for (int64_t s = 0; s < count; ++s) sum += std::exp(score_at(s)[c] - mx);
    float acc = 0.f;
    for (int64_t s = 0; s < count; ++s) {
      acc += kv_at(s)[c] * (std::exp(score_at(s)[c] - mx) / sum);
    }
    out[c] = acc;
  }
}

}  // namespace

int64_t CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv,
                          const float* score, int64_t n, int64_t pos0, float* kv_state,
                          float* score_state, float* rows_out, int64_t* row_index_out) {
  const int64_t m = shape.ratio, d = shape.dim, w = shape.width();
  int64_t emitted = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t pos = pos0 + j;
    const int64_t phase = pos % m;
    const int64_t slot = shape.overlap() ? m + phase : phase;
    std::memcpy(kv_state + slot * w, kv + j * w, static_cast<size_t>(w) * sizeof(float));
    float* sc = score_state + slot * w;
    for (int64_t c = 0; c < w; ++c) sc[c] = score[j * w + c] + ape[phase * w + c];
    if ((pos + 1) % m != 0) continue;

    float* out = rows_out + emitted * d;
    if (shape.overlap()) {
      // Slots 0..m−1: previous window's A halves (channels [0, d)); slots m..2m−1: this
      // window's B halves (channels [d, 2d)).
      auto kv_at = [&](int64_t s) {
        return s < m ? kv_state + s * w : kv_state + s * w + d;
      };
      auto score_at = [&](int64_t s) {
        return s < m ? score_state + s * w : score_state + s * w + d;
      };
      PoolChannels(2 * m, d, kv_at, score_at, out);
      std::memcpy(kv_state, kv_state + m * w, static_cast<size_t>(m * w) * sizeof(float));
      std::memcpy(score_state, score_state + m * w, static_cast<size_t>(m * w) * sizeof(float));
    } else {
      auto kv_at = [&](int64_t s) { return kv_state + s * w; };
      auto score_at = [&](int64_t s) { return score_state + s * w; };
      PoolChannels(m, d, kv_at, score_at, out);
    }
    row_index_out[emitted] = (pos + 1) / m - 1;
    ++emitted;
  }
  return emitted;
}

}  // namespace deepinfer::cpu
