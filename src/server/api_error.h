// HTTP errors in each API's own JSON shape (api-and-encoding.md §2.4, §5):
//   OpenAI / DeepSeek:  {"error": {"message", "type", "param", "code"}}
//   Anthropic:          {"type": "error", "error": {"type", "message"}}
// and the same errors as mid-stream SSE events (OpenAI: a data-only event whose JSON has an
// "error" key, which the SDKs raise; Anthropic: "event: error").
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "base/status.h"

namespace deepinfer::server {

enum class ApiKind { kOpenAI, kAnthropic };

// Which kind of problem, independent of the API that reports it.
enum class ErrorKind {
  kInvalidRequest,     // 400
  kContextLength,      // 400, prompt (+ max_tokens) over the context limit
  kAuthentication,     // 401
  kNotFound,           // 404 (route or model)
  kMethodNotAllowed,   // 405
  kRequestTooLarge,    // 413 (body) / 431 (headers are reported as 413 too)
  kRateLimit,          // 429 (engine queue full)
  kInternal,           // 500
  kOverloaded,         // 503 (draining, shutting down)
};

struct ApiError {
  ApiError() = default;
  ApiError(ErrorKind k, std::string m, std::optional<std::string> p = std::nullopt)
      : kind(k), message(std::move(m)), param(std::move(p)) {}

  ErrorKind kind = ErrorKind::kInvalidRequest;
  std::string message;
  std::optional<std::string> param;  // the offending field, when known (OpenAI "param")

  int http_status() const;
};

// Maps an engine/recipe Status (status.h codes) to an ApiError; `ok` statuses are a bug.
ApiError ErrorFromStatus(const Status& status);

// The non-streaming body for `error` in the shape of `api`.
std::string ErrorBody(ApiKind api, const ApiError& error);

// A complete SSE event carrying `error` (the stream should be closed after it).
std::string StreamErrorEvent(ApiKind api, const ApiError& error);

}  // namespace deepinfer::server
