// StepAccountant (actors/scheduler/step_account.hpp): the step loop's wall time booked into
// parts that add up to it, a step's layers split between decode rows and prompt tokens.
#include "actors/scheduler/step_account.hpp"

#include <gtest/gtest.h>

namespace troupe::scheduler {
namespace {

using Clock = StepAccountant::Clock;
using std::chrono::milliseconds;

double sum_of_parts(const engine::StepAccount& a) {
  return a.idle_ms + a.engine_ms + a.decode_layers_ms + a.prompt_layers_ms + a.logits_ms +
         a.sampling_ms + a.prompt_outputs_ms + a.backend_other_ms + a.interrupted_ms;
}

TEST(StepAccountTest, TheLayersAreSplitByTokensAndThePartsAddUpToTheWallTime) {
  const Clock::time_point start{};
  StepAccountant accountant(start);
  accountant.add_idle(100);
  // 12 decode rows beside a 36-token prompt chunk: a quarter of the layers' 40 ms is decode's.
  accountant.add_step(36, 12, 50,
                      {.layers_ms = 40, .logits_ms = 4, .sampling_ms = 2, .prompt_outputs_ms = 1});
  accountant.add_step(0, 16, 20, {.layers_ms = 10, .logits_ms = 5, .sampling_ms = 3});
  accountant.add_step(64, 0, 30, {.layers_ms = 29});
  accountant.add_interrupted(7);
  const engine::StepAccount a = accountant.at(start + milliseconds(300));
  EXPECT_DOUBLE_EQ(a.wall_ms, 300);
  EXPECT_DOUBLE_EQ(a.idle_ms, 100);
  EXPECT_DOUBLE_EQ(a.decode_layers_ms, 10 + 10);
  EXPECT_DOUBLE_EQ(a.prompt_layers_ms, 30 + 29);
  EXPECT_DOUBLE_EQ(a.logits_ms, 9);
  EXPECT_DOUBLE_EQ(a.sampling_ms, 5);
  EXPECT_DOUBLE_EQ(a.prompt_outputs_ms, 1);
  EXPECT_DOUBLE_EQ(a.backend_other_ms, 3 + 2 + 1);
  EXPECT_DOUBLE_EQ(a.interrupted_ms, 7);
  // What no part claims is the loop's own work: 300 - 100 idle - 100 of steps - 7.
  EXPECT_DOUBLE_EQ(a.engine_ms, 93);
  EXPECT_DOUBLE_EQ(sum_of_parts(a), a.wall_ms);
  EXPECT_EQ(a.mixed_steps, 1u);
  EXPECT_EQ(a.decode_only_steps, 1u);
  EXPECT_EQ(a.prompt_only_steps, 1u);
  EXPECT_EQ(a.decode_rows, 28u);
  EXPECT_EQ(a.prompt_tokens, 100u);
}

TEST(StepAccountTest, PhasesLongerThanTheStepShrinkToFitIt) {
  // Two clocks a hair apart: the backend's phases may sum past the scheduler's step time.
  StepAccountant accountant(Clock::time_point{});
  accountant.add_step(0, 4, 10, {.layers_ms = 8, .logits_ms = 4});
  const engine::StepAccount a = accountant.at(Clock::time_point{} + milliseconds(10));
  EXPECT_NEAR(a.decode_layers_ms + a.logits_ms, 10, 1e-9);
  EXPECT_NEAR(a.backend_other_ms, 0, 1e-9);
  EXPECT_GE(a.engine_ms, 0);
}

TEST(StepAccountTest, ABackendThatTimesNothingLeavesTheWholeStepUnplaced) {
  StepAccountant accountant(Clock::time_point{});
  accountant.add_step(3, 2, 25, {});
  accountant.add_failed(5);
  const engine::StepAccount a = accountant.at(Clock::time_point{} + milliseconds(40));
  EXPECT_DOUBLE_EQ(a.backend_other_ms, 30);
  EXPECT_DOUBLE_EQ(a.decode_layers_ms + a.prompt_layers_ms, 0);
  EXPECT_DOUBLE_EQ(a.engine_ms, 10);
}

}  // namespace
}  // namespace troupe::scheduler
