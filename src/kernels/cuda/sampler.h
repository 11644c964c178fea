// Token sampling on the GPU: the twin of sampling::Sample (src/sampling/sampler.cpp has the
// contract), batched over rows, one thread block per row.
//
// Per row, as the host sampler (vLLM order): repetition / presence / frequency penalties →
// min_tokens suppression of EOS and stop tokens → temperature (0, or top_k == 1: greedy argmax,
// ties to the lower id) → min_p → top_k → top_p → one draw by inverse CDF in token-id order with
// UniformDraw(rng_seed, num_outputs) → logprobs of the raw logits.
//
// Agreement with the host: every integer decision (greedy argmax, the top_k set with ties to the
// lower id, the sampled token, the top logprob ids) is the host's unless a value lies within
// rounding of a boundary. The probabilities are computed in double with the host's formulas
// (z = logit / temperature, exp(z − max z), divided by the sum) but the sums run in another
// order and the device exp may differ from glibc's by 1 ulp, so they may differ by a few ulp. A
// decision can then differ only where the host's own rounding decides it: a draw u within ~1e-13
// (relative) of a cumulative boundary; a top_p prefix mass within ~1e-13 of top_p · kept mass
// (the walk sums masses exactly in 2^-62 fixed point, order independent; the host sums in double
// in rank order), which random data does not hit but exactly tied probabilities with a dyadic
// top_p (0.5, 0.75) can, the host's choice being its rounding noise there; two probabilities
// from distinct logits that round equal on one side only. Logprobs agree to an f32 ulp or two.
//
// Cost per row: about a dozen passes over the row for the softmax and the draw, plus one pass per
// 8-bit digit of each radix select (top_k, top_p, top logprobs; usually 3–5 each, up to 11 when
// the boundary falls inside a tie group).
//
// Deterministic: integer atomics only, fixed reduction orders; a row's result does not depend on
// the other rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/sampler_row.h"

namespace deepinfer::cuda {

using deepinfer::kSamplerMaxLogprobs;
using deepinfer::SamplerRowParams;

// Bytes of scratch SampleRows needs: per row a double [vocab] (the row's transformed logits, then
// its probabilities) and an int32 [vocab] (penalty counts; entries of history tokens only are
// touched). The input logits are not modified.
size_t SamplerScratchBytes(int64_t rows, int64_t vocab);

// Samples one token per row.
//   logits: [rows, vocab] f32, row stride ld_logits (elements; 0: every row reads the same
//     logits); read only.
//   sampleable_vocab: ids >= this are never sampled (they still count for logprobs); <= 0 or
//     >= vocab: all ids.
//   params: [rows] device array. tokens: device int32 buffer the rows' histories index (may be
//     null when no row has a penalty on). stop_ids: device int32 list the rows' stop ids index
//     (may be null when no row suppresses). Ids outside [0, vocab) are ignored, as on the host.
//   scratch: SamplerScratchBytes(rows, vocab) bytes, 8-byte aligned.
//   sampled: [rows] int32. sampled_logprobs: [rows] f32, the sampled token's raw log-softmax
//     (0 for rows with logprobs < 0). top_ids / top_logprobs: [rows, kSamplerMaxLogprobs]; entry j
//     < min(logprobs, vocab) is the j-th largest raw logit (ties to the lower id) and its
//     log-softmax; the other entries are −1 and −inf. Any of the three logprob outputs may be null.
// A row's logits must not be NaN, and each row needs a finite logit among the sampleable ids
// after suppression (as on the host, whose result is otherwise undefined).
void SampleRows(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab, int64_t sampleable_vocab,
                const SamplerRowParams* params, const int32_t* tokens, const int32_t* stop_ids, void* scratch,
                int32_t* sampled, float* sampled_logprobs, int32_t* top_ids, float* top_logprobs, cudaStream_t stream);

// out[i] = sampling::UniformDraw(seeds[i], indices[i]) bit for bit (device arrays of n), for tests.
void UniformDraws(const uint64_t* seeds, const uint64_t* indices, int64_t n, double* out, cudaStream_t stream);

// ids[dst_index[i]] = src[src_index[i]] for i < n (device int32 arrays): the next step's input
// tokens taken from the tokens the previous step sampled, without a trip through the host.
void CopyIndexedTokens(int32_t* ids, const int32_t* dst_index, const int32_t* src, const int32_t* src_index, int64_t n,
                       cudaStream_t stream);

}  // namespace deepinfer::cuda
