// Oniguruma -> PCRE2 pattern translation (see regex.h).
//
// Differences handled (Oniguruma as the reference compiles patterns: Ruby syntax, UTF-8,
// ONIG_OPTION_NONE):
//  - Unicode classes (\p{..}, \s, \d, \w and their negations) use the reference's newer Unicode
//    tables: PCRE2's item plus/minus the generated deltas. \w is roughly Letter|Mark|Nd|Pc plus
//    some other numbers, and inside a class a few Latin-1 numbers fewer (as the reference has it).
//  - \h is a hex digit, \v is U+000B, \uHHHH is a code point, \b/\B use the reference's \w.
//  - (?m) means "dot matches newline" (PCRE2's s); ^ and $ are line anchors (compiled MULTILINE).
//  - {,n} means {0,n}.
// Rejected (Error): nested classes, class intersection (&&), POSIX brackets, negated Unicode
// items inside a class when the negation is not expressible there, \X, \Q, absent operators,
// interval repeats followed by '+', and unknown escapes or options.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_tables.h"

namespace deepinfer::tokenizer_internal {
namespace {

constexpr char32_t kMaxCodepoint = 0x10FFFF;

std::string NormalizePropertyName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

std::string_view ResolveAlias(const std::string& normalized) {
  static const std::pair<std::string_view, std::string_view> kAliases[] = {
      {"letter", "l"},         {"mark", "m"},   {"number", "n"},
      {"punctuation", "p"},    {"symbol", "s"}, {"separator", "z"},
      {"other", "c"},          {"decimalnumber", "nd"},
      {"uppercaseletter", "lu"}, {"lowercaseletter", "ll"},
  };
  for (const auto& [alias, target] : kAliases) {
    if (normalized == alias) return target;
  }
  return normalized;
}

const ClassItemDelta* FindItem(std::string_view name) {
  for (const ClassItemDelta& item : ClassItemDeltas()) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

const ClassItemDelta* FindProperty(std::string_view name) {
  const std::string normalized = NormalizePropertyName(name);
  const std::string_view wanted = ResolveAlias(normalized);
  for (const ClassItemDelta& item : ClassItemDeltas()) {
    if (item.name.starts_with('\\') || item.name.starts_with('[')) continue;  // shorthands
    if (NormalizePropertyName(item.name) == wanted) return &item;
  }
  return nullptr;
}

void AppendCodepoint(char32_t cp, std::string& out) {
  out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(cp));
}

void AppendRange(char32_t first, char32_t last, std::string& out) {
  AppendCodepoint(first, out);
  if (last != first) {
    out.push_back('-');
    AppendCodepoint(last, out);
  }
}

void AppendRanges(std::span<const CodepointRange> ranges, std::string& out) {
  for (const CodepointRange& r : ranges) AppendRange(r.first, r.last, out);
}

// Appends the code points not in `ranges` (sorted, disjoint), leaving out the surrogates.
void AppendComplementRanges(std::span<const CodepointRange> ranges, std::string& out) {
  auto emit = [&](char32_t first, char32_t last) {
    if (first > last) return;
    if (first < 0xD800 && last >= 0xD800) {
      AppendRange(first, 0xD7FF, out);
      if (last > 0xDFFF) AppendRange(0xE000, last, out);
    } else if (first >= 0xD800 && first <= 0xDFFF) {
      if (last > 0xDFFF) AppendRange(0xE000, last, out);
    } else {
      AppendRange(first, last, out);
    }
  };
  char32_t next = 0;
  for (const CodepointRange& r : ranges) {
    if (r.first > next) emit(next, r.first - 1);
    next = r.last + 1;
  }
  if (next <= kMaxCodepoint) emit(next, kMaxCodepoint);
}

class Translator {
 public:
  explicit Translator(std::string_view pattern) : src_(pattern) {}

  std::string Run() {
    while (pos_ < src_.size()) {
      if (in_class_) {
        ClassStep();
      } else {
        Step();
      }
    }
    if (in_class_) Fail(src_.size(), "unterminated character class");
    return std::move(out_);
  }

 private:
  [[noreturn]] void Fail(size_t at, std::string_view what) const {
    DI_THROW("regex /{}/: {} at offset {} (cannot be translated faithfully to PCRE2)", src_, what,
             at);
  }

  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }

  // Copies one (possibly multi-byte) character verbatim.
  void CopyChar() {
    const auto lead = static_cast<unsigned char>(src_[pos_]);
    const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out_.append(src_.substr(pos_, n));
    pos_ += n;
  }

  void EmitItemInClass(const ClassItemDelta& item, bool negated, size_t at) {
    if (!negated) {
      if (!item.removed.empty()) Fail(at, fmt::format("class item '{}' inside a class", item.name));
      if (item.pcre2_items.empty() && item.added.empty()) {
        Fail(at, fmt::format("empty class item '{}' inside a class", item.name));
      }
      out_ += item.pcre2_items;
      AppendRanges(item.added, out_);
      return;
    }
    if (!item.pcre2_items.empty()) {
      Fail(at, fmt::format("negated class item '{}' inside a class", item.name));
    }
    AppendComplementRanges(item.added, out_);
  }

  static std::string ItemOutsideClass(const ClassItemDelta& item, bool negated) {
    std::string body(item.pcre2_items);
    AppendRanges(item.added, body);
    std::string removed;
    AppendRanges(item.removed, removed);
    if (body.empty()) return negated ? "(?s:.)" : "(?!)";
    if (!negated) {
      return removed.empty() ? "[" + body + "]" : "(?:(?![" + removed + "])[" + body + "])";
    }
    return removed.empty() ? "[^" + body + "]" : "(?:[" + removed + "]|[^" + body + "])";
  }

  // At "\p" or "\P": parses "{name}" or "{^name}" and returns the item and its negation.
  const ClassItemDelta& ParseProperty(bool* negated) {
    const size_t at = pos_;
    *negated = src_[pos_ + 1] == 'P';
    pos_ += 2;
    if (Peek() != '{') Fail(at, "property escape without braces");
    const size_t close = src_.find('}', pos_);
    if (close == std::string_view::npos) Fail(at, "unterminated property name");
    std::string_view name = src_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    if (name.starts_with('^')) {
      *negated = !*negated;
      name.remove_prefix(1);
    }
    const ClassItemDelta* item = FindProperty(name);
    if (item == nullptr) Fail(at, fmt::format("unsupported Unicode property '{}'", name));
    return *item;
  }

  // The item of shorthand \c; `in_class` picks its meaning inside a class ("[\w]") where the
  // reference gives it a different one.
  static const ClassItemDelta& Shorthand(char c, bool in_class) {
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string name = {'\\', lower};
    if (in_class) {
      if (const ClassItemDelta* item = FindItem("[" + name + "]")) return *item;
    }
    const ClassItemDelta* item = FindItem(name);
    if (item == nullptr) DI_THROW("unicode tables lack the shorthand {}", name);
    return *item;
  }

  // At "\u": 4 hex digits follow.
  void TranslateUnicodeEscape(size_t at) {
    std::string_view hex = src_.substr(pos_ + 2, 4);
    if (hex.size() != 4 || !std::all_of(hex.begin(), hex.end(), [](char h) {
          return std::isxdigit(static_cast<unsigned char>(h)) != 0;
        })) {
      Fail(at, "\\u escape without 4 hex digits");
    }
    out_ += "\\x{";
    out_ += hex;
    out_ += "}";
    pos_ += 6;
  }

  // Escapes whose meaning is the same in both engines.
  static bool IsPassThroughEscape(char c, bool in_class) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return true;
    if (std::isdigit(static_cast<unsigned char>(c))) return true;
    static constexpr std::string_view kBoth = "ntrfeaxco";
    static constexpr std::string_view kOutside = "AzZGKRkg";
    return kBoth.find(c) != std::string_view::npos ||
           (!in_class && kOutside.find(c) != std::string_view::npos);
  }

  void Escape() {
    const size_t at = pos_;
    if (pos_ + 1 >= src_.size()) Fail(at, "trailing backslash");
    const char c = src_[pos_ + 1];
    switch (c) {
      case 'p':
      case 'P': {
        bool negated = false;
        const ClassItemDelta& item = ParseProperty(&negated);
        if (in_class_) {
          EmitItemInClass(item, negated, at);
        } else {
          out_ += ItemOutsideClass(item, negated);
        }
        return;
      }
      case 's': case 'S': case 'd': case 'D': case 'w': case 'W': {
        const bool negated = std::isupper(static_cast<unsigned char>(c)) != 0;
        pos_ += 2;
        if (in_class_) {
          EmitItemInClass(Shorthand(c, true), negated, at);
        } else {
          out_ += ItemOutsideClass(Shorthand(c, false), negated);
        }
        return;
      }
      case 'h':
      case 'H':
        if (in_class_ && c == 'H') Fail(at, "\\H inside a class");
        out_ += in_class_ ? "0-9a-fA-F" : (c == 'h' ? "[0-9a-fA-F]" : "[^0-9a-fA-F]");
        pos_ += 2;
        return;
      case 'b':
      case 'B':
        if (in_class_) break;  // backspace in a class, as in PCRE2
        {
          const std::string w = ItemOutsideClass(Shorthand('w', false), false);
          out_ += c == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                           : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
          pos_ += 2;
          return;
        }
      case 'u':
        TranslateUnicodeEscape(at);
        return;
      case 'v':
        out_ += "\\x0B";
        pos_ += 2;
        return;
      case 'x':
      case 'o':
        if (Peek(2) == '{') {  // \x{HHHH}, \o{OOO}: copy through the closing brace
          const size_t close = src_.find('}', pos_);
          if (close == std::string_view::npos) Fail(at, "unterminated \\x{...} or \\o{...}");
          out_.append(src_.substr(pos_, close + 1 - pos_));
          pos_ = close + 1;
          return;
        }
        break;
      default:
        if (!IsPassThroughEscape(c, in_class_)) {
          Fail(at, fmt::format("unsupported escape \\{}", c));
        }
    }
    out_.push_back('\\');
    ++pos_;
    CopyChar();
  }

  void ClassStep() {
    const char c = src_[pos_];
    if (c == '\\') {
      Escape();
    } else if (c == '[') {
      Fail(pos_, Peek(1) == ':' ? "POSIX bracket expression" : "nested character class");
    } else if (c == '&' && Peek(1) == '&') {
      Fail(pos_, "class intersection &&");
    } else if (c == ']' && !class_first_) {
      out_.push_back(']');
      ++pos_;
      in_class_ = false;
    } else {
      CopyChar();
    }
    class_first_ = false;
  }

  void OpenClass() {
    out_.push_back('[');
    ++pos_;
    if (Peek() == '^') {
      out_.push_back('^');
      ++pos_;
    }
    in_class_ = true;
    class_first_ = true;  // a ']' right here is a literal, in both engines
  }

  void OpenGroup() {
    const size_t at = pos_;
    out_.push_back('(');
    ++pos_;
    if (Peek() != '?') return;
    const char kind = Peek(1);
    if (kind == '#') {  // comment
      const size_t close = src_.find(')', pos_);
      if (close == std::string_view::npos) Fail(at, "unterminated comment");
      out_.append(src_.substr(pos_, close + 1 - pos_));
      pos_ = close + 1;
      return;
    }
    if (kind == ':' || kind == '=' || kind == '!' || kind == '<' || kind == '>' || kind == '\'') {
      return;  // groups and lookarounds: same syntax
    }
    if (kind == '~') Fail(at, "absent operator (?~...)");
    // Inline options (?imx-imx) or (?imx-imx:...): Oniguruma's m is PCRE2's s.
    out_.push_back('?');
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != ')' && src_[pos_] != ':') {
      const char option = src_[pos_];
      if (option == 'm') {
        out_.push_back('s');
      } else if (option == 'i' || option == 'x' || option == '-') {
        out_.push_back(option);
      } else {
        Fail(pos_, fmt::format("unsupported group or option '(?{}'", option));
      }
      ++pos_;
    }
  }

  // At '{': "{,n}" becomes "{0,n}"; an interval followed by '+' is rejected.
  void Interval() {
    const size_t close = src_.find('}', pos_);
    std::string_view body =
        close == std::string_view::npos ? std::string_view() : src_.substr(pos_ + 1, close - pos_ - 1);
    const bool is_interval =
        !body.empty() && std::all_of(body.begin(), body.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == ',';
        }) && std::count(body.begin(), body.end(), ',') <= 1 && body != ",";
    if (!is_interval) {
      CopyChar();
      return;
    }
    if (close + 1 < src_.size() && src_[close + 1] == '+') {
      Fail(pos_, "interval followed by '+' (a repeat of a repeat in Oniguruma)");
    }
    out_ += body.starts_with(',') ? "{0" : "{";
    out_ += body;
    out_ += "}";
    pos_ = close + 1;
  }

  void Step() {
    switch (src_[pos_]) {
      case '\\': Escape(); return;
      case '[': OpenClass(); return;
      case '(': OpenGroup(); return;
      case '{': Interval(); return;
      default: CopyChar(); return;
    }
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::string out_;
  bool in_class_ = false;
  bool class_first_ = false;
};

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) {
  return Translator(pattern).Run();
}

}  // namespace deepinfer::tokenizer_internal
