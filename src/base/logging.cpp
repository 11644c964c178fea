#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace deepinfer {

void InitLogging(const std::string& level) {
  static bool initialized = false;
  if (!initialized) {
    auto logger = spdlog::stderr_color_mt("deepinfer");
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    initialized = true;
  }
  const char* env = std::getenv("DEEPINFER_LOG");
  spdlog::set_level(spdlog::level::from_str(env != nullptr ? env : level));
}

}  // namespace deepinfer
