#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include "server/json_out.h"

namespace deepinfer::server {
namespace {

// OpenAI "type" and "code" for each kind. DeepSeek answers 4xx with invalid_request_error;
// the others follow OpenAI's names (api-and-encoding.md §2.4).
const char* OpenAIType(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kContextLength:
    case ErrorKind::kNotFound:
    case ErrorKind::kMethodNotAllowed:
    case ErrorKind::kRequestTooLarge: return "invalid_request_error";
    case ErrorKind::kAuthentication: return "authentication_error";
    case ErrorKind::kRateLimit: return "rate_limit_error";
    case ErrorKind::kInternal: return "server_error";
    case ErrorKind::kOverloaded: return "overloaded_error";
  }
  return "server_error";
}

const char* OpenAICode(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest: return "invalid_request_error";
    case ErrorKind::kContextLength: return "context_length_exceeded";
    case ErrorKind::kAuthentication: return "invalid_api_key";
    case ErrorKind::kNotFound: return "not_found";
    case ErrorKind::kMethodNotAllowed: return "method_not_allowed";
    case ErrorKind::kRequestTooLarge: return "request_too_large";
    case ErrorKind::kRateLimit: return "rate_limit_exceeded";
    case ErrorKind::kInternal: return "internal_error";
    case ErrorKind::kOverloaded: return "server_overloaded";
  }
  return "internal_error";
}

// Anthropic error types (its public API's list).
const char* AnthropicType(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kContextLength:
    case ErrorKind::kMethodNotAllowed: return "invalid_request_error";
    case ErrorKind::kAuthentication: return "authentication_error";
    case ErrorKind::kNotFound: return "not_found_error";
    case ErrorKind::kRequestTooLarge: return "request_too_large";
    case ErrorKind::kRateLimit: return "rate_limit_error";
    case ErrorKind::kInternal: return "api_error";
    case ErrorKind::kOverloaded: return "overloaded_error";
  }
  return "api_error";
}

Json ErrorJson(ApiKind api, const ApiError& error) {
  if (api == ApiKind::kAnthropic) {
    return {{"type", "error"},
            {"error", {{"type", AnthropicType(error.kind)}, {"message", error.message}}}};
  }
  Json param = nullptr;
  if (error.param) param = *error.param;
  return {{"error",
           {{"message", error.message}, {"type", OpenAIType(error.kind)}, {"param", param},
            {"code", OpenAICode(error.kind)}}}};
}

// "messages[1].content: expected ..." -> "messages[1].content": the recipe's messages start
// with the field path.
std::optional<std::string> ParamOf(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  const std::string head = message.substr(0, colon);
  for (char c : head) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '[' || c == ']';
    if (!ok) return std::nullopt;
  }
  return head;
}

}  // namespace

int ApiError::http_status() const {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kContextLength: return 400;
    case ErrorKind::kAuthentication: return 401;
    case ErrorKind::kNotFound: return 404;
    case ErrorKind::kMethodNotAllowed: return 405;
    case ErrorKind::kRequestTooLarge: return 413;
    case ErrorKind::kRateLimit: return 429;
    case ErrorKind::kInternal: return 500;
    case ErrorKind::kOverloaded: return 503;
  }
  return 500;
}

ApiError ErrorFromStatus(const Status& status) {
  ApiError error;
  error.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      error.kind = ErrorKind::kInvalidRequest;
      error.param = ParamOf(status.message());
      break;
    case StatusCode::kOutOfRange: error.kind = ErrorKind::kContextLength; break;
    case StatusCode::kNotFound: error.kind = ErrorKind::kNotFound; break;
    case StatusCode::kUnauthenticated: error.kind = ErrorKind::kAuthentication; break;
    case StatusCode::kResourceExhausted: error.kind = ErrorKind::kRateLimit; break;
    case StatusCode::kUnavailable:
    case StatusCode::kAborted: error.kind = ErrorKind::kOverloaded; break;
    case StatusCode::kOk:
    case StatusCode::kInternal: error.kind = ErrorKind::kInternal; break;
  }
  if (error.message.empty()) error.message = StatusCodeName(status.code());
  return error;
}

std::string ErrorBody(ApiKind api, const ApiError& error) { return DumpJson(ErrorJson(api, error)); }

std::string StreamErrorEvent(ApiKind api, const ApiError& error) {
  if (api == ApiKind::kAnthropic) return "event: error\ndata: " + ErrorBody(api, error) + "\n\n";
  return "data: " + ErrorBody(api, error) + "\n\n";
}

}  // namespace deepinfer::server
