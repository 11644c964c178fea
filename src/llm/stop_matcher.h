// Stop strings over streamed raw text (completions without chat parsing). Text is released as
// soon as it can no longer be the start of a stop string; a match ends the output before the
// stop string, which is never released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text`; returns what may be released now.
  std::string Feed(std::string_view text);
  // End of output: releases whatever was held back.
  std::string Finish();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace deepinfer
