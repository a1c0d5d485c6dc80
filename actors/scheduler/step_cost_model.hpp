// The step-time cost model behind the scheduler's step-time budget (issue 13, Sarathi-Serve's
// stall-free batching): how long a step of a given shape takes on this machine and model.
//
//   predicted_ms = fixed_ms                                    (launch, barriers, weight reads)
//                + per_token_ms    x tokens computed           (the matmuls)
//                + per_context_ms  x (query, key) pairs        (attention over the context)
//                + per_sampled_ms  x rows sampled              (logits over the vocabulary)
//
// A prefill chunk of n tokens starting at position p attends to n*p + n(n+1)/2 keys, so the
// context term is what makes a chunk deep in a long prompt slow. The coefficients are not
// constants per box: StepCostFitter fits them online (ridge regression over a window of
// recent steps, pulled towards a prior from the model's arithmetic) from the measured step
// times the scheduler actor feeds it. The Scheduler policy only reads a StepCostModel value;
// it never sees a clock.
//
// Thread-safety: plain values and a single-threaded fitter (the scheduler actor's executor).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/step.hpp"

namespace troupe::scheduler {

// The features of a step that its cost depends on.
struct StepShape {
  int64_t num_tokens = 0;
  int64_t num_context_pairs = 0;  // sum over computed tokens of the keys each attends to
  int64_t num_sampled = 0;

  StepShape& operator+=(const StepShape& other) {
    num_tokens += other.num_tokens;
    num_context_pairs += other.num_context_pairs;
    num_sampled += other.num_sampled;
    return *this;
  }
};

// The shape of a span of `num_tokens` tokens whose first token is at `first_position`.
StepShape span_shape(int64_t first_position, int64_t num_tokens, bool samples);
// What num_drafts draft tokens add to a decode span whose token is at `position`
// (speculative decoding): their tokens, their attention pairs, and a logits row each.
StepShape draft_shape(int64_t position, int64_t num_drafts);
// The shape of a whole planned step.
StepShape shape_of(const gpu::StepBatch& batch);

struct StepCostModel {
  double fixed_ms = 0;
  double per_token_ms = 0;
  double per_context_ms = 0;
  double per_sampled_ms = 0;
  // False until the fitter has seen enough steps; an unusable model turns the budget off.
  bool usable = false;
  // How far off recent predictions were (mean |predicted - actual| / actual, from the actor):
  // the policy plans to max_step_ms / (1 + margin), so a model that errs by 15 % still keeps
  // most steps inside the budget. 0 in a pure test.
  double margin = 0;

  double predict_ms(const StepShape& shape) const {
    return fixed_ms + per_token_ms * static_cast<double>(shape.num_tokens) +
           per_context_ms * static_cast<double>(shape.num_context_pairs) +
           per_sampled_ms * static_cast<double>(shape.num_sampled);
  }
};

// What one unit of each feature costs in arithmetic, from the model's shape: the prior's
// relative weights (how a token compares to an attention pair), not a speed.
struct StepArithmetic {
  double flops_per_token = 0;    // 2 x the parameters a token passes through (no embedding)
  double flops_per_context = 0;  // QK and PV over one key: 4 x layers x heads x head_dim
  double flops_per_sampled = 0;  // the logits row: 2 x vocabulary x embedding
};

struct StepCostFitterConfig {
  StepArithmetic arithmetic;
  // The prior (Bayesian ridge): each coefficient starts at its arithmetic over this speed,
  // give or take prior_uncertainty times itself; the fixed cost at 0 give or take
  // prior_fixed_ms. Any plausible speed works: measured steps, whose relative noise is taken
  // as step_time_noise, outweigh the prior within a few informative steps, while a feature the
  // machine never exercises (long contexts, say) keeps its prior instead of a guess from noise.
  double prior_gflops = 50.0;
  double prior_uncertainty = 1.0;
  double prior_fixed_ms = 10.0;
  double step_time_noise = 0.05;
  size_t window_steps = 512;  // the fit follows the machine's current speed
  // Before this many steps the model is not usable (the budget is off). One measured step
  // anchors the prior's speed; the first long prompt may come right after start.
  size_t min_steps = 1;
};

// Fits StepCostModel to observed (shape, milliseconds) pairs.
class StepCostFitter {
 public:
  explicit StepCostFitter(StepCostFitterConfig config);

  void observe(const StepShape& shape, double measured_ms);
  const StepCostModel& model() const { return model_; }
  size_t num_observed() const { return num_observed_; }

 private:
  static constexpr size_t kTerms = 4;
  using Features = std::array<double, kTerms>;
  struct Observation {
    Features x;
    double ms = 0;
  };

  Features scaled(const StepShape& shape) const;
  void refit();

  StepCostFitterConfig config_;
  Features scale_{};  // feature units: a "typical step" has each scaled feature near 1
  Features prior_{};         // prior coefficients in scaled units
  Features prior_weight_{};  // ... and their ridge weights (noise^2 / prior variance)
  std::vector<Observation> window_;  // ring buffer
  size_t next_ = 0;
  size_t num_observed_ = 0;
  StepCostModel model_;
};

// The margin the policy plans with (StepCostModel::margin): the mean overrun of recent steps
// the budget cut, max(0, actual / predicted - 1), over ~10 steps. Only those steps were sized by
// the model, and only an overrun threatens the budget. (The mean absolute error of every step,
// which the margin once was, kept a fresh server's first full-size prefills, off by up to 70 %,
// in it for a hundred steps: steps beside a long prefill ran at 60-80 % of the budget.)
class PlanningMargin {
 public:
  // Until a budget-cut step has run, plan with a quarter to spare.
  static constexpr double kPrior = 0.25;
  // Capped (planning to 2/3 of the budget at worst): a wildly wrong model must still let
  // prefill progress.
  static constexpr double kMax = 0.5;

  void observe_budget_cut_step(double predicted_ms, double actual_ms) {
    if (predicted_ms <= 0) return;
    constexpr double kSmoothing = 0.1;
    const double overrun = actual_ms > predicted_ms ? actual_ms / predicted_ms - 1.0 : 0.0;
    mean_overrun_ += kSmoothing * (overrun - mean_overrun_);
  }
  double value() const { return mean_overrun_ < kMax ? mean_overrun_ : kMax; }

 private:
  double mean_overrun_ = kPrior;
};

}  // namespace troupe::scheduler
