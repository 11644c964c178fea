// One row's sampling parameters as the GPU sampler reads them (kernels/cuda/sampler.h has the
// contract): SamplingParams plus the sequence context, plain values for a device array. Shared
// by the CUDA kernels, the ops layer and the runner, which fills it on the host.
#pragma once

#include <cstdint>

namespace deepinfer {

inline constexpr int kSamplerMaxLogprobs = 20;  // = kMaxLogprobs (core/sampling_params.h)

// One row's sampling parameters (SamplingParams plus the sequence context), plain values for a
// device array. Greedy when temperature == 0 or top_k == 1.
struct SamplerRowParams {
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]; 1: off
  int32_t top_k = 0;                // 0: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // 1: off; seen tokens (prompt + outputs)
  float presence_penalty = 0.0f;    // output tokens only
  float frequency_penalty = 0.0f;   // output tokens only, times their count
  int32_t min_tokens = 0;           // stop ids are suppressed while num_outputs < min_tokens
  int32_t logprobs = -1;            // -1: none; 0..kSamplerMaxLogprobs: the sampled token's logprob + top alternatives
  int32_t num_stop_ids = 0;         // EOS ids followed by SamplingParams::stop_token_ids
  uint64_t rng_seed = 0;
  int64_t num_outputs = 0;          // output tokens so far: the draw index, and the min_tokens count
  int64_t prompt_len = 0;
  // The history tokens[history_offset, + prompt_len + num_outputs) (prompt, then outputs). Read
  // only when a penalty is on.
  int64_t history_offset = 0;
  int64_t stop_ids_offset = 0;      // stop_ids[stop_ids_offset, + num_stop_ids); read only while suppressing
};

}  // namespace deepinfer
