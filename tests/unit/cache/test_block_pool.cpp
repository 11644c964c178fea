// BlockPool scenarios with exact block ids and free-queue order.
#include <gtest/gtest.h>

#include "cache/block_pool.h"

namespace deepinfer::cache {
namespace {

using Ids = std::vector<BlockId>;

TEST(BlockPool, HandsOutLowestIdsFirstAndNeverTheNullBlock) {
  BlockPool pool(6);  // null + 5
  EXPECT_EQ(pool.FreeQueue(), (Ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(*pool.GetNewBlocks(2), (Ids{1, 2}));
  EXPECT_EQ(*pool.GetNewBlocks(3), (Ids{3, 4, 5}));
  EXPECT_FALSE(pool.GetNewBlocks(1).has_value());
  EXPECT_EQ(pool.num_used(), 5);
  EXPECT_EQ(pool.CheckIntegrity(), "");
}

TEST(BlockPool, FreedBlocksGoToTheTailInTheOrderGiven) {
  BlockPool pool(6);
  const Ids a = *pool.GetNewBlocks(3);  // 1 2 3
  pool.Free({3, 1});
  EXPECT_EQ(pool.FreeQueue(), (Ids{4, 5, 3, 1}));
  EXPECT_EQ(*pool.GetNewBlocks(3), (Ids{4, 5, 3}));
  EXPECT_EQ(pool.FreeQueue(), (Ids{1}));
  EXPECT_EQ(pool.CheckIntegrity(), "");
}

TEST(BlockPool, SharedBlocksFreeOnTheLastReference) {
  BlockPool pool(4);
  const Ids a = *pool.GetNewBlocks(1);  // 1
  pool.Touch(1);
  EXPECT_EQ(pool.RefCount(1), 2);
  pool.Free({1});
  EXPECT_EQ(pool.FreeQueue(), (Ids{2, 3}));
  pool.Free({1});
  EXPECT_EQ(pool.FreeQueue(), (Ids{2, 3, 1}));
  EXPECT_EQ(pool.CheckIntegrity(), "");
}

TEST(BlockPool, CachedFreeBlocksAreHitThenEvictedInLruOrder) {
  BlockPool pool(5);  // null + 4
  const Ids a = *pool.GetNewBlocks(2);  // 1 2
  pool.SetHash(1, 0xa1);
  pool.SetHash(2, 0xa2);
  pool.Free({2, 1});  // reverse order, like a finished sequence
  EXPECT_EQ(pool.FreeQueue(), (Ids{3, 4, 2, 1}));
  EXPECT_EQ(pool.Lookup(0xa1), 1);
  // A prefix hit on 0xa1 takes block 1 off the queue.
  pool.Touch(1);
  EXPECT_EQ(pool.FreeQueue(), (Ids{3, 4, 2}));
  // New content takes 3 and 4, then 2 — evicting its hash.
  std::vector<BlockId> evicted;
  EXPECT_EQ(*pool.GetNewBlocks(3, &evicted), (Ids{3, 4, 2}));
  EXPECT_EQ(evicted, (Ids{2}));
  EXPECT_FALSE(pool.Lookup(0xa2).has_value());
  EXPECT_EQ(pool.Lookup(0xa1), 1);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.CheckIntegrity(), "");
}

TEST(BlockPool, NoDeduplicationOfEqualContent) {
  BlockPool pool(4);
  const Ids a = *pool.GetNewBlocks(2);
  pool.SetHash(1, 7);
  pool.SetHash(2, 7);  // the same content computed twice: the first block keeps the entry
  EXPECT_EQ(pool.Lookup(7), 1);
  EXPECT_FALSE(pool.HashOf(2).has_value());
  EXPECT_EQ(pool.CheckIntegrity(), "");
}

TEST(BlockPool, DoubleFreeIsAnError) {
  BlockPool pool(3);
  const Ids a = *pool.GetNewBlocks(1);
  pool.Free({1});
  EXPECT_THROW(pool.Free({1}), Error);
  EXPECT_THROW(pool.Free({0}), Error);
}

}  // namespace
}  // namespace deepinfer::cache
