#include "tokenizer/utf8.h"

#include <cstring>

namespace deepinfer::tokenizer_internal {
namespace {

// Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the allowed range
// of the second byte; later bytes are always 80..BF.
struct LeadInfo {
  uint8_t length;  // 0: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

constexpr LeadInfo InfoOf(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the maximal subpart at text[pos] (>= 1) and whether it is a complete valid sequence.
size_t MaximalSubpart(std::string_view text, size_t pos, bool* valid, bool* truncated) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const LeadInfo info = InfoOf(p[pos]);
  *truncated = false;
  if (info.length <= 1) {
    *valid = info.length == 1;
    return 1;
  }
  size_t n = 1;
  for (; n < info.length; ++n) {
    if (pos + n >= text.size()) {
      *truncated = true;
      *valid = false;
      return n;
    }
    const unsigned char c = p[pos + n];
    const bool ok = n == 1 ? (c >= info.second_lo && c <= info.second_hi) : (c & 0xC0) == 0x80;
    if (!ok) {
      *valid = false;
      return n;
    }
  }
  *valid = true;
  return n;
}

}  // namespace

size_t ValidSequenceLength(std::string_view text, size_t pos, bool* incomplete) {
  bool valid = false;
  bool truncated = false;
  const size_t n = MaximalSubpart(text, pos, &valid, &truncated);
  if (incomplete != nullptr) *incomplete = truncated;
  return valid ? n : 0;
}

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t len = ValidSequenceLength(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

size_t AppendLossyUtf8(std::string_view bytes, bool keep_incomplete_tail, std::string& out) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one append
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    bool valid = false;
    bool truncated = false;
    const size_t n = MaximalSubpart(bytes, i, &valid, &truncated);
    if (valid) {
      i += n;
      continue;
    }
    out.append(bytes.data() + run_start, i - run_start);
    if (truncated && keep_incomplete_tail) return i;
    AppendUtf8(kReplacementChar, out);
    i += n;
    run_start = i;
  }
  out.append(bytes.data() + run_start, i - run_start);
  return i;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace deepinfer::tokenizer_internal
