#include "kernels/cuda/compressor.h"

#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_common.cuh"

// How the batch runs in parallel. The CPU walks a sequence's tokens one by one; here every
// emitted row and every state element is computed independently from (input, state before the
// call), which gives the same values:
//   - a candidate at position q >= pos0 comes from input token q − pos0 (score + ape[q mod
//     ratio]), exactly what the CPU would have stored in the state before reading it;
//   - a candidate at q < pos0 is still in the state before the call: in the current-window
//     slot (coff−1)·ratio + (q mod ratio) if q lies in pos0's window, else (overlapping, first
//     emitted row only) in previous-window slot q − (window start − ratio), which also covers
//     the empty slots before position 0.
// Kernel 1 pools the rows (block: one row × a chunk of channels; thread: one channel, which owns
// column c and, overlapping, column dim + c). Kernel 2 then writes the final state (block: one
// sequence × one phase s, i.e. slots s and ratio + s; thread: columns), reading any old value it
// needs before overwriting it. Stream order puts every read of the old state before any write.

namespace deepinfer::cuda {

namespace {

constexpr int kPoolThreads = 128;
constexpr int kStateThreads = 256;
constexpr int kResetThreads = 256;
constexpr int64_t kResetMaxChunks = 1024;

struct AdvanceArgs {
  int64_t ratio;
  int64_t dim;
  int64_t width;
  bool overlap;
  const float* ape;
  const float* kv;
  const float* score;
  int64_t ld;
  CompressorStatePool pool;
  const CompressorSeq* seqs;
  int64_t num_seqs;
  float* rows_out;
  int64_t ldr;
  int64_t* row_index_out;
  int64_t* rows_emitted;
};

// Candidate s of row `row` for channel c (s < 2·ratio overlapping, else s < ratio): its kv value
// and its score with ape, read from the input or from the state before the call.
__device__ inline void LoadCandidate(const AdvanceArgs& a, const CompressorSeq& sq, const float* kv_state,
                                     const float* score_state, int64_t row, int64_t window_start, int64_t s,
                                     int64_t c, float* kv_value, float* score_value) {
  const int64_t m = a.ratio;
  int64_t q, col;
  if (a.overlap) {
    q = s < m ? m * (row - 1) + s : m * row + (s - m);
    col = s < m ? c : a.dim + c;
  } else {
    q = m * row + s;
    col = c;
  }
  if (q >= sq.pos0) {
    const int64_t t = sq.token_offset + (q - sq.pos0);
    *kv_value = a.kv[t * a.ld + col];
    *score_value = __fadd_rn(a.score[t * a.ld + col], a.ape[(q % m) * a.width + col]);
  } else {
    const int64_t slot = q >= window_start ? (a.overlap ? m : 0) + (q - window_start) : q - (window_start - m);
    *kv_value = kv_state[slot * a.width + col];
    *score_value = score_state[slot * a.width + col];
  }
}

// Grid: (rows_capacity, ⌈dim / kPoolThreads⌉). The CPU's per-channel pooling, same order, no FMA:
// max, Σ exp(z − max), Σ kv · (exp(z − max) / Σ).
__global__ void __launch_bounds__(kPoolThreads) CompressorPoolKernel(AdvanceArgs a) {
  PdlPrologue();
  const int64_t r = blockIdx.x;
  // The owner of row r: the last sequence whose row_offset <= r.
  int64_t lo = 0, hi = a.num_seqs;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a.seqs[mid].row_offset <= r) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return;
  const CompressorSeq sq = a.seqs[lo - 1];
  const int64_t m = a.ratio;
  const int64_t first = sq.pos0 / m;
  const int64_t count = (sq.pos0 + sq.num_tokens) / m - first;
  const int64_t j = r - sq.row_offset;
  if (j >= count) return;
  const int64_t row = first + j;
  if (blockIdx.y == 0 && threadIdx.x == 0) a.row_index_out[r] = row;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kPoolThreads + threadIdx.x;
  if (c >= a.dim) return;

  const float* kv_state = a.pool.kv + sq.slot * a.pool.slot_stride;
  const float* score_state = a.pool.score + sq.slot * a.pool.slot_stride;
  const int64_t window_start = first * m;
  const int64_t count_s = a.overlap ? 2 * m : m;
  float kvv, scv;
  float mx = -INFINITY;
  for (int64_t s = 0; s < count_s; ++s) {
    LoadCandidate(a, sq, kv_state, score_state, row, window_start, s, c, &kvv, &scv);
    mx = mx < scv ? scv : mx;  // std::max(mx, scv)
  }
  float sum = 0.f;
  for (int64_t s = 0; s < count_s; ++s) {
    LoadCandidate(a, sq, kv_state, score_state, row, window_start, s, c, &kvv, &scv);
    sum = __fadd_rn(sum, expf(scv - mx));
  }
  float acc = 0.f;
  for (int64_t s = 0; s < count_s; ++s) {
    LoadCandidate(a, sq, kv_state, score_state, row, window_start, s, c, &kvv, &scv);
    acc = __fadd_rn(acc, __fmul_rn(kvv, __fdiv_rn(expf(scv - mx), sum)));
  }
  a.rows_out[r * a.ldr + c] = acc;
}

// Grid: (num_seqs, ratio). Block (b, s) writes sequence b's final slots s and ratio + s: the
// current-window slot of phase s gets the last token of phase s in the call (if any); when
// overlapping and a window closed, slot s gets what the CPU copied there at the last closing
// (phase s of the last closed window, from the input or from the old current-window slot).
__global__ void __launch_bounds__(kStateThreads) CompressorStateKernel(AdvanceArgs a) {
  PdlPrologue();
  const CompressorSeq sq = a.seqs[blockIdx.x];
  const int64_t s = blockIdx.y;
  const int64_t m = a.ratio;
  const int64_t n = sq.num_tokens, pos0 = sq.pos0;
  const int64_t closed_end = (pos0 + n) / m;  // windows closed up to the end of the call
  const int64_t count = closed_end - pos0 / m;
  if (s == 0 && threadIdx.x == 0) a.rows_emitted[blockIdx.x] = count;
  if (n == 0) return;
  const int64_t last = pos0 + n - 1;
  const int64_t q_new = last - (((last - s) % m) + m) % m;  // last position <= last of phase s
  const bool write_current = q_new >= pos0;
  const bool shift = a.overlap && count > 0;
  const int64_t q_shift = (closed_end - 1) * m + s;  // phase s of the last closed window
  if (!write_current && !shift) return;

  float* kv_state = a.pool.kv + sq.slot * a.pool.slot_stride;
  float* score_state = a.pool.score + sq.slot * a.pool.slot_stride;
  const int64_t w = a.width;
  const int64_t current = (a.overlap ? m : 0) + s;
  const float* ape = a.ape + s * w;
  const float* kv_new = a.kv + (sq.token_offset + (q_new - pos0)) * a.ld;
  const float* score_new = a.score + (sq.token_offset + (q_new - pos0)) * a.ld;
  for (int64_t col = threadIdx.x; col < w; col += kStateThreads) {
    float kv_prev = 0.f, score_prev = 0.f;
    if (shift) {
      if (q_shift >= pos0) {
        const int64_t t = sq.token_offset + (q_shift - pos0);
        kv_prev = a.kv[t * a.ld + col];
        score_prev = __fadd_rn(a.score[t * a.ld + col], ape[col]);
      } else {
        kv_prev = kv_state[(m + s) * w + col];
        score_prev = score_state[(m + s) * w + col];
      }
    }
    if (write_current) {
      kv_state[current * w + col] = kv_new[col];
      score_state[current * w + col] = __fadd_rn(score_new[col], ape[col]);
    }
    if (shift) {
      kv_state[s * w + col] = kv_prev;
      score_state[s * w + col] = score_prev;
    }
  }
}

// Grid: (num_slots, chunks); a grid-stride loop over each slot's state_floats.
__global__ void __launch_bounds__(kResetThreads)
    CompressorResetKernel(CompressorStatePool pool, const int64_t* slots, int64_t state_floats) {
  PdlPrologue();
  const int64_t slot = slots[blockIdx.x];
  float* kv = pool.kv + slot * pool.slot_stride;
  float* score = pool.score + slot * pool.slot_stride;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * kResetThreads + threadIdx.x; i < state_floats;
       i += static_cast<int64_t>(gridDim.y) * kResetThreads) {
    kv[i] = 0.f;
    score[i] = -INFINITY;
  }
}

void CheckShapeAndPool(const char* what, const CompressorShape& shape, const CompressorStatePool& pool) {
  if (shape.ratio < 1 || shape.ratio > 65535 || shape.dim < 1 || shape.dim > (int64_t{1} << 22)) {
    ThrowCudaError(__FILE__, __LINE__, what, "ratio must be in [1, 65535] and dim in [1, 2^22]");
  }
  if (pool.kv == nullptr || pool.score == nullptr || pool.slot_stride < shape.state_floats()) {
    ThrowCudaError(__FILE__, __LINE__, what, "state pool pointers missing or slot stride too small");
  }
}

}  // namespace

void CompressorReset(const CompressorShape& shape, const CompressorStatePool& pool, const int64_t* slots,
                     int64_t num_slots, cudaStream_t stream) {
  CheckShapeAndPool("compressor_reset", shape, pool);
  if (num_slots < 0 || num_slots > INT_MAX) ThrowCudaError(__FILE__, __LINE__, "compressor_reset", "bad slot count");
  if (num_slots == 0) return;
  const int64_t chunks = std::min(CeilDiv(shape.state_floats(), kResetThreads), kResetMaxChunks);
  const dim3 grid(static_cast<unsigned>(num_slots), static_cast<unsigned>(chunks));
  CompressorResetKernel<<<grid, kResetThreads, 0, stream>>>(pool, slots, shape.state_floats());
  DI_CUDA_LAUNCH_CHECK("compressor_reset");
}

void CompressorAdvance(const CompressorShape& shape, const float* ape, const float* kv, const float* score,
                       int64_t ld, const CompressorStatePool& pool, const CompressorSeq* seqs, int64_t num_seqs,
                       float* rows_out, int64_t ldr, int64_t* row_index_out, int64_t* rows_emitted,
                       int64_t rows_capacity, cudaStream_t stream) {
  const char* what = "compressor_advance";
  CheckShapeAndPool(what, shape, pool);
  if (ld < shape.width() || ldr < shape.dim) ThrowCudaError(__FILE__, __LINE__, what, "row stride too small");
  if (num_seqs < 0 || num_seqs > INT_MAX || rows_capacity < 0 || rows_capacity > INT_MAX) {
    ThrowCudaError(__FILE__, __LINE__, what, "bad sequence or row count");
  }
  if (num_seqs == 0) return;
  const AdvanceArgs args{shape.ratio, shape.dim,  shape.width(), shape.overlap(), ape,      kv,
                         score,       ld,         pool,          seqs,            num_seqs, rows_out,
                         ldr,         row_index_out, rows_emitted};
  if (rows_capacity > 0) {
    const dim3 grid(static_cast<unsigned>(rows_capacity), static_cast<unsigned>(CeilDiv(shape.dim, kPoolThreads)));
    CompressorPoolKernel<<<grid, kPoolThreads, 0, stream>>>(args);
    DI_CUDA_LAUNCH_CHECK(what);
  }
  const dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(shape.ratio));
  CompressorStateKernel<<<grid, kStateThreads, 0, stream>>>(args);
  DI_CUDA_LAUNCH_CHECK(what);
}

}  // namespace deepinfer::cuda
