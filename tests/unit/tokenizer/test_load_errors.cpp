// Load errors: a broken or unsupported tokenizer.json is rejected with a message that names the
// file and the offending key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer_test_util.h"

namespace deepinfer::testing {
namespace {

using nlohmann::json;

// Loads `content` and returns the error message (fails the test if it loads).
std::string LoadError(const std::string& content, const std::string& origin = "bad.json") {
  try {
    Tokenizer::FromJson(content, origin);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "loaded: " << content.substr(0, 200);
  return {};
}

void ExpectMentions(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

json Valid() { return ByteLevelSpec({{"a", "b"}}); }

TEST(LoadErrors, MissingFileNamesThePath) {
  try {
    Tokenizer::FromFile("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const Error& e) {
    ExpectMentions(e.what(), {"/nonexistent/dir/tokenizer.json", "cannot open"});
  }
}

TEST(LoadErrors, InvalidJson) {
  ExpectMentions(LoadError("{\"model\": {\"vocab\": ", "x/tokenizer.json"),
                 {"x/tokenizer.json", "invalid JSON"});
  ExpectMentions(LoadError("[1, 2]"), {"bad.json", "expected an object"});
}

TEST(LoadErrors, MissingOrMalformedKeys) {
  json spec = Valid();
  spec.erase("model");
  ExpectMentions(LoadError(spec.dump()), {"bad.json", "missing key 'model'"});

  spec = Valid();
  spec["model"]["merges"] = {"abc"};
  ExpectMentions(LoadError(spec.dump()), {"model.merges[0]", "exactly one space"});

  spec = Valid();
  spec["model"]["merges"] = {"a qq"};
  ExpectMentions(LoadError(spec.dump()), {"merges[0]", "'qq'", "not in model.vocab"});

  spec = Valid();
  spec["model"]["vocab"]["a"] = -3;
  ExpectMentions(LoadError(spec.dump()), {"model.vocab[\"a\"]", "token id"});

  spec = Valid();
  spec["added_tokens"] = {{{"id", 300}, {"special", true}}};
  ExpectMentions(LoadError(spec.dump()), {"added_tokens[0]", "missing key 'content'"});

  spec = Valid();
  spec["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", "yes"}}};
  ExpectMentions(LoadError(spec.dump()), {"added_tokens[0].special", "true or false"});
}

TEST(LoadErrors, UnsupportedComponentsAreNamed) {
  json spec = Valid();
  spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}};
  ExpectMentions(LoadError(spec.dump()), {"normalizer.normalizers[0]", "'NFKC' is not supported"});

  spec = Valid();
  spec["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Digits"}}, {{"type", "Whitespace"}}}}};
  ExpectMentions(LoadError(spec.dump()), {"pre_tokenizer.pretokenizers[0].type", "'Digits'"});

  spec = Valid();
  spec["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Split"},
                                                   {"pattern", {{"Regex", "a"}}},
                                                   {"behavior", "Isolated"}}}}};
  ExpectMentions(LoadError(spec.dump()), {"pretokenizers[1]", "only the last"});

  spec = Valid();
  spec["decoder"] = {{"type", "WordPiece"}};
  ExpectMentions(LoadError(spec.dump()), {"decoder.type", "'WordPiece' is not supported"});

  spec = Valid();
  spec["model"]["type"] = "Unigram";
  ExpectMentions(LoadError(spec.dump()), {"model.type", "'Unigram' is not supported"});

  spec = Valid();
  spec["model"]["dropout"] = 0.1;
  ExpectMentions(LoadError(spec.dump()), {"model.dropout"});

  spec = Valid();
  spec["truncation"] = {{"max_length", 8}};
  ExpectMentions(LoadError(spec.dump()), {"truncation", "must be null"});
}

TEST(LoadErrors, BadRegexNamesThePattern) {
  json spec = Valid();
  spec["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}},
                           {"behavior", "Isolated"}, {"invert", false}};
  ExpectMentions(LoadError(spec.dump()), {"bad.json", "pre_tokenizer.pattern", "(ab",
                                          "does not compile"});
  spec["pre_tokenizer"]["pattern"]["Regex"] = "[[:alpha:]]";
  ExpectMentions(LoadError(spec.dump()), {"pre_tokenizer.pattern", "POSIX bracket"});
  spec["pre_tokenizer"]["behavior"] = "Sideways";
  ExpectMentions(LoadError(spec.dump()), {"pre_tokenizer.behavior", "'Sideways'"});
}

TEST(LoadErrors, CorruptedRealTokenizerFile) {
  std::ifstream in(V4TokenizerPath(), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string content = buffer.str();
  ASSERT_GT(content.size(), 1000000u);
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_tokenizer_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "truncated_tokenizer.json").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << content.substr(0, content.size() / 2);
  }
  try {
    Tokenizer::FromFile(path);
    ADD_FAILURE() << "loaded a truncated file";
  } catch (const Error& e) {
    ExpectMentions(e.what(), {"truncated_tokenizer.json", "invalid JSON"});
  }
  std::string renamed = content;
  const size_t at = renamed.find("\"merges\"");
  ASSERT_NE(at, std::string::npos);
  renamed.replace(at, 8, "\"mergez\"");
  ExpectMentions(LoadError(renamed, "renamed.json"), {"renamed.json", "missing key 'merges'"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::testing
