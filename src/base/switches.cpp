#include "base/switches.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace deepinfer {

int64_t ParseCountSwitch(const char* name, const char* value, int64_t if_unset, const char* meaning) {
  if (value == nullptr || *value == '\0') return if_unset;
  const std::string v(value);
  const bool digits = v.size() <= 9 && std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits) throw Error(fmt::format("{} must be {}, got '{}'", name, meaning, v));
  return std::stoll(v);
}

bool ParseOnOffSwitch(const char* name, const char* value, bool if_unset) {
  if (value == nullptr || *value == '\0') return if_unset;
  const std::string v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  throw Error(fmt::format("{} must be 0 or 1, got '{}'", name, v));
}

}  // namespace deepinfer
