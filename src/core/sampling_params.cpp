#include "core/sampling_params.h"

#include <cmath>
#include <fmt/format.h>

namespace deepinfer {

Status SamplingParams::Validate() const {
  auto bad = [](std::string m) { return InvalidArgument(std::move(m)); };
  if (!std::isfinite(temperature) || temperature < 0.f || temperature > 100.f) {
    return bad(fmt::format("temperature must be in [0, 100], got {}", temperature));
  }
  if (!std::isfinite(top_p) || top_p <= 0.f || top_p > 1.f) {
    return bad(fmt::format("top_p must be in (0, 1], got {}", top_p));
  }
  if (top_k < 0) return bad(fmt::format("top_k must be >= 0 (0 disables it), got {}", top_k));
  if (!std::isfinite(min_p) || min_p < 0.f || min_p > 1.f) {
    return bad(fmt::format("min_p must be in [0, 1], got {}", min_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.f || repetition_penalty > 10.f) {
    return bad(fmt::format("repetition_penalty must be in (0, 10], got {}", repetition_penalty));
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.f || presence_penalty > 2.f) {
    return bad(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.f || frequency_penalty > 2.f) {
    return bad(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  if (n < 1 || n > kMaxN) return bad(fmt::format("n must be in [1, {}], got {}", kMaxN, n));
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    return bad(fmt::format("top_logprobs must be in [0, {}], got {}", kMaxLogprobs, logprobs));
  }
  if (max_tokens < 1) return bad(fmt::format("max_tokens must be >= 1, got {}", max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return bad(fmt::format("min_tokens must be in [0, max_tokens={}], got {}", max_tokens, min_tokens));
  }
  for (TokenId t : stop_token_ids) {
    if (t < 0) return bad(fmt::format("stop_token_ids must be non-negative, got {}", t));
  }
  if (stop.size() > 16) return bad(fmt::format("at most 16 stop strings, got {}", stop.size()));
  for (const std::string& s : stop) {
    if (s.empty()) return bad("stop strings must not be empty");
  }
  return Status::Ok();
}

}  // namespace deepinfer
