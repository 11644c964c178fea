#include "tokenizer/bpe.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <span>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer_internal {
namespace {

constexpr uint64_t kEmptyPair = ~uint64_t{0};
// Bit filter over merge pairs (256 KiB, cache-resident): indexed by the top bits of the pair hash,
// the table slot by the low bits.
constexpr int kFilterBits = 21;
constexpr int kFilterShift = 64 - kFilterBits;

uint64_t PairKey(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

uint64_t MixPair(uint64_t key) {  // a cheap, well-distributed hash of a pair key
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return key;
}

// Pending merge of the symbol at `pos` with its right neighbour; ordered as the reference's heap:
// lowest rank first, then leftmost.
struct Merge {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
  int32_t left;   // the pair the entry was made for
  int32_t right;
};
struct MergeAfter {
  bool operator()(const Merge& a, const Merge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

size_t StringHash::operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }

char32_t ByteLevelChar(uint8_t byte) {
  // GPT-2: printable bytes map to themselves; the others, in byte order, to U+0100, U+0101, ...
  auto printable = [](unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  if (printable(byte)) return byte;
  char32_t n = 0;
  for (unsigned b = 0; b < byte; ++b) {
    if (!printable(b)) ++n;
  }
  return 0x100 + n;
}

// Word cache: piece bytes -> ids. Sharded by hash so concurrent Encode calls rarely contend; each
// shard is an open-addressing table whose keys and ids live in two arenas. A shard that reaches
// its load limit is cleared (its words are recomputed on demand).
class BpeModel::WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;

  WordCache() {
    for (Shard& shard : shards_) shard.slots = std::make_unique<Slot[]>(kNumSlots);
  }

  // Starts loading the slot where the lookup of `hash` begins (the slot arrays never move).
  void Prefetch(uint64_t hash) const {
    __builtin_prefetch(&shards_[hash >> kShardShift].slots[hash & kSlotMask]);
  }

  bool Lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) {
    Shard& shard = shards_[hash >> kShardShift];
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (size_t i = hash & kSlotMask;; i = (i + 1) & kSlotMask) {
      const Slot& slot = shard.slots[i];
      if (slot.num_ids == 0) return false;
      if (slot.hash == static_cast<uint32_t>(hash) && slot.key_len == word.size() &&
          std::memcmp(shard.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
        const int32_t* ids = shard.ids.data() + slot.ids_offset;
        out.insert(out.end(), ids, ids + slot.num_ids);
        return true;
      }
    }
  }

  void Insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t num_ids) {
    if (num_ids == 0 || num_ids > UINT16_MAX) return;
    Shard& shard = shards_[hash >> kShardShift];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.size >= kMaxEntries) shard.Reset();
    size_t i = hash & kSlotMask;
    while (shard.slots[i].num_ids != 0) {
      const Slot& slot = shard.slots[i];
      if (slot.hash == static_cast<uint32_t>(hash) && slot.key_len == word.size() &&
          std::memcmp(shard.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
        return;  // inserted meanwhile by another thread
      }
      i = (i + 1) & kSlotMask;
    }
    shard.slots[i] = Slot{static_cast<uint32_t>(hash), static_cast<uint32_t>(shard.keys.size()),
                          static_cast<uint32_t>(shard.ids.size()),
                          static_cast<uint16_t>(word.size()), static_cast<uint16_t>(num_ids)};
    shard.keys.append(word);
    shard.ids.insert(shard.ids.end(), ids, ids + num_ids);
    ++shard.size;
  }

 private:
  static constexpr int kShardBits = 4;
  static constexpr int kShardShift = 64 - kShardBits;
  static constexpr size_t kNumSlots = size_t{1} << 13;  // per shard
  static constexpr size_t kSlotMask = kNumSlots - 1;
  static constexpr size_t kMaxEntries = kNumSlots / 2;
  struct Slot {
    uint32_t hash;  // low 32 bits of the word's hash
    uint32_t key_offset;
    uint32_t ids_offset;
    uint16_t key_len;
    uint16_t num_ids;  // 0: free slot
  };
  struct Shard {
    void Reset() {
      std::fill(slots.get(), slots.get() + kNumSlots, Slot{});
      keys.clear();
      ids.clear();
      size = 0;
    }
    std::mutex mutex;
    std::unique_ptr<Slot[]> slots;  // kNumSlots, allocated once
    std::string keys;
    std::vector<int32_t> ids;
    size_t size = 0;
  };
  Shard shards_[size_t{1} << kShardBits];
};

BpeModel::BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, bool byte_level, const std::string& what)
    : vocab_(std::move(vocab)),
      options_(std::move(options)),
      byte_level_(byte_level),
      cache_(std::make_unique<WordCache>()) {
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
  merge_table_.assign(capacity, MergeEntry{kEmptyPair, 0, 0});
  merge_mask_ = capacity - 1;
  merge_filter_.assign((uint64_t{1} << kFilterBits) / 64, 0);
  auto lookup = [&](const std::string& token, size_t rank) {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      DI_THROW("{}: merges[{}] uses token '{}' which is not in model.vocab", what, rank, token);
    }
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t left_id = lookup(left, rank);
    const int32_t right_id = lookup(right, rank);
    const int32_t new_id = lookup(left + right, rank);
    InsertMerge(left_id, right_id, static_cast<uint32_t>(rank), new_id);
  }
  std::vector<int32_t> ids;
  ids.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  vocab_has_duplicate_ids_ = std::adjacent_find(ids.begin(), ids.end()) != ids.end();
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  for (unsigned b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteLevelChar(static_cast<uint8_t>(b)), text);
    auto it = vocab_.find(text);
    byte_symbol_id_[b] = it == vocab_.end() ? -1 : it->second;
    byte_symbol_text_[b] = std::move(text);
    auto fallback = vocab_.find(fmt::format("<0x{:02X}>", b));
    fallback_id_[b] = fallback == vocab_.end() ? -1 : fallback->second;
  }
}

BpeModel::~BpeModel() = default;

const BpeModel::MergeEntry* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = PairKey(left, right);
  const uint64_t mixed = MixPair(key);
  const uint64_t bit = mixed >> kFilterShift;  // most pairs have no merge: the small filter says so
  if ((merge_filter_[bit >> 6] & (uint64_t{1} << (bit & 63))) == 0) return nullptr;
  for (uint64_t slot = mixed & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeEntry& entry = merge_table_[slot];
    if (entry.pair == key) return &entry;
    if (entry.pair == kEmptyPair) return nullptr;
  }
}

void BpeModel::InsertMerge(int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
  const uint64_t key = PairKey(left, right);
  const uint64_t bit = MixPair(key) >> kFilterShift;
  merge_filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
  for (uint64_t slot = MixPair(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    MergeEntry& entry = merge_table_[slot];
    if (entry.pair == kEmptyPair || entry.pair == key) {
      entry = MergeEntry{key, rank, new_id};
      return;
    }
  }
}

void BpeModel::AddSymbolsOfChar(std::string_view symbol, uint32_t byte_len,
                                std::vector<Symbol>& symbols,
                                std::optional<std::pair<int32_t, uint32_t>>& unk) const {
  auto add = [&](int32_t id, uint32_t len) { symbols.push_back(Symbol{id, -1, -1, len}); };
  auto it = vocab_.find(symbol);
  if (it != vocab_.end()) {
    if (unk) add(unk->first, unk->second);
    unk.reset();
    add(it->second, byte_len);
    return;
  }
  if (options_.byte_fallback) {
    const bool all_present = std::all_of(symbol.begin(), symbol.end(), [&](char c) {
      return fallback_id_[static_cast<uint8_t>(c)] >= 0;
    });
    if (all_present) {  // as in the reference, a pending unknown token is not flushed first
      for (char c : symbol) add(fallback_id_[static_cast<uint8_t>(c)], 1);
      return;
    }
  }
  if (!options_.unk_token) return;  // no unknown token: the character is dropped
  DI_CHECK(unk_id_.has_value(), "BPE unk_token '{}' is not in the vocabulary",
           *options_.unk_token);
  if (unk && options_.fuse_unk) {
    unk->second += byte_len;
    return;
  }
  if (unk) add(unk->first, unk->second);
  unk = std::make_pair(*unk_id_, byte_len);
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<Symbol>& symbols) const {
  std::optional<std::pair<int32_t, uint32_t>> unk;
  if (byte_level_) {
    for (char c : piece) {
      const auto b = static_cast<uint8_t>(c);
      if (byte_symbol_id_[b] >= 0 && !unk) {
        symbols.push_back(Symbol{byte_symbol_id_[b], -1, -1, 1});
      } else {
        AddSymbolsOfChar(byte_symbol_text_[b], 1, symbols, unk);
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      const size_t n = SequenceLengthOfLead(static_cast<uint8_t>(piece[i]));
      AddSymbolsOfChar(piece.substr(i, n), static_cast<uint32_t>(n), symbols, unk);
      i += n;
    }
  }
  if (unk) symbols.push_back(Symbol{unk->first, -1, -1, unk->second});
  for (size_t i = 0; i < symbols.size(); ++i) {
    symbols[i].prev = static_cast<int32_t>(i) - 1;
    symbols[i].next = i + 1 < symbols.size() ? static_cast<int32_t>(i + 1) : -1;
  }
}

void BpeModel::MergeAll(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const {
  thread_local std::vector<Merge> queue;
  queue.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {  // independent lookups: overlap their misses
    __builtin_prefetch(&merge_table_[MixPair(PairKey(symbols[i].id, symbols[i + 1].id)) & merge_mask_]);
  }
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeEntry* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back(Merge{m->rank, static_cast<uint32_t>(i), m->new_id, symbols[i].id,
                            symbols[i + 1].id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), MergeAfter());
  auto push = [&](uint32_t pos, const MergeEntry* m) {
    queue.push_back(Merge{m->rank, pos, m->new_id, static_cast<int32_t>(m->pair >> 32),
                          static_cast<int32_t>(m->pair & 0xFFFFFFFF)});
    std::push_heap(queue.begin(), queue.end(), MergeAfter());
  };
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), MergeAfter());
    const Merge top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[top.pos];
    if (current.len == 0 || current.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(current.next)];
    if (current.id != top.left || right.id != top.right) {
      // The pair changed since the entry was made. The reference still merges if the new pair
      // yields the same token id; the new pair's text is longer than the old one, so that needs
      // two strings sharing an id, which only a vocabulary with duplicate ids has.
      if (!vocab_has_duplicate_ids_) continue;
      const MergeEntry* now = FindMerge(current.id, right.id);
      if (now == nullptr || now->new_id != top.new_id) continue;
    }
    current.id = top.new_id;
    current.len += right.len;
    current.next = right.next;
    right.len = 0;
    if (current.next >= 0) symbols[static_cast<size_t>(current.next)].prev = static_cast<int32_t>(top.pos);
    if (current.prev >= 0) {
      if (const MergeEntry* m = FindMerge(symbols[static_cast<size_t>(current.prev)].id, current.id)) {
        push(static_cast<uint32_t>(current.prev), m);
      }
    }
    if (current.next >= 0) {
      if (const MergeEntry* m = FindMerge(current.id, symbols[static_cast<size_t>(current.next)].id)) {
        push(top.pos, m);
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    std::string symbol_text;
    if (byte_level_) {
      for (char c : piece) symbol_text += byte_symbol_text_[static_cast<uint8_t>(c)];
    }
    auto it = vocab_.find(byte_level_ ? std::string_view(symbol_text) : piece);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  InitialSymbols(piece, symbols);
  MergeAll(symbols, out);
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  EncodeWithHash(piece, XXH3_64bits(piece.data(), piece.size()), out);
}

void BpeModel::EncodePieces(std::span<const std::string_view> pieces,
                            std::vector<int32_t>& out) const {
  // Hash every piece first so the word-cache slots of the next pieces can be loaded while the
  // current one is encoded.
  constexpr size_t kPrefetchAhead = 4;
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    hashes[i] = XXH3_64bits(pieces[i].data(), pieces[i].size());
    if (i < kPrefetchAhead) cache_->Prefetch(hashes[i]);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + kPrefetchAhead < pieces.size()) cache_->Prefetch(hashes[i + kPrefetchAhead]);
    EncodeWithHash(pieces[i], hashes[i], out);
  }
}

void BpeModel::EncodeWithHash(std::string_view piece, uint64_t hash,
                              std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (byte_level_ && piece.size() <= 2 && !options_.ignore_merges) {  // no cache needed
    const int32_t first = byte_symbol_id_[static_cast<uint8_t>(piece[0])];
    const int32_t second = piece.size() == 2 ? byte_symbol_id_[static_cast<uint8_t>(piece[1])] : 0;
    if (first >= 0 && second >= 0) {
      if (piece.size() == 1) {
        out.push_back(first);
      } else if (const MergeEntry* merge = FindMerge(first, second)) {
        out.push_back(merge->new_id);
      } else {
        out.push_back(first);
        out.push_back(second);
      }
      return;
    }
  }
  if (piece.size() > WordCache::kMaxWordBytes) {
    EncodeUncached(piece, out);
    return;
  }
  if (cache_->Lookup(piece, hash, out)) return;
  const size_t first = out.size();
  EncodeUncached(piece, out);
  cache_->Insert(piece, hash, out.data() + first, out.size() - first);
}

}  // namespace deepinfer::tokenizer_internal
