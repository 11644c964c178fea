#include "tokenizer/pre_tokenizer.h"

#include <utility>

namespace deepinfer::tokenizer_internal {
namespace {

// The GPT-2 pattern the reference's ByteLevel pre-tokenizer uses when use_regex is true.
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Segment {
  Span span;
  bool is_match;
};

// Cuts `piece` by `regex` with `behavior`, as the reference's NormalizedString::split does:
// matches and the gaps between them cover the piece; the behavior decides what is kept and what
// is merged; empty results are dropped.
void SplitPiece(const Regex& regex, SplitBehavior behavior, bool invert, std::string_view piece,
                std::vector<Span>& matches, std::vector<std::string_view>& out) {
  auto emit = [&](Span s) {
    if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
  };
  matches.clear();
  regex.FindAll(piece, matches);
  if (behavior == SplitBehavior::kIsolated) {  // hot path: every match and gap, in order
    size_t prev = 0;
    for (const Span& m : matches) {
      emit({prev, m.begin});
      emit(m);
      prev = m.end;
    }
    emit({prev, piece.size()});
    return;
  }
  std::vector<Segment> segments;
  segments.reserve(2 * matches.size() + 1);
  size_t prev = 0;
  for (const Span& m : matches) {
    if (prev != m.begin) segments.push_back({{prev, m.begin}, invert});
    segments.push_back({m, !invert});
    prev = m.end;
  }
  if (prev != piece.size()) segments.push_back({{prev, piece.size()}, invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:  // handled above
      return;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) emit(s.span);
      }
      return;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.span.end;
        } else {
          kept.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.span.end;
        } else {
          kept.push_back(s.span);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->span.begin;
        } else {
          kept.push_back(it->span);
        }
        previous_match = it->is_match;
      }
      for (auto it = kept.rbegin(); it != kept.rend(); ++it) emit(*it);
      return;
  }
  for (const Span& s : kept) emit(s);
}

}  // namespace

void PreTokenizer::SetByteLevel(bool add_prefix_space, bool use_regex, const std::string& what) {
  byte_level_ = true;
  add_prefix_space_ = add_prefix_space;
  if (use_regex) byte_level_regex_ = std::make_unique<Regex>(kByteLevelPattern, false, what);
}

void PreTokenizer::ApplySplit(const SplitStep& step, std::string_view piece,
                              std::vector<Span>& matches, std::vector<std::string_view>& out) {
  SplitPiece(*step.regex, step.behavior, step.invert, piece, matches, out);
}

void PreTokenizer::Run(std::string_view segment, PreTokenizeScratch& scratch,
                       std::vector<std::string_view>& out) const {
  std::vector<std::string_view>& current = scratch.current;
  std::vector<std::string_view>& next = scratch.next;
  current.clear();
  current.push_back(segment);
  for (const SplitStep& step : splits_) {
    next.clear();
    for (std::string_view piece : current) ApplySplit(step, piece, scratch.matches, next);
    std::swap(current, next);
  }
  if (byte_level_ && (add_prefix_space_ || byte_level_regex_ != nullptr)) {
    next.clear();
    for (std::string_view piece : current) {
      if (add_prefix_space_ && !piece.starts_with(' ')) {
        std::string& prefixed = scratch.owned.emplace_back();
        prefixed.reserve(piece.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(piece);
        piece = prefixed;
      }
      if (byte_level_regex_ != nullptr) {
        SplitPiece(*byte_level_regex_, SplitBehavior::kIsolated, false, piece, scratch.matches,
                   next);
      } else {
        next.push_back(piece);
      }
    }
    std::swap(current, next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace deepinfer::tokenizer_internal
