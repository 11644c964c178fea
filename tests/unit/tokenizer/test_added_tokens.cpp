// Added tokens: recognised in the raw text before pre-tokenization, leftmost-longest, with the
// lstrip / rstrip / single_word / normalized / special flags as the reference library applies
// them. Tokenizers have no merges, so plain text encodes to its byte values.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace deepinfer::testing {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

std::unique_ptr<Tokenizer> WithAdded(const std::vector<json>& added) {
  return FromSpec(ByteLevelSpec({}, json(added)));
}

TEST(AddedTokens, SpecialAndPlainTokensAreRecognisedInText) {
  auto tok = WithAdded({AddedTokenJson(256, "<s>", true), AddedTokenJson(257, "<think>", false)});
  EXPECT_EQ(tok->Encode("x<s>y<think>z"), (Ids{'x', 256, 'y', 257, 'z'}));
  EXPECT_EQ(tok->Encode("<think"), (Ids{'<', 't', 'h', 'i', 'n', 'k'}));  // partial: plain text
}

TEST(AddedTokens, LeftmostLongestMatch) {
  auto tok = WithAdded({AddedTokenJson(256, "ab", false), AddedTokenJson(257, "abc", false)});
  EXPECT_EQ(tok->Encode("xabcd"), (Ids{'x', 257, 'd'}));
  EXPECT_EQ(tok->Encode("abab"), (Ids{256, 256}));
}

TEST(AddedTokens, MatchedBeforePreTokenization) {
  // The ByteLevel regex would cut "a b" at the space; the added token is taken first.
  auto tok = WithAdded({AddedTokenJson(256, "a b", false)});
  EXPECT_EQ(tok->Encode("xa bc"), (Ids{'x', 256, 'c'}));
}

TEST(AddedTokens, LstripTakesTheSpacesBefore) {
  auto plain = WithAdded({AddedTokenJson(256, "<m>", false)});
  EXPECT_EQ(plain->Encode("x  <m>y"), (Ids{'x', ' ', ' ', 256, 'y'}));
  auto lstrip = WithAdded({AddedTokenJson(256, "<m>", false, /*lstrip=*/true)});
  EXPECT_EQ(lstrip->Encode("x  <m>y"), (Ids{'x', 256, 'y'}));
}

TEST(AddedTokens, RstripTakesTheSpacesAfter) {
  auto plain = WithAdded({AddedTokenJson(256, "<m>", false)});
  EXPECT_EQ(plain->Encode("<m>  y"), (Ids{256, ' ', ' ', 'y'}));
  auto rstrip = WithAdded({AddedTokenJson(256, "<m>", false, false, /*rstrip=*/true)});
  EXPECT_EQ(rstrip->Encode("<m>  y"), (Ids{256, 'y'}));
  EXPECT_EQ(rstrip->Encode("<m>\u3000\ty"), (Ids{256, 'y'}));  // Unicode whitespace too
}

TEST(AddedTokens, SingleWordNeedsNonWordNeighbours) {
  auto tok = WithAdded({AddedTokenJson(256, "<m>", false, false, false, /*single_word=*/true)});
  EXPECT_EQ(tok->Encode("a<m>"), (Ids{'a', '<', 'm', '>'}));
  EXPECT_EQ(tok->Encode(" <m> "), (Ids{' ', 256, ' '}));
  EXPECT_EQ(tok->Encode("<m>,"), (Ids{256, ','}));
  EXPECT_EQ(tok->Encode("<m>é"), (Ids{'<', 'm', '>', 0xC3, 0xA9}));  // é is a word character
}

TEST(AddedTokens, NormalizedTokensAreMatchedAfterTheOthers) {
  // "bc" (not normalized) is extracted first, although "ab" starts further left.
  auto tok = WithAdded({AddedTokenJson(256, "ab", false, false, false, false, /*normalized=*/true),
                        AddedTokenJson(257, "bc", false)});
  EXPECT_EQ(tok->Encode("abc"), (Ids{'a', 257}));
}

TEST(AddedTokens, SpecialFlagControlsSkippingInDecode) {
  auto tok = WithAdded({AddedTokenJson(256, "<s>", true), AddedTokenJson(257, "<t>", false)});
  const Ids ids = tok->Encode("x<s>y<t>");
  ASSERT_EQ(ids, (Ids{'x', 256, 'y', 257}));
  EXPECT_EQ(tok->Decode(ids), "x<s>y<t>");
  EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/true), "xy<t>");
  EXPECT_TRUE(tok->IsSpecial(256));
  EXPECT_FALSE(tok->IsSpecial(257));
  EXPECT_FALSE(tok->IsSpecial('x'));
  EXPECT_FALSE(tok->IsSpecial(-1));
  EXPECT_FALSE(tok->IsSpecial(100000));
}

TEST(AddedTokens, IdsAreAssignedAsTheReferenceDoes) {
  // A content already in the vocabulary keeps its id; a declared id beyond the vocabulary is
  // replaced by the next free one (the reference warns and does the same).
  auto tok = WithAdded({AddedTokenJson(999, "<z>", true), AddedTokenJson(65, "A", true)});
  EXPECT_EQ(tok->Encode("<z>A"), (Ids{256, 65}));
  EXPECT_EQ(tok->TokenToId("<z>"), 256);
  EXPECT_EQ(tok->IdToToken(256), "<z>");
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_TRUE(tok->IsSpecial(65));
}

}  // namespace
}  // namespace deepinfer::testing
