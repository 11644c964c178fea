#include "recipe/utf8.h"

namespace deepinfer::recipe {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";

// Length of the character a lead byte starts; 0 if the byte cannot start one.
size_t LeadLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) return 2;
  if (b >= 0xe0 && b <= 0xef) return 3;
  if (b >= 0xf0 && b <= 0xf4) return 4;
  return 0;
}

// Whether `b` may follow the held prefix (excludes overlongs, surrogates, > U+10FFFF).
bool ValidContinuation(const std::string& held, uint8_t b) {
  if (b < 0x80 || b > 0xbf) return false;
  if (held.size() != 1) return true;
  switch (static_cast<uint8_t>(held[0])) {
    case 0xe0: return b >= 0xa0;
    case 0xed: return b <= 0x9f;
    case 0xf0: return b >= 0x90;
    case 0xf4: return b <= 0x8f;
    default: return true;
  }
}

}  // namespace

void Utf8Sanitizer::Replace(std::string& out) {
  out += kReplacement;
  ++num_replaced_;
}

void Utf8Sanitizer::Append(std::string_view bytes, std::string& out) {
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (!held_.empty()) {
      if (ValidContinuation(held_, b)) {
        held_ += c;
        if (held_.size() == needed_) {
          out += held_;
          held_.clear();
        }
        continue;
      }
      held_.clear();
      Replace(out);  // truncated sequence; `b` starts afresh below
    }
    const size_t length = LeadLength(b);
    if (length == 1) {
      out += c;
    } else if (length == 0) {
      Replace(out);
    } else {
      held_ = c;
      needed_ = length;
    }
  }
}

void Utf8Sanitizer::Flush(std::string& out) {
  if (held_.empty()) return;
  held_.clear();
  Replace(out);
}

}  // namespace deepinfer::recipe
