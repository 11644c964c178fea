// Status and Result<T> for the request path: errors that belong to one request (bad input,
// over-long prompt) travel as values so they can be answered without unwinding the engine.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "base/error.h"

namespace deepinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the request is malformed or has a bad value (HTTP 400)
  kNotFound,          // unknown model / route / id (HTTP 404)
  kOutOfRange,        // e.g. prompt longer than the context (HTTP 400)
  kResourceExhausted, // queue full, out of cache memory (HTTP 429/503)
  kUnauthenticated,   // bad or missing API key (HTTP 401)
  kAborted,           // cancelled by the client or by shutdown
  kUnavailable,       // draining or not ready (HTTP 503)
  kInternal,          // a bug (HTTP 500)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    DI_CHECK(!std::get<Status>(data_).ok(), "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(data_);
  }
  T& value() & {
    DI_CHECK(ok(), "Result::value on error: {}", std::get<Status>(data_).ToString());
    return std::get<T>(data_);
  }
  const T& value() const& {
    DI_CHECK(ok(), "Result::value on error: {}", std::get<Status>(data_).ToString());
    return std::get<T>(data_);
  }
  T&& value() && {
    DI_CHECK(ok(), "Result::value on error: {}", std::get<Status>(data_).ToString());
    return std::get<T>(std::move(data_));
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace deepinfer
