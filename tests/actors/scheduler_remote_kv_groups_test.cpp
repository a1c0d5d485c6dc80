// Disaggregated prefill/decode with KV groups (a sliding-window model, gpu/kv_groups.hpp), policy
// side: the prefill server holds every group's pages and says which sliding pages it already
// freed; the decode server pulls group 0's blocks and, per sliding group, only the pages the next
// token's window reaches, and refuses a source that lacks one of those (computing the prompt
// itself). The fake model reads every window back through the sliding groups and checks each
// page holds its own prefix's KV (FakeStepModel::check_windows), so a page pulled into the wrong
// place, or one missing, changes the outcome.
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/scheduler.hpp"
#include "remote_kv_test_support.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using kv_cache::kNoBlock;
using testing::add_remote;
using testing::complete;
using testing::prefill_and_hold;
using testing::pull;
using testing::remote_request;
using testing::run_until_idle;
using testing::SchedulerHarness;
using testing::source_of;
using testing::take_work;
using testing::token_range;

constexpr int32_t kWindow = 32;

// Three groups of 16-token pages, the sliding ones keeping 32 tokens; a 101-token prefill in one
// span.
SchedulerConfig groups_config() {
  SchedulerConfig config = testing::small_config();
  config.max_num_batched_tokens = 128;
  config.chunked_prefill_size = 0;
  config.num_blocks = 96;
  config.num_kv_groups = 3;
  config.sliding_window = kWindow;
  return config;
}

// The pull order of request 1, admitted on `decode` (no step runs it before its KV is resident).
std::optional<KvPullOrder> admit_and_take_pull(SchedulerHarness& decode) {
  take_work(decode);
  const StepPlan plan = decode.scheduler.schedule();
  if (!plan.empty()) complete(decode, plan);
  KvWork work = take_work(decode);
  if (work.pulls.size() != 1) return std::nullopt;
  return work.pulls[0];
}

// A 100-token prompt: the prefill server holds its 7 pages in group 0 and, having freed those
// before the window of position 100 (positions < 69: pages 0-3), pages 4-6 in each sliding
// group. The decode server pulls 7 + 2 x 3 pages and decodes the reference output.
TEST(SchedulerRemoteKvGroups, PulledWindowPagesDecodeLikeALocalPrefill) {
  SchedulerHarness prefill(groups_config());
  SchedulerHarness decode(groups_config());
  const std::vector<int32_t> prompt = token_range(100, 100);
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const HeldKv& kv = *held->held_kv;
  ASSERT_EQ(kv.block_ids.size(), 7u);
  ASSERT_EQ(kv.sliding_block_ids.size(), 2u);
  for (const std::vector<kv_cache::BlockId>& group : kv.sliding_block_ids) {
    ASSERT_EQ(group.size(), 7u);
    EXPECT_EQ(group[3], kNoBlock);
    EXPECT_NE(group[4], kNoBlock);
  }
  ASSERT_EQ(add_remote(decode,
                       remote_request(1, prompt, 12, source_of(kv, "lease-1"), kv.first_token_id)),
            AddResult::kAccepted);
  const std::optional<KvPullOrder> order = admit_and_take_pull(decode);
  ASSERT_TRUE(order.has_value());
  const Sequence* seq = decode.scheduler.find(1);
  ASSERT_NE(seq, nullptr);
  std::vector<BlockCopy> expected;
  for (size_t i = 0; i < 7; ++i) expected.push_back({kv.block_ids[i], seq->kv.blocks[i]});
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(seq->kv.sliding[g][3], kNoBlock) << "allocated before the window: given back";
    for (size_t i = 4; i < 7; ++i)
      expected.push_back({kv.sliding_block_ids[g][i], seq->kv.sliding[g][i]});
  }
  ASSERT_EQ(order->copies.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(order->copies[i].source, expected[i].source) << i;
    EXPECT_EQ(order->copies[i].destination, expected[i].destination) << i;
  }
  pull(decode, prefill, *order);
  decode.scheduler.kv_resident(1, /*ok=*/true);
  EXPECT_TRUE(prefill.scheduler.release_transferred(1));
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
  EXPECT_EQ(decode.scheduler.stats().num_kv_pull_fallbacks, 0u);
  EXPECT_EQ(decode.scheduler.kv_cache().pool().num_referenced(), 0);
  EXPECT_EQ(prefill.scheduler.kv_cache().pool().num_referenced(), 0);
}

// The decode pool holds 16 pages: the 7 of group 0 and the 2 x 3 of the window fit, a page per
// position in every group (21) would not. The pull is admitted at once.
TEST(SchedulerRemoteKvGroups, APullAllocatesOnlyTheWindowsPages) {
  SchedulerHarness prefill(groups_config());
  SchedulerConfig small = groups_config();
  small.num_blocks = 16;
  SchedulerHarness decode(small);
  const std::vector<int32_t> prompt = token_range(100, 100);
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const HeldKv& kv = *held->held_kv;
  ASSERT_EQ(
      add_remote(decode, remote_request(1, prompt, 4, source_of(kv, "lease-1"), kv.first_token_id)),
      AddResult::kAccepted);
  const std::optional<KvPullOrder> order = admit_and_take_pull(decode);
  ASSERT_TRUE(order.has_value()) << "not admitted into 16 pages";
  EXPECT_EQ(order->copies.size(), 13u);
  EXPECT_EQ(decode.scheduler.kv_cache().pool().num_referenced(), 13);
  pull(decode, prefill, *order);
  decode.scheduler.kv_resident(1, /*ok=*/true);
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
}

// The decode server has the prompt's first 64 tokens cached (with the window pages of that hit):
// it pulls only pages 4-6 of every group, and the answer is still the reference.
TEST(SchedulerRemoteKvGroups, APullTakesWhatTheLocalCacheLacksInEveryGroup) {
  SchedulerHarness prefill(groups_config());
  SchedulerHarness decode(groups_config());
  const std::vector<int32_t> prompt = token_range(100, 100);
  ASSERT_EQ(decode.add(9, token_range(64, 100), 3), AddResult::kAccepted);
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const HeldKv& kv = *held->held_kv;
  ASSERT_EQ(add_remote(decode,
                       remote_request(1, prompt, 12, source_of(kv, "lease-1"), kv.first_token_id)),
            AddResult::kAccepted);
  const std::optional<KvPullOrder> order = admit_and_take_pull(decode);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(decode.scheduler.find(1)->num_cached_prompt_tokens, 64);
  EXPECT_EQ(order->copies.size(), 3u * 3u);
  pull(decode, prefill, *order);
  decode.scheduler.kv_resident(1, /*ok=*/true);
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
  EXPECT_EQ(decode.outputs[9], decode.expected_output(9));
  EXPECT_EQ(decode.scheduler.kv_cache().pool().num_referenced(), 0);
}

// A source that lacks a page inside the window (here: a sliding page the prefill server freed,
// needed because no first token came and position 46 is computed again, whose window reaches
// page 0) is not pulled from: the prompt is computed here, to the same answer.
TEST(SchedulerRemoteKvGroups, ASourceMissingAWindowPageIsComputedHere) {
  SchedulerHarness prefill(groups_config());
  SchedulerHarness decode(groups_config());
  const std::vector<int32_t> prompt = token_range(47, 100);
  const std::optional<FinishedSequence> held = prefill_and_hold(prefill, 1, prompt);
  ASSERT_TRUE(held.has_value() && held->held_kv.has_value());
  const HeldKv& kv = *held->held_kv;
  // The window of position 47 starts at 16: page 0 was freed there.
  ASSERT_EQ(kv.sliding_block_ids[0][0], kNoBlock);
  ASSERT_EQ(add_remote(decode, remote_request(1, prompt, 6, source_of(kv, "lease-1"),
                                              /*first_token_id=*/std::nullopt)),
            AddResult::kAccepted);
  EXPECT_EQ(decode.scheduler.stats().num_kv_pull_fallbacks, 1u);
  const KvWork work = take_work(decode);
  ASSERT_EQ(work.releases.size(), 1u);  // the lease goes back at once
  ASSERT_NO_FATAL_FAILURE(run_until_idle(decode));
  EXPECT_TRUE(take_work(decode).pulls.empty());
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
}

}  // namespace
}  // namespace troupe::scheduler
