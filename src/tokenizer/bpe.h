// The BPE model of tokenizer.json ("model": {"type": "BPE"}), encoding one pre-tokenized piece at
// a time exactly as the reference library's BPE::tokenize does (same merge order, same handling
// of characters missing from the vocabulary), with a word cache.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer::tokenizer_internal {

// Hash for string keys that also accepts string_view lookups.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `merges` in rank order (rank = index; a later duplicate pair overrides an earlier one, as in
  // the reference). `byte_level`: pieces are raw bytes and each byte is the vocabulary symbol of
  // its ByteLevel character; otherwise each UTF-8 character is a symbol. Throws deepinfer::Error
  // (prefixed with `what`) if a merge names a token missing from the vocabulary.
  BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, bool byte_level, const std::string& what);
  ~BpeModel();

  // Appends the ids of `piece` (valid UTF-8 unless byte_level). Thread-safe.
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;
  // Encode for each of `pieces`, in order (faster than one call per piece).
  void EncodePieces(std::span<const std::string_view> pieces, std::vector<int32_t>& out) const;

  const TokenMap& vocab() const { return vocab_; }

 private:
  struct MergeEntry {
    uint64_t pair;  // kEmptyPair marks a free slot
    uint32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // 0: merged into its left neighbour
  };
  class WordCache;

  const MergeEntry* FindMerge(int32_t left, int32_t right) const;
  void InsertMerge(int32_t left, int32_t right, uint32_t rank, int32_t new_id);
  // Initial symbols of `piece` (vocabulary lookup, byte fallback, unknown token).
  void InitialSymbols(std::string_view piece, std::vector<Symbol>& symbols) const;
  void AddSymbolsOfChar(std::string_view symbol, uint32_t byte_len, std::vector<Symbol>& symbols,
                        std::optional<std::pair<int32_t, uint32_t>>& unk) const;
  // Applies the merges to `symbols` (the reference's Word::merge_all) and appends the ids.
  void MergeAll(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const;
  // `hash`: XXH3_64bits of the piece, the word-cache key.
  void EncodeWithHash(std::string_view piece, uint64_t hash, std::vector<int32_t>& out) const;

  TokenMap vocab_;
  BpeOptions options_;
  bool byte_level_;
  std::optional<int32_t> unk_id_;
  bool vocab_has_duplicate_ids_ = false;
  std::vector<MergeEntry> merge_table_;  // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;
  std::vector<uint64_t> merge_filter_;  // one bit per hash bucket that holds some merge
  std::array<int32_t, 256> byte_symbol_id_{};       // byte-level: id of each byte's character
  std::array<std::string, 256> byte_symbol_text_;   // byte-level: each byte's character, UTF-8
  std::array<int32_t, 256> fallback_id_{};          // id of "<0xXX>" or -1
  std::unique_ptr<WordCache> cache_;
};

// The character the reference's ByteLevel pre-tokenizer maps `byte` to (GPT-2's table).
char32_t ByteLevelChar(uint8_t byte);

}  // namespace deepinfer::tokenizer_internal
