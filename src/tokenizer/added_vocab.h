// Added tokens of tokenizer.json ("added_tokens"): their ids, and their extraction from raw text
// before pre-tokenization, replaying the reference library's AddedVocabulary (id assignment,
// leftmost-longest matching, single_word / lstrip / rstrip, normalized tokens matched second).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe.h"

namespace deepinfer::tokenizer_internal {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

// A piece of the input after added-token extraction: an added token (id >= 0) or text to
// pre-tokenize (id < 0). Offsets index the input; pieces are in order but, as in the reference,
// may overlap when an rstrip runs into the next match.
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Adds one "added_tokens" entry, in file order, assigning its id as the reference does: the id
  // of the same content already known (added or in `model_vocab`), else the next free id.
  void Add(const AddedToken& token, const TokenMap& model_vocab);
  // Builds the matchers; call once after the last Add.
  void Build(const TokenMap& model_vocab);

  // Splits `text` (valid UTF-8) into segments. The normalizer is the identity (the only one
  // supported), so normalized tokens are matched in the text left between non-normalized ones.
  void Split(std::string_view text, std::vector<TextSegment>& out) const;

  std::optional<int32_t> TokenToId(std::string_view content) const;
  // The added token that owns `id`, or nullptr.
  const AddedToken* TokenOfId(int32_t id) const;
  bool IsSpecialContent(std::string_view content) const {
    return special_contents_.count(std::string(content)) != 0;
  }
  // Highest added id, or -1 if none.
  int32_t max_id() const { return max_id_; }
  bool empty() const { return by_content_.empty(); }

 private:
  // Byte trie over the contents of one matching set (non-normalized or normalized tokens).
  class Matcher {
   public:
    void Insert(std::string_view content, int32_t id);
    bool empty() const { return nodes_.size() <= 1; }
    // Leftmost-longest, non-overlapping matches in `text`: appends (begin, end, id).
    void FindAll(std::string_view text, std::vector<TextSegment>& out) const;

   private:
    struct Node {
      std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
      int32_t id = -1;                                     // >= 0: a content ends here
    };
    uint32_t Child(uint32_t node, uint8_t byte) const;
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
  };

  // The reference's find_matches: applies the flags to `matcher`'s matches in `sentence`
  // (offsets relative to `sentence`, shifted by `base` in the output).
  void SplitWith(const Matcher& matcher, std::string_view sentence, size_t base,
                 std::vector<TextSegment>& out) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> by_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::vector<AddedToken> special_tokens_;  // in the order they were added
  std::vector<AddedToken> added_tokens_;    // the non-special ones, in order
  std::unordered_set<std::string> special_contents_;
  int32_t max_id_ = -1;
  Matcher raw_matcher_;
  Matcher normalized_matcher_;
};

}  // namespace deepinfer::tokenizer_internal
