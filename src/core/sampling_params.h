// SamplingParams: how one request's tokens are chosen and when it stops (token side). Stop
// strings are applied on the output side (detokenizer/parser), which aborts the request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/types.h"

namespace deepinfer {

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy
  float top_p = 1.0f;              // (0, 1]
  int32_t top_k = 0;               // 0 = off
  float min_p = 0.0f;              // [0, 1]
  float repetition_penalty = 1.0f; // > 0; 1 = off (divides positive logits of seen tokens)
  float presence_penalty = 0.0f;   // [-2, 2], OpenAI semantics (output tokens only)
  float frequency_penalty = 0.0f;  // [-2, 2]
  std::optional<uint64_t> seed;    // same seed and prompt -> same tokens, whatever the batch
  int32_t n = 1;                   // independent completions of one prompt
  int32_t logprobs = -1;           // -1: none; k >= 0: sampled token's logprob + top-k alternatives
  int32_t max_tokens = 16;         // completion tokens, >= 1
  int32_t min_tokens = 0;          // EOS and stop tokens are suppressed until this many
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  std::vector<std::string> stop;   // stop strings (output side)

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  // Checks ranges; the message names the field (it reaches API users as a 400).
  Status Validate() const;
};

inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr int32_t kMaxN = 16;

}  // namespace deepinfer
