// kv_capacity: blocks as tokens and conversations, with and without sliding-window KV groups.
#include "actors/kv_cache/kv_capacity.hpp"

#include <gtest/gtest.h>

namespace troupe::kv_cache {
namespace {

TEST(KvCapacity, OneGroupHoldsBlocksOverPagesPerConversation) {
  gpu::KvCacheGeometry g{.num_blocks = 728, .block_size = 16, .bytes = 256 << 20};
  const engine::KvCapacity c = kv_capacity(g, 2048);
  EXPECT_EQ(c.dtype, "f16");
  EXPECT_EQ(c.tokens, 728 * 16);
  EXPECT_EQ(c.conversations, 728 / 128);  // 2048 tokens: 128 pages each
  EXPECT_EQ(c.conversation_tokens, 2048);
  g.dtype = gpu::KvDtype::kQ8_0;
  g.num_blocks = 1370;  // the same memory in q8_0
  EXPECT_EQ(kv_capacity(g, 2048).conversations, 10);
  EXPECT_EQ(kv_capacity(g, 2048).dtype, "q8_0");
  EXPECT_EQ(kv_capacity(g, 2000).conversations, 1370 / 125);  // a partial page is a page
}

// Gemma 3 270M's shape: group 0 global, five sliding groups of window 512. A conversation of 8k
// tokens holds 512 global pages and 33 in each sliding group (window 512 over 16-token pages,
// straddling one boundary); a short one never more than its own length.
TEST(KvCapacity, SlidingGroupsHoldOnlyTheirWindow) {
  const gpu::KvCacheGeometry g{.num_blocks = 5000,
                               .block_size = 16,
                               .num_kv_groups = 6,
                               .sliding_window = 512,
                               .layers_per_group = 3};
  EXPECT_EQ(kv_capacity(g, 8192).conversations, 5000 / (512 + 5 * 33));
  EXPECT_EQ(kv_capacity(g, 160).conversations, 5000 / (10 + 5 * 10));
}

TEST(KvCapacity, NoConversationLengthMeansNoCount) {
  const gpu::KvCacheGeometry g{.num_blocks = 10, .block_size = 16};
  EXPECT_EQ(kv_capacity(g, 0).conversations, 0);
  EXPECT_EQ(kv_capacity(g, 0).tokens, 160);
}

}  // namespace
}  // namespace troupe::kv_cache
