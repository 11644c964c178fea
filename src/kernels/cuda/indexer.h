// CUDA lightning-indexer scoring and top-k of DeepSeek-V4 (dsv4-model.md §5.5), batched over
// query tokens: the twin of cpu::IndexerTopK, with a tie rule of its own (below).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

// Floats of `scores` scratch IndexerTopK needs: num_queries · max_keys.
inline int64_t IndexerScratchFloats(int64_t num_queries, int64_t max_keys) { return num_queries * max_keys; }

// Shapes (f32 unless stated; all pointers are device pointers):
//   q            [M, Hi, dk]: query m's head h at q + m·q_stride + h·dk (q_stride >= Hi·dk).
//   weights      [M, Hi]: query m's head weights at weights + m·weights_stride (any sign).
//   keys         [R, dk]: the key row pool; row r at keys + r·key_stride (key_stride >= dk).
//   key_ids      int32 [M, max_keys] contiguous: query m's candidate j (j < num_visible[m]) is the
//                pool row key_ids[m·max_keys + j]; each must lie in [0, R) (not checked).
//   num_visible  int32 [M]: 0 <= num_visible[m] <= max_keys (values outside are clamped).
//   scores       scratch [M, max_keys] (IndexerScratchFloats); on return holds the scores of the
//                visible candidates (row m at scores + m·max_keys).
//   selected     int32 [M, top_k] contiguous: row m gets the chosen candidate positions j (indices
//                into the query's list, not pool rows) in ascending order, then −1 padding.
//   counts       int32 [M]: how many were chosen, min(top_k, num_visible[m]).
// For query m: score[j] = Σ_h weights[m,h] · ReLU(q[m,h] · keys[key_ids[m,j]]), the heads summed
// in order h = 0, 1, …; then the min(top_k, num_visible[m]) visible candidates first in the order
// (score descending, j ascending) are chosen; NaN ranks above every number and −0 ties with +0.
//
// Relation to cpu::IndexerTopK(…, num_visible, num_candidates, …): the CPU's candidates past
// num_visible score −inf and are never returned, so the visible set it returns is the top
// min(top_k, num_visible) visible scores; num_candidates only changes which tied rows it keeps.
// Hence no num_candidates argument here. Ties: the CPU reproduces torch's selection order among
// equal scores (exact zeros from ReLU are common); this kernel instead keeps the lowest positions
// among the scores equal to the k-th largest. The sets agree whenever the k-th and (k+1)-th
// largest scores differ by more than the rounding of the scores (fp32 dot products over dk in
// order k = 0, 1, …, differing from the CPU's BLAS order).
//
// Deterministic and batch invariant. Limits: 1 <= Hi <= 64, dk >= 1, max_keys <= 64·65535,
// 0 <= top_k <= 2^31 − 1. Launches two kernels on `stream`; nothing is allocated or synchronized;
// M == 0 launches nothing.
//
// bf16_exact: the caller guarantees that every value of q and of the keys is exact in BF16
// (Numerics::indexer_fp4's e2m1 codes times power-of-two scales). Then, where dk is 64 or 128 and
// q and keys are 16-byte aligned with strides of whole float4s, the dot products run on BF16
// tensor cores (mma.sync, f32 accumulation, k in steps of 16 in order): exact products, and sums
// that round differently from the SIMT kernel's only where a partial sum is not exact in f32 (for
// FP4 codes with power-of-two block scales, only when a row's block scales span more than 2^9).
// Still deterministic and batch invariant (DEEPINFER_INDEXER_MMA=0, read once, keeps the SIMT
// scoring, for comparisons). A value that is not exact in BF16 is rounded to nearest
// (no error is raised; the benchmarks' hashed index rows are such values).
void IndexerTopK(const float* q, int64_t q_stride, const float* weights, int64_t weights_stride,
                 int64_t num_queries, int64_t num_heads, int64_t head_dim, const float* keys,
                 int64_t key_stride, const int32_t* key_ids, int64_t max_keys, const int32_t* num_visible,
                 int64_t top_k, float* scores, int32_t* selected, int32_t* counts, cudaStream_t stream,
                 bool bf16_exact = false);
// Launches of the tensor-core scoring so far (tests: which kernel ran).
uint64_t IndexerMmaLaunchesForTesting();

}  // namespace deepinfer::cuda
