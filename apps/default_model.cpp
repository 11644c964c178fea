#include "apps/default_model.h"

#include <cstdlib>

#ifndef DEEPINFER_SOURCE_DIR
#error "DEEPINFER_SOURCE_DIR must be defined (apps/CMakeLists.txt)"
#endif

namespace deepinfer::apps {

std::string DefaultModelDir() {
  const char* env = std::getenv("DEEPINFER_MODEL");
  if (env != nullptr && env[0] != '\0') return env;
  return DEEPINFER_SOURCE_DIR "/models/deepinfer-v4-demo";
}

}  // namespace deepinfer::apps
