// PrefixCache (the radix tree) and KvCacheManager (pool + tree kept consistent): matching,
// no aliasing across prefixes, sharing of concurrently computed blocks, LRU leaf eviction.
#include "actors/kv_cache/prefix_cache.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

#include "actors/kv_cache/kv_cache_manager.hpp"

namespace troupe::kv_cache {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::span<const int32_t> block_of(const std::vector<int32_t>& tokens, int32_t i) {
  return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(i * kBs), kBs);
}

void expect_consistent(const PrefixCache& cache) {
  const auto error = cache.check_invariants();
  EXPECT_FALSE(error.has_value()) << *error;
}

void expect_consistent(const KvCacheManager& kv) {
  const auto error = kv.check_invariants();
  EXPECT_FALSE(error.has_value()) << *error;
}

TEST(PrefixCacheTest, EmptyCacheMatchesNothing) {
  PrefixCache cache(8, kBs);
  EXPECT_TRUE(cache.match(iota_tokens(12), 10).empty());
  EXPECT_EQ(cache.num_cached_blocks(), 0);
}

TEST(PrefixCacheTest, MatchesTheLongestCachedChainOfFullBlocks) {
  PrefixCache cache(8, kBs);
  const auto tokens = iota_tokens(10);  // two full blocks and a partial one
  EXPECT_EQ(cache.insert(kNoBlock, block_of(tokens, 0), 5).outcome, InsertOutcome::kInserted);
  EXPECT_EQ(cache.insert(5, block_of(tokens, 1), 2).outcome, InsertOutcome::kInserted);
  EXPECT_EQ(cache.match(tokens, 10), (std::vector<BlockId>{5, 2}));
  EXPECT_EQ(cache.match(tokens, 1), std::vector<BlockId>{5});
  EXPECT_TRUE(cache.match(tokens, 0).empty());
  // Diverging in the second block keeps only the first.
  auto other = tokens;
  other[5] = 9;
  EXPECT_EQ(cache.match(other, 10), std::vector<BlockId>{5});
  // A partial block never matches.
  EXPECT_TRUE(cache.match(std::span<const int32_t>(tokens).first(3), 10).empty());
  EXPECT_EQ(cache.parent_of(2), 5);
  EXPECT_EQ(cache.num_children(5), 1);
  expect_consistent(cache);
}

TEST(PrefixCacheTest, EqualBlocksUnderDifferentPrefixesDoNotAlias) {
  PrefixCache cache(8, kBs);
  const std::vector<int32_t> a = {1, 2, 3, 4, 9, 9, 9, 9};
  const std::vector<int32_t> b = {5, 6, 7, 8, 9, 9, 9, 9};
  cache.insert(kNoBlock, block_of(a, 0), 0);
  cache.insert(0, block_of(a, 1), 1);
  cache.insert(kNoBlock, block_of(b, 0), 2);
  EXPECT_EQ(cache.insert(2, block_of(b, 1), 3).outcome, InsertOutcome::kInserted);
  EXPECT_EQ(cache.match(a, 2), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(cache.match(b, 2), (std::vector<BlockId>{2, 3}));
  // The second block alone (at the root) is not cached.
  EXPECT_TRUE(cache.match(block_of(a, 1), 1).empty());
  expect_consistent(cache);
}

TEST(PrefixCacheTest, InsertingAnExistingKeyReturnsTheCachedBlock) {
  PrefixCache cache(8, kBs);
  const auto tokens = iota_tokens(4);
  cache.insert(kNoBlock, tokens, 3);
  const InsertResult again = cache.insert(kNoBlock, tokens, 6);
  EXPECT_EQ(again.outcome, InsertOutcome::kAlreadyCached);
  EXPECT_EQ(again.block, 3);
  EXPECT_FALSE(cache.contains(6));
  expect_consistent(cache);
}

TEST(PrefixCacheTest, MisuseIsABug) {
  PrefixCache cache(8, kBs);
  const auto tokens = iota_tokens(8);
  EXPECT_THROW(cache.insert(kNoBlock, block_of(tokens, 0).first(3), 0), std::logic_error);
  EXPECT_THROW(cache.insert(4, block_of(tokens, 1), 0), std::logic_error);  // parent not cached
  cache.insert(kNoBlock, block_of(tokens, 0), 0);
  EXPECT_THROW(cache.insert(kNoBlock, block_of(tokens, 1), 0), std::logic_error);  // 0 cached
  cache.insert(0, block_of(tokens, 1), 1);
  EXPECT_THROW(cache.erase(0), std::logic_error);  // not a leaf
  EXPECT_THROW(cache.erase(5), std::logic_error);  // not cached
  expect_consistent(cache);
}

TEST(PrefixCacheTest, ErasingALeafMakesItsParentALeaf) {
  PrefixCache cache(8, kBs);
  const auto tokens = iota_tokens(8);
  cache.insert(kNoBlock, block_of(tokens, 0), 0);
  cache.insert(0, block_of(tokens, 1), 1);
  cache.erase(1);
  EXPECT_EQ(cache.num_children(0), 0);
  EXPECT_EQ(cache.match(tokens, 2), std::vector<BlockId>{0});
  cache.erase(0);
  EXPECT_TRUE(cache.match(tokens, 2).empty());
  EXPECT_EQ(cache.counters().num_evictions, 2u);
  expect_consistent(cache);
}

TEST(PrefixCacheTest, CountsQueriesHitsAndTokensSaved) {
  PrefixCache cache(8, kBs);
  cache.record_query(100, 0);
  cache.record_query(100, 64);
  EXPECT_EQ(cache.counters().num_queries, 2u);
  EXPECT_EQ(cache.counters().num_hits, 1u);
  EXPECT_EQ(cache.counters().num_query_tokens, 200u);
  EXPECT_EQ(cache.counters().num_hit_tokens, 64u);
  EXPECT_DOUBLE_EQ(cache.counters().hit_rate(), 0.32);
  EXPECT_DOUBLE_EQ(PrefixCacheCounters{}.hit_rate(), 0.0);
}

// ---- KvCacheManager ------------------------------------------------------------------------

KvCacheManager make_manager(int32_t num_blocks, bool prefix_caching = true) {
  return KvCacheManager(KvCacheConfig{num_blocks, kBs, prefix_caching});
}

// Allocates and "computes" a whole prompt, as a sequence would, then caches its full blocks.
SequenceBlocks run_prompt(KvCacheManager& kv, const std::vector<int32_t>& tokens) {
  SequenceBlocks seq;
  const PrefixMatch match = kv.find_cached_prefix(tokens);
  EXPECT_TRUE(kv.allocate_slots(seq, match, static_cast<int32_t>(tokens.size())));
  kv.cache_full_blocks(seq, tokens, static_cast<int32_t>(tokens.size()));
  return seq;
}

TEST(KvCacheManagerTest, AllocatesBlocksAsTheSequenceGrows) {
  auto kv = make_manager(8);
  SequenceBlocks seq;
  EXPECT_TRUE(kv.allocate_slots(seq, 1));
  EXPECT_EQ(seq.blocks.size(), 1u);
  EXPECT_TRUE(kv.allocate_slots(seq, 4));
  EXPECT_EQ(seq.blocks.size(), 1u);
  EXPECT_TRUE(kv.allocate_slots(seq, 5));
  EXPECT_EQ(seq.blocks.size(), 2u);
  EXPECT_FALSE(kv.allocate_slots(seq, 100));  // all or nothing
  EXPECT_EQ(seq.blocks.size(), 2u);
  EXPECT_EQ(kv.stats().num_referenced, 2);
  kv.free_sequence(seq);
  EXPECT_TRUE(seq.blocks.empty());
  EXPECT_EQ(kv.stats().num_referenced, 0);
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, AHitNeverCoversTheLastToken) {
  auto kv = make_manager(8);
  const auto prompt = iota_tokens(8);  // exactly two blocks
  SequenceBlocks first = run_prompt(kv, prompt);
  EXPECT_EQ(first.num_cached_blocks, 2);
  // The same 8 tokens: only the first block is reused, the last token must be computed.
  EXPECT_EQ(kv.find_cached_prefix(prompt).num_tokens, 4);
  auto longer = prompt;
  longer.push_back(1);
  EXPECT_EQ(kv.find_cached_prefix(longer).num_tokens, 8);
  auto off = make_manager(8, /*prefix_caching=*/false);
  SequenceBlocks other = run_prompt(off, prompt);
  EXPECT_EQ(off.find_cached_prefix(longer).num_tokens, 0);
  EXPECT_EQ(other.num_cached_blocks, 0);
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, AdoptingAPrefixSharesBlocksByReference) {
  auto kv = make_manager(8);
  const auto prompt = iota_tokens(9);
  SequenceBlocks a = run_prompt(kv, prompt);
  SequenceBlocks b = run_prompt(kv, prompt);
  ASSERT_EQ(a.blocks.size(), 3u);
  ASSERT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(a.blocks[0], b.blocks[0]);
  EXPECT_EQ(a.blocks[1], b.blocks[1]);
  EXPECT_NE(a.blocks[2], b.blocks[2]);  // the partial tail block is private
  EXPECT_EQ(kv.pool().ref_count(a.blocks[0]), 2);
  EXPECT_EQ(kv.stats().num_referenced, 4);
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, AHitOnEvictableBlocksCountsAgainstTheRoomLeft) {
  auto kv = make_manager(4);
  const auto prompt = iota_tokens(9);  // 3 blocks, 2 of them full
  SequenceBlocks a = run_prompt(kv, prompt);
  kv.free_sequence(a);
  EXPECT_EQ(kv.stats().num_cached_unreferenced, 2);
  EXPECT_EQ(kv.pool().num_allocatable(), 4);
  SequenceBlocks b;
  const PrefixMatch match = kv.find_cached_prefix(prompt);
  ASSERT_EQ(match.blocks.size(), 2u);
  // 2 hit blocks + 3 new ones would need 5 of the 4 blocks: refused, nothing touched.
  EXPECT_FALSE(kv.allocate_slots(b, match, 20));
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(kv.stats().num_cached_unreferenced, 2);
  EXPECT_TRUE(kv.allocate_slots(b, match, 16));
  EXPECT_EQ(b.blocks.size(), 4u);
  EXPECT_EQ(kv.stats().num_cached_blocks, 2);  // the hits were not evicted by the allocation
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, ConcurrentIdenticalBlocksAreSharedOnceCached) {
  auto kv = make_manager(8);
  const auto prompt = iota_tokens(9);
  SequenceBlocks a;
  SequenceBlocks b;
  // Both admitted before either computed anything: no hit, private blocks.
  ASSERT_TRUE(kv.allocate_slots(a, 9));
  ASSERT_TRUE(kv.allocate_slots(b, 9));
  EXPECT_EQ(kv.stats().num_referenced, 6);
  kv.cache_full_blocks(a, prompt, 9);
  kv.cache_full_blocks(b, prompt, 9);
  // b swapped its two full blocks for a's: one copy of the prefix remains.
  EXPECT_EQ(a.blocks[0], b.blocks[0]);
  EXPECT_EQ(a.blocks[1], b.blocks[1]);
  EXPECT_EQ(b.num_cached_blocks, 2);
  EXPECT_EQ(kv.stats().num_referenced, 4);
  EXPECT_EQ(kv.stats().num_free, 4);
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, BlocksAreCachedAsSoonAsTheyAreFull) {
  auto kv = make_manager(8);
  const auto prompt = iota_tokens(12);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate_slots(seq, 6));  // first chunk: 6 tokens
  kv.cache_full_blocks(seq, prompt, 6);
  EXPECT_EQ(seq.num_cached_blocks, 1);
  EXPECT_EQ(kv.find_cached_prefix(prompt).num_tokens, 4);  // visible mid-prefill
  ASSERT_TRUE(kv.allocate_slots(seq, 12));
  kv.cache_full_blocks(seq, prompt, 12);
  EXPECT_EQ(seq.num_cached_blocks, 3);
  expect_consistent(kv);
}

TEST(KvCacheManagerTest, EvictsLeastRecentlyUsedLeavesAndNeverReferencedBlocks) {
  auto kv = make_manager(6);
  const auto old_prompt = iota_tokens(9, 100);
  const auto new_prompt = iota_tokens(9, 500);
  SequenceBlocks old_seq = run_prompt(kv, old_prompt);
  SequenceBlocks held = run_prompt(kv, iota_tokens(5, 900));  // stays referenced
  kv.free_sequence(old_seq);
  // Released tail-first: the leaf (second block) is evicted before its parent.
  const auto order = kv.pool().eviction_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(kv.prefix_cache().parent_of(order[1]), kNoBlock);
  SequenceBlocks fresh;
  ASSERT_TRUE(kv.allocate_slots(fresh, 9));  // 2 free + 1 evicted
  EXPECT_EQ(kv.stats().prefix.num_evictions, 1u);
  EXPECT_EQ(kv.find_cached_prefix(old_prompt).num_tokens, 4);  // the root block survived
  for (BlockId b : held.blocks) EXPECT_EQ(kv.pool().ref_count(b), 1);
  EXPECT_FALSE(kv.allocate_slots(fresh, 20));  // only held/fresh blocks left besides 1 cached
  kv.cache_full_blocks(fresh, new_prompt, 9);
  expect_consistent(kv);
}

}  // namespace
}  // namespace troupe::kv_cache
