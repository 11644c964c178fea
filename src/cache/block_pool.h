// BlockPool: the paged blocks of the state cache, with prefix-cache bookkeeping (vLLM-style).
//
//   - Block 0 is the null block: never handed out, never freed.
//   - Every other block is either referenced (ref_count > 0) or on the free queue. The free
//     queue is in eviction order: GetNewBlocks takes from its head; a block whose last
//     reference goes away is appended to its tail, so unreferenced cached blocks are evicted
//     least-recently-freed first.
//   - A block may carry a hash (its content is the prefix-cache entry for that hash). Taking a
//     cached free block for new content evicts it (drops the hash). Touch() re-references a
//     cached block on a prefix hit and removes it from the free queue.
// Host-only; ids only (the memory lives in the runner).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"

namespace deepinfer::cache {

using BlockId = int32_t;
using BlockHash = uint64_t;
inline constexpr BlockId kNullBlock = 0;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);  // including the null block

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_free() const { return num_free_; }  // on the free queue (cached or not)
  int32_t num_used() const { return num_blocks() - 1 - num_free_; }
  int32_t num_cached() const { return static_cast<int32_t>(by_hash_.size()); }

  // `n` blocks with ref_count 1, taken from the free-queue head (evicting cached content), or
  // nullopt (nothing changed) when fewer than n are free. `evicted` receives evicted blocks.
  std::optional<std::vector<BlockId>> GetNewBlocks(int32_t n, std::vector<BlockId>* evicted = nullptr);
  // Drops one reference from each block, in order; blocks reaching 0 go to the free-queue tail.
  void Free(const std::vector<BlockId>& ids);
  // Adds a reference (a prefix hit); a free block leaves the free queue.
  void Touch(BlockId id);

  // Prefix cache.
  std::optional<BlockId> Lookup(BlockHash hash) const;
  // Records that `id` (referenced) now holds the content for `hash`. A block already holding a
  // hash keeps it. If another block already holds `hash`, nothing changes (no de-duplication).
  void SetHash(BlockId id, BlockHash hash);
  std::optional<BlockHash> HashOf(BlockId id) const;
  int32_t RefCount(BlockId id) const { return blocks_.at(id).ref_count; }

  // Free-queue order, head first (tests assert it).
  std::vector<BlockId> FreeQueue() const;
  // Recounts everything; returns "" if consistent, else a description of the first problem.
  std::string CheckIntegrity() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    BlockId prev = -1, next = -1;  // free-queue links (-1: none)
    bool in_free_queue = false;
    bool has_hash = false;
    BlockHash hash = 0;
  };
  void PushBack(BlockId id);
  void Remove(BlockId id);
  void Evict(BlockId id);

  std::vector<Block> blocks_;
  BlockId head_ = -1, tail_ = -1;
  int32_t num_free_ = 0;
  std::unordered_map<BlockHash, BlockId> by_hash_;
};

}  // namespace deepinfer::cache
