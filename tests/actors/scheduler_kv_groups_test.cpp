// The scheduler with KV groups (a sliding-window model, gpu/kv_groups.hpp): every group grows
// together, the sliding groups give back the pages outside their window after each step, every
// key inside a window reads back through them (FakeStepModel::check_windows, which also checks
// that a page holds the KV of its own prefix), preemption frees all groups, and prompts that
// share a start share its pages through the prefix cache, window included.
#include "actors/scheduler/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::SchedulerHarness;
using testing::small_config;
using testing::token_range;

// KV groups (a sliding-window model): three groups, the sliding ones keeping 32 tokens, and
// three long requests (ignore_eos, so they run to max_tokens).
SchedulerConfig kv_groups_config(int32_t num_blocks) {
  SchedulerConfig config = small_config();
  config.num_kv_groups = 3;
  config.sliding_window = 32;
  config.num_blocks = num_blocks;
  config.max_model_len = 512;
  return config;
}

void add_long_requests(SchedulerHarness& h) {
  h.add(1, token_range(150, 100), 40, Priority::kNormal, /*ignore_eos=*/true);
  h.add(2, token_range(90, 300), 60, Priority::kNormal, /*ignore_eos=*/true);
  h.add(3, token_range(20, 500), 30, Priority::kNormal, /*ignore_eos=*/true);
}

// The requests run to their reference outputs with every key inside every window read back
// through the sliding groups (FakeStepModel::check_windows), and once decoding, a long sequence
// holds its whole context in group 0 and only its window in the others.
TEST(SchedulerTest, KvGroupsFreeSlidingPagesOutsideTheWindow) {
  const SchedulerConfig config = kv_groups_config(96);
  SchedulerHarness h(config);
  add_long_requests(h);
  // Run until request 1 decodes, then look at what it holds.
  for (int i = 0; i < 200 && h.outputs[1].size() < 10; ++i) ASSERT_TRUE(h.step());
  SlotInfo slot;
  for (const SlotInfo& s : h.scheduler.slots()) {
    if (s.request_id == 1) slot = s;
  }
  const int32_t context = slot.num_computed_tokens;
  const int32_t blocks = (context + 15) / 16;
  // Group 0 holds every block; each sliding group the blocks from the next token's window on.
  const int32_t window_blocks = blocks - std::max(0, context + 1 - 32) / 16;
  EXPECT_EQ(slot.num_blocks, blocks + 2 * window_blocks) << "context " << context;
  EXPECT_LT(slot.num_blocks, 3 * blocks);
  h.run_until_idle();
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_referenced(), 0);
}

// The same requests in a pool too small for them together: allocation counts every group's
// pages, preemption frees them all, and the recomputed requests still reach their outputs.
TEST(SchedulerTest, KvGroupsUnderPressurePreemptAndRecompute) {
  const SchedulerConfig config = kv_groups_config(30);
  SchedulerHarness h(config);
  add_long_requests(h);
  h.run_until_idle();
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  EXPECT_GT(h.scheduler.stats().num_preemptions, 0u);
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_referenced(), 0);
}

// prompt's first n tokens, then a tail of its own (so requests share exactly n tokens).
std::vector<int32_t> shared_start(int32_t n, int32_t tail_first, int32_t tail_len) {
  std::vector<int32_t> tokens = token_range(n, 100);
  for (int32_t t : token_range(tail_len, tail_first)) tokens.push_back(t);
  return tokens;
}

// A 150-token prompt computed, then two requests that share 150 and 70 of its tokens: each
// takes the shared blocks from the cache, the sliding groups' window pages with them (the
// first sequence released those before 150 + 1 - 32 into the cache as its window moved), and
// both reach their reference outputs, every window read back from pages of their own prefix.
TEST(SchedulerTest, KvGroupsShareAPromptsBlocksWithTheirWindow) {
  const SchedulerConfig config = kv_groups_config(120);
  SchedulerHarness h(config);
  ASSERT_TRUE(h.scheduler.kv_cache().prefix_caching_enabled());
  h.add(1, token_range(150, 100), 20, Priority::kNormal, /*ignore_eos=*/true);
  h.run_until_idle();
  const uint64_t hits_before = h.scheduler.stats().kv.prefix.num_hit_tokens;
  h.add(2, shared_start(150, 7000, 30), 20, Priority::kNormal, /*ignore_eos=*/true);
  h.run_until_idle();
  h.add(3, shared_start(70, 8000, 40), 20, Priority::kNormal, /*ignore_eos=*/true);
  h.run_until_idle();
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  // 150 shared tokens: 9 whole blocks (144); 70: 4 blocks (64).
  EXPECT_EQ(h.scheduler.stats().kv.prefix.num_hit_tokens - hits_before, 144u + 64u);
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_referenced(), 0);
}

// Many requests over a few shared starts in a pool too small for them: hits, evictions of nodes
// and window pages, preemptions and recomputation together, and still every output is the
// reference and every invariant holds after every step (the harness checks).
TEST(SchedulerTest, KvGroupsSharedStartsUnderPressure) {
  SchedulerConfig config = kv_groups_config(48);
  SchedulerHarness h(config);
  RequestId id = 1;
  for (int round = 0; round < 4; ++round) {
    for (int32_t start : {40, 90, 130}) {
      h.add(id, shared_start(start, 10000 + 100 * static_cast<int32_t>(id), 5 + round * 7), 25,
            Priority::kNormal, /*ignore_eos=*/true);
      ++id;
    }
    for (int i = 0; i < 15; ++i) (void)h.step();
  }
  h.run_until_idle();
  for (RequestId r = 1; r < id; ++r) EXPECT_EQ(h.outputs[r], h.expected_output(r)) << r;
  EXPECT_GT(h.scheduler.stats().kv.prefix.num_hit_tokens, 0u);
  EXPECT_GT(h.scheduler.stats().kv.prefix.num_evictions, 0u);
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_referenced(), 0);
}

}  // namespace
}  // namespace troupe::scheduler
