// Why a sequence stopped.
#pragma once

namespace deepinfer {

enum class FinishReason {
  kNone,
  kStop,    // EOS or a stop token id (the token is the sequence's last token)
  kLength,  // max_tokens reached, or the context length
  kAbort,   // aborted (client disconnect, stop string found on the output side, shutdown)
  kError,   // the request failed inside the engine
};

inline const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

}  // namespace deepinfer
