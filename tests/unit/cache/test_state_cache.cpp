// StateCacheManager scenarios (exact block, slot and pack ids) and randomized operation
// sequences with the integrity checker after every operation.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "cache/state_cache.h"

namespace deepinfer::cache {
namespace {

using Ids = std::vector<BlockId>;

TokenIds Range(int32_t begin, int32_t n) {
  TokenIds t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), begin);
  return t;
}

CacheConfig SmallConfig(int32_t blocks = 8, int32_t slots = 2, int32_t packs = 2) {
  CacheConfig c;
  c.num_blocks = blocks;
  c.block_size = 128;
  c.num_slots = slots;
  c.num_packs = packs;
  c.model_salt = 42;
  return c;
}

TEST(StateCache, MissAllocatesSlotAndBlocks) {
  StateCacheManager m(SmallConfig());
  SequenceCache a;
  a.salt = m.SaltFor("");
  const auto hit = m.Admit(a, Range(0, 300));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->num_tokens, 0);
  EXPECT_EQ(a.slot, 0);
  ASSERT_TRUE(m.EnsureBlocks(a, 300));
  EXPECT_EQ(a.blocks, (Ids{1, 2, 3}));
  EXPECT_EQ(m.CheckIntegrity({&a}), "");
}

TEST(StateCache, PrefixHitEndsAtAPackAndCopiesThePartialBlock) {
  StateCacheManager m(SmallConfig());  // null + 7 blocks
  const TokenIds prompt_a = Range(1000, 300);
  SequenceCache a;
  a.salt = m.SaltFor("");
  ASSERT_TRUE(m.Admit(a, prompt_a));
  ASSERT_TRUE(m.EnsureBlocks(a, 300));                    // 1 2 3
  m.CacheFullBlocks(a, prompt_a, 300);                    // blocks 1, 2 hashed
  EXPECT_EQ(a.num_hashed_blocks, 2);
  const auto pack = m.ReservePack(a, prompt_a, 300);      // 300 = 2·128 + 44: partial copy
  ASSERT_TRUE(pack.has_value());
  EXPECT_EQ(pack->pack, 0);
  EXPECT_EQ(pack->block, 4);
  m.CommitPack(pack->pack);
  m.Release(a);                                           // frees 3, 2, 1 (reverse)
  EXPECT_EQ(m.pool().FreeQueue(), (Ids{5, 6, 7, 3, 2, 1}));

  // B continues A's prompt: the hit is A's pack at 300 over cached blocks 1 and 2.
  TokenIds prompt_b = prompt_a;
  for (int i = 0; i < 50; ++i) prompt_b.push_back(7);
  SequenceCache b;
  b.salt = m.SaltFor("");
  const auto hit = m.Admit(b, prompt_b);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->num_tokens, 300);
  EXPECT_EQ(hit->pack, 0);
  EXPECT_EQ(hit->pack_block, 4);
  EXPECT_EQ(hit->target_block, 5);
  EXPECT_EQ(b.slot, 0);
  EXPECT_EQ(b.blocks, (Ids{1, 2, 5}));
  EXPECT_EQ(m.pool().FreeQueue(), (Ids{6, 7, 3}));
  EXPECT_EQ(m.CheckIntegrity({&b}), "");
  m.ReleasePackRef(0);
  EXPECT_EQ(m.CheckIntegrity({&b}), "");
}

// A sequence (default salt) computes all of `p`, leaves a committed pack at its end (keeping
// its last logits or not) and is released.
void ComputeAndPack(StateCacheManager& m, const TokenIds& p, bool with_logits) {
  const int64_t n = static_cast<int64_t>(p.size());
  SequenceCache a;
  a.salt = m.SaltFor("");
  ASSERT_TRUE(m.Admit(a, p));
  ASSERT_TRUE(m.EnsureBlocks(a, n));
  m.CacheFullBlocks(a, p, n);
  const auto pk = m.ReservePack(a, p, n, 0, with_logits);
  ASSERT_TRUE(pk.has_value());
  m.CommitPack(pk->pack);
  m.Release(a);
}

TEST(StateCache, HitNeverCoversTheWholePromptAndSaltsSeparate) {
  StateCacheManager m(SmallConfig());
  const TokenIds p = Range(0, 200);
  ComputeAndPack(m, p, /*with_logits=*/false);
  // Same 200 tokens again: the pack sits at 200 but carries no logits, so the last token must
  // be computed and the pack cannot be used: no hit.
  SequenceCache b;
  b.salt = m.SaltFor("");
  EXPECT_EQ(m.Admit(b, p)->num_tokens, 0);
  m.Release(b);
  // With one more token, the pack hits; under another salt it does not.
  TokenIds longer = p;
  longer.push_back(1);
  SequenceCache c, d;
  c.salt = m.SaltFor("");
  d.salt = m.SaltFor("tenant-2");
  EXPECT_EQ(m.Admit(c, longer)->num_tokens, 200);
  EXPECT_EQ(m.Admit(d, longer)->num_tokens, 0);
  EXPECT_EQ(m.CheckIntegrity({&c, &d}), "");
}

TEST(StateCache, APackWithLogitsServesTheWholeIdenticalPrompt) {
  StateCacheManager m(SmallConfig());
  const TokenIds p = Range(0, 200);
  ComputeAndPack(m, p, /*with_logits=*/true);
  SequenceCache b;
  b.salt = m.SaltFor("");
  const auto hit = m.Admit(b, p);
  EXPECT_EQ(hit->num_tokens, 200);
  EXPECT_TRUE(hit->has_logits);
  EXPECT_EQ(m.CheckIntegrity({&b}), "");
}

TEST(StateCache, PacksAreEvictedLeastRecentlyUsedFirst) {
  StateCacheManager m(SmallConfig(16, 2, 2));
  auto make_pack = [&](int32_t base) {
    SequenceCache s;
    s.salt = m.SaltFor("");
    const TokenIds t = Range(base, 128);
    EXPECT_TRUE(m.Admit(s, t));
    EXPECT_TRUE(m.EnsureBlocks(s, 128));
    m.CacheFullBlocks(s, t, 128);
    const auto pk = m.ReservePack(s, t, 128);  // block-aligned: no partial copy
    EXPECT_EQ(pk->block, kNullBlock);
    m.CommitPack(pk->pack);
    m.Release(s);
    return pk->pack;
  };
  EXPECT_EQ(make_pack(0), 0);
  EXPECT_EQ(make_pack(1000), 1);
  // Use pack 0 (it becomes most recently used), then a third pack evicts pack 1.
  SequenceCache s;
  s.salt = m.SaltFor("");
  TokenIds t = Range(0, 128);
  t.push_back(5);
  EXPECT_EQ(m.Admit(s, t)->pack, 0);
  m.ReleasePackRef(0);
  m.Release(s);
  EXPECT_EQ(make_pack(2000), 1);
  SequenceCache u;
  u.salt = m.SaltFor("");
  TokenIds t1 = Range(1000, 128);
  t1.push_back(5);
  EXPECT_EQ(m.Admit(u, t1)->num_tokens, 0);  // pack for 1000.. was evicted
  EXPECT_EQ(m.CheckIntegrity({&u}), "");
}

TEST(StateCache, RandomizedOperationsKeepEveryCountConsistent) {
  std::mt19937 rng(1234);
  int hits = 0, evictions_seen = 0;
  for (int trial = 0; trial < 20; ++trial) {
    StateCacheManager m(SmallConfig(24, 4, 3));
    struct Live {
      SequenceCache cache;
      TokenIds tokens;
      int64_t covered = 0;
      std::vector<int32_t> pack_refs;
      std::vector<int32_t> pending;
    };
    std::vector<Live> live;
    auto check = [&](const char* op) {
      std::vector<const SequenceCache*> ptrs;
      for (auto& l : live) ptrs.push_back(&l.cache);
      ASSERT_EQ(m.CheckIntegrity(ptrs), "") << "after " << op << " in trial " << trial;
    };
    for (int step = 0; step < 400; ++step) {
      const int op = static_cast<int>(rng() % 6);
      if (op == 0 && live.size() < 4) {  // arrive: prompts share prefixes often
        Live l;
        l.cache.salt = m.SaltFor(rng() % 4 == 0 ? "other" : "");
        const int32_t base = static_cast<int32_t>(rng() % 3) * 10000;
        l.tokens = Range(base, static_cast<int32_t>(50 + rng() % 400));
        const auto hit = m.Admit(l.cache, l.tokens);
        if (!hit) continue;
        l.covered = hit->num_tokens;
        if (hit->pack >= 0) {
          l.pack_refs.push_back(hit->pack);
          ++hits;
        }
        live.push_back(std::move(l));
        check("admit");
      } else if (op == 1 && !live.empty()) {  // schedule a chunk
        Live& l = live[rng() % live.size()];
        const int64_t target = std::min<int64_t>(l.tokens.size(), l.covered + 1 + rng() % 200);
        if (m.EnsureBlocks(l.cache, target)) {
          l.covered = target;
          m.CacheFullBlocks(l.cache, l.tokens, l.covered);
        }
        evictions_seen += static_cast<int>(m.TakeEvicted().size());
        check("schedule");
      } else if (op == 2 && !live.empty()) {  // save a pack where the sequence stands
        Live& l = live[rng() % live.size()];
        if (l.covered > 0) {
          if (auto pk = m.ReservePack(l.cache, l.tokens, l.covered)) l.pending.push_back(pk->pack);
        }
        check("reserve pack");
      } else if (op == 3 && !live.empty()) {  // the runner finished its copies
        Live& l = live[rng() % live.size()];
        for (int32_t p : l.pending) m.CommitPack(p);
        l.pending.clear();
        for (int32_t p : l.pack_refs) m.ReleasePackRef(p);
        l.pack_refs.clear();
        check("commit");
      } else if (op >= 4 && !live.empty()) {  // finish / abort / preempt: release everything
        const size_t i = rng() % live.size();
        for (int32_t p : live[i].pending) m.CommitPack(p);
        for (int32_t p : live[i].pack_refs) m.ReleasePackRef(p);
        m.Release(live[i].cache);
        live.erase(live.begin() + static_cast<long>(i));
        check("release");
      }
    }
  }
  // The sequences exercised the prefix path and eviction, not only misses.
  EXPECT_GT(hits, 20);
  EXPECT_GT(evictions_seen, 20);
}

}  // namespace
}  // namespace deepinfer::cache
