#include "cache/state_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <fmt/format.h>

#include "base/error.h"
#include "base/math.h"

namespace deepinfer::cache {

namespace {
constexpr uint64_t kPackTag = 0x9ac4f1e3d2b50717ull;
}  // namespace

StateCacheManager::StateCacheManager(const CacheConfig& config)
    : config_(config),
      pool_(config.num_blocks),
      slot_used_(static_cast<size_t>(config.num_slots), false),
      packs_(static_cast<size_t>(std::max(config.num_packs, 0))) {
  DI_CHECK(config.block_size > 0 && config.num_slots > 0, "cache needs a block size and slots");
  for (int32_t s = config.num_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  if (config_.num_packs <= 0) config_.enable_prefix_caching = false;
}

uint64_t StateCacheManager::SaltFor(const std::string& cache_salt) const {
  return XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), config_.model_salt ^ 0x5eedull);
}

BlockHash StateCacheManager::BlockHashOf(BlockHash parent, const TokenId* tokens) const {
  return XXH3_64bits_withSeed(tokens, sizeof(TokenId) * static_cast<size_t>(config_.block_size), parent);
}

BlockHash StateCacheManager::PackKey(BlockHash parent, const TokenId* tokens, int64_t n) const {
  return XXH3_64bits_withSeed(tokens, sizeof(TokenId) * static_cast<size_t>(n), parent ^ kPackTag) + static_cast<uint64_t>(n);
}

int32_t StateCacheManager::BlocksFor(int64_t num_tokens) const {
  return static_cast<int32_t>(DivCeil<int64_t>(num_tokens, config_.block_size));
}

std::optional<PrefixHit> StateCacheManager::Admit(SequenceCache& seq, const TokenIds& tokens,
                                                  uint64_t step) {
  DI_CHECK(seq.slot < 0 && seq.blocks.empty(), "admitting a sequence that holds state");
  if (free_slots_.empty()) return std::nullopt;
  const int64_t bs = config_.block_size;
  const int64_t limit = static_cast<int64_t>(tokens.size());
  std::vector<BlockHash> chain;
  std::vector<BlockId> chain_blocks;
  int32_t best = -1;
  int64_t best_b = 0;
  if (config_.enable_prefix_caching && limit > 0) {
    BlockHash parent = seq.salt;
    for (int64_t i = 0; (i + 1) * bs <= limit; ++i) {
      const BlockHash h = BlockHashOf(parent, tokens.data() + i * bs);
      const auto block = pool_.Lookup(h);
      if (!block) break;
      chain.push_back(h);
      chain_blocks.push_back(*block);
      parent = h;
    }
    for (int64_t b = static_cast<int64_t>(chain.size()); b >= 0 && best < 0; --b) {
      const BlockHash parent_b = b == 0 ? seq.salt : chain[b - 1];
      auto it = packs_by_parent_.find(parent_b);
      if (it == packs_by_parent_.end()) continue;
      for (int32_t id : it->second) {
        const Pack& p = packs_[id];
        if (p.position > limit || (p.position == limit && !p.has_logits) || p.usable_from > step) continue;
        if (best >= 0 && p.position <= packs_[best].position) continue;
        if (!std::equal(p.partial.begin(), p.partial.end(), tokens.begin() + b * bs)) continue;
        best = id;
        best_b = b;
      }
    }
  }
  PrefixHit hit;
  const bool partial = best >= 0 && packs_[best].block != kNullBlock;
  if (partial && pool_.num_free() < 1) return std::nullopt;

  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[seq.slot] = true;
  if (best < 0) {
    seq.chain_hash = seq.salt;
    return hit;
  }
  for (int64_t i = 0; i < best_b; ++i) {
    pool_.Touch(chain_blocks[i]);
    seq.blocks.push_back(chain_blocks[i]);
  }
  seq.num_hashed_blocks = static_cast<int32_t>(best_b);
  seq.chain_hash = best_b == 0 ? seq.salt : chain[best_b - 1];
  Pack& p = packs_[best];
  if (partial) {
    const auto fresh = pool_.GetNewBlocks(1, &evicted_);
    seq.blocks.push_back(fresh->front());
    hit.target_block = fresh->front();
    hit.pack_block = p.block;
  }
  if (p.refs++ == 0) LruRemove(p);
  hit.num_tokens = p.position;
  hit.has_logits = p.has_logits;
  hit.pack = best;
  return hit;
}

bool StateCacheManager::EnsureBlocks(SequenceCache& seq, int64_t num_tokens) {
  const int32_t need = BlocksFor(num_tokens) - static_cast<int32_t>(seq.blocks.size());
  if (need <= 0) return true;
  auto fresh = pool_.GetNewBlocks(need, &evicted_);
  if (!fresh) return false;
  seq.blocks.insert(seq.blocks.end(), fresh->begin(), fresh->end());
  return true;
}

void StateCacheManager::CacheFullBlocks(SequenceCache& seq, const TokenIds& known_tokens,
                                        int64_t num_covered) {
  if (!config_.enable_prefix_caching) return;
  const int64_t n = std::min<int64_t>(num_covered, static_cast<int64_t>(known_tokens.size()));
  const int64_t full = std::min<int64_t>(n / config_.block_size, static_cast<int64_t>(seq.blocks.size()));
  for (int64_t i = seq.num_hashed_blocks; i < full; ++i) {
    const BlockHash h = BlockHashOf(seq.chain_hash, known_tokens.data() + i * config_.block_size);
    pool_.SetHash(seq.blocks[i], h);
    seq.chain_hash = h;
    seq.num_hashed_blocks = static_cast<int32_t>(i + 1);
  }
}

void StateCacheManager::LruRemove(Pack& p) {
  if (!p.in_lru) return;
  lru_.erase(p.lru);
  p.in_lru = false;
}

void StateCacheManager::FreePack(int32_t id) {
  Pack& p = packs_[id];
  LruRemove(p);
  if (p.state != PackState::kFree) {
    auto& list = packs_by_parent_[p.parent];
    list.erase(std::find(list.begin(), list.end(), id));
    if (list.empty()) packs_by_parent_.erase(p.parent);
  }
  if (p.block != kNullBlock) pool_.Free({p.block});
  p = Pack{};
}

std::optional<int32_t> StateCacheManager::TakePack() {
  for (int32_t id = 0; id < static_cast<int32_t>(packs_.size()); ++id) {
    if (packs_[id].state == PackState::kFree) return id;
  }
  if (lru_.empty()) return std::nullopt;
  const int32_t victim = lru_.front();
  FreePack(victim);
  return victim;
}

std::optional<PackReservation> StateCacheManager::ReservePack(const SequenceCache& seq,
                                                             const TokenIds& tokens, int64_t position,
                                                             uint64_t usable_from_step, bool with_logits) {
  if (!config_.enable_prefix_caching || position <= 0 || position > static_cast<int64_t>(tokens.size())) {
    return std::nullopt;
  }
  const int64_t bs = config_.block_size, b = position / bs, r = position % bs;
  BlockHash parent = seq.salt;
  for (int64_t i = 0; i < b; ++i) parent = BlockHashOf(parent, tokens.data() + i * bs);
  const BlockHash key = PackKey(parent, tokens.data() + b * bs, r);
  for (const Pack& p : packs_) {
    if (p.state != PackState::kFree && p.key == key && p.parent == parent) return std::nullopt;
  }
  const auto id = TakePack();
  if (!id) return std::nullopt;
  PackReservation res;
  res.pack = *id;
  if (r > 0) {
    auto fresh = pool_.GetNewBlocks(1, &evicted_);
    if (!fresh) return std::nullopt;  // the taken pack stays free
    res.block = fresh->front();
  }
  Pack& p = packs_[*id];
  p.state = PackState::kPending;
  p.parent = parent;
  p.key = key;
  p.partial.assign(tokens.begin() + b * bs, tokens.begin() + position);
  p.position = position;
  p.usable_from = usable_from_step;
  p.has_logits = with_logits;
  p.block = res.block;
  packs_by_parent_[parent].push_back(*id);
  return res;
}

void StateCacheManager::CommitPack(int32_t id) {
  Pack& p = packs_.at(id);
  DI_CHECK(p.state == PackState::kPending, "commit of pack {} that is not pending", id);
  p.state = PackState::kReady;
  if (p.refs == 0) {
    p.lru = lru_.insert(lru_.end(), id);
    p.in_lru = true;
  }
}

void StateCacheManager::ReleasePackRef(int32_t id) {
  Pack& p = packs_.at(id);
  DI_CHECK(p.refs > 0, "pack {} released more often than referenced", id);
  if (--p.refs == 0 && p.state == PackState::kReady) {
    p.lru = lru_.insert(lru_.end(), id);
    p.in_lru = true;
  }
}

void StateCacheManager::Release(SequenceCache& seq, std::vector<BlockId>* freed_uncached) {
  // Reverse order: a sequence's tail blocks are the least likely prefix of another request, so
  // they reach the free-queue head (eviction) first.
  std::vector<BlockId> reversed(seq.blocks.rbegin(), seq.blocks.rend());
  pool_.Free(reversed);
  if (freed_uncached != nullptr) {
    for (BlockId id : reversed) {
      if (pool_.RefCount(id) == 0 && !pool_.HashOf(id)) freed_uncached->push_back(id);
    }
  }
  if (seq.slot >= 0) {
    slot_used_[seq.slot] = false;
    free_slots_.insert(std::upper_bound(free_slots_.begin(), free_slots_.end(), seq.slot, std::greater<>()), seq.slot);
  }
  const uint64_t salt = seq.salt;
  seq = SequenceCache{};
  seq.salt = salt;
}

std::vector<BlockId> StateCacheManager::TakeEvicted() {
  std::vector<BlockId> out;
  out.swap(evicted_);
  return out;
}

int32_t StateCacheManager::num_ready_packs() const {
  int32_t n = 0;
  for (const Pack& p : packs_) n += p.state == PackState::kReady;
  return n;
}

int32_t StateCacheManager::num_pack_blocks() const {
  int32_t n = 0;
  for (const Pack& p : packs_) n += p.block != kNullBlock;
  return n;
}

std::string StateCacheManager::CheckIntegrity(const std::vector<const SequenceCache*>& live) const {
  if (std::string err = pool_.CheckIntegrity(); !err.empty()) return "block pool: " + err;
  std::vector<int32_t> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<bool> slot_seen(static_cast<size_t>(config_.num_slots), false);
  for (const SequenceCache* s : live) {
    for (BlockId id : s->blocks) {
      if (id <= 0 || id >= pool_.num_blocks()) return fmt::format("sequence holds invalid block {}", id);
      ++refs[id];
    }
    if (s->slot >= 0) {
      if (slot_seen[s->slot]) return fmt::format("slot {} held by two sequences", s->slot);
      if (!slot_used_[s->slot]) return fmt::format("slot {} held but marked free", s->slot);
      slot_seen[s->slot] = true;
    }
  }
  int32_t used_slots = 0;
  for (int32_t s = 0; s < config_.num_slots; ++s) {
    used_slots += slot_used_[s];
    if (slot_used_[s] != slot_seen[s]) return fmt::format("slot {} marked used={} but held={}", s, slot_used_[s], slot_seen[s]);
  }
  if (used_slots + static_cast<int32_t>(free_slots_.size()) != config_.num_slots) return "slot count mismatch";
  size_t lru_expected = 0;
  for (size_t i = 0; i < packs_.size(); ++i) {
    const Pack& p = packs_[i];
    if (p.block != kNullBlock) ++refs[p.block];
    if (p.state == PackState::kFree) {
      if (p.refs != 0 || p.in_lru || p.block != kNullBlock) return fmt::format("free pack {} holds state", i);
      continue;
    }
    const auto it = packs_by_parent_.find(p.parent);
    const bool indexed = it != packs_by_parent_.end() &&
                         std::count(it->second.begin(), it->second.end(), static_cast<int32_t>(i)) == 1;
    if (!indexed) return fmt::format("pack {} is not indexed", i);
    if (p.in_lru != (p.state == PackState::kReady && p.refs == 0)) return fmt::format("pack {} LRU state wrong", i);
    lru_expected += p.in_lru;
  }
  if (lru_expected != lru_.size()) return "pack LRU size mismatch";
  for (BlockId id = 1; id < pool_.num_blocks(); ++id) {
    if (refs[id] != pool_.RefCount(id)) {
      return fmt::format("block {} has ref_count {} but {} holders", id, pool_.RefCount(id), refs[id]);
    }
  }
  return "";
}

}  // namespace deepinfer::cache
