#include "device/cuda_error.h"

#include <cstring>
#include <string>

#include "base/error.h"

namespace deepinfer {

void ThrowCudaError(const char* file, int line, const char* what, const char* cuda_message) {
  const char* src = std::strstr(file, "/src/");
  throw Error(std::string(src != nullptr ? src + 5 : file) + ":" + std::to_string(line) + ": " + what + ": " +
              cuda_message);
}

}  // namespace deepinfer
