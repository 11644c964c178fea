// C++ symbol names as people read them.
#pragma once

#include <string>

namespace deepinfer {

// The demangled form of a mangled symbol (e.g. a kernel's, from cudaFuncGetName or CUPTI); the
// symbol itself where it does not demangle, "?" for null.
std::string Demangled(const char* symbol);

}  // namespace deepinfer
