#include "cache/block_pool.h"

#include <fmt/format.h>

#include "base/error.h"

namespace deepinfer::cache {

BlockPool::BlockPool(int32_t num_blocks) : blocks_(static_cast<size_t>(num_blocks)) {
  DI_CHECK(num_blocks >= 2, "a block pool needs the null block and at least one more, got {}", num_blocks);
  for (BlockId id = 1; id < num_blocks; ++id) PushBack(id);
}

void BlockPool::PushBack(BlockId id) {
  Block& b = blocks_[id];
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0) blocks_[tail_].next = id;
  else head_ = id;
  tail_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockPool::Remove(BlockId id) {
  Block& b = blocks_[id];
  if (b.prev >= 0) blocks_[b.prev].next = b.next;
  else head_ = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev;
  else tail_ = b.prev;
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --num_free_;
}

void BlockPool::Evict(BlockId id) {
  Block& b = blocks_[id];
  if (!b.has_hash) return;
  auto it = by_hash_.find(b.hash);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  b.has_hash = false;
}

std::optional<std::vector<BlockId>> BlockPool::GetNewBlocks(int32_t n, std::vector<BlockId>* evicted) {
  if (n > num_free_) return std::nullopt;
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = head_;
    Remove(id);
    if (blocks_[id].has_hash) {
      Evict(id);
      if (evicted != nullptr) evicted->push_back(id);
    }
    blocks_[id].ref_count = 1;
    out.push_back(id);
  }
  return out;
}

void BlockPool::Free(const std::vector<BlockId>& ids) {
  for (BlockId id : ids) {
    DI_CHECK(id > 0 && id < num_blocks(), "free of invalid block {}", id);
    Block& b = blocks_[id];
    DI_CHECK(b.ref_count > 0, "double free of block {}", id);
    if (--b.ref_count == 0) PushBack(id);
  }
}

void BlockPool::Touch(BlockId id) {
  DI_CHECK(id > 0 && id < num_blocks(), "touch of invalid block {}", id);
  Block& b = blocks_[id];
  if (b.ref_count == 0) Remove(id);
  ++b.ref_count;
}

std::optional<BlockId> BlockPool::Lookup(BlockHash hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::SetHash(BlockId id, BlockHash hash) {
  Block& b = blocks_.at(id);
  DI_CHECK(b.ref_count > 0, "only a referenced block can be given a hash (block {})", id);
  if (b.has_hash || by_hash_.count(hash)) return;
  b.has_hash = true;
  b.hash = hash;
  by_hash_.emplace(hash, id);
}

std::optional<BlockHash> BlockPool::HashOf(BlockId id) const {
  const Block& b = blocks_.at(id);
  if (!b.has_hash) return std::nullopt;
  return b.hash;
}

std::vector<BlockId> BlockPool::FreeQueue() const {
  std::vector<BlockId> q;
  for (BlockId id = head_; id >= 0; id = blocks_[id].next) q.push_back(id);
  return q;
}

std::string BlockPool::CheckIntegrity() const {
  if (blocks_[0].ref_count != 0 || blocks_[0].in_free_queue) return "the null block is in use";
  int32_t count = 0;
  BlockId prev = -1;
  for (BlockId id = head_; id >= 0; id = blocks_[id].next) {
    const Block& b = blocks_[id];
    if (!b.in_free_queue) return fmt::format("block {} linked but not marked free", id);
    if (b.ref_count != 0) return fmt::format("free block {} has ref_count {}", id, b.ref_count);
    if (b.prev != prev) return fmt::format("block {} has a broken back link", id);
    if (++count > num_blocks()) return "free queue has a cycle";
    prev = id;
  }
  if (prev != tail_) return "free queue tail mismatch";
  if (count != num_free_) return fmt::format("free queue holds {} blocks, counter says {}", count, num_free_);
  for (BlockId id = 1; id < num_blocks(); ++id) {
    const Block& b = blocks_[id];
    if (b.ref_count < 0) return fmt::format("block {} has negative ref_count", id);
    if ((b.ref_count == 0) != b.in_free_queue) {
      return fmt::format("block {} ref_count {} but in_free_queue {}", id, b.ref_count, b.in_free_queue);
    }
    if (b.has_hash) {
      auto it = by_hash_.find(b.hash);
      if (it == by_hash_.end() || it->second != id) return fmt::format("block {} hash not indexed", id);
    }
  }
  for (const auto& [h, id] : by_hash_) {
    if (!blocks_[id].has_hash || blocks_[id].hash != h) return fmt::format("hash index points at block {} without it", id);
  }
  return "";
}

}  // namespace deepinfer::cache
