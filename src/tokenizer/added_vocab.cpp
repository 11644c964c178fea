#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer_internal {
namespace {

// First code point of `text` (valid UTF-8, non-empty).
char32_t FirstChar(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  return DecodeValid(p, SequenceLengthOfLead(p[0]));
}

// Start offset of the last character of `text` (valid UTF-8, non-empty).
size_t LastCharStart(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool IsWordChar(char32_t cp) { return InRanges(kAddedTokenWordRanges, cp); }
bool IsSpaceChar(char32_t cp) { return InRanges(kAddedTokenSpaceRanges, cp); }

bool EndsWithWord(std::string_view text) {
  return !text.empty() && IsWordChar(FirstChar(text.substr(LastCharStart(text))));
}

bool StartsWithWord(std::string_view text) { return !text.empty() && IsWordChar(FirstChar(text)); }

// Offset where the run of trailing whitespace of `text` starts (text.size() if none).
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = LastCharStart(text.substr(0, end));
    if (!IsSpaceChar(FirstChar(text.substr(start)))) break;
    end = start;
  }
  return end;
}

// Length of the run of leading whitespace of `text`.
size_t LeadingSpaceLength(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = SequenceLengthOfLead(static_cast<unsigned char>(text[i]));
    if (!IsSpaceChar(FirstChar(text.substr(i)))) break;
    i += n;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Add(const AddedToken& token, const TokenMap& model_vocab) {
  if (token.special && !token.content.empty() && special_contents_.insert(token.content).second) {
    special_tokens_.push_back(token);
  }
  if (token.content.empty()) return;
  for (const auto& [id, existing] : by_id_) {
    if (existing == token) return;  // exactly this token is already known
  }
  int32_t id = -1;
  if (auto known = TokenToId(token.content)) {
    id = *known;
  } else if (auto in_model = model_vocab.find(token.content); in_model != model_vocab.end()) {
    id = in_model->second;
  } else {
    const auto model_size = static_cast<int64_t>(model_vocab.size());
    const int64_t max_added = max_id_;
    if (max_added < 0) {
      id = static_cast<int32_t>(model_size);
    } else {
      id = static_cast<int32_t>(max_added >= model_size || model_size == 0 ? max_added + 1
                                                                           : model_size);
    }
  }
  by_content_[token.content] = id;
  by_id_[id] = token;
  max_id_ = std::max(max_id_, id);
  if (special_contents_.count(token.content) == 0) added_tokens_.push_back(token);
}

void AddedVocabulary::Build(const TokenMap& model_vocab) {
  auto add_all = [&](const std::vector<AddedToken>& tokens) {
    for (const AddedToken& token : tokens) {
      std::optional<int32_t> id = TokenToId(token.content);
      if (!id) {
        auto it = model_vocab.find(token.content);
        if (it == model_vocab.end()) continue;
        id = it->second;
      }
      (token.normalized ? normalized_matcher_ : raw_matcher_).Insert(token.content, *id);
    }
  };
  add_all(special_tokens_);
  add_all(added_tokens_);
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::TokenOfId(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void AddedVocabulary::Matcher::Insert(std::string_view content, int32_t id) {
  uint32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    uint32_t child = Child(node, byte);
    if (child == 0) {
      child = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[node].children;
      auto pos = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, 0u));
      children.insert(pos, {byte, child});
    }
    node = child;
  }
  if (nodes_[node].id < 0) nodes_[node].id = id;  // duplicates share the content, hence the id
  first_byte_[static_cast<uint8_t>(content[0])] = true;
}

uint32_t AddedVocabulary::Matcher::Child(uint32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, 0u));
  return it != children.end() && it->first == byte ? it->second : 0;
}

void AddedVocabulary::Matcher::FindAll(std::string_view text, std::vector<TextSegment>& out) const {
  if (empty()) return;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    uint32_t node = 0;
    size_t best_end = 0;
    int32_t best_id = -1;
    for (size_t i = pos; i < text.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(text[i]));
      if (node == 0) break;
      if (nodes_[node].id >= 0) {
        best_end = i + 1;
        best_id = nodes_[node].id;
      }
    }
    if (best_id < 0) {
      ++pos;
      continue;
    }
    out.push_back(TextSegment{pos, best_end, best_id});
    pos = best_end;
  }
}

void AddedVocabulary::SplitWith(const Matcher& matcher, std::string_view sentence, size_t base,
                                std::vector<TextSegment>& out) const {
  std::vector<TextSegment> matches;
  matcher.FindAll(sentence, matches);
  size_t start_offset = 0;
  for (TextSegment m : matches) {
    const AddedToken& token = by_id_.at(m.id);
    if (token.single_word) {
      const bool start_space = m.begin == 0 || !EndsWithWord(sentence.substr(0, m.begin));
      const bool stop_space =
          m.end == sentence.size() || !StartsWithWord(sentence.substr(m.end));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      m.begin = std::max(TrailingSpaceStart(sentence.substr(0, m.begin)), start_offset);
    }
    if (token.rstrip) m.end += LeadingSpaceLength(sentence.substr(m.end));
    if (start_offset < m.begin) out.push_back(TextSegment{base + start_offset, base + m.begin, -1});
    out.push_back(TextSegment{base + m.begin, base + m.end, m.id});
    start_offset = m.end;
  }
  if (start_offset != sentence.size()) {
    out.push_back(TextSegment{base + start_offset, base + sentence.size(), -1});
  }
}

void AddedVocabulary::Split(std::string_view text, std::vector<TextSegment>& out) const {
  if (text.empty()) return;
  if (raw_matcher_.empty() && normalized_matcher_.empty()) {
    out.push_back(TextSegment{0, text.size(), -1});
    return;
  }
  std::vector<TextSegment> first;
  SplitWith(raw_matcher_, text, 0, first);
  for (const TextSegment& segment : first) {
    if (segment.id >= 0 || normalized_matcher_.empty()) {
      out.push_back(segment);
      continue;
    }
    SplitWith(normalized_matcher_, text.substr(segment.begin, segment.end - segment.begin),
              segment.begin, out);
  }
}

}  // namespace deepinfer::tokenizer_internal
