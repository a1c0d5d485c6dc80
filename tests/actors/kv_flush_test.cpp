// Flushing the prefix cache (the admin's flush_prefix_cache): unreferenced cached blocks return
// to the free list; blocks a sequence holds stay cached.
#include <gtest/gtest.h>

#include <numeric>

#include "actors/kv_cache/kv_cache_manager.hpp"

namespace troupe::kv_cache {
namespace {

std::vector<int32_t> tokens(int32_t count, int32_t first) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

TEST(KvCacheFlush, DropsOnlyUnreferencedCachedBlocks) {
  KvCacheManager kv(KvCacheConfig{.num_blocks = 16, .block_size = 4, .enable_prefix_caching = true});
  const auto a_tokens = tokens(16, 100);
  const auto b_tokens = tokens(8, 500);
  SequenceBlocks a;
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(a, 16));
  ASSERT_TRUE(kv.allocate_slots(b, 8));
  kv.cache_full_blocks(a, a_tokens, 16);
  kv.cache_full_blocks(b, b_tokens, 8);
  kv.free_sequence(a);  // a's 4 blocks: cached, unreferenced
  EXPECT_EQ(kv.stats().num_cached_unreferenced, 4);

  EXPECT_EQ(kv.flush_unreferenced_cache(), 4);
  const KvCacheStats stats = kv.stats();
  EXPECT_EQ(stats.num_cached_unreferenced, 0);
  EXPECT_EQ(stats.num_referenced, 2);      // b's blocks, still held
  EXPECT_EQ(stats.num_cached_blocks, 2);   // and still cached
  EXPECT_EQ(stats.num_free, 14);
  EXPECT_TRUE(kv.find_cached_prefix(a_tokens).blocks.empty());
  EXPECT_EQ(kv.check_invariants(), std::nullopt);
  EXPECT_EQ(kv.flush_unreferenced_cache(), 0);
  kv.free_sequence(b);
  EXPECT_EQ(kv.check_invariants(), std::nullopt);
}

}  // namespace
}  // namespace troupe::kv_cache
