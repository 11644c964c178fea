#include "base/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace deepinfer {

std::string Demangled(const char* symbol) {
  if (symbol == nullptr) return "?";
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> plain(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                                     std::free);
  return status == 0 && plain ? std::string(plain.get()) : std::string(symbol);
}

}  // namespace deepinfer
