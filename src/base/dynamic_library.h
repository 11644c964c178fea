// Shared libraries opened at run time (dlopen) instead of linked: CUDA libraries a binary uses only
// when present (cuBLASLt, CUPTI).
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace deepinfer {

struct OpenedLibrary {
  void* handle = nullptr;  // null where no name opened
  std::string path;        // the name that opened
  std::string tried;       // the loader's reason for each name that did not open, "; "-separated
};

// The first of `names` that dlopen(RTLD_NOW | RTLD_LOCAL) opens.
OpenedLibrary OpenFirstLibrary(const std::vector<std::string>& names);

// *fn = the symbol `name` of `lib` (null where absent); the first absent name of a series of calls
// goes into *first_missing (left as it is while it is not empty).
template <typename Fn>
void ResolveSymbol(void* lib, const char* name, Fn* fn, std::string* first_missing) {
  void* symbol = dlsym(lib, name);
  if (symbol == nullptr && first_missing->empty()) *first_missing = name;
  *fn = reinterpret_cast<Fn>(symbol);
}

}  // namespace deepinfer
