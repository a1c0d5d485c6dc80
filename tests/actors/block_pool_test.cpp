// BlockPool: states, reference counts, free-before-evict allocation and LRU eviction order.
#include "actors/kv_cache/block_pool.hpp"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace troupe::kv_cache {
namespace {

void expect_consistent(const BlockPool& pool) {
  const auto error = pool.check_invariants();
  EXPECT_FALSE(error.has_value()) << *error;
}

TEST(BlockPoolTest, StartsWithEveryBlockFree) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_blocks(), 8);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.num_referenced(), 0);
  EXPECT_EQ(pool.num_cached_unreferenced(), 0);
  EXPECT_EQ(pool.num_allocatable(), 8);
  for (BlockId b = 0; b < 8; ++b) EXPECT_EQ(pool.state(b), BlockState::kFree);
  expect_consistent(pool);
}

TEST(BlockPoolTest, RejectsAnEmptyPool) { EXPECT_THROW(BlockPool(0), std::invalid_argument); }

TEST(BlockPoolTest, AllocateHandsOutReferencedBlocks) {
  BlockPool pool(4);
  const auto allocation = pool.allocate(3);
  ASSERT_TRUE(allocation.has_value());
  EXPECT_EQ(allocation->blocks, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_TRUE(allocation->evicted.empty());
  for (BlockId b : allocation->blocks) {
    EXPECT_EQ(pool.state(b), BlockState::kReferenced);
    EXPECT_EQ(pool.ref_count(b), 1);
  }
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_referenced(), 3);
  expect_consistent(pool);
}

TEST(BlockPoolTest, RunningOutIsAValueAndChangesNothing) {
  BlockPool pool(4);
  ASSERT_TRUE(pool.allocate(3).has_value());
  EXPECT_FALSE(pool.allocate(2).has_value());
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.allocate(0).has_value());
  EXPECT_FALSE(pool.allocate(-1).has_value());
  expect_consistent(pool);
}

TEST(BlockPoolTest, FreeingAnUncachedBlockMakesItFree) {
  BlockPool pool(2);
  const auto blocks = pool.allocate(1)->blocks;
  pool.free(blocks[0]);
  EXPECT_EQ(pool.state(blocks[0]), BlockState::kFree);
  EXPECT_EQ(pool.num_free(), 2);
  expect_consistent(pool);
}

TEST(BlockPoolTest, SharedBlockStaysReferencedUntilTheLastHolderFrees) {
  BlockPool pool(2);
  const BlockId b = pool.allocate(1)->blocks[0];
  pool.mark_cached(b);
  pool.touch(b);  // a second sequence hits it
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.free(b);
  EXPECT_EQ(pool.state(b), BlockState::kReferenced);
  pool.free(b);
  EXPECT_EQ(pool.state(b), BlockState::kCachedUnreferenced);
  expect_consistent(pool);
}

TEST(BlockPoolTest, ReleasedCachedBlocksQueueInLruOrder) {
  BlockPool pool(4);
  const auto blocks = pool.allocate(4)->blocks;
  for (BlockId b : blocks) pool.mark_cached(b);
  pool.free(2);
  pool.free(0);
  pool.free(3);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{2, 0, 3}));
  EXPECT_EQ(pool.num_cached_unreferenced(), 3);
  EXPECT_EQ(pool.num_allocatable(), 3);
  // A hit takes the block out of the list; releasing it again makes it most recently used.
  pool.touch(2);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{0, 3}));
  pool.free(2);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockId>{0, 3, 2}));
  expect_consistent(pool);
}

TEST(BlockPoolTest, AllocateUsesFreeBlocksBeforeEvictingCachedOnes) {
  BlockPool pool(4);
  const auto blocks = pool.allocate(4)->blocks;
  pool.mark_cached(0);
  pool.mark_cached(1);
  pool.free(1);  // cached, released first -> evicted first
  pool.free(0);
  pool.free(3);  // uncached -> free
  const auto first = pool.allocate(1);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->blocks, std::vector<BlockId>{3});
  EXPECT_TRUE(first->evicted.empty());
  const auto second = pool.allocate(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->blocks, (std::vector<BlockId>{1, 0}));
  EXPECT_EQ(second->evicted, (std::vector<BlockId>{1, 0}));
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_FALSE(pool.is_cached(0));
  expect_consistent(pool);
}

TEST(BlockPoolTest, MisuseIsABug) {
  BlockPool pool(2);
  EXPECT_THROW(pool.touch(0), std::logic_error);        // free blocks hold garbage
  EXPECT_THROW(pool.free(0), std::logic_error);         // nothing to release
  EXPECT_THROW(pool.mark_cached(0), std::logic_error);  // only computed (held) blocks
  EXPECT_THROW(pool.free(7), std::logic_error);         // out of range
  EXPECT_THROW(pool.state(-1), std::logic_error);
  const BlockId b = pool.allocate(1)->blocks[0];
  pool.free(b);
  EXPECT_THROW(pool.free(b), std::logic_error);  // double free
  expect_consistent(pool);
}

// Random operations: after each, every block is in exactly one state and the counts agree.
TEST(BlockPoolTest, RandomOperationsKeepEveryBlockInExactlyOneState) {
  constexpr int32_t kNumBlocks = 32;
  BlockPool pool(kNumBlocks);
  std::vector<int32_t> holders(kNumBlocks, 0);
  std::mt19937 rng(1234);
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    const auto b = static_cast<BlockId>(rng() % kNumBlocks);
    if (op == 0) {
      const auto n = static_cast<int32_t>(rng() % 4);
      const bool expect_ok = n <= pool.num_allocatable();
      const auto allocation = pool.allocate(n);
      ASSERT_EQ(allocation.has_value(), expect_ok);
      if (allocation) {
        for (BlockId a : allocation->blocks) holders[static_cast<size_t>(a)] = 1;
      }
    } else if (op == 1 && holders[static_cast<size_t>(b)] > 0) {
      pool.free(b);
      --holders[static_cast<size_t>(b)];
    } else if (op == 2 && (holders[static_cast<size_t>(b)] > 0 || pool.is_cached(b))) {
      pool.touch(b);
      ++holders[static_cast<size_t>(b)];
    } else if (op == 3 && holders[static_cast<size_t>(b)] > 0) {
      pool.mark_cached(b);
    }
    int32_t referenced = 0;
    for (BlockId i = 0; i < kNumBlocks; ++i) {
      ASSERT_EQ(pool.ref_count(i), holders[static_cast<size_t>(i)]);
      referenced += holders[static_cast<size_t>(i)] > 0 ? 1 : 0;
    }
    ASSERT_EQ(pool.num_referenced(), referenced);
    ASSERT_EQ(pool.num_free() + pool.num_cached_unreferenced() + pool.num_referenced(), kNumBlocks);
    const auto error = pool.check_invariants();
    ASSERT_FALSE(error.has_value()) << *error;
  }
}

TEST(BlockPoolTest, StateNames) {
  EXPECT_EQ(to_string(BlockState::kFree), "free");
  EXPECT_EQ(to_string(BlockState::kCachedUnreferenced), "cached_unreferenced");
  EXPECT_EQ(to_string(BlockState::kReferenced), "referenced");
}

}  // namespace
}  // namespace troupe::kv_cache
