// The scheduler with KV groups (a sliding-window model, gpu/kv_groups.hpp): every group grows
// together, the sliding groups give back the pages outside their window after each step, every
// key inside a window reads back through them (FakeStepModel::check_windows), and preemption
// frees all groups.
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
  EXPECT_FALSE(h.scheduler.kv_cache().prefix_caching_enabled());  // off with groups
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
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_free(), config.num_blocks);
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
  EXPECT_EQ(h.scheduler.kv_cache().pool().num_free(), config.num_blocks);
}

}  // namespace
}  // namespace troupe::scheduler
