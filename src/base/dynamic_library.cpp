#include "base/dynamic_library.h"

namespace deepinfer {

OpenedLibrary OpenFirstLibrary(const std::vector<std::string>& names) {
  OpenedLibrary opened;
  for (const std::string& name : names) {
    opened.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (opened.handle != nullptr) {
      opened.path = name;
      return opened;
    }
    const char* why = dlerror();
    opened.tried += (opened.tried.empty() ? "" : "; ") + std::string(why != nullptr ? why : name.c_str());
  }
  return opened;
}

}  // namespace deepinfer
