// Errors and checks. Host code reports a broken precondition by throwing deepinfer::Error whose
// message starts with file:line. Exceptions are for load/config time and programming errors;
// the request path returns Status (status.h) so a bad request never unwinds the engine loop.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace deepinfer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] void ThrowError(const std::source_location& where, const std::string& message);
[[noreturn]] void ThrowCheckFailure(const std::source_location& where, const char* condition,
                                    const std::string& message);
}  // namespace detail

}  // namespace deepinfer

// DI_THROW("fmt {}", args...): throw deepinfer::Error("file:line: message").
#define DI_THROW(...) \
  ::deepinfer::detail::ThrowError(std::source_location::current(), ::fmt::format(__VA_ARGS__))

// DI_CHECK(cond) or DI_CHECK(cond, "fmt {}", args...): throw when cond is false.
#define DI_CHECK(cond, ...)                                                                 \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::deepinfer::detail::ThrowCheckFailure(std::source_location::current(), #cond,        \
                                             ::deepinfer::detail::CheckMessage(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

namespace deepinfer::detail {
inline std::string CheckMessage() { return {}; }
template <typename... Args>
std::string CheckMessage(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace deepinfer::detail
