#include "llm/stop_matcher.h"

#include <algorithm>

namespace deepinfer {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopStringMatcher::Feed(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (first == std::string::npos || at < first)) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::Finish() {
  if (stopped_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace deepinfer
