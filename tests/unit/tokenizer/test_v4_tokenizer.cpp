// The real DeepSeek-V4 tokenizer.json: special tokens, lossless round trips and streaming over the
// repository corpus, the invalid-UTF-8 policy, and concurrent use. (Ids against the reference
// library: compare_hf.py.)
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer_test_util.h"

namespace deepinfer::testing {
namespace {

using Ids = std::vector<int32_t>;

std::vector<std::string> CorpusLines(const std::string& name) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/tokenizer/" + name, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(buffer, line, '\n')) lines.push_back(line);
  DI_CHECK(!lines.empty(), "empty corpus {}", name);
  return lines;
}

TEST(V4Tokenizer, SpecialTokens) {
  const Tokenizer& tok = V4Tokenizer();
  EXPECT_EQ(tok.TokenToId("<think>"), 128821);
  EXPECT_EQ(tok.TokenToId("</think>"), 128822);
  EXPECT_EQ(tok.TokenToId("｜DSML｜"), 128825);
  EXPECT_EQ(tok.IdToToken(128821), "<think>");
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_TRUE(tok.IsSpecial(0));        // <｜begin▁of▁sentence｜>
  EXPECT_FALSE(tok.IsSpecial(128821));  // <think> is an added, non-special token
  EXPECT_EQ(tok.Encode("<think>"), (Ids{128821}));
  EXPECT_EQ(tok.Encode("｜DSML｜"), (Ids{128825}));
  const Ids ids = tok.Encode("a<think>b</think>");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], 128821);
  EXPECT_EQ(ids[3], 128822);
  EXPECT_EQ(tok.Encode(""), Ids{});
}

TEST(V4Tokenizer, CorpusRoundTripsAndStreams) {
  const Tokenizer& tok = V4Tokenizer();
  size_t num_ids = 0;
  for (const std::string& line : CorpusLines("corpus.txt")) {
    const Ids ids = tok.Encode(line);
    num_ids += ids.size();
    ASSERT_EQ(tok.Decode(ids), line);
    IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.Append(id);
    streamed += detok.Flush();
    ASSERT_EQ(streamed, line);
  }
  EXPECT_GT(num_ids, 100000u);
}

TEST(V4Tokenizer, InvalidUtf8IsEncodedAsReplacementCharacters) {
  const Tokenizer& tok = V4Tokenizer();
  for (const std::string& line : CorpusLines("invalid_utf8.txt")) {
    const Ids ids = tok.Encode(line);
    const std::string text = tok.Decode(ids);
    ASSERT_NE(text.find("\uFFFD"), std::string::npos);
    ASSERT_EQ(tok.Encode(text), ids);  // the ids are those of the repaired text
  }
  EXPECT_EQ(tok.Encode("\xC0\x80"), tok.Encode("\uFFFD\uFFFD"));
  EXPECT_EQ(tok.Encode("a\xE4\xBD"), tok.Encode("a\uFFFD"));
}

TEST(V4Tokenizer, ConcurrentEncodingMatchesSequential) {
  const Tokenizer& tok = V4Tokenizer();
  const std::vector<std::string> lines = CorpusLines("corpus.txt");
  std::vector<Ids> sequential;
  for (const std::string& line : lines) sequential.push_back(tok.Encode(line));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < lines.size(); i += 2) {
        if (tok.Encode(lines[i]) != sequential[i]) ++mismatches[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace deepinfer::testing
