// StepCostModel and StepCostFitter: the features of a step, and the online fit that recovers a
// machine's coefficients from measured step times (synthetic here: a known model plus noise).
#include "actors/scheduler/step_cost_model.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

namespace troupe::scheduler {
namespace {

TEST(StepCostModelTest, ASpanAttendsToEveryEarlierKey) {
  const StepShape decode = span_shape(99, 1, true);  // the 101st token: 100 keys
  EXPECT_EQ(decode.num_tokens, 1);
  EXPECT_EQ(decode.num_context_pairs, 100);
  EXPECT_EQ(decode.num_sampled, 1);
  const StepShape chunk = span_shape(1000, 4, false);  // keys 1001 + 1002 + 1003 + 1004
  EXPECT_EQ(chunk.num_context_pairs, 4010);
  EXPECT_EQ(chunk.num_sampled, 0);

  gpu::StepBatch batch;
  gpu::SequenceSlice a;
  a.num_tokens = 4;
  a.context_len = 1004;
  gpu::SequenceSlice b;
  b.num_tokens = 1;
  b.context_len = 100;
  b.sample = true;
  batch.seqs = {a, b};
  const StepShape whole = shape_of(batch);
  EXPECT_EQ(whole.num_tokens, 5);
  EXPECT_EQ(whole.num_context_pairs, 4110);
  EXPECT_EQ(whole.num_sampled, 1);
}

TEST(StepCostModelTest, PredictionIsLinearInTheFeatures) {
  StepCostModel model{.fixed_ms = 2, .per_token_ms = 0.5, .per_context_ms = 1e-4,
                      .per_sampled_ms = 0.25, .usable = true};
  EXPECT_DOUBLE_EQ(model.predict_ms({.num_tokens = 10, .num_context_pairs = 20000, .num_sampled = 4}),
                   2 + 5 + 2 + 1);
}

// Step shapes as a server sees them: decode batches of various sizes and contexts, prefill
// chunks near and deep into long prompts, mixed steps.
StepShape random_step(std::mt19937& rng) {
  std::uniform_int_distribution<int> decoders(0, 32), chunk(0, 512), depth(0, 6000), ctx(16, 3000);
  StepShape shape;
  const int n = decoders(rng);
  for (int i = 0; i < n; ++i) shape += span_shape(ctx(rng), 1, true);
  const int c = chunk(rng);
  if (c > 0) shape += span_shape(depth(rng), c, false);
  if (shape.num_tokens == 0) shape += span_shape(10, 1, true);
  return shape;
}

TEST(StepCostFitterTest, RecoversTheCoefficientsOfSyntheticStepTimes) {
  const StepCostModel truth{.fixed_ms = 6, .per_token_ms = 0.8, .per_context_ms = 2.5e-5,
                            .per_sampled_ms = 0.3, .usable = true};
  StepCostFitterConfig config;
  // A prior that is wrong on purpose (10x too fast, no fixed cost): data must win.
  config.arithmetic = {.flops_per_token = 2.7e8, .flops_per_context = 6.9e4, .flops_per_sampled = 5.7e7};
  config.prior_gflops = 500;
  StepCostFitter fitter(config);
  EXPECT_FALSE(fitter.model().usable);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.02);  // 2 % measurement noise
  for (int i = 0; i < 400; ++i) {
    const StepShape shape = random_step(rng);
    fitter.observe(shape, truth.predict_ms(shape) * (1.0 + noise(rng)));
  }
  const StepCostModel& fit = fitter.model();
  EXPECT_TRUE(fit.usable);

  EXPECT_NEAR(fit.fixed_ms, truth.fixed_ms, 1.0);
  EXPECT_NEAR(fit.per_token_ms, truth.per_token_ms, 0.05 * truth.per_token_ms);
  EXPECT_NEAR(fit.per_context_ms, truth.per_context_ms, 0.05 * truth.per_context_ms);
  EXPECT_NEAR(fit.per_sampled_ms, truth.per_sampled_ms, 0.1);
  // And it predicts unseen steps within a few percent.
  for (int i = 0; i < 50; ++i) {
    const StepShape shape = random_step(rng);
    EXPECT_NEAR(fit.predict_ms(shape), truth.predict_ms(shape), 0.05 * truth.predict_ms(shape) + 0.5);
  }
}

TEST(StepCostFitterTest, AFeatureNeverSeenKeepsItsPriorAndNoCoefficientGoesNegative) {
  StepCostFitterConfig config;
  config.arithmetic = {.flops_per_token = 2e8, .flops_per_context = 1e5, .flops_per_sampled = 0};
  config.prior_gflops = 100;
  StepCostFitter fitter(config);
  const double prior_context_ms = 1e5 / (100 * 1e6);
  // Only short decode steps: context pairs barely vary, so their cost stays near the prior
  // instead of collapsing to 0 (which would let the first long chunk blow the budget).
  for (int i = 0; i < 200; ++i) {
    StepShape shape;
    for (int j = 0; j < 1 + i % 8; ++j) shape += span_shape(20, 1, true);
    fitter.observe(shape, 5.0 + 0.2 * static_cast<double>(shape.num_tokens));
  }
  const StepCostModel& fit = fitter.model();
  EXPECT_NEAR(fit.per_context_ms, prior_context_ms, 0.5 * prior_context_ms);
  EXPECT_GE(fit.fixed_ms, 0);
  EXPECT_GE(fit.per_token_ms, 0);
  EXPECT_GE(fit.per_sampled_ms, 0);
  // Times that fall as work grows would fit a negative slope: clamped to 0, not negative.
  StepCostFitter odd(StepCostFitterConfig{});
  for (int i = 1; i <= 50; ++i) odd.observe(span_shape(0, i * 10, false), 100.0 - i);
  EXPECT_GE(odd.model().per_token_ms, 0);
  EXPECT_GE(odd.model().per_context_ms, 0);
  EXPECT_GT(odd.model().fixed_ms, 0);
}

TEST(StepCostFitterTest, FollowsTheMachineWhenItSlowsDown) {
  StepCostFitterConfig config;
  config.window_steps = 64;
  StepCostFitter fitter(config);
  std::mt19937 rng(3);
  const StepCostModel fast{.fixed_ms = 2, .per_token_ms = 0.5, .per_context_ms = 1e-5,
                           .per_sampled_ms = 0.1, .usable = true};
  StepCostModel slow = fast;
  slow.per_token_ms = 1.5;  // e.g. another process took a core
  for (int i = 0; i < 200; ++i) {
    const StepShape s = random_step(rng);
    fitter.observe(s, fast.predict_ms(s));
  }
  for (int i = 0; i < 64; ++i) {
    const StepShape s = random_step(rng);
    fitter.observe(s, slow.predict_ms(s));
  }
  EXPECT_NEAR(fitter.model().per_token_ms, 1.5, 0.1);
}

// The margin follows how far budget-cut steps ran over their prediction, forgets the prior
// within a few steps, ignores steps that ran faster, and is capped.
TEST(PlanningMarginTest, FollowsOverrunsOfBudgetCutSteps) {
  PlanningMargin margin;
  EXPECT_DOUBLE_EQ(margin.value(), PlanningMargin::kPrior);
  for (int i = 0; i < 40; ++i) margin.observe_budget_cut_step(100, 90);  // faster than predicted
  EXPECT_LT(margin.value(), 0.01);
  for (int i = 0; i < 40; ++i) margin.observe_budget_cut_step(100, 110);  // 10 % over
  EXPECT_NEAR(margin.value(), 0.10, 0.01);
  for (int i = 0; i < 40; ++i) margin.observe_budget_cut_step(100, 400);
  EXPECT_DOUBLE_EQ(margin.value(), PlanningMargin::kMax);
}

}  // namespace
}  // namespace troupe::scheduler
