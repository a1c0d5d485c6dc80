// Scheduler fair share (issue 13): among requests of equal priority, admission and preemption
// go round robin across clients, a per-client cap refuses only the flooding client, and
// whatever fairness reorders, every request's output is the one it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "actors/scheduler/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::SchedulerHarness;
using testing::token_range;

SchedulerConfig fair_config(Fairness fairness) {
  SchedulerConfig config = testing::small_config();
  config.max_num_seqs = 4;
  config.max_queue = 256;
  config.num_blocks = 256;
  config.fairness = fairness;
  return config;
}

bool in_plan(const StepPlan& plan, RequestId id) {
  return testing::slice_of(plan, id) != nullptr;
}

// Client "flood" fills every slot and keeps 96 more waiting; then "lone" sends one request.
void flood_then_lone(SchedulerHarness& h) {
  for (RequestId id = 1; id <= 100; ++id) {
    ASSERT_EQ(h.add_for("flood", id, token_range(8, 100 + static_cast<int32_t>(id)), 200),
              AddResult::kAccepted);
  }
  for (int i = 0; i < 3; ++i) h.step();
  ASSERT_EQ(h.scheduler.stats().num_running, 4);
  ASSERT_EQ(h.add_for("lone", 1000, token_range(8, 7), 20), AddResult::kAccepted);
}

TEST(SchedulerFairnessTest, ALoneClientIsAdmittedInTheNextRoundWhileAnotherHasAHundredWaiting) {
  SchedulerHarness h(fair_config(Fairness::kClient));
  flood_then_lone(h);
  const auto plan = h.step();
  ASSERT_TRUE(plan);
  EXPECT_TRUE(in_plan(*plan, 1000)) << "the lone client waited behind the flood";
  // It took the slot of the flooding client's latest arrival, which waits again.
  ASSERT_EQ(plan->preempted.size(), 1u);
  EXPECT_EQ(h.scheduler.find(plan->preempted[0])->client, "flood");
  EXPECT_EQ(h.scheduler.stats().num_fairness_preemptions, 1u);
  EXPECT_EQ(h.scheduler.stats().num_waiting_clients, 1);
  // Fair, not upside down: the flood keeps its other three slots, and does not take the lone
  // client's slot back (it would run 3 against 1).
  for (int i = 0; i < 5; ++i) h.step();
  EXPECT_EQ(h.scheduler.stats().num_fairness_preemptions, 1u);
  h.run_until_idle();
  EXPECT_EQ(h.outputs[1000], h.expected_output(1000));
}

TEST(SchedulerFairnessTest, FifoLetsTheFloodOwnTheQueue) {
  SchedulerHarness h(fair_config(Fairness::kFifo));
  flood_then_lone(h);
  for (int i = 0; i < 20; ++i) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    EXPECT_FALSE(in_plan(*plan, 1000));
  }
  EXPECT_EQ(h.scheduler.stats().num_fairness_preemptions, 0u);
}

TEST(SchedulerFairnessTest, FreeSlotsGoRoundRobinAcrossClients) {
  auto config = fair_config(Fairness::kClient);
  config.max_num_batched_tokens = 256;
  SchedulerHarness h(config);
  for (RequestId id = 1; id <= 6; ++id) h.add_for("a", id, token_range(8, 10), 30);
  h.add_for("b", 7, token_range(8, 20), 30);
  h.add_for("c", 8, token_range(8, 30), 30);
  h.add_for("b", 9, token_range(8, 40), 30);
  const auto plan = h.step();
  ASSERT_TRUE(plan);
  // Four slots: a, b, c, then a again (b's second request waits for the next round).
  EXPECT_TRUE(in_plan(*plan, 1));
  EXPECT_TRUE(in_plan(*plan, 7));
  EXPECT_TRUE(in_plan(*plan, 8));
  EXPECT_TRUE(in_plan(*plan, 2));
  EXPECT_FALSE(in_plan(*plan, 9));
}

TEST(SchedulerFairnessTest, ThePerClientCapRefusesOnlyTheFloodingClient) {
  auto config = fair_config(Fairness::kClient);
  config.max_waiting_per_client = 3;
  SchedulerHarness h(config);
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(h.add_for("flood", id, {5, 6}, 4), AddResult::kAccepted);
  EXPECT_EQ(h.add_for("flood", 4, {5, 6}, 4), AddResult::kClientQueueFull);
  EXPECT_EQ(h.add_for("lone", 5, {5, 6}, 4), AddResult::kAccepted);
  EXPECT_EQ(to_string(AddResult::kClientQueueFull), "client_queue_full");
  h.step();  // admitted: they no longer wait, so the flood may queue again
  EXPECT_EQ(h.add_for("flood", 4, {5, 6}, 4), AddResult::kAccepted);
}

TEST(SchedulerFairnessTest, TwoFloodsConvergeToEqualSharesWithUnchangedOutputs) {
  auto config = fair_config(Fairness::kClient);
  config.max_num_seqs = 8;
  SchedulerHarness h(config, /*eos_one_in=*/1ULL << 62);
  for (RequestId id = 1; id <= 20; ++id) h.add_for("a", id, token_range(12, static_cast<int32_t>(id)), 60);
  for (int i = 0; i < 3; ++i) h.step();
  for (RequestId id = 21; id <= 40; ++id) h.add_for("b", id, token_range(12, static_cast<int32_t>(id)), 60);
  for (int i = 0; i < 12; ++i) h.step();
  int32_t a = 0, b = 0;
  for (const SlotInfo& slot : h.scheduler.slots()) {
    if (slot.phase != SlotPhase::kPrefill && slot.phase != SlotPhase::kDecode) continue;
    (slot.client == "a" ? a : b) += 1;
  }
  EXPECT_EQ(a + b, 8);
  EXPECT_LE(std::abs(a - b), 1) << "a runs " << a << ", b runs " << b;
  h.run_until_idle();
  for (RequestId id = 1; id <= 40; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

TEST(SchedulerFairnessTest, KvPressurePreemptsTheClientRunningTheMost) {
  auto config = fair_config(Fairness::kClient);
  config.num_blocks = 12;  // 192 tokens of KV for four sequences growing to 64 tokens each
  config.max_num_batched_tokens = 128;
  SchedulerHarness h(config);
  h.add_for("heavy", 1, token_range(16, 10), 48);
  h.add_for("heavy", 2, token_range(16, 30), 48);
  h.add_for("heavy", 3, token_range(16, 50), 48);
  h.add_for("light", 4, token_range(16, 70), 48);
  std::vector<RequestId> victims;
  while (h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    victims.insert(victims.end(), plan->preempted.begin(), plan->preempted.end());
  }
  ASSERT_FALSE(victims.empty());
  // The light client arrived last: under FIFO it would be the victim (the latest arrival);
  // fairly, the heavy client gives up its own latest instead.
  EXPECT_EQ(victims.front(), 3u);
  EXPECT_EQ(std::count(victims.begin(), victims.end(), 4u), 0);
  for (RequestId id = 1; id <= 4; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

// A KV preemption victim resumes before a later arrival of another client that holds as little
// as the victim's client now does: the ring puts the victim's client first (RingPlace::kFront).
// With one client the ring place cannot matter; this is the case where it does.
TEST(SchedulerFairnessTest, AKvPreemptionVictimResumesBeforeAnotherClientsWaitingRequest) {
  auto config = fair_config(Fairness::kClient);
  config.max_num_seqs = 2;
  config.num_blocks = 6;  // 96 tokens: two sequences growing to 64 tokens each do not fit
  config.max_num_batched_tokens = 128;
  SchedulerHarness h(config);
  ASSERT_EQ(h.add_for("a", 1, token_range(16, 10), 48), AddResult::kAccepted);
  ASSERT_EQ(h.add_for("b", 2, token_range(16, 30), 48), AddResult::kAccepted);
  ASSERT_TRUE(h.step());
  ASSERT_EQ(h.scheduler.stats().num_running, 2);
  ASSERT_EQ(h.add_for("c", 3, token_range(16, 50), 48), AddResult::kAccepted);  // no slot: waits
  std::optional<RequestId> victim;
  while (!victim && h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    if (!plan->preempted.empty()) victim = plan->preempted.front();
  }
  ASSERT_TRUE(victim) << "the KV never ran short";
  ASSERT_NE(*victim, 3u);
  // The victim's client and "c" now run nothing: a tie the ring breaks, victim first.
  std::optional<RequestId> first_back;
  while (!first_back && h.scheduler.has_unfinished_requests()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    if (in_plan(*plan, *victim)) first_back = *victim;
    if (in_plan(*plan, 3)) first_back = first_back.value_or(3);
  }
  EXPECT_EQ(first_back, victim) << "request 3 of client c went before the preempted request";
  h.run_until_idle();
  for (RequestId id = 1; id <= 3; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

}  // namespace
}  // namespace troupe::scheduler
