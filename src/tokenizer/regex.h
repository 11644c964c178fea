// Regexes of tokenizer.json pre-tokenizers, run on PCRE2 (JIT, UTF + UCP).
//
// tokenizer.json patterns are written for Oniguruma (the engine of the Hugging Face `tokenizers`
// library). TranslateOnigurumaPattern rewrites the constructs whose meaning differs in PCRE2 and
// applies the Unicode deltas of unicode_tables.h, so that both engines match the same text;
// constructs it cannot translate faithfully are rejected with an Error instead of approximated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace deepinfer::tokenizer_internal {

// Byte range [begin, end) of a match or piece.
struct Span {
  size_t begin;
  size_t end;
};

// Returns the PCRE2 pattern equivalent to the Oniguruma `pattern`. Throws deepinfer::Error
// naming the construct and its offset when it cannot be translated faithfully.
std::string TranslateOnigurumaPattern(std::string_view pattern);

class Regex {
 public:
  // `pattern`: Oniguruma syntax, or a plain string when `literal`. `what` names the pattern's
  // place in the tokenizer.json for error messages. Throws deepinfer::Error if it does not compile.
  Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends to `out` the successive non-overlapping matches in `text` (valid UTF-8), iterated as
  // the reference library does: an empty match ending where the previous match ended is skipped by
  // advancing one character. Offsets are relative to `text`; lookarounds never see past `text`.
  void FindAll(std::string_view text, std::vector<Span>& out) const;

  const std::string& pcre2_pattern() const { return pcre2_pattern_; }

 private:
  // Leftmost match starting at or after `start`; false if none.
  bool Search(std::string_view text, size_t start, Span* match) const;

  std::string pcre2_pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace deepinfer::tokenizer_internal
