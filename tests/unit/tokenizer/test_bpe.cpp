// BPE model: merge order, both merge forms, ties, long words, the word cache under concurrency,
// and characters missing from the vocabulary. Expected ids follow from the merge rules by hand
// (ids: byte b -> b, merges -> 256, 257, ... in order; see tokenizer_test_util.h).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tokenizer_test_util.h"

namespace deepinfer::testing {
namespace {

using Ids = std::vector<int32_t>;

TEST(Bpe, LowestRankMergeFirst) {
  // rank 0: a+b, rank 1: b+c, rank 2: ab+c. "abc": a+b wins over b+c, then ab+c.
  auto tok = FromSpec(ByteLevelSpec({{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  EXPECT_EQ(tok->Encode("abc"), (Ids{IdOf(*tok, "abc")}));
  // With b+c ranked first the word becomes a + bc, and no merge joins those.
  auto swapped = FromSpec(ByteLevelSpec({{"b", "c"}, {"a", "b"}, {"ab", "c"}}));
  EXPECT_EQ(swapped->Encode("abc"), (Ids{'a', IdOf(*swapped, "bc")}));
}

TEST(Bpe, PairFormEqualsStringForm) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {" ", "the"}, {"e", "r"}, {"h", "e"}};
  auto strings = FromSpec(ByteLevelSpec(merges));
  auto pairs = FromSpec(ByteLevelSpec(merges, nlohmann::json::array(), nullptr, true));
  for (const std::string text : {"the other there", "hehe the", "thethe"}) {
    EXPECT_EQ(strings->Encode(text), pairs->Encode(text)) << text;
  }
  EXPECT_EQ(strings->Encode(" the"), (Ids{IdOf(*strings, " the")}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  auto tok = FromSpec(ByteLevelSpec({{"a", "a"}}));
  const int32_t aa = IdOf(*tok, "aa");
  EXPECT_EQ(tok->Encode("aaa"), (Ids{aa, 'a'}));
  EXPECT_EQ(tok->Encode("aaaa"), (Ids{aa, aa}));
  EXPECT_EQ(tok->Encode("aaaaa"), (Ids{aa, aa, 'a'}));
}

TEST(Bpe, LongWordsBypassTheCacheWithTheSameResult) {
  auto tok = FromSpec(ByteLevelSpec({{"a", "b"}, {"ab", "ab"}}));
  const int32_t abab = IdOf(*tok, "abab");
  std::string word;
  Ids want;
  for (int i = 0; i < 300; ++i) {  // 1200 bytes: longer than any cached word
    word += "abab";
    want.push_back(abab);
  }
  EXPECT_EQ(tok->Encode(word), want);
  EXPECT_EQ(tok->Encode(word + "a"), [&] {
    Ids w = want;
    w.push_back('a');
    return w;
  }());
}

TEST(Bpe, NonAsciiBytesAreSymbols) {
  auto tok = FromSpec(ByteLevelSpec({{"\xC3", "\xA9"}}));  // the two bytes of "é"
  EXPECT_EQ(tok->Encode("é"), (Ids{IdOf(*tok, "é")}));
  EXPECT_EQ(tok->Encode("ü"), (Ids{0xC3, 0xBC}));
  EXPECT_EQ(tok->Encode(" é"), (Ids{' ', IdOf(*tok, "é")}));  // no merge of "Ġ" with "é"
}

TEST(Bpe, CachedAndConcurrentEncodingAgree) {
  auto tok = FromSpec(ByteLevelSpec({{"a", "b"}, {"c", "d"}, {"ab", "cd"}, {" ", "abcd"}}));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += (i % 3 == 0 ? " abcd" : i % 3 == 1 ? " abc" : " dcba");
  const Ids first = tok->Encode(text);
  EXPECT_EQ(tok->Encode(text), first);  // second pass: from the cache
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) {
    threads.emplace_back([&tok, &text, &r] {
      for (int i = 0; i < 20; ++i) r = tok->Encode(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const Ids& r : results) EXPECT_EQ(r, first);
}

// A model without ByteLevel: symbols are characters, some missing from the vocabulary.
nlohmann::json CharSpec(const nlohmann::json& model_options = nlohmann::json::object()) {
  nlohmann::json model = {{"type", "BPE"},
                          {"vocab", {{"a", 0}, {"b", 1}, {"[UNK]", 2}, {"<0x78>", 3}, {"ab", 4},
                                     {"abc", 5}, {"c", 6}}},
                          {"merges", {"a b"}}};
  model.update(model_options);
  return {{"model", model}, {"decoder", {{"type", "ByteLevel"}}}, {"pre_tokenizer", nullptr}};
}

TEST(Bpe, UnknownCharactersAreDroppedWithoutUnkToken) {
  auto tok = FromSpec(CharSpec());
  EXPECT_EQ(tok->Encode("axyb"), (Ids{4}));  // x, y dropped; a and b then merge
}

TEST(Bpe, UnknownCharactersBecomeUnk) {
  auto separate = FromSpec(CharSpec({{"unk_token", "[UNK]"}}));
  EXPECT_EQ(separate->Encode("axyb"), (Ids{0, 2, 2, 1}));
  auto fused = FromSpec(CharSpec({{"unk_token", "[UNK]"}, {"fuse_unk", true}}));
  EXPECT_EQ(fused->Encode("axyb"), (Ids{0, 2, 1}));
  EXPECT_EQ(fused->Encode("xab"), (Ids{2, 4}));
}

TEST(Bpe, ByteFallbackUsesByteTokens) {
  auto tok = FromSpec(CharSpec({{"unk_token", "[UNK]"}, {"byte_fallback", true}}));
  EXPECT_EQ(tok->Encode("axb"), (Ids{0, 3, 1}));  // "x" has "<0x78>"
  EXPECT_EQ(tok->Encode("ayb"), (Ids{0, 2, 1}));  // "y" has no byte token: unk
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  auto merged = FromSpec(CharSpec());
  EXPECT_EQ(merged->Encode("abc"), (Ids{4, 6}));
  auto whole = FromSpec(CharSpec({{"ignore_merges", true}}));
  EXPECT_EQ(whole->Encode("abc"), (Ids{5}));
  EXPECT_EQ(whole->Encode("abab"), (Ids{4, 4}));  // not in the vocabulary: merged as usual
}

}  // namespace
}  // namespace deepinfer::testing
