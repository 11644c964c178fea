// Where commands find a model when they are given no --model.
#pragma once

#include <string>

namespace deepinfer::apps {

// $DEEPINFER_MODEL when set and non-empty; otherwise the demo model shipped in the source tree,
// DEEPINFER_SOURCE_DIR "/models/deepinfer-v4-demo" (which may not exist yet).
std::string DefaultModelDir();

}  // namespace deepinfer::apps
