// UTF-8 helpers for the tokenizer: validation, decoding one code point, and the lossy conversion
// that both the encoder (for invalid input) and the decoder (for byte-level output) use.
//
// The lossy conversion replaces every maximal invalid subpart with U+FFFD, the policy of the
// Unicode standard (§3.9, "U+FFFD substitution of maximal subparts") that Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") implement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer_internal {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length in bytes of the valid UTF-8 sequence starting at text[pos], or 0 if the bytes there are
// not a complete valid sequence. `incomplete` (optional) is set when the bytes up to the end of
// `text` are a valid but truncated prefix of a sequence (more bytes could still make it valid).
size_t ValidSequenceLength(std::string_view text, size_t pos, bool* incomplete = nullptr);

// Whether `text` is entirely valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Appends the lossy UTF-8 conversion of `bytes` to `out`. Stops before a trailing truncated
// sequence when `keep_incomplete_tail` is true and returns how many bytes were consumed, so a
// caller streaming bytes can retry the tail once more bytes arrive; otherwise consumes all bytes.
size_t AppendLossyUtf8(std::string_view bytes, bool keep_incomplete_tail, std::string& out);

inline std::string LossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  AppendLossyUtf8(bytes, /*keep_incomplete_tail=*/false, out);
  return out;
}

// Decodes the code point of a valid sequence of `length` bytes at `p` (precondition: valid).
inline char32_t DecodeValid(const unsigned char* p, size_t length) {
  switch (length) {
    case 1: return p[0];
    case 2: return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
             (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

// Length of the sequence whose (valid) lead byte is `lead`.
inline size_t SequenceLengthOfLead(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

void AppendUtf8(char32_t cp, std::string& out);

}  // namespace deepinfer::tokenizer_internal
