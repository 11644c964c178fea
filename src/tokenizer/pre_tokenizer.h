// Pre-tokenization: cuts a text segment (between added tokens) into the pieces the BPE model
// encodes independently, as the reference library's Sequence / Split / ByteLevel pre-tokenizers
// do. Each step runs on every piece of the previous step separately, so a regex never sees (or
// looks around into) text outside its piece.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace deepinfer::tokenizer_internal {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

// Reusable buffers of one Run call; also owns pieces that are not substrings of the input (those
// with a prefix space added by ByteLevel). Not shared between threads.
struct PreTokenizeScratch {
  std::vector<std::string_view> current;
  std::vector<std::string_view> next;
  std::vector<Span> matches;
  std::deque<std::string> owned;
};

class PreTokenizer {
 public:
  void AddSplit(SplitStep step) { splits_.push_back(std::move(step)); }
  // ByteLevel(add_prefix_space, use_regex): must be the last step. The byte-to-character mapping
  // itself is left to the model, which works on raw bytes.
  void SetByteLevel(bool add_prefix_space, bool use_regex, const std::string& what);
  bool byte_level() const { return byte_level_; }

  // Appends the pieces of `segment` (non-empty, valid UTF-8) to `out`. Pieces are views into
  // `segment` or into scratch.owned; they stay valid until scratch.owned is cleared.
  void Run(std::string_view segment, PreTokenizeScratch& scratch,
           std::vector<std::string_view>& out) const;

 private:
  static void ApplySplit(const SplitStep& step, std::string_view piece, std::vector<Span>& matches,
                         std::vector<std::string_view>& out);

  std::vector<SplitStep> splits_;
  bool byte_level_ = false;
  bool add_prefix_space_ = false;
  std::unique_ptr<Regex> byte_level_regex_;  // set when ByteLevel.use_regex
};

}  // namespace deepinfer::tokenizer_internal
