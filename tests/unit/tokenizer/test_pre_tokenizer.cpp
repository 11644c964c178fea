// Regex translation (Oniguruma semantics on PCRE2, the reference's newer Unicode tables), match
// iteration, Split behaviors and ByteLevel's prefix space.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

namespace deepinfer::tokenizer_internal {
namespace {

std::vector<std::string> Matches(const std::string& pattern, std::string_view text) {
  Regex regex(pattern, false, "test");
  std::vector<Span> spans;
  regex.FindAll(text, spans);
  std::vector<std::string> out;
  for (const Span& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

using Strings = std::vector<std::string>;

TEST(Regex, UnicodePropertiesUseTheReferenceTables) {
  // U+1C89 (Cyrillic capital TJE) and U+1FAE8 (shaking face) were assigned in Unicode 16 and 15,
  // after the Unicode 14 tables of Debian's PCRE2.
  EXPECT_EQ(Matches(R"(\p{L}+)", "a\u1c89b"), (Strings{"a\u1c89b"}));
  EXPECT_EQ(Matches(R"(\p{So})", "\U0001fae8"), (Strings{"\U0001fae8"}));
  EXPECT_EQ(Matches(R"([^\p{L}\p{S}]+)", "x\U0001fae8\u1c89 "), (Strings{" "}));
  EXPECT_EQ(Matches(R"(\P{L}+)", "a\u1c89-"), (Strings{"-"}));
  EXPECT_EQ(Matches(R"(\p{Cn})", "\u1c89\u0378"), (Strings{"\u0378"}));  // U+0378: unassigned
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpace) {
  // U+180E stopped being whitespace in Unicode 6.3; PCRE2's \s still includes it.
  EXPECT_EQ(Matches(R"(\s+)", "a\u180e\u3000\u0085\u2028\t b"), (Strings{"\u3000\u0085\u2028\t "}));
  EXPECT_EQ(Matches(R"([^\s]+)", "a\u180e b"), (Strings{"a\u180e", "b"}));
  EXPECT_EQ(Matches(R"(\S+)", "a\u180e b"), (Strings{"a\u180e", "b"}));
}

TEST(Regex, OnigurumaSyntaxDifferences) {
  EXPECT_EQ(Matches(R"(x{,2})", "xxx"), (Strings{"xx", "x"}));  // {,n} is {0,n}
  EXPECT_EQ(Matches(R"((?m:a.b))", "a\nb"), (Strings{"a\nb"}));       // (?m) is dot-all
  EXPECT_EQ(Matches(R"(a.b)", "a\nb"), (Strings{}));
  EXPECT_EQ(Matches(R"(^b)", "a\nb"), (Strings{"b"}));  // ^ and $ are line anchors
  EXPECT_EQ(Matches(R"(a$)", "a\nb"), (Strings{"a"}));
  EXPECT_EQ(Matches(R"(\h+)", "0aFg"), (Strings{"0aF"}));  // \h is a hex digit
  EXPECT_EQ(Matches(R"(\u4e2d+)", "中中文"), (Strings{"中中"}));
  EXPECT_EQ(Matches(R"(\x{6587}{2})", "文文文"), (Strings{"文文"}));
  EXPECT_EQ(Matches(R"(\w+)", "x²½\u0301_"), (Strings{"x²½\u0301_"}));
}

TEST(Regex, EmptyMatchesRightAfterAMatchAreSkipped) {
  EXPECT_EQ(Matches("a*", "baab"), (Strings{"", "aa", ""}));
  Regex regex("a*", false, "test");
  std::vector<Span> spans;
  regex.FindAll("baab", spans);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].begin, 0u);
  EXPECT_EQ(spans[1].begin, 1u);
  EXPECT_EQ(spans[2].begin, 4u);
}

TEST(Regex, LiteralPatternsAreNotRegexes) {
  Regex regex(".+", true, "test");
  std::vector<Span> spans;
  regex.FindAll("a.+b.+", spans);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1].begin, 4u);
}

TEST(Regex, UntranslatableConstructsAreRejected) {
  for (const char* pattern :
       {"[[:alpha:]]", "[a&&b]", "[a[b]]", R"(\X)", R"([\W])", R"([\D])", R"(\p{NoSuchProperty})",
        R"([\p{C}])", "(?s:a)", R"(\Qa\E)", "a{1,2}+", "(?~a)"}) {  // (?s: fails in both
    try {
      Regex regex(pattern, false, "pre_tokenizer.pattern");
      ADD_FAILURE() << pattern << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pre_tokenizer.pattern"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Regex("(", false, "test"), Error);  // does not compile
}

std::vector<std::string> SplitPieces(SplitBehavior behavior, std::string_view text) {
  PreTokenizer pre;
  // The reference's own example: the words and punctuation are the matches, inverted.
  pre.AddSplit(SplitStep{std::make_unique<Regex>(R"(\w+|[^\w\s]+)", false, "test"), behavior,
                         /*invert=*/true});
  PreTokenizeScratch scratch;
  std::vector<std::string_view> pieces;
  pre.Run(text, scratch, pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizer, SplitBehaviors) {
  const char* text = "How are you doing?";
  EXPECT_EQ(SplitPieces(SplitBehavior::kRemoved, text),
            (Strings{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(SplitPieces(SplitBehavior::kIsolated, text),
            (Strings{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(SplitPieces(SplitBehavior::kMergedWithPrevious, text),
            (Strings{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(SplitPieces(SplitBehavior::kMergedWithNext, text),
            (Strings{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(SplitPieces(SplitBehavior::kContiguous, text),
            (Strings{"How", " ", "are", " ", "you", " ", "doing?"}));
}

TEST(PreTokenizer, StepsRunOnEachPieceSeparately) {
  PreTokenizer pre;
  pre.AddSplit(SplitStep{std::make_unique<Regex>(R"(\p{N}{1,3})", false, "t"),
                         SplitBehavior::kIsolated, false});
  // \s+(?!\S) must not see the digit that the first step cut off.
  pre.AddSplit(SplitStep{std::make_unique<Regex>(R"(\s+(?!\S)|\s+)", false, "t"),
                         SplitBehavior::kIsolated, false});
  PreTokenizeScratch scratch;
  std::vector<std::string_view> pieces;
  pre.Run("ab  1234", scratch, pieces);
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
            (Strings{"ab", "  ", "123", "4"}));
}

TEST(PreTokenizer, ByteLevelPrefixSpaceOnEveryPiece) {
  PreTokenizer pre;
  pre.AddSplit(SplitStep{std::make_unique<Regex>(R"(\d)", false, "t"), SplitBehavior::kIsolated,
                         false});
  pre.SetByteLevel(/*add_prefix_space=*/true, /*use_regex=*/false, "t");
  PreTokenizeScratch scratch;
  std::vector<std::string_view> pieces;
  pre.Run("ab1cd 2 e", scratch, pieces);
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
            (Strings{" ab", " 1", " cd ", " 2", " e"}));
}

}  // namespace
}  // namespace deepinfer::tokenizer_internal
