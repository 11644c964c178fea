#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace tokenizer_internal {
namespace {

// Inverse of ByteLevelChar for the 256 characters of the table; -1 for any other code point.
int ByteOfByteLevelChar(char32_t cp) {
  static const std::vector<int> table = [] {
    std::vector<int> t(0x200, -1);
    for (unsigned b = 0; b < 256; ++b) t[ByteLevelChar(static_cast<uint8_t>(b))] = static_cast<int>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace

std::string ByteLevelDecode(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const size_t n = ValidSequenceLength(token, i);
    const int byte =
        n == 0 ? -1
               : ByteOfByteLevelChar(DecodeValid(reinterpret_cast<const unsigned char*>(token.data()) + i, n));
    if (byte < 0) return std::string(token);  // not a byte-level token: its own UTF-8
    bytes.push_back(static_cast<char>(byte));
    i += n;
  }
  return bytes;
}

TokenizerImpl::TokenizerImpl(std::unique_ptr<BpeModel> model, AddedVocabulary added,
                             std::unique_ptr<PreTokenizer> pre_tokenizer)
    : model_(std::move(model)), added_(std::move(added)), pre_tokenizer_(std::move(pre_tokenizer)) {
  int32_t max_id = added_.max_id();
  for (const auto& [token, id] : model_->vocab()) max_id = std::max(max_id, id);
  const size_t size = static_cast<size_t>(max_id + 1);
  id_to_token_.resize(size);
  decoded_.resize(size);
  known_.assign(size, false);
  special_.assign(size, false);
  for (const auto& [token, id] : model_->vocab()) {
    id_to_token_[id] = token;
    known_[id] = true;
  }
  for (size_t id = 0; id < size; ++id) {
    if (const AddedToken* added_token = added_.TokenOfId(static_cast<int32_t>(id))) {
      id_to_token_[id] = added_token->content;
      known_[id] = true;
    }
    if (!known_[id]) continue;
    decoded_[id] = ByteLevelDecode(id_to_token_[id]);
    special_[id] = added_.IsSpecialContent(id_to_token_[id]);
  }
}

void TokenizerImpl::EncodeSegment(std::string_view segment, std::vector<int32_t>& ids) const {
  thread_local PreTokenizeScratch scratch;
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  scratch.owned.clear();
  pre_tokenizer_->Run(segment, scratch, pieces);
  model_->EncodePieces(pieces, ids);
}

std::vector<int32_t> TokenizerImpl::Encode(std::string_view text) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = LossyUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSegment> segments;
  added_.Split(text, segments);
  for (const TextSegment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else if (segment.end > segment.begin) {
      EncodeSegment(text.substr(segment.begin, segment.end - segment.begin), ids);
    }
  }
  return ids;
}

std::optional<int32_t> TokenizerImpl::TokenToId(std::string_view token) const {
  if (auto id = added_.TokenToId(token)) return id;
  auto it = model_->vocab().find(token);
  if (it == model_->vocab().end()) return std::nullopt;
  return it->second;
}

std::string TokenizerImpl::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return {};
  return id_to_token_[id];
}

}  // namespace tokenizer_internal

Tokenizer::Tokenizer(std::unique_ptr<tokenizer_internal::TokenizerImpl> impl)
    : impl_(std::move(impl)) {}

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::FromFile(const std::string& tokenizer_json_path) {
  std::ifstream file(tokenizer_json_path, std::ios::binary);
  if (!file) DI_THROW("tokenizer.json '{}': cannot open file", tokenizer_json_path);
  std::ostringstream content;
  content << file.rdbuf();
  if (file.bad()) DI_THROW("tokenizer.json '{}': read error", tokenizer_json_path);
  return FromJson(content.str(), tokenizer_json_path);
}

std::unique_ptr<Tokenizer> Tokenizer::FromJson(std::string_view json, const std::string& origin) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(tokenizer_internal::LoadTokenizerJson(json, origin)));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const { return impl_->Encode(text); }

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) impl_->AppendDecodedBytes(id, skip_special_tokens, bytes);
  return tokenizer_internal::LossyUtf8(bytes);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  return impl_->TokenToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const { return impl_->IdToToken(id); }

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }

bool Tokenizer::IsSpecial(int32_t id) const { return impl_->IsSpecial(id); }

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Append(int32_t id) {
  if (!tokenizer_.impl_->AppendDecodedBytes(id, skip_special_tokens_, pending_)) return {};
  std::string text;
  const size_t consumed =
      tokenizer_internal::AppendLossyUtf8(pending_, /*keep_incomplete_tail=*/true, text);
  pending_.erase(0, consumed);
  return text;
}

std::string IncrementalDetokenizer::Flush() {
  std::string text = tokenizer_internal::LossyUtf8(pending_);
  pending_.clear();
  return text;
}

}  // namespace deepinfer
