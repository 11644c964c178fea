// Force-included into fuzzing builds (scripts/fuzz.sh). Debian 12's clang 14 lacks
// __builtin_source_location, so libstdc++'s <source_location> declares nothing there; this
// supplies std::source_location from the builtins clang 14 has. No effect on other compilers.
#pragma once

#if defined(__clang__) && __clang_major__ < 15 && __cplusplus > 201703L
#include <cstdint>

namespace std {
struct source_location {
  static consteval source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE(),
                                           uint_least32_t column = __builtin_COLUMN()) noexcept {
    source_location location;
    location.file_ = file;
    location.function_ = function;
    location.line_ = line;
    location.column_ = column;
    return location;
  }
  constexpr source_location() noexcept = default;
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr uint_least32_t line() const noexcept { return line_; }
  constexpr uint_least32_t column() const noexcept { return column_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
  uint_least32_t column_ = 0;
};
}  // namespace std
#endif
