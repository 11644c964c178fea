// Internals of deepinfer::Tokenizer: the loaded components and the per-id tables decoding uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace deepinfer::tokenizer_internal {

class TokenizerImpl {
 public:
  TokenizerImpl(std::unique_ptr<BpeModel> model, AddedVocabulary added,
                std::unique_ptr<PreTokenizer> pre_tokenizer);

  std::vector<int32_t> Encode(std::string_view text) const;
  // Appends the decoder's bytes for `id` (ByteLevel: the token's characters mapped back to bytes,
  // or its UTF-8 if one of them is not a ByteLevel character). Returns false, appending nothing,
  // for unknown ids and, with skip_special, special tokens.
  bool AppendDecodedBytes(int32_t id, bool skip_special, std::string& out) const {
    if (id < 0 || static_cast<size_t>(id) >= known_.size() || !known_[id]) return false;
    if (skip_special && special_[id]) return false;
    out += decoded_[id];
    return true;
  }

  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::string IdToToken(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(known_.size()); }
  bool IsSpecial(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
  }

 private:
  void EncodeSegment(std::string_view segment, std::vector<int32_t>& ids) const;

  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<std::string> id_to_token_;
  std::vector<std::string> decoded_;
  std::vector<bool> known_;
  std::vector<bool> special_;
};

// Parses tokenizer.json content into a TokenizerImpl. Throws deepinfer::Error whose message
// starts with `origin` and names the offending key.
std::unique_ptr<TokenizerImpl> LoadTokenizerJson(std::string_view json, const std::string& origin);

// The ByteLevel decoder's bytes for one token string.
std::string ByteLevelDecode(std::string_view token);

}  // namespace deepinfer::tokenizer_internal
