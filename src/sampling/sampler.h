// Token sampling on the host (the CPU backend's sampler; the CUDA one follows the same
// contract). One sequence at a time from its logits row.
//
// Order, as vLLM: repetition / presence / frequency penalties → min_tokens suppression of EOS
// and stop tokens → temperature (0: greedy argmax, ties to the lower id) → min_p → top_k →
// top_p → one draw. Draw i of a sequence uses a counter-based uniform from (rng_seed, i), so a
// seeded request gives the same tokens whatever else shares its batches. Logprobs are the
// log-softmax of the raw logits (before penalties and temperature).
#pragma once

#include <cstdint>
#include <vector>

#include "core/sampling_params.h"
#include "core/scheduler_output.h"
#include "kernels/cpu/sampler_row.h"

namespace deepinfer::sampling {

struct SequenceContext {
  const SamplingParams* params = nullptr;
  const TokenIds* tokens = nullptr;  // prompt + outputs so far
  int64_t prompt_len = 0;
  uint64_t rng_seed = 0;
  const std::vector<TokenId>* eos_token_ids = nullptr;
  int64_t sampleable_vocab = 0;      // ids >= this are never sampled (embedding padding)
};

// Uniform double in [0, 1) determined by (seed, index) alone.
double UniformDraw(uint64_t seed, uint64_t index);

// Samples the next token. `logits` [vocab] is overwritten (scratch).
SampledToken Sample(float* logits, int64_t vocab, const SequenceContext& ctx);

// The GPU sampler's parameters for one row (kernels/cuda/sampler.h) of a sequence with `params`,
// seed, prompt length and outputs so far; its history and stop-id ranges are left empty (offsets
// 0, no stop ids) for the caller to point at its buffers.
SamplerRowParams DeviceRowParams(const SamplingParams& params, uint64_t rng_seed, int64_t prompt_len,
                                 int64_t num_outputs);

// The probabilities the draw uses (after every transform), for tests. Empty for greedy.
std::vector<double> SamplingDistribution(std::vector<float> logits, const SequenceContext& ctx);

}  // namespace deepinfer::sampling
