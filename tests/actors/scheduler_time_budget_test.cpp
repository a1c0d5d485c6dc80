// Scheduler step-time budget (issue 13): while streams decode, prefill chunks are cut so the
// step's predicted time stays under max_step_ms; a long prompt still advances every step; with
// nothing decoding it runs at full size; a short prompt is not queued behind a long one; a
// newcomer's short prompt runs in a step of its own when the decodes would slow its first token,
// and may have the step in flight given up for it (first-token interrupts).
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/scheduler/scheduler.hpp"
#include "scheduler_harness.hpp"

namespace troupe::scheduler {
namespace {

using testing::SchedulerHarness;
using testing::ids_in;
using testing::slice_of;
using testing::token_range;

constexpr double kBudgetMs = 100;

SchedulerConfig budget_config() {
  SchedulerConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 2048;
  config.chunked_prefill_size = 512;
  config.max_model_len = 8192;
  config.max_queue = 64;
  config.block_size = 16;
  config.num_blocks = 2048;
  config.eos_token_ids = {2};
  config.max_step_ms = kBudgetMs;
  return config;
}

// A machine where a token costs 0.5 ms and attention 1 ms per 10k (query, key) pairs: a
// 512-token chunk at position 0 costs ~270 ms, far over the budget.
StepCostModel test_machine() {
  return {.fixed_ms = 4, .per_token_ms = 0.5, .per_context_ms = 1e-4, .per_sampled_ms = 0.2,
          .usable = true};
}

// Four streams decoding (EOS ignored, long max_tokens).
void start_four_streams(SchedulerHarness& h) {
  for (RequestId id = 1; id <= 4; ++id) {
    h.add(id, token_range(20, 10 * static_cast<int32_t>(id)), 4000, Priority::kNormal, /*ignore_eos=*/true);
  }
  for (int i = 0; i < 3; ++i) h.step();
  for (RequestId id = 1; id <= 4; ++id) ASSERT_GT(h.outputs[id].size(), 0u);
}

TEST(SchedulerTimeBudgetTest, ALongPromptAdvancesEveryStepWithoutBlowingTheBudget) {
  SchedulerHarness h(budget_config());
  h.scheduler.set_step_cost_model(test_machine());
  start_four_streams(h);
  h.add(9, token_range(3000, 1000), 4);
  int32_t computed = 0;
  int steps = 0;
  while (h.outputs[9].empty()) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    ++steps;
    // Every stream gets its token in every step ...
    for (RequestId id = 1; id <= 4; ++id) EXPECT_NE(slice_of(*plan, id), nullptr) << "step " << steps;
    // ... and the step is planned within the budget (the long prompt's chunk is what gives).
    EXPECT_LE(plan->predicted_ms, kBudgetMs) << "step " << steps;
    EXPECT_DOUBLE_EQ(plan->predicted_ms, test_machine().predict_ms(plan->shape));
    const auto* chunk = slice_of(*plan, 9);
    ASSERT_NE(chunk, nullptr) << "the long prompt starved at step " << steps;
    EXPECT_GT(chunk->num_tokens, 0);
    EXPECT_TRUE(plan->time_budgeted || chunk->context_len == 3000);
    computed = chunk->context_len;
  }
  EXPECT_EQ(computed, 3000);
  // Chunks shrink as the context grows (attention): 3000 tokens take far more than 6 steps.
  EXPECT_GT(steps, 3000 / 512 + 1);
  EXPECT_GT(h.scheduler.stats().num_time_budgeted_steps, 0u);
  h.run_until_idle(50);
  EXPECT_EQ(h.outputs[9], h.expected_output(9));
}

TEST(SchedulerTimeBudgetTest, AModelThatErredPlansWithAMargin) {
  SchedulerHarness h(budget_config());
  StepCostModel model = test_machine();
  model.margin = 0.25;  // recent predictions were 25 % off: plan to 100 / 1.25 = 80 ms
  h.scheduler.set_step_cost_model(model);
  start_four_streams(h);
  h.add(9, token_range(3000, 1000), 4);
  for (int i = 0; i < 5; ++i) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    ASSERT_NE(slice_of(*plan, 9), nullptr);
    EXPECT_LE(plan->predicted_ms, kBudgetMs / 1.25);
    EXPECT_GT(plan->predicted_ms, kBudgetMs / 1.25 - 5);  // and uses what it may
  }
}

TEST(SchedulerTimeBudgetTest, WithNothingDecodingAPromptRunsInFullChunks) {
  SchedulerHarness h(budget_config());
  h.scheduler.set_step_cost_model(test_machine());
  h.add(9, token_range(3000, 1000), 4);
  const auto plan = h.step();
  ASSERT_TRUE(plan);
  EXPECT_EQ(slice_of(*plan, 9)->num_tokens, 512);
  EXPECT_FALSE(plan->time_budgeted);
  EXPECT_GT(plan->predicted_ms, kBudgetMs);
}

TEST(SchedulerTimeBudgetTest, NoUsableModelOrNoBudgetMeansTokenBudgetOnly) {
  for (const bool usable : {false, true}) {
    auto config = budget_config();
    if (usable) config.max_step_ms = 0;  // the budget is off
    SchedulerHarness h(config);
    StepCostModel model = test_machine();
    model.usable = usable;
    h.scheduler.set_step_cost_model(model);
    start_four_streams(h);
    h.add(9, token_range(3000, 1000), 4);
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    EXPECT_EQ(slice_of(*plan, 9)->num_tokens, 512) << "usable " << usable;
    EXPECT_FALSE(plan->time_budgeted);
  }
}

TEST(SchedulerTimeBudgetTest, WhenDecodesAloneFillTheBudgetThePromptStillAdvances) {
  SchedulerHarness h(budget_config());
  StepCostModel slow = test_machine();
  slow.fixed_ms = 150;  // every step is over budget already
  h.scheduler.set_step_cost_model(slow);
  start_four_streams(h);
  h.add(9, token_range(100, 1000), 4);
  h.add(10, token_range(100, 2000), 4);
  for (int i = 0; i < 2; ++i) {
    const auto plan = h.step();
    ASSERT_TRUE(plan);
    // The first prefill of the step advances by what a quarter of the budget buys (at 0.5 ms a
    // token and 1e-4 ms a (query, key) pair: 49 tokens, more than a block); the second waits.
    const auto* first = slice_of(*plan, 9);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->num_tokens, 49);
    EXPECT_EQ(slice_of(*plan, 10), nullptr);
  }
  // A budget so small that a quarter of it buys less than a block: still a block.
  auto tiny = budget_config();
  tiny.max_step_ms = 10;
  SchedulerHarness t(tiny);
  t.scheduler.set_step_cost_model(slow);
  start_four_streams(t);
  t.add(9, token_range(100, 1000), 4);
  const auto plan = t.step();
  ASSERT_TRUE(plan);
  ASSERT_NE(slice_of(*plan, 9), nullptr);
  EXPECT_EQ(slice_of(*plan, 9)->num_tokens, 16);
}

// Every step is over budget, so prefills advance only by the minimum progress. A client that
// floods has four streams decoding and four prompts prefilling in every slot; a newcomer's short
// prompt must get that progress (fair order: its client runs nothing), not wait behind them.
TEST(SchedulerTimeBudgetTest, WhenTheBudgetIsSpentTheMinimumProgressGoesToTheLeastLoadedClient) {
  auto config = budget_config();
  config.max_num_seqs = 8;
  SchedulerHarness h(config);
  for (RequestId id = 1; id <= 4; ++id) {
    h.add(id, token_range(16, 10 * static_cast<int32_t>(id)), 4000, Priority::kNormal,
          /*ignore_eos=*/true, "flood");
  }
  for (int i = 0; i < 3; ++i) h.step();
  for (RequestId id = 11; id <= 16; ++id) {
    h.add(id, token_range(2000, 1000 * static_cast<int32_t>(id)), 4, Priority::kNormal, false,
          "flood");
  }
  h.step();  // no cost model yet: the token budget admits four 2000-token prompts
  ASSERT_EQ(h.scheduler.stats().num_running, 8);
  StepCostModel slow = test_machine();
  slow.fixed_ms = 150;
  h.scheduler.set_step_cost_model(slow);
  for (int i = 0; i < 3; ++i) h.step();
  h.add(20, token_range(30, 50000), 4, Priority::kNormal, false, "lone");
  // One step admits it (a flood sequence makes room) and computes its 30 tokens (what a quarter
  // of the budget buys), where arrival order would wait hundreds of steps for the four prompts.
  h.step();
  EXPECT_FALSE(h.outputs[20].empty());
  h.run_until_idle(4000);
  EXPECT_EQ(h.outputs[20], h.expected_output(20));
  for (RequestId id = 11; id <= 16; ++id) EXPECT_EQ(h.outputs[id], h.expected_output(id));
}

TEST(SchedulerTimeBudgetTest, AShortPromptIsNotQueuedBehindALongOne) {
  SchedulerHarness h(budget_config());
  h.scheduler.set_step_cost_model(test_machine());
  start_four_streams(h);
  h.add(9, token_range(4000, 1000), 4);
  h.step();
  h.step();
  h.add(10, token_range(30, 5000), 4);
  // Its 30 tokens fit beside the decodes in the time the long prefill leaves it.
  const auto plan = h.step();
  ASSERT_TRUE(plan);
  ASSERT_NE(slice_of(*plan, 10), nullptr);
  EXPECT_EQ(slice_of(*plan, 10)->num_tokens, 30);
  ASSERT_NE(slice_of(*plan, 9), nullptr);
  EXPECT_LE(plan->predicted_ms, kBudgetMs);
  h.step();
  EXPECT_FALSE(h.outputs[10].empty());
}

// First-token steps. On this machine a sampled row costs 5 ms (the logits over a large
// vocabulary on a CPU): eight decodes cost ~48 ms, a 20-token prompt alone ~19 ms.
StepCostModel decode_heavy_machine() {
  return {.fixed_ms = 4, .per_token_ms = 0.5, .per_context_ms = 1e-4, .per_sampled_ms = 5,
          .usable = true};
}

// Eight streams of client "flood" decode; then the cost model is set and `newcomer` (id 20, of
// `client`, `prompt_len` tokens) arrives. Returns the step planned next.
struct NewcomerCase {
  SchedulerConfig config = budget_config();
  StepCostModel machine = decode_heavy_machine();
  std::string client = "lone";
  int32_t prompt_len = 20;
};

StepPlan newcomer_step(SchedulerHarness& h, const NewcomerCase& c) {
  for (RequestId id = 1; id <= 8; ++id) {
    h.add(id, token_range(16, 100 * static_cast<int32_t>(id)), 64, Priority::kNormal,
          /*ignore_eos=*/true, "flood");
  }
  for (int i = 0; i < 3; ++i) h.step();
  h.scheduler.set_step_cost_model(c.machine);
  h.add(20, token_range(c.prompt_len, 50000), 4, Priority::kNormal, false, c.client);
  const auto plan = h.step();
  return plan ? *plan : StepPlan{};
}

TEST(SchedulerFirstTokenStepTest, AFloodedNewcomersShortPromptRunsAloneThenTheDecodes) {
  NewcomerCase c;
  c.config.max_num_seqs = 8;  // every slot is the flood's: one makes room for the newcomer
  SchedulerHarness h(c.config);
  const StepPlan plan = newcomer_step(h, c);
  ASSERT_EQ(plan.batch.seqs.size(), 1u);
  ASSERT_NE(slice_of(plan, 20), nullptr);
  EXPECT_EQ(slice_of(plan, 20)->num_tokens, 20);
  EXPECT_FALSE(h.outputs[20].empty());  // its first token came from that short step
  EXPECT_EQ(h.scheduler.stats().num_first_token_steps, 1u);
  // Another newcomer at once: the decodes go first, never two first-token steps in a row.
  h.add(21, token_range(20, 60000), 4, Priority::kNormal, false, "lone 2");
  const auto next = h.step();
  ASSERT_TRUE(next);
  EXPECT_NE(slice_of(*next, 1), nullptr);
  EXPECT_NE(slice_of(*next, 20), nullptr);
  EXPECT_EQ(h.scheduler.stats().num_first_token_steps, 1u);
  h.run_until_idle(4000);
  for (RequestId id : {1, 2, 3, 4, 5, 6, 7, 8, 20, 21}) {
    EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  }
}

// Where a step of its own would not halve the time to the newcomer's first token, the newcomer
// is no newcomer, or first-token steps are switched off, its prompt shares the step with the
// decodes.
TEST(SchedulerFirstTokenStepTest, OtherwiseThePromptJoinsTheDecodes) {
  std::vector<std::pair<std::string, NewcomerCase>> cases;
  cases.push_back({"decodes cheaper than the prompt", {.machine = test_machine()}});
  NewcomerCase long_prompt{.prompt_len = 200};
  long_prompt.machine.per_sampled_ms = 20;  // it alone (~126 ms) would still halve its first step
  cases.push_back({"a prompt over the budget", long_prompt});
  cases.push_back({"the flood's own request", {.client = "flood"}});
  NewcomerCase fifo;
  fifo.config.fairness = Fairness::kFifo;
  cases.push_back({"fifo fairness", fifo});
  NewcomerCase switched_off;
  switched_off.config.first_token_steps = false;
  cases.push_back({"first-token steps switched off", switched_off});
  for (const auto& [name, c] : cases) {
    SchedulerHarness h(c.config);
    const StepPlan plan = newcomer_step(h, c);
    EXPECT_NE(slice_of(plan, 1), nullptr) << name;
    EXPECT_NE(slice_of(plan, 20), nullptr) << name;
    EXPECT_EQ(h.scheduler.stats().num_first_token_steps, 0u) << name;
  }
}

// First-token interrupts. The step in flight is given up as the CPU backend gives it up: part
// of its KV written (here: wrong tokens at its spans' positions, which only a replan that
// recomputes them overwrites), no tokens.
void interrupt(SchedulerHarness& h, const StepPlan& plan) {
  gpu::StepBatch half_done = plan.batch;
  for (int32_t& token : half_done.token_ids) token += 1;
  half_done.sampling.clear();
  for (gpu::SequenceSlice& slice : half_done.seqs) slice.sample = false;
  (void)h.model.run(half_done);
  h.scheduler.on_step_interrupted(plan.batch.step_id);
  h.check();
}

// Eight streams of client "flood" decode beside a long prompt of client "long" (which the step
// also computes a chunk of); `decodes` is the next step, planned and in flight.
struct InFlight {
  SchedulerHarness h;
  StepPlan decodes;
  explicit InFlight(SchedulerConfig config) : h(config) {
    for (RequestId id = 1; id <= 8; ++id) {
      h.add(id, token_range(16, 100 * static_cast<int32_t>(id)), 64, Priority::kNormal,
            /*ignore_eos=*/true, "flood");
    }
    for (int i = 0; i < 3; ++i) h.step();
    h.add(9, token_range(600, 7000), 4, Priority::kNormal, false, "long");
    h.scheduler.set_step_cost_model(decode_heavy_machine());
    decodes = h.scheduler.schedule();
  }
};

SchedulerConfig interrupt_config() {
  SchedulerConfig config = budget_config();
  config.max_num_seqs = 10;
  return config;
}

TEST(SchedulerFirstTokenInterruptTest, ANewcomerMidStepHasItGivenUpAndTheStepIsReplanned) {
  InFlight f(interrupt_config());
  SchedulerHarness& h = f.h;
  ASSERT_NE(slice_of(f.decodes, 1), nullptr);
  const gpu::SequenceSlice* chunk = slice_of(f.decodes, 9);
  ASSERT_NE(chunk, nullptr);
  EXPECT_TRUE(f.decodes.interruptible);
  EXPECT_FALSE(h.scheduler.interrupt_due());  // nobody waits
  h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "lone");
  EXPECT_TRUE(h.scheduler.interrupt_due());

  interrupt(h, f.decodes);
  EXPECT_FALSE(h.scheduler.step_in_flight());
  EXPECT_FALSE(h.scheduler.interrupt_due());
  EXPECT_EQ(h.scheduler.stats().num_interrupted_steps, 1u);
  // The newcomer's first-token step ...
  const auto first = h.step();
  ASSERT_TRUE(first);
  EXPECT_EQ(ids_in(*first), std::vector<RequestId>{20});
  EXPECT_FALSE(first->interruptible);
  EXPECT_FALSE(h.outputs[20].empty());
  // ... then the given-up step's spans again, from the same positions.
  const auto again = h.step();
  ASSERT_TRUE(again);
  for (RequestId id = 1; id <= 8; ++id) {
    ASSERT_NE(slice_of(*again, id), nullptr) << id;
    EXPECT_EQ(slice_of(*again, id)->context_len, slice_of(f.decodes, id)->context_len) << id;
  }
  ASSERT_NE(slice_of(*again, 9), nullptr);
  EXPECT_EQ(slice_of(*again, 9)->context_len - slice_of(*again, 9)->num_tokens,
            chunk->context_len - chunk->num_tokens);
  h.run_until_idle(4000);
  for (RequestId id : {1, 2, 3, 4, 5, 6, 7, 8, 9, 20}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
  EXPECT_EQ(h.scheduler.stats().num_interrupted_steps, 1u);
}

// The decodes wait for at most one first-token step in a row: neither a first-token step nor
// the step right after one is given up.
TEST(SchedulerFirstTokenInterruptTest, NeitherAFirstTokenStepNorTheStepAfterItIsGivenUp) {
  InFlight f(interrupt_config());
  SchedulerHarness& h = f.h;
  h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "lone");
  interrupt(h, f.decodes);
  const StepPlan first = h.scheduler.schedule();
  ASSERT_EQ(ids_in(first), std::vector<RequestId>{20});
  h.add(21, token_range(20, 60000), 4, Priority::kNormal, false, "lone 2");
  EXPECT_FALSE(h.scheduler.interrupt_due()) << "a first-token step";
  h.record(h.scheduler.on_step_complete(h.model.run(first.batch)));
  const StepPlan after = h.scheduler.schedule();
  EXPECT_FALSE(after.interruptible);
  EXPECT_NE(slice_of(after, 1), nullptr);
  EXPECT_FALSE(h.scheduler.interrupt_due()) << "the decodes right after a first-token step";
  h.record(h.scheduler.on_step_complete(h.model.run(after.batch)));
  // One step later the decodes have had theirs: 21 may interrupt again.
  const StepPlan later = h.scheduler.schedule();
  EXPECT_TRUE(later.interruptible);
  h.add(22, token_range(20, 70000), 4, Priority::kNormal, false, "lone 3");
  EXPECT_TRUE(h.scheduler.interrupt_due());
  h.record(h.scheduler.on_step_complete(h.model.run(later.batch)));
  h.run_until_idle(4000);
  for (RequestId id : {1, 2, 3, 9, 20, 21, 22}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

// The newcomer gone by the next plan (cancelled, say), the step after an interrupted one is an
// ordinary step, and it is not given up either: no run of messages takes two steps in a row from
// the decodes.
TEST(SchedulerFirstTokenInterruptTest, TheStepAfterAnInterruptedOneIsNotGivenUp) {
  InFlight f(interrupt_config());
  SchedulerHarness& h = f.h;
  h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "lone");
  ASSERT_TRUE(h.scheduler.interrupt_due());
  interrupt(h, f.decodes);
  ASSERT_TRUE(h.scheduler.cancel(20));
  const StepPlan next = h.scheduler.schedule();
  EXPECT_NE(slice_of(next, 1), nullptr);
  EXPECT_EQ(h.scheduler.stats().num_first_token_steps, 0u);
  EXPECT_FALSE(next.interruptible);
  h.add(21, token_range(20, 60000), 4, Priority::kNormal, false, "lone 2");
  EXPECT_FALSE(h.scheduler.interrupt_due());
  h.record(h.scheduler.on_step_complete(h.model.run(next.batch)));
  h.run_until_idle(4000);
  for (RequestId id : {1, 2, 3, 9, 21}) EXPECT_EQ(h.outputs[id], h.expected_output(id)) << id;
}

TEST(SchedulerFirstTokenInterruptTest, OnlyForANewcomerDueAFirstTokenStep) {
  {
    SchedulerConfig off = interrupt_config();
    off.first_token_interrupts = false;
    InFlight f(off);
    EXPECT_FALSE(f.decodes.interruptible);
    f.h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "lone");
    EXPECT_FALSE(f.h.scheduler.interrupt_due()) << "switched off";
  }
  {
    InFlight f(interrupt_config());
    f.h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "flood");
    EXPECT_FALSE(f.h.scheduler.interrupt_due()) << "the flood's own request";
  }
  {
    InFlight f(interrupt_config());
    f.h.add(20, token_range(300, 50000), 4, Priority::kNormal, false, "lone");
    EXPECT_FALSE(f.h.scheduler.interrupt_due()) << "a prompt over the budget";
  }
  {
    SchedulerHarness h(interrupt_config());
    h.add(20, token_range(20, 50000), 4, Priority::kNormal, false, "lone");
    EXPECT_FALSE(h.scheduler.interrupt_due()) << "no step in flight";
  }
}

TEST(SchedulerFirstTokenInterruptTest, InterruptingAStepNotInFlightIsABug) {
  InFlight f(interrupt_config());
  EXPECT_THROW(f.h.scheduler.on_step_interrupted(f.decodes.batch.step_id + 1), std::logic_error);
  f.h.scheduler.on_step_interrupted(f.decodes.batch.step_id);
  EXPECT_THROW(f.h.scheduler.on_step_interrupted(f.decodes.batch.step_id), std::logic_error);
}

}  // namespace
}  // namespace troupe::scheduler
