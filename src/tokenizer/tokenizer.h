// Hugging Face tokenizer.json tokenizers (byte-level BPE, as DeepSeek-V4 ships), producing the same
// ids as the `tokenizers` library's encode(text, add_special_tokens=False) and the same text as
// its decode(ids, skip_special_tokens).
//
// Supported tokenizer.json content (anything else is rejected at load with an Error naming the
// file and key): model BPE (merges as "a b" strings or ["a", "b"] pairs; unk_token, fuse_unk,
// byte_fallback, ignore_merges); added_tokens with single_word / lstrip / rstrip / normalized /
// special; normalizer null or an (empty) Sequence; pre_tokenizer null, Split(Regex|String,
// behavior, invert), ByteLevel(add_prefix_space, use_regex) as the last step, or a Sequence of
// those; decoder ByteLevel; truncation and padding null. post_processor is ignored (no special
// tokens are ever added).
//
// Invalid UTF-8 input (which the reference cannot receive: Python strings are always valid) is
// encoded as its lossy conversion: every maximal invalid subpart becomes U+FFFD, as
// bytes.decode("utf-8", "replace") does, so Encode(bytes) == HF encode(bytes.decode(errors=
// "replace")) and Encode never fails on any input.
//
// Thread safety: a Tokenizer is immutable after loading except for an internal, locked word
// cache; all const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

namespace tokenizer_internal {
class TokenizerImpl;
}

class Tokenizer {
 public:
  // Throws deepinfer::Error naming the file and what is wrong (unreadable, invalid JSON, missing
  // or malformed key, unsupported component).
  static std::unique_ptr<Tokenizer> FromFile(const std::string& tokenizer_json_path);
  // As FromFile, for tokenizer.json content; `origin` names it in error messages.
  static std::unique_ptr<Tokenizer> FromJson(std::string_view json, const std::string& origin);
  ~Tokenizer();

  // Ids of `text` (any bytes); no BOS/EOS added; added and special tokens in the text are
  // recognised.
  std::vector<int32_t> Encode(std::string_view text) const;
  // Text of `ids` (valid UTF-8: undecodable bytes become U+FFFD). Unknown ids are skipped; with
  // skip_special_tokens, so are special tokens.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  // Id of a token string (an added token's content, or a vocabulary entry in its byte-level
  // form, e.g. "Ġthe").
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Token string of `id`; empty if unknown.
  std::string IdToToken(int32_t id) const;
  // Largest id + 1 (vocabulary and added tokens).
  int32_t vocab_size() const;
  // Whether `id` is an added token marked special.
  bool IsSpecial(int32_t id) const;

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::unique_ptr<tokenizer_internal::TokenizerImpl> impl);

  std::unique_ptr<tokenizer_internal::TokenizerImpl> impl_;
};

// Streaming detokenizer: Append returns the newly printable text; deltas never split a UTF-8
// character, and their concatenation followed by Flush() equals Decode(all ids) with the same
// skip_special_tokens. Bytes that may still become a character are held back until a later id
// completes them or Flush() (which turns them into U+FFFD) ends the stream; after Flush() the
// object starts a new stream. Holds a reference to `tokenizer`, which must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string Append(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // decoded bytes not yet returned: a truncated UTF-8 sequence, <= 3 bytes
};

}  // namespace deepinfer
