// The prefix cache with KV groups (issue 36, a sliding-window model): the sliding groups' pages
// cached beside the tree's nodes (WindowPages), a hit that takes the next token's window of them,
// a match shortened until its window pages are all cached, eviction in LRU order with a node's
// pages before it. Geometry: pages of 16 tokens, group 0 global, groups 1 and 2 keeping 32 tokens.
#include <numeric>
#include <stdexcept>

#include <gtest/gtest.h>

#include "actors/kv_cache/kv_cache_manager.hpp"
#include "actors/kv_cache/window_pages.hpp"

namespace troupe::kv_cache {
namespace {

constexpr int32_t kBs = 16;
constexpr int32_t kGroups = 3;
constexpr int32_t kWindow = 32;

KvCacheManager make_manager(int32_t num_blocks) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = kBs;
  config.num_kv_groups = kGroups;
  config.sliding_window = kWindow;
  return KvCacheManager(config);
}

std::vector<int32_t> tokens_from(int32_t n, int32_t first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// `tokens` with another tail of n tokens (so a match must stop before the last token).
std::vector<int32_t> with_tail(std::vector<int32_t> tokens, int32_t n) {
  for (int32_t i = 0; i < n; ++i) tokens.push_back(9000 + i);
  return tokens;
}

void expect_consistent(const KvCacheManager& kv) {
  const auto error = kv.check_invariants();
  EXPECT_FALSE(error.has_value()) << *error;
}

// A sequence that computed `tokens` whole, cached its blocks and let its window move past them.
SequenceBlocks run_prompt(KvCacheManager& kv, const std::vector<int32_t>& tokens) {
  SequenceBlocks seq;
  const auto n = static_cast<int32_t>(tokens.size());
  EXPECT_TRUE(kv.allocate_slots(seq, kv.find_cached_prefix(tokens), n));
  kv.cache_full_blocks(seq, tokens, n);
  kv.release_out_of_window(seq, n);
  return seq;
}

TEST(WindowPagesTest, AttachDetachAndTheirMisuse) {
  WindowPages pages(8, kGroups);
  EXPECT_EQ(pages.num_sliding_groups(), 2);
  pages.attach(0, 1, 5);
  EXPECT_EQ(pages.page_of(0, 1), 5);
  EXPECT_FALSE(pages.has_every_group(0));
  pages.attach(0, 2, 6);
  EXPECT_TRUE(pages.has_every_group(0));
  EXPECT_THROW(pages.attach(0, 1, 7), std::logic_error);      // the slot is taken
  EXPECT_THROW(pages.attach(1, 1, 5), std::logic_error);      // the page is attached elsewhere
  EXPECT_THROW((void)pages.page_of(0, 0), std::logic_error);  // group 0 is the tree's
  pages.detach_page(5);
  EXPECT_EQ(pages.page_of(0, 1), kNoBlock);
  EXPECT_FALSE(pages.is_attached(5));
  EXPECT_EQ(pages.detach_node(0), std::vector<BlockId>{6});
  EXPECT_EQ(pages.num_attached(), 0);
  EXPECT_FALSE(pages.check_invariants().has_value());
}

// A hit adopts every group-0 block and, in each sliding group, only the pages the next token's
// window reaches: those the first sequence still holds.
TEST(KvWindowCacheTest, AHitTakesTheWindowsPagesAndNoneBeforeIt) {
  auto kv = make_manager(64);
  EXPECT_TRUE(kv.prefix_caching_enabled());
  const std::vector<int32_t> prompt = tokens_from(96);  // 6 blocks
  SequenceBlocks first = run_prompt(kv, prompt);
  // Window of position 96: positions 65.. -> pages 4 and 5 held, pages 0-3 released (cached).
  for (const std::vector<BlockId>& group : first.sliding) {
    EXPECT_EQ(group[3], kNoBlock);
    EXPECT_NE(group[4], kNoBlock);
  }
  const PrefixMatch match = kv.find_cached_prefix(with_tail(prompt, 10));
  ASSERT_EQ(match.blocks, first.blocks);
  EXPECT_EQ(match.num_tokens, 96);
  ASSERT_EQ(match.sliding.size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(match.sliding[g], (std::vector<BlockId>{kNoBlock, kNoBlock, kNoBlock, kNoBlock,
                                                      first.sliding[g][4], first.sliding[g][5]}));
  }
  SequenceBlocks second;
  ASSERT_TRUE(kv.allocate_slots(second, match, 106));
  EXPECT_EQ(second.num_cached_blocks, 6);
  EXPECT_EQ(second.blocks.size(), 7u);
  EXPECT_EQ(second.sliding[0][4], first.sliding[0][4]);
  EXPECT_EQ(kv.pool().ref_count(first.sliding[1][5]), 2);
  expect_consistent(kv);
  // A shorter prompt of the same start: its window (positions 33..) is in pages 2 and 3, which
  // the first sequence released into the cache.
  const PrefixMatch shorter = kv.find_cached_prefix(with_tail(tokens_from(64), 5));
  EXPECT_EQ(shorter.num_tokens, 64);
  EXPECT_NE(shorter.sliding[0][2], kNoBlock);
  EXPECT_EQ(shorter.sliding[0][1], kNoBlock);
  kv.free_sequence(second);
  kv.free_sequence(first);
  EXPECT_EQ(kv.pool().num_referenced(), 0);
  expect_consistent(kv);
}

// The window pages of a match's end evicted: the match shortens to the last length whose window
// pages are all cached (not to nothing), and an evicted page before every window costs no hit.
TEST(KvWindowCacheTest, AMatchShortensUntilItsWindowPagesAreCached) {
  auto kv = make_manager(4 * kGroups);  // exactly one 64-token sequence
  const std::vector<int32_t> prompt = tokens_from(64);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate_slots(seq, 64));
  kv.cache_full_blocks(seq, prompt, 64);
  const BlockId group1_page3 = seq.sliding[0][3];
  kv.free_sequence(seq);  // sliding pages first, last to first: group 1's page 3 goes first
  ASSERT_EQ(kv.pool().eviction_order().front(), group1_page3);
  SequenceBlocks other;
  ASSERT_TRUE(kv.allocate_slots(other, 1));  // 1 page in each of 3 groups: evicts 3 pages
  expect_consistent(kv);
  // Evicted: group 1's pages 3, 2 and 1. A 64-token hit needs pages 2-3 (positions 33..): gone;
  // 48 needs 1-2; 32 needs 0-1; 16 needs page 0 only, which is there.
  const PrefixMatch match = kv.find_cached_prefix(with_tail(prompt, 3));
  EXPECT_EQ(match.num_tokens, 16);
  EXPECT_NE(match.sliding[0][0], kNoBlock);
  kv.free_sequence(other);
  expect_consistent(kv);
}

// Two sequences computing the same prompt at once: the second to cache shares the first's node
// and its window pages, and gives its own back.
TEST(KvWindowCacheTest, ConcurrentIdenticalWindowPagesAreSharedOnceCached) {
  auto kv = make_manager(64);
  const std::vector<int32_t> prompt = tokens_from(40);
  SequenceBlocks a;
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(a, 40));
  ASSERT_TRUE(kv.allocate_slots(b, 40));
  kv.cache_full_blocks(a, prompt, 40);
  kv.cache_full_blocks(b, prompt, 40);
  EXPECT_EQ(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(b.sliding[0][1], a.sliding[0][1]);
  EXPECT_EQ(b.sliding[1][0], a.sliding[1][0]);
  EXPECT_NE(b.blocks[2], a.blocks[2]);  // not full: private
  EXPECT_EQ(kv.pool().ref_count(a.sliding[1][1]), 2);
  EXPECT_EQ(kv.window_pages().num_attached(), 4);
  expect_consistent(kv);
  kv.free_sequence(a);
  kv.free_sequence(b);
  // 2 nodes and 4 window pages stay cached; the private pages went back.
  EXPECT_EQ(kv.pool().num_cached_unreferenced(), 6);
  EXPECT_EQ(kv.stats().num_cached_blocks, 6);
  expect_consistent(kv);
}

// The admin's flush: every unreferenced node goes, and the window pages with it.
TEST(KvWindowCacheTest, FlushingForgetsNodesAndTheirPages) {
  auto kv = make_manager(64);
  SequenceBlocks seq = run_prompt(kv, tokens_from(80));
  kv.free_sequence(seq);
  EXPECT_EQ(kv.window_pages().num_attached(), 10);
  EXPECT_EQ(kv.flush_unreferenced_cache(), 15);
  EXPECT_EQ(kv.window_pages().num_attached(), 0);
  EXPECT_EQ(kv.prefix_cache().num_cached_blocks(), 0);
  EXPECT_EQ(kv.pool().num_free(), 64);
  expect_consistent(kv);
}

}  // namespace
}  // namespace troupe::kv_cache
