// Streaming UTF-8 repair: arbitrary byte pieces in, whole valid characters out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::recipe {

// Passes valid UTF-8 through and holds an incomplete trailing character until its remaining
// bytes arrive, so output never ends inside a character. Each invalid byte (or truncated
// sequence) becomes U+FFFD. The output depends only on the concatenated input.
class Utf8Sanitizer {
 public:
  // Appends the complete, repaired characters of `bytes` (plus held bytes) to `out`.
  void Append(std::string_view bytes, std::string& out);
  // End of input: a held incomplete character becomes U+FFFD.
  void Flush(std::string& out);
  // Replacement characters written so far.
  uint64_t num_replaced() const { return num_replaced_; }

 private:
  void Replace(std::string& out);

  std::string held_;     // a valid prefix of one multi-byte character
  size_t needed_ = 0;    // total length of the character in held_
  uint64_t num_replaced_ = 0;
};

}  // namespace deepinfer::recipe
