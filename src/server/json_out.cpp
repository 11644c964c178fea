#include "server/json_out.h"

#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <random>

namespace deepinfer::server {

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SseData(const Json& value) { return "data: " + DumpJson(value) + "\n\n"; }

std::string SseEvent(std::string_view name, const Json& value) {
  return fmt::format("event: {}\ndata: {}\n\n", name, DumpJson(value));
}

std::string RandomId(std::string_view prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi = 0;
  uint64_t lo = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = rng();
    lo = rng();
  }
  return fmt::format("{}{:08x}{:016x}", prefix, static_cast<uint32_t>(hi), lo);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace deepinfer::server
