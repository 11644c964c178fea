// ByteLevel decoding (bytes back from characters, U+FFFD for undecodable bytes) and the
// incremental detokenizer: for every prefix of an id sequence, the deltas plus Flush() equal
// Decode(prefix), every delta is whole UTF-8 characters, and the deltas so far are a prefix of
// the final text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer_test_util.h"

namespace deepinfer::testing {
namespace {

using Ids = std::vector<int32_t>;

// Independent UTF-8 validity check (well-formed sequences per Unicode Table 3-7).
bool IsWholeUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80) n = 1;
    else if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b == 0xE0) n = 3, lo = 0xA0;
    else if (b == 0xED) n = 3, hi = 0x9F;
    else if (b >= 0xE1 && b <= 0xEF) n = 3;
    else if (b == 0xF0) n = 4, lo = 0x90;
    else if (b == 0xF4) n = 4, hi = 0x8F;
    else if (b >= 0xF1 && b <= 0xF3) n = 4;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Checks the detokenizer contract on every prefix of `ids`.
void ExpectStreamingMatchesDecode(const Tokenizer& tok, const Ids& ids, bool skip_special) {
  const std::string full = tok.Decode(ids, skip_special);
  for (size_t k = 0; k <= ids.size(); ++k) {
    IncrementalDetokenizer detok(tok, skip_special);
    std::string streamed;
    for (size_t i = 0; i < k; ++i) {
      const std::string delta = detok.Append(ids[i]);
      ASSERT_TRUE(IsWholeUtf8(delta)) << "delta after id #" << i << " splits a character";
      streamed += delta;
      ASSERT_EQ(full.compare(0, streamed.size(), streamed), 0) << "deltas diverge at id #" << i;
    }
    const std::string tail = detok.Flush();
    ASSERT_TRUE(IsWholeUtf8(tail));
    const Ids prefix(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
    ASSERT_EQ(streamed + tail, tok.Decode(prefix, skip_special)) << "prefix of " << k << " ids";
  }
}

int32_t ByteToken(const Tokenizer& tok, unsigned char byte) {
  const auto id = tok.TokenToId(ByteChar(byte));
  DI_CHECK(id.has_value(), "no byte token for {}", byte);
  return *id;
}

TEST(ByteLevelDecode, CharactersMapBackToBytes) {
  auto tok = FromSpec(ByteLevelSpec({{" ", "h"}, {" h", "i"}}));
  EXPECT_EQ(tok->IdToToken(IdOf(*tok, " hi")), "Ġhi");
  EXPECT_EQ(tok->Decode(tok->Encode(" hi there\n\t")), " hi there\n\t");
  EXPECT_EQ(tok->Decode(Ids{0xE4, 0xBD, 0xA0}), "你");
}

TEST(ByteLevelDecode, UndecodableBytesBecomeReplacementCharacters) {
  auto tok = FromSpec(ByteLevelSpec({}));
  // One U+FFFD per maximal invalid subpart, as Python's decode(errors="replace").
  EXPECT_EQ(tok->Decode(Ids{0xE4, 0xBD}), "\uFFFD");
  EXPECT_EQ(tok->Decode(Ids{0xE4, 0xBD, 'A'}), "\uFFFDA");
  EXPECT_EQ(tok->Decode(Ids{0xC0, 0x80}), "\uFFFD\uFFFD");
  EXPECT_EQ(tok->Decode(Ids{0xED, 0xA0, 0x80}), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(tok->Decode(Ids{0xF4, 0x90, 0x80, 0x80}), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(tok->Decode(Ids{0xF0, 0x9F, 0x98}), "\uFFFD");
  EXPECT_EQ(tok->Decode(Ids{0xFF, 'A'}), "\uFFFDA");
}

TEST(ByteLevelDecode, UnknownIdsAreSkipped) {
  auto tok = FromSpec(ByteLevelSpec({}));
  EXPECT_EQ(tok->Decode(Ids{'a', -5, 100000, 'b'}), "ab");
  EXPECT_EQ(tok->IdToToken(100000), "");
}

TEST(ByteLevelDecode, AddedTokensDecodeToTheirText) {
  const Tokenizer& tok = V4Tokenizer();
  const Ids ids = tok.Encode("<｜User｜>hi<think>x</think>");
  EXPECT_EQ(tok.Decode(ids), "<｜User｜>hi<think>x</think>");
  EXPECT_EQ(tok.Decode(Ids{0, 1}), "<｜begin▁of▁sentence｜><｜end▁of▁sentence｜>");
  EXPECT_EQ(tok.Decode(Ids{0, 1}, /*skip_special_tokens=*/true), "");
}

TEST(IncrementalDetokenizer, EmojiCjkAndMixedText) {
  const Tokenizer& tok = V4Tokenizer();
  for (const char* text : {"👨‍👩‍👧‍👦 你好，世界！ こんにちは 🫨🇨🇳", "안녕하세요 😀😂 mixed ТЕКСТ ☕",
                           "𠀀𠀁 ٣٤٥ e\u0301 <think>思考</think>", "<｜User｜>🫠<｜Assistant｜>"}) {
    const Ids ids = tok.Encode(text);
    ASSERT_EQ(tok.Decode(ids), text);
    ExpectStreamingMatchesDecode(tok, ids, false);
    ExpectStreamingMatchesDecode(tok, ids, true);
  }
}

TEST(IncrementalDetokenizer, SingleByteTokensOfMultiByteCharacters) {
  const Tokenizer& tok = V4Tokenizer();
  auto bytes = [&](std::initializer_list<unsigned char> list) {
    Ids ids;
    for (unsigned char b : list) ids.push_back(ByteToken(tok, b));
    return ids;
  };
  // 😀 = F0 9F 98 80 and 你 = E4 BD A0, one token per byte, then broken sequences.
  const Ids emoji_bytes = bytes({0xF0, 0x9F, 0x98, 0x80, 0xE4, 0xBD, 0xA0, 'a'});
  EXPECT_EQ(tok.Decode(emoji_bytes), "😀你a");
  ExpectStreamingMatchesDecode(tok, emoji_bytes, false);
  const Ids broken = bytes({0xF0, 0x9F, 'x', 0xE4, 0xBD, 0xE4, 0xBD, 0xA0, 0x80, 0xC0, 0xF0, 0x9F});
  ExpectStreamingMatchesDecode(tok, broken, false);
  Ids with_special = bytes({0xE4, 0xBD});
  with_special.push_back(0);  // BOS (special) between the bytes of one character
  with_special.push_back(ByteToken(tok, 0xA0));
  ExpectStreamingMatchesDecode(tok, with_special, false);
  ExpectStreamingMatchesDecode(tok, with_special, true);
  EXPECT_EQ(tok.Decode(with_special, true), "你");
}

TEST(IncrementalDetokenizer, HoldsBackOnlyIncompleteCharacters) {
  const Tokenizer& tok = V4Tokenizer();
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.Append(ByteToken(tok, 0xE4)), "");
  EXPECT_EQ(detok.Append(ByteToken(tok, 0xBD)), "");
  EXPECT_EQ(detok.Append(ByteToken(tok, 0xA0)), "你");
  EXPECT_EQ(detok.Append(ByteToken(tok, 0xE4)), "");
  EXPECT_EQ(detok.Append(ByteToken(tok, 'a')), "\uFFFDa");  // known invalid: emitted at once
  EXPECT_EQ(detok.Append(ByteToken(tok, 0xF0)), "");
  EXPECT_EQ(detok.Flush(), "\uFFFD");
  EXPECT_EQ(detok.Flush(), "");
  EXPECT_EQ(detok.Append(ByteToken(tok, 'b')), "b");  // a new stream after Flush
}

}  // namespace
}  // namespace deepinfer::testing
