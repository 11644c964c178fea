// Small integer helpers.
#pragma once

#include <cstdint>
#include <type_traits>

namespace deepinfer {

template <typename T>
constexpr T DivCeil(T a, T b) {
  static_assert(std::is_integral_v<T>);
  return (a + b - 1) / b;
}

template <typename T>
constexpr T AlignUp(T a, T b) {
  return DivCeil(a, b) * b;
}

constexpr bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace deepinfer
