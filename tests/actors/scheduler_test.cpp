// Scheduler policy, seed behaviour by seed behaviour (docs/design.md §2, issue 3): chunked
// prefill, the decode-first budget, continuous batching, back-pressure, stop conditions, cancel,
// prefix reuse, eviction, priorities and preemption, P/D transfer, stats and slots.
#include "actors/scheduler/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::FakeStepModel;
using testing::ids_in;
using testing::SchedulerHarness;
using testing::slice_of;
using testing::small_config;
using testing::token_range;


// One sequence at a time and no priority preemption: admission order alone decides who runs.
SchedulerConfig one_slot_without_preemption() {
  SchedulerConfig config = small_config();
  config.max_num_seqs = 1;
  config.enable_priority_preemption = false;
  return config;
}

TEST(SchedulerConfigTest, RejectsUnusableConfigs) {
  EXPECT_FALSE(validate(small_config()).has_value());
  auto bad = small_config();
  bad.max_num_batched_tokens = 4;  // fewer than max_num_seqs
  EXPECT_TRUE(validate(bad).has_value());
  EXPECT_THROW(Scheduler{bad}, std::invalid_argument);
  bad = small_config();
  bad.block_size = 0;
  EXPECT_TRUE(validate(bad).has_value());
  bad = small_config();
  bad.num_blocks = 0;
  EXPECT_TRUE(validate(bad).has_value());
  bad = small_config();
  bad.eos_token_ids = {-1};
  EXPECT_TRUE(validate(bad).has_value());
  EXPECT_EQ(to_string(SchedulerRole::kPrefillOnly), "prefill_only");
}

TEST(SchedulerTest, RefusalsAreValues) {
  auto config = small_config();
  config.max_queue = 2;
  config.num_blocks = 8;  // 128 tokens of KV
  SchedulerHarness h(config);
  EXPECT_EQ(h.add(1, {}, 4), AddResult::kEmptyPrompt);
  EXPECT_EQ(h.add(1, {5, 6}, 0), AddResult::kInvalidMaxTokens);
  EXPECT_EQ(h.add(1, token_range(512, 10), 4), AddResult::kPromptTooLong);
  EXPECT_EQ(h.add(1, token_range(100, 10), 100), AddResult::kNeverFits);  // 199 tokens of KV
  EXPECT_EQ(h.add(1, token_range(100, 10), 29), AddResult::kAccepted);    // 128 tokens: fits
  EXPECT_EQ(h.add(1, {5}, 4), AddResult::kDuplicateId);
  EXPECT_EQ(h.add(2, {5}, 4), AddResult::kAccepted);
  EXPECT_EQ(h.add(3, {5}, 4), AddResult::kQueueFull);  // back-pressure: refused at once
  EXPECT_EQ(h.scheduler.stats().num_requests_refused, 6u);
  EXPECT_EQ(to_string(AddResult::kQueueFull), "queue_full");
  h.step();  // both admitted: the queue has room again
  EXPECT_EQ(h.add(3, {5}, 4), AddResult::kAccepted);
  h.run_until_idle();
  EXPECT_EQ(h.outputs[1], h.expected_output(1));
}

TEST(SchedulerTest, ChunkedPrefillComputesALongPromptInSpans) {
  SchedulerHarness h(small_config());
  ASSERT_EQ(h.add(7, token_range(100, 10), 2), AddResult::kAccepted);
  const int32_t expected_spans[][2] = {{0, 32}, {32, 32}, {64, 32}, {96, 4}, {100, 1}};
  for (const auto& [start, length] : expected_spans) {
    const auto plan = h.step();
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->batch.seqs.size(), 1u);
    const gpu::SequenceSlice& slice = plan->batch.seqs[0];
    EXPECT_EQ(slice.num_tokens, length);
    EXPECT_EQ(slice.context_len, start + length);
    EXPECT_EQ(plan->batch.positions.front(), start);
    EXPECT_EQ(plan->batch.positions.back(), start + length - 1);
    // Only the span that reaches the end of the sequence samples.
    EXPECT_EQ(slice.sample, start + length >= 100);
    EXPECT_EQ(plan->batch.max_blocks_per_seq, (start + length + 15) / 16);
  }
  EXPECT_EQ(h.reasons[7], FinishReason::kMaxTokens);
  EXPECT_EQ(h.outputs[7], h.expected_output(7));
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, DecodeIsBudgetedFirstAndPrefillFillsTheRest) {
  auto config = small_config();
  config.max_num_batched_tokens = 16;
  config.chunked_prefill_size = 0;  // only the budget limits a chunk
  SchedulerHarness h(config);
  for (RequestId id = 1; id <= 3; ++id) h.add(id, token_range(4, static_cast<int32_t>(id) * 100), 50);
  h.step();  // three 4-token prompts
  h.add(9, token_range(100, 1000), 5);
  const auto plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 2, 3, 9}));
  EXPECT_EQ(plan->num_decode_tokens, 3);
  EXPECT_EQ(plan->num_prefill_tokens, 13);
  EXPECT_EQ(plan->batch.num_tokens(), 16);
  EXPECT_EQ(slice_of(*plan, 9)->num_tokens, 13);
  EXPECT_EQ(h.scheduler.stats().last_step_num_tokens, 16);
  EXPECT_EQ(h.scheduler.stats().last_step_num_seqs, 4);
  // Now the long prompt is a running prefill that alone could take the whole budget: the
  // decodes still come first, every step, and it gets what they leave.
  for (int i = 0; i < 3; ++i) {
    const auto next = h.step();
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->num_decode_tokens, 3) << "step " << i;
    ASSERT_NE(slice_of(*next, 9), nullptr);
    EXPECT_EQ(slice_of(*next, 9)->num_tokens, 13) << "step " << i;
  }
}

TEST(SchedulerTest, MaxNumSeqsCapsTheBatchAndTheRestWait) {
  auto config = small_config();
  config.max_num_seqs = 2;
  SchedulerHarness h(config);
  h.add(1, {11, 12}, 3);
  h.add(2, {21, 22}, 6);
  h.add(3, {31, 32}, 2);
  auto plan = h.step();
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(h.scheduler.stats().num_waiting, 1);
  h.step();
  h.step();  // request 1 finishes (3 tokens)
  EXPECT_EQ(h.reasons[1], FinishReason::kMaxTokens);
  plan = h.step();  // continuous batching: 3 takes the free slot at once
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{2, 3}));
  h.run_until_idle();
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

TEST(SchedulerTest, StopsOnEosUnlessIgnoredAndOnStopTokensRegardless) {
  const auto prompt = token_range(5, 40);
  auto config = small_config();
  config.eos_token_ids = {FakeStepModel::next_token(prompt, testing::fake_config_for(config, 1ULL << 62))};
  SchedulerHarness h(config);
  h.add(1, prompt, 10);
  h.add(2, prompt, 10, Priority::kNormal, /*ignore_eos=*/true);
  NewRequest stop_id;
  stop_id.request_id = 3;
  stop_id.prompt_token_ids = prompt;
  stop_id.stop.ignore_eos = true;
  stop_id.stop.stop_token_ids = config.eos_token_ids;  // explicit ids stop even with ignore_eos
  ASSERT_EQ(h.scheduler.add_request(stop_id), AddResult::kAccepted);
  h.run_until_idle();
  EXPECT_EQ(h.reasons[1], FinishReason::kEos);
  EXPECT_EQ(h.outputs[1].size(), 1u);
  EXPECT_EQ(h.reasons[2], FinishReason::kMaxTokens);
  EXPECT_EQ(h.outputs[2].size(), 10u);
  EXPECT_EQ(h.reasons[3], FinishReason::kStopToken);
  EXPECT_EQ(openai_finish_reason(FinishReason::kEos), "stop");
  EXPECT_EQ(openai_finish_reason(FinishReason::kMaxModelLen), "length");
  EXPECT_EQ(openai_finish_reason(FinishReason::kCancelled), "cancelled");
}

TEST(SchedulerTest, StopsAtMaxModelLen) {
  auto config = small_config();
  config.max_model_len = 40;
  SchedulerHarness h(config);
  h.add(1, token_range(30, 7), 1000);
  h.run_until_idle();
  EXPECT_EQ(h.reasons[1], FinishReason::kMaxModelLen);
  EXPECT_EQ(h.outputs[1].size(), 10u);
  EXPECT_EQ(h.outputs[1], h.expected_output(1));
}

TEST(SchedulerTest, CancelInAnyStateFreesEverything) {
  auto config = small_config();
  config.max_num_seqs = 1;
  SchedulerHarness h(config);
  h.add(1, token_range(40, 10), 50);
  h.add(2, token_range(40, 90), 50);
  h.step();
  EXPECT_GT(h.scheduler.kv_cache().stats().num_referenced, 0);
  const auto waiting = h.scheduler.cancel(2);
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->reason, FinishReason::kCancelled);
  const auto running = h.scheduler.cancel(1);
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->num_prompt_tokens, 40);
  EXPECT_FALSE(h.scheduler.cancel(1).has_value());  // already gone
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
  EXPECT_FALSE(h.scheduler.has_unfinished_requests());
  EXPECT_TRUE(h.scheduler.schedule().empty());
  h.check();
}

TEST(SchedulerTest, CancelWhileAStepIsInFlightDropsItsToken) {
  SchedulerHarness h(small_config());
  h.add(1, {5, 6, 7}, 10);
  h.add(2, {8, 9}, 10);
  const StepPlan plan = h.scheduler.schedule();
  ASSERT_EQ(plan.batch.seqs.size(), 2u);
  EXPECT_TRUE(h.scheduler.step_in_flight());
  ASSERT_TRUE(h.scheduler.cancel(1).has_value());
  EXPECT_EQ(h.add(3, {1, 2}, 10), AddResult::kAccepted);  // adding mid-flight is fine too
  const StepUpdate update = h.scheduler.on_step_complete(h.model.run(plan.batch));
  ASSERT_EQ(update.tokens.size(), 1u);
  EXPECT_EQ(update.tokens[0].request_id, 2u);
  EXPECT_EQ(update.tokens[0].num_generated_tokens, 1);
  EXPECT_TRUE(update.finished.empty());
  h.check();
}

TEST(SchedulerTest, FinishEndsARequestForAStopString) {
  SchedulerHarness h(small_config());
  h.add(1, {5, 6, 7}, 10);
  h.step();
  const auto finished = h.scheduler.finish(1, FinishReason::kStopString);
  ASSERT_TRUE(finished.has_value());
  EXPECT_EQ(finished->reason, FinishReason::kStopString);
  EXPECT_EQ(finished->num_generated_tokens, 1);
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, ProtocolMisuseIsABug) {
  SchedulerHarness h(small_config());
  EXPECT_THROW(h.scheduler.on_step_complete({}), std::logic_error);
  h.add(1, {5, 6}, 3);
  const StepPlan plan = h.scheduler.schedule();
  EXPECT_THROW(h.scheduler.schedule(), std::logic_error);  // one step in flight at a time
  gpu::StepResult wrong = h.model.run(plan.batch);
  wrong.step_id += 1;
  EXPECT_THROW(h.scheduler.on_step_complete(wrong), std::logic_error);
  gpu::StepResult missing;
  missing.step_id = plan.batch.step_id;
  EXPECT_THROW(h.scheduler.on_step_complete(missing), std::logic_error);
}

TEST(SchedulerTest, ABorrowedKvManagerMustBeAttachedToTouchKv) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config, Scheduler::KvCacheHome::kBorrowed);
  EXPECT_FALSE(scheduler.has_kv_cache());
  NewRequest request;
  request.request_id = 1;
  request.prompt_token_ids = token_range(20, 100);
  request.stop.max_tokens = 4;
  EXPECT_EQ(scheduler.add_request(request), AddResult::kAccepted);  // needs no KV
  EXPECT_THROW((void)scheduler.schedule(), std::logic_error);
  EXPECT_EQ(scheduler.stats().num_waiting, 1);
  EXPECT_EQ(scheduler.stats().kv.num_blocks, 0);  // the KV figures are the kv-cache actor's

  auto other = config;
  other.num_blocks = config.num_blocks + 1;
  EXPECT_THROW(scheduler.attach_kv_cache(std::make_unique<kv_cache::KvCacheManager>(
                   Scheduler::kv_cache_config(other))),
               std::logic_error);
  scheduler.attach_kv_cache(
      std::make_unique<kv_cache::KvCacheManager>(Scheduler::kv_cache_config(config)));
  const StepPlan plan = scheduler.schedule();
  EXPECT_EQ(ids_in(plan), (std::vector<RequestId>{1}));
  // Sequences keep their block ids across a loan; the blocks stay theirs in the manager.
  std::unique_ptr<kv_cache::KvCacheManager> lent = scheduler.detach_kv_cache();
  EXPECT_EQ(lent->stats().num_referenced, 2);
  EXPECT_THROW((void)scheduler.cancel(1), std::logic_error);
  scheduler.attach_kv_cache(std::move(lent));
  EXPECT_TRUE(scheduler.cancel(1).has_value());
  EXPECT_EQ(scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, ReusesAFullyCachedPrompt) {
  SchedulerHarness h(small_config());
  const auto prompt = token_range(64, 300);
  h.add(1, prompt, 3);
  h.run_until_idle();
  h.add(2, prompt, 3);
  const auto plan = h.step();
  // 64 tokens = 4 full blocks, but the last token is recomputed: 3 blocks (48 tokens) reused.
  ASSERT_EQ(plan->batch.seqs.size(), 1u);
  EXPECT_EQ(plan->batch.seqs[0].num_tokens, 16);
  EXPECT_EQ(plan->batch.positions.front(), 48);
  h.run_until_idle();
  EXPECT_EQ(h.outputs[2], h.expected_output(2));
  const auto stats = h.scheduler.stats();
  EXPECT_EQ(stats.kv.prefix.num_queries, 2u);
  EXPECT_EQ(stats.kv.prefix.num_hits, 1u);
  EXPECT_EQ(stats.kv.prefix.num_hit_tokens, 48u);
  EXPECT_DOUBLE_EQ(stats.prefix_cache_hit_rate, 48.0 / 128.0);
}

TEST(SchedulerTest, ReusesThePartOfAPromptThatIsCached) {
  SchedulerHarness h(small_config());
  auto prompt = token_range(64, 300);
  h.add(1, prompt, 3);
  h.run_until_idle();
  prompt[40] = 7;  // diverges inside the third block
  h.add(2, prompt, 3);
  const auto plan = h.step();
  EXPECT_EQ(plan->batch.positions.front(), 32);
  EXPECT_EQ(h.scheduler.find(2)->num_cached_prompt_tokens, 32);
  h.run_until_idle();
  EXPECT_EQ(h.outputs[2], h.expected_output(2));
}

std::vector<int32_t> system_prompt_with_suffix(int32_t suffix, int32_t first_token = 500) {
  auto tokens = token_range(64, first_token);  // the shared "system prompt": 4 blocks
  tokens.push_back(suffix);
  return tokens;
}

TEST(SchedulerTest, ConcurrentRequestsWithASharedPromptComputeItOnce) {
  auto config = small_config();
  config.chunked_prefill_size = 16;
  SchedulerHarness h(config);
  h.add(1, system_prompt_with_suffix(1), 5);
  h.add(2, system_prompt_with_suffix(2), 5);
  h.add(3, system_prompt_with_suffix(3, /*first_token=*/900), 5);  // another system prompt
  auto plan = h.step();
  // 2 steps aside while 1 computes the block it needs; 3 shares nothing and goes ahead of it.
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 3}));
  h.add(4, system_prompt_with_suffix(4), 5);  // arrives mid-prefill: waits behind 2
  while (h.scheduler.find(1)->num_computed_tokens < 64) {
    plan = h.step();
    EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 3}));
    ASSERT_EQ(h.scheduler.stats().num_waiting, 2);
  }
  // The whole shared prompt is cached: 2 and 4 compute only their own last token, in order.
  plan = h.step();
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 3, 2, 4}));
  EXPECT_EQ(h.scheduler.find(2)->num_cached_prompt_tokens, 64);
  EXPECT_EQ(h.scheduler.find(4)->num_cached_prompt_tokens, 64);
  EXPECT_EQ(slice_of(*plan, 2)->num_tokens, 1);
  EXPECT_EQ(slice_of(*plan, 2)->num_prompt_tokens, 65);  // its one token is prompt, not decode
  EXPECT_EQ(h.scheduler.stats().num_prefix_deferrals, 4u + 3u);  // 2 in steps 1-4, 4 in 2-4
  h.run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

TEST(SchedulerTest, WithoutThePrefixCacheSharedPromptsAreComputedSideBySide) {
  auto config = small_config();
  config.chunked_prefill_size = 16;
  config.enable_prefix_caching = false;
  SchedulerHarness h(config);
  h.add(1, system_prompt_with_suffix(1), 5);
  h.add(2, system_prompt_with_suffix(2), 5);
  const auto plan = h.step();
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(h.scheduler.stats().num_prefix_deferrals, 0u);
  h.run_until_idle();
  for (RequestId id = 1; id <= 2; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

TEST(SchedulerTest, EvictsLeastRecentlyUsedCacheUnderPressureButNeverBlocksInUse) {
  auto config = small_config();
  config.num_blocks = 12;  // 192 tokens
  SchedulerHarness h(config);
  h.add(100, token_range(20, 9000), 30);  // long-lived, holds up to 4 blocks throughout
  for (RequestId id = 1; id <= 6; ++id) {
    h.add(id, token_range(64, static_cast<int32_t>(id) * 1000), 2);
    for (int i = 0; i < 4; ++i) h.step();
  }
  h.run_until_idle();
  EXPECT_GT(h.scheduler.kv_cache().stats().prefix.num_evictions, 0u);
  EXPECT_EQ(h.scheduler.stats().num_preemptions, 0u);
  for (RequestId id : {1, 2, 3, 4, 5, 6, 100}) {
    EXPECT_EQ(h.outputs[static_cast<RequestId>(id)], h.expected_output(static_cast<RequestId>(id)));
  }
  // The most recent prompt survived; the oldest was evicted first.
  EXPECT_GT(h.scheduler.kv_cache().find_cached_prefix(token_range(64, 6000)).num_tokens, 0);
  EXPECT_EQ(h.scheduler.kv_cache().find_cached_prefix(token_range(64, 1000)).num_tokens, 0);
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, AdmitsByPriorityThenArrival) {
  SchedulerHarness h(one_slot_without_preemption());
  h.add(1, {1, 1}, 1, Priority::kLow);
  h.add(2, {2, 2}, 1, Priority::kNormal);
  h.add(3, {3, 3}, 1, Priority::kCritical);
  h.add(4, {4, 4}, 1, Priority::kHigh);
  h.add(5, {5, 5}, 1, Priority::kNormal);
  std::vector<RequestId> order;
  while (auto plan = h.step()) order.push_back(plan->batch.seqs.at(0).seq_id);
  EXPECT_EQ(order, (std::vector<RequestId>{3, 4, 2, 5, 1}));
}

TEST(SchedulerTest, HigherPriorityPreemptsTheLowestPriorityLatestArrival) {
  auto config = small_config();
  config.max_num_seqs = 3;
  SchedulerHarness h(config);
  h.add(1, token_range(20, 100), 30, Priority::kLow);
  h.add(2, token_range(20, 200), 30, Priority::kNormal);
  h.add(3, token_range(20, 300), 30, Priority::kLow);
  h.step();
  h.step();
  h.add(4, token_range(20, 400), 5, Priority::kHigh);
  const auto plan = h.step();
  EXPECT_EQ(plan->preempted, std::vector<RequestId>{3});  // low, and arrived after 1
  EXPECT_EQ(ids_in(*plan), (std::vector<RequestId>{2, 1, 4}));
  const auto slots = h.scheduler.slots();
  const auto preempted = std::find_if(slots.begin(), slots.end(),
                                      [](const SlotInfo& s) { return s.request_id == 3; });
  ASSERT_NE(preempted, slots.end());
  EXPECT_EQ(preempted->phase, SlotPhase::kPreempted);
  EXPECT_EQ(h.scheduler.stats().num_preempted_waiting, 1);
  h.run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  EXPECT_EQ(h.scheduler.stats().num_preemptions, 1u);
}

// A preempted request keeps its place: it resumes before requests of its priority (and client)
// that arrived after it and were already waiting when it was preempted.
TEST(SchedulerTest, APreemptedRequestResumesBeforeLaterArrivals) {
  auto config = small_config();
  config.max_num_seqs = 2;
  SchedulerHarness h(config);
  h.add(1, token_range(20, 100), 30);
  h.add(2, token_range(20, 200), 30);
  h.step();
  h.step();
  h.add(3, token_range(20, 300), 30);  // waits: both slots taken
  h.add(4, token_range(20, 400), 2, Priority::kHigh);
  const auto plan = h.step();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->preempted, std::vector<RequestId>{2});
  // Request 4 finishes after its two tokens; the freed slot goes to 2, not to 3.
  std::optional<StepPlan> resumed;
  for (int i = 0; i < 5 && !resumed; ++i) {
    auto next = h.step();
    ASSERT_TRUE(next);
    if (slice_of(*next, 2) != nullptr || slice_of(*next, 3) != nullptr) resumed = std::move(next);
  }
  ASSERT_TRUE(resumed);
  EXPECT_NE(slice_of(*resumed, 2), nullptr);
  EXPECT_EQ(slice_of(*resumed, 3), nullptr);
  h.run_until_idle();
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

TEST(SchedulerTest, EqualPriorityNeverPreemptsAndPreemptedRequestsCanBeCancelled) {
  auto config = small_config();
  config.max_num_seqs = 2;
  SchedulerHarness h(config);
  h.add(1, token_range(20, 100), 30, Priority::kNormal);
  h.add(2, token_range(20, 200), 30, Priority::kLow);
  h.step();
  h.add(3, token_range(20, 300), 5, Priority::kNormal);  // same as 1, above 2
  auto plan = h.step();
  EXPECT_EQ(plan->preempted, std::vector<RequestId>{2});
  h.add(4, token_range(20, 400), 5, Priority::kNormal);  // only equal priorities run now
  plan = h.step();
  EXPECT_TRUE(plan->preempted.empty());
  EXPECT_EQ(h.scheduler.stats().num_waiting, 2);
  // Cancel the preempted one while it waits: it holds nothing, the queue forgets it.
  const auto cancelled = h.scheduler.cancel(2);
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->num_preemptions, 1);
  EXPECT_EQ(cancelled->num_generated_tokens, 1);  // its second decode was unscheduled
  h.run_until_idle();
  for (RequestId id : {1, 3, 4}) {
    EXPECT_EQ(h.outputs[static_cast<RequestId>(id)], h.expected_output(static_cast<RequestId>(id)));
  }
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, PriorityPreemptionCanBeTurnedOff) {
  SchedulerHarness h(one_slot_without_preemption());
  h.add(1, token_range(20, 100), 4, Priority::kLow);
  h.step();
  h.add(2, token_range(20, 200), 4, Priority::kCritical);
  const auto plan = h.step();
  EXPECT_TRUE(plan->preempted.empty());
  EXPECT_EQ(ids_in(*plan), std::vector<RequestId>{1});
  h.run_until_idle();
  EXPECT_EQ(h.scheduler.stats().num_preemptions, 0u);
}

TEST(SchedulerTest, KvPressurePreemptsByRecomputeAndTheOutputIsUnchanged) {
  auto config = small_config();
  config.num_blocks = 10;  // 160 tokens for three sequences that grow to ~100 each
  SchedulerHarness h(config);
  h.add(1, token_range(40, 100), 60, Priority::kNormal, true);
  h.add(2, token_range(40, 200), 60, Priority::kNormal, true);
  h.add(3, token_range(40, 300), 60, Priority::kNormal, true);
  std::vector<RequestId> victims;
  while (auto plan = h.step()) {
    victims.insert(victims.end(), plan->preempted.begin(), plan->preempted.end());
  }
  ASSERT_FALSE(victims.empty());
  EXPECT_EQ(victims.front(), 3u);  // the latest arrival goes first
  for (RequestId id = 1; id <= 3; ++id) {
    EXPECT_EQ(h.reasons[id], FinishReason::kMaxTokens);
    EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  }
  EXPECT_EQ(h.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, StatsAndSlotsDescribeEveryRequest) {
  auto config = small_config();
  config.max_num_seqs = 2;
  config.chunked_prefill_size = 16;
  SchedulerHarness h(config);
  h.add(1, token_range(4, 10), 20);
  h.add(2, token_range(40, 50), 20, Priority::kHigh);
  h.add(3, token_range(4, 90), 20);
  h.step();
  h.step();
  const auto slots = h.scheduler.slots();
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(slots[0].request_id, 2u);  // running, high priority first
  EXPECT_EQ(slots[0].phase, SlotPhase::kPrefill);
  EXPECT_EQ(slots[0].num_computed_tokens, 32);
  EXPECT_EQ(slots[0].num_blocks, 2);
  EXPECT_EQ(slots[1].request_id, 1u);
  EXPECT_EQ(slots[1].phase, SlotPhase::kDecode);
  EXPECT_EQ(slots[1].num_generated_tokens, 2);
  EXPECT_EQ(slots[1].first_scheduled_step, 1u);
  EXPECT_EQ(slots[1].first_token_step, 1u);
  EXPECT_EQ(slots[2].phase, SlotPhase::kWaiting);
  EXPECT_EQ(to_string(slots[2].phase), "waiting");
  const auto stats = h.scheduler.stats();
  EXPECT_EQ(stats.num_running, 2);
  EXPECT_EQ(stats.num_waiting, 1);
  EXPECT_EQ(stats.num_steps, 2u);
  EXPECT_EQ(stats.num_generated_tokens, 2u);
  EXPECT_EQ(stats.num_prompt_tokens, 48u);
  EXPECT_EQ(stats.kv.num_referenced, 3);
  EXPECT_DOUBLE_EQ(stats.kv.usage_ratio, 3.0 / 64.0);
}

TEST(SchedulerTest, SamplingSlotsCarryTheirStreamPositionAndPenaltyWindow) {
  SchedulerHarness h(small_config());
  NewRequest request;
  request.request_id = 1;
  request.prompt_token_ids = token_range(10, 100);
  request.sampling.repetition_penalty = 1.1f;
  request.sampling.penalty_last_n = 4;
  request.stop.max_tokens = 5;
  ASSERT_EQ(h.scheduler.add_request(request), AddResult::kAccepted);
  h.add(2, {7, 8}, 5);  // no penalties: no window copied
  h.step();
  const auto plan = h.step();
  ASSERT_EQ(plan->batch.sampling.size(), 2u);
  const gpu::SamplingSlot& slot = plan->batch.sampling[0];
  EXPECT_EQ(slot.num_generated, 1);
  EXPECT_EQ(slot.recent_count, 4);
  const std::vector<int32_t> window(plan->batch.recent_tokens.begin() + slot.recent_offset,
                                    plan->batch.recent_tokens.begin() + slot.recent_offset + 4);
  const auto& tokens = h.scheduler.find(1)->token_ids;
  EXPECT_EQ(window, std::vector<int32_t>(tokens.end() - 5, tokens.end() - 1));
  EXPECT_EQ(plan->batch.sampling[1].recent_count, 0);
  EXPECT_EQ(plan->batch.seqs[1].sampling_index, 1);
}

TEST(SchedulerTest, MovesPrefilledSequencesBetweenSchedulers) {
  auto prefill_config = small_config();
  prefill_config.role = SchedulerRole::kPrefillOnly;
  SchedulerHarness prefill(prefill_config);
  SchedulerHarness decode(small_config());
  prefill.add(1, token_range(50, 100), 8);
  prefill.add(2, token_range(20, 700), 8);
  prefill.add(3, token_range(50, 100), 1);  // finishes on the prefill side
  while (prefill.step()) {
  }
  const auto handoffs = prefill.scheduler.take_completed_prefill();
  ASSERT_EQ(handoffs.size(), 2u);
  EXPECT_EQ(prefill.reasons[3], FinishReason::kMaxTokens);
  for (const PrefillHandoff& handoff : handoffs) {
    EXPECT_EQ(handoff.num_computed_tokens, handoff.num_prompt_tokens);
    const TransferAdmission admission = decode.scheduler.admit_transferred(handoff);
    ASSERT_EQ(admission.result, AddResult::kAccepted);
    for (const BlockCopy& copy : admission.copies) {
      decode.model.copy_block_from(prefill.model, copy.source, copy.destination);
    }
    EXPECT_TRUE(prefill.scheduler.release_transferred(handoff.request_id));
    decode.requests[handoff.request_id] = prefill.requests[handoff.request_id];
    decode.outputs[handoff.request_id] = prefill.outputs[handoff.request_id];
  }
  EXPECT_EQ(decode.scheduler.admit_transferred(handoffs[0]).result, AddResult::kDuplicateId);
  EXPECT_FALSE(prefill.scheduler.release_transferred(1));
  EXPECT_EQ(prefill.scheduler.kv_cache().stats().num_referenced, 0);
  decode.run_until_idle();
  for (RequestId id : {1, 2}) {
    EXPECT_EQ(decode.outputs[static_cast<RequestId>(id)], decode.expected_output(static_cast<RequestId>(id)));
  }
  EXPECT_EQ(decode.scheduler.kv_cache().stats().num_referenced, 0);
}

TEST(SchedulerTest, AdmitTransferredReusesTheDestinationPrefixCache) {
  auto prefill_config = small_config();
  prefill_config.role = SchedulerRole::kPrefillOnly;
  SchedulerHarness prefill(prefill_config);
  SchedulerHarness decode(small_config());
  decode.add(9, token_range(48, 100), 2);  // the decode side already cached 48 of the tokens
  decode.run_until_idle();
  prefill.add(1, token_range(50, 100), 4);
  prefill.run_until_idle();
  const auto handoffs = prefill.scheduler.take_completed_prefill();
  ASSERT_EQ(handoffs.size(), 1u);
  const TransferAdmission admission = decode.scheduler.admit_transferred(handoffs[0]);
  ASSERT_EQ(admission.result, AddResult::kAccepted);
  // Blocks 0..2 (tokens 0..47) hit the destination's cache; only block 3 (48, 49) is copied.
  ASSERT_EQ(admission.copies.size(), 1u);
  EXPECT_EQ(admission.copies[0].source, handoffs[0].source_blocks[3]);
  for (const BlockCopy& copy : admission.copies) {
    decode.model.copy_block_from(prefill.model, copy.source, copy.destination);
  }
  prefill.scheduler.release_transferred(1);
  decode.requests[1] = prefill.requests[1];
  decode.outputs[1] = prefill.outputs[1];
  decode.run_until_idle();
  EXPECT_EQ(decode.outputs[1], decode.expected_output(1));
}

}  // namespace
}  // namespace troupe::scheduler
