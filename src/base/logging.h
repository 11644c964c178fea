// Logging through spdlog. One process-wide logger named "deepinfer" writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

namespace deepinfer {

// Sets the level from a name ("trace".."off"); the DEEPINFER_LOG environment variable, when
// set, wins over the argument.
void InitLogging(const std::string& level = "info");

}  // namespace deepinfer

#define DI_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define DI_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define DI_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define DI_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
