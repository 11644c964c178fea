// StateCacheManager: ids for DeepSeek-V4's per-sequence state (ARCHITECTURE.md §4).
//
//   blocks  paged compressed rows, block_size tokens per block (BlockPool)
//   slots   fixed per-sequence state: windows + compressor partial state; one per running
//           sequence, ids [0, num_slots)
//   packs   resume packs: a saved copy of a sequence's fixed state at position P (in its own
//           slot, id num_slots + pack) plus, when P is not a block boundary, a copy of the
//           block holding rows of the partial last block. A prefix hit needs every full block
//           before P cached AND a pack at P: the longest such P is the hit.
//
// Hashes: block i of a sequence hashes (parent hash, its block_size token ids), the root
// parent is derived from the model salt and the request's cache salt. A pack is keyed by
// (hash of the last full block before P, the tokens after it up to P).
//
// Packs pass through states: pending (reserved; the runner's copy is scheduled) and ready (the
// copy is done). Steps run in order, so a pack may be restored by any step from the one its
// copy runs before (usable_from_step) on, even while still pending: lookups see it from then.
// Each restore holds a reference until the runner has copied it. Unreferenced ready packs are
// evicted least-recently-used first when a new one is needed.
// Host-only; the memory lives in the runner.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "base/error.h"
#include "core/types.h"

namespace deepinfer::cache {

struct CacheConfig {
  int32_t num_blocks = 0;      // including the null block
  int32_t block_size = 128;    // tokens per block
  int32_t num_slots = 0;       // running sequences
  int32_t num_packs = 0;       // resume packs (0 disables prefix caching)
  uint64_t model_salt = 0;     // distinguishes models sharing a cache
  bool enable_prefix_caching = true;
};

// The cache side of one sequence (owned by the scheduler's request).
struct SequenceCache {
  int32_t slot = -1;
  std::vector<BlockId> blocks;    // block table, logical order
  int32_t num_hashed_blocks = 0;  // leading blocks registered in the prefix cache
  BlockHash chain_hash = 0;       // hash of block num_hashed_blocks − 1 (root when 0)
  uint64_t salt = 0;              // root of this sequence's chain
};

struct PrefixHit {
  int64_t num_tokens = 0;         // tokens covered (0: miss); all of them only with logits
  bool has_logits = false;        // the pack carries the logits of its last position
  int32_t pack = -1;              // pack to restore (referenced until ReleasePackRef)
  BlockId pack_block = kNullBlock;  // the pack's partial-block copy, or null
  BlockId target_block = kNullBlock;  // the sequence's block to copy it into, or null
};

struct PackReservation {
  int32_t pack = -1;
  BlockId block = kNullBlock;     // where the partial block is copied to (null if aligned)
};

class StateCacheManager {
 public:
  explicit StateCacheManager(const CacheConfig& config);

  const CacheConfig& config() const { return config_; }
  int32_t pack_slot(int32_t pack) const { return config_.num_slots + pack; }

  // Chain root for a request's cache salt.
  uint64_t SaltFor(const std::string& cache_salt) const;

  // Gives `seq` a slot and, with prefix caching, references the longest cached prefix of
  // `tokens` that ends at a pack usable in step `step`: shorter than `tokens`, or all of it
  // when the pack carries the logits of its last position. nullopt (nothing changed) when no
  // slot (or no block for the partial copy) is free.
  std::optional<PrefixHit> Admit(SequenceCache& seq, const TokenIds& tokens, uint64_t step = UINT64_MAX);

  // Grows the block table to cover `num_tokens`; false (nothing changed) if blocks run out.
  bool EnsureBlocks(SequenceCache& seq, int64_t num_tokens);
  // Blocks needed for `num_tokens` tokens.
  int32_t BlocksFor(int64_t num_tokens) const;
  int32_t num_free_blocks() const { return pool_.num_free(); }

  // Registers every full block of `known_tokens` (the tokens whose ids are known, which the
  // sequence's state covers) in the prefix cache.
  void CacheFullBlocks(SequenceCache& seq, const TokenIds& known_tokens, int64_t num_covered);

  // Reserves a pack for the state of `seq` after `position` tokens of `tokens`, restorable by
  // steps from `usable_from_step` on; `with_logits`: the runner also keeps that position's
  // logits. nullopt if caching is off, an equal pack exists, or no pack/block can be had.
  std::optional<PackReservation> ReservePack(const SequenceCache& seq, const TokenIds& tokens,
                                             int64_t position, uint64_t usable_from_step = 0,
                                             bool with_logits = false);
  void CommitPack(int32_t pack);      // the runner's copy is done: visible to lookups
  void ReleasePackRef(int32_t pack);  // a restore has been copied

  // Frees the slot and every block reference of `seq` (deferred-release callers ensure no
  // step in flight still uses them). `freed_uncached` receives blocks that became free and
  // hold no cached content (the poison debug mode overwrites those).
  void Release(SequenceCache& seq, std::vector<BlockId>* freed_uncached = nullptr);

  // Blocks evicted from the prefix cache since the last call (poison debug mode).
  std::vector<BlockId> TakeEvicted();

  // Recounts blocks, slots and packs against the live sequences; "" if consistent.
  std::string CheckIntegrity(const std::vector<const SequenceCache*>& live) const;

  const BlockPool& pool() const { return pool_; }
  int32_t num_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  int32_t num_ready_packs() const;
  int32_t num_pack_blocks() const;  // blocks held by packs (partial-block copies)

 private:
  enum class PackState { kFree, kPending, kReady };
  struct Pack {
    PackState state = PackState::kFree;
    int32_t refs = 0;
    BlockHash parent = 0;
    BlockHash key = 0;
    TokenIds partial;             // tokens after the last full block, up to the position
    int64_t position = 0;
    uint64_t usable_from = 0;     // first step that may restore it
    bool has_logits = false;      // the runner kept the logits of its last position
    BlockId block = kNullBlock;   // owned partial-block copy
    std::list<int32_t>::iterator lru;  // valid while ready and unreferenced
    bool in_lru = false;
  };
  BlockHash BlockHashOf(BlockHash parent, const TokenId* tokens) const;
  BlockHash PackKey(BlockHash parent, const TokenId* tokens, int64_t n) const;
  std::optional<int32_t> TakePack();
  void FreePack(int32_t pack);
  void LruRemove(Pack& p);

  CacheConfig config_;
  BlockPool pool_;
  std::vector<int32_t> free_slots_;  // sorted descending: back() is the lowest id
  std::vector<bool> slot_used_;
  std::vector<Pack> packs_;
  std::list<int32_t> lru_;           // ready unreferenced packs, least recently used first
  std::unordered_map<BlockHash, std::vector<int32_t>> packs_by_parent_;  // pending and ready
  std::vector<BlockId> evicted_;
};

}  // namespace deepinfer::cache
