#include "base/error.h"

#include <cstring>

namespace deepinfer::detail {

namespace {
const char* ShortFile(const char* path) {
  const char* src = std::strstr(path, "/src/");
  if (src != nullptr) return src + 5;
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}
}  // namespace

void ThrowError(const std::source_location& where, const std::string& message) {
  throw Error(fmt::format("{}:{}: {}", ShortFile(where.file_name()), where.line(), message));
}

void ThrowCheckFailure(const std::source_location& where, const char* condition,
                       const std::string& message) {
  if (message.empty()) {
    throw Error(fmt::format("{}:{}: check failed: {}", ShortFile(where.file_name()), where.line(),
                            condition));
  }
  throw Error(fmt::format("{}:{}: {} (check failed: {})", ShortFile(where.file_name()),
                          where.line(), message, condition));
}

}  // namespace deepinfer::detail
