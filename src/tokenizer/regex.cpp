#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <memory>

#include "base/error.h"
#include "tokenizer/unicode_tables.h"

namespace deepinfer::tokenizer_internal {
namespace {

std::string Pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// The deltas in unicode_tables.cpp are relative to one PCRE2 Unicode version; with another one
// they would silently be wrong, so refuse to run.
void CheckUnicodeVersion() {
  static const std::string version = [] {
    char buffer[64] = {};
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buffer);
    return std::string(buffer);
  }();
  DI_CHECK(version == kTablesPcre2UnicodeVersion,
           "PCRE2 uses Unicode {} but src/tokenizer/unicode_tables.cpp was generated against "
           "Unicode {}; regenerate it with tools/gen_unicode_tables.py",
           version, kTablesPcre2UnicodeVersion);
}

// Per-thread PCRE2 matching state: match data for one ovector pair and a JIT stack that can grow
// to kMaxJitStackBytes (patterns that backtrack deeply need more than the default 32 KiB).
constexpr size_t kMaxJitStackBytes = size_t{8} << 20;

struct ThreadMatchState {
  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, kMaxJitStackBytes, nullptr);
    context = pcre2_match_context_create(nullptr);
    DI_CHECK(match_data != nullptr && jit_stack != nullptr && context != nullptr,
             "out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
  pcre2_match_data* match_data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, const std::string& what) {
  CheckUnicodeVersion();
  uint32_t options = PCRE2_UTF;
  if (literal) {
    pcre2_pattern_ = std::string(pattern);
    options |= PCRE2_LITERAL;
  } else {
    options |= PCRE2_UCP;
    try {
      pcre2_pattern_ = TranslateOnigurumaPattern(pattern);
    } catch (const Error& e) {
      DI_THROW("{}: {}", what, e.what());
    }
    options |= PCRE2_MULTILINE;  // Oniguruma's ^ and $ are line anchors
  }
  std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> context(
      pcre2_compile_context_create(nullptr), &pcre2_compile_context_free);
  DI_CHECK(context != nullptr, "out of memory creating a PCRE2 compile context");
  pcre2_set_newline(context.get(), PCRE2_NEWLINE_LF);
  pcre2_set_bsr(context.get(), PCRE2_BSR_UNICODE);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern_.data()), pcre2_pattern_.size(),
                        options, &error_code, &error_offset, context.get());
  if (code_ == nullptr) {
    DI_THROW("{}: regex /{}/ does not compile (as PCRE2 /{}/): {} at offset {}", what, pattern,
             pcre2_pattern_, Pcre2ErrorMessage(error_code), error_offset);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::Search(std::string_view text, size_t start, Span* match) const {
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = PCRE2_ERROR_JIT_STACKLIMIT;
  if (jit_) {
    rc = pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.match_data,
                         state.context);
  }
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // no JIT, or it ran out of stack: use the interpreter
    rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.match_data,
                     nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  DI_CHECK(rc >= 0, "PCRE2 match of /{}/ failed: {}", pcre2_pattern_, Pcre2ErrorMessage(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
  match->begin = ovector[0];
  match->end = ovector[1];
  return true;
}

void Regex::FindAll(std::string_view text, std::vector<Span>& out) const {
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  Span match{};
  while (last_end <= text.size() && Search(text, last_end, &match)) {
    if (match.begin == match.end && have_last && last_match_end == match.end) {
      // Empty match right after the previous match: move on by one character.
      if (last_end < text.size()) {
        const auto lead = static_cast<unsigned char>(text[last_end]);
        last_end += lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      } else {
        last_end += 1;
      }
      continue;
    }
    last_end = match.end;
    last_match_end = match.end;
    have_last = true;
    out.push_back(match);
  }
}

}  // namespace deepinfer::tokenizer_internal
