// StepCostModel features and the online ridge fit (see step_cost_model.hpp).
#include "actors/scheduler/step_cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::scheduler {
namespace {

// What "a typical step" holds, per feature: scaling every feature to about 1 keeps the normal
// equations well conditioned (context pairs run to 1e7 where sampled rows stay below 1e2) and
// gives the prior's weight a meaning ("worth this many typical steps").
constexpr double kTypicalTokens = 512;
constexpr double kTypicalContextPairs = 512.0 * 2048.0;
constexpr double kTypicalSampled = 64;

// Solves a x = b (n <= 4) by Gaussian elimination with partial pivoting; false when singular.
template <size_t N>
bool solve(std::array<std::array<double, N>, N> a, std::array<double, N> b, size_t n,
           std::array<double, N>& x) {
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row][col]) > std::abs(a[pivot][col])) pivot = row;
    }
    if (std::abs(a[pivot][col]) < 1e-12) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t row = col + 1; row < n; ++row) {
      const double f = a[row][col] / a[col][col];
      for (size_t k = col; k < n; ++k) a[row][k] -= f * a[col][k];
      b[row] -= f * b[col];
    }
  }
  for (size_t i = n; i-- > 0;) {
    double sum = b[i];
    for (size_t k = i + 1; k < n; ++k) sum -= a[i][k] * x[k];
    x[i] = sum / a[i][i];
  }
  return true;
}

}  // namespace

StepShape span_shape(int64_t first_position, int64_t num_tokens, bool samples) {
  StepShape shape;
  shape.num_tokens = num_tokens;
  // Token i of the span (position first_position + i) attends to first_position + i + 1 keys.
  shape.num_context_pairs = num_tokens * first_position + num_tokens * (num_tokens + 1) / 2;
  shape.num_sampled = samples ? 1 : 0;
  return shape;
}

StepShape draft_shape(int64_t position, int64_t num_drafts) {
  const StepShape grown = span_shape(position, 1 + num_drafts, true);
  const StepShape alone = span_shape(position, 1, true);
  return {grown.num_tokens - alone.num_tokens, grown.num_context_pairs - alone.num_context_pairs,
          num_drafts};
}

StepShape shape_of(const gpu::StepBatch& batch) {
  StepShape shape;
  for (const gpu::SequenceSlice& slice : batch.seqs) {
    shape += span_shape(slice.context_len - slice.num_tokens, slice.num_tokens, slice.sample);
    shape.num_sampled += slice.num_draft_tokens;  // a verify span: a logits row per draft
  }
  return shape;
}

StepCostFitter::StepCostFitter(StepCostFitterConfig config) : config_(config) {
  scale_ = {1.0, 1.0 / kTypicalTokens, 1.0 / kTypicalContextPairs, 1.0 / kTypicalSampled};
  // GFLOP/s = 1e6 flops per millisecond.
  const double flops_per_ms = std::max(config_.prior_gflops, 1e-3) * 1e6;
  const StepArithmetic& a = config_.arithmetic;
  prior_ = {0.0, a.flops_per_token * kTypicalTokens / flops_per_ms,
            a.flops_per_context * kTypicalContextPairs / flops_per_ms,
            a.flops_per_sampled * kTypicalSampled / flops_per_ms};
  const double noise2 = config_.step_time_noise * config_.step_time_noise;
  for (size_t i = 0; i < kTerms; ++i) {
    // A zero prior (no arithmetic given) is no information: a negligible weight that only
    // keeps the normal equations solvable.
    const double sigma = i == 0 ? config_.prior_fixed_ms
                                : std::max(prior_[i] * config_.prior_uncertainty, 0.0);
    prior_weight_[i] = sigma > 0 ? noise2 / (sigma * sigma) : 1e-12;
    if (i > 0 && prior_[i] == 0) prior_weight_[i] = 1e-12;
  }
  config_.window_steps = std::max<size_t>(config_.window_steps, 1);
  window_.reserve(config_.window_steps);
  refit();  // the prior alone, not yet usable
}

StepCostFitter::Features StepCostFitter::scaled(const StepShape& shape) const {
  return {scale_[0], static_cast<double>(shape.num_tokens) * scale_[1],
          static_cast<double>(shape.num_context_pairs) * scale_[2],
          static_cast<double>(shape.num_sampled) * scale_[3]};
}

void StepCostFitter::observe(const StepShape& shape, double measured_ms) {
  if (!std::isfinite(measured_ms) || measured_ms < 0) return;
  Observation observation{scaled(shape), measured_ms};
  if (window_.size() < config_.window_steps) {
    window_.push_back(observation);
  } else {
    window_[next_] = observation;
  }
  next_ = (next_ + 1) % config_.window_steps;
  ++num_observed_;
  refit();
}

// Ridge regression towards the prior, weighted for relative error (a 5 ms error matters on a
// 20 ms decode step, not on a 2 s prefill; measurement noise grows with the step too), with
// every coefficient kept >= 0 (a step never gets cheaper by computing more): a coefficient
// that comes out negative is pinned to 0 and the rest refitted, as an active-set non-negative
// least squares does.
void StepCostFitter::refit() {
  using Matrix = std::array<std::array<double, kTerms>, kTerms>;
  Matrix normal{};
  Features rhs{};
  for (const Observation& o : window_) {
    const double weight = 1.0 / std::max(o.ms * o.ms, 1e-2);
    for (size_t i = 0; i < kTerms; ++i) {
      rhs[i] += weight * o.x[i] * o.ms;
      for (size_t j = 0; j < kTerms; ++j) normal[i][j] += weight * o.x[i] * o.x[j];
    }
  }
  for (size_t i = 0; i < kTerms; ++i) {
    normal[i][i] += prior_weight_[i];
    rhs[i] += prior_weight_[i] * prior_[i];
  }
  std::array<bool, kTerms> pinned{};
  Features theta{};
  for (size_t round = 0; round <= kTerms; ++round) {
    // The system restricted to the free coefficients.
    std::array<size_t, kTerms> free_terms{};
    size_t n = 0;
    for (size_t i = 0; i < kTerms; ++i) {
      if (!pinned[i]) free_terms[n++] = i;
    }
    Matrix a{};
    Features b{}, x{};
    for (size_t r = 0; r < n; ++r) {
      b[r] = rhs[free_terms[r]];
      for (size_t c = 0; c < n; ++c) a[r][c] = normal[free_terms[r]][free_terms[c]];
    }
    if (n > 0 && !solve(a, b, n, x)) break;  // cannot happen with lambda > 0; keep the last fit
    theta = {};
    size_t most_negative = kTerms;
    for (size_t r = 0; r < n; ++r) {
      theta[free_terms[r]] = x[r];
      if (x[r] < 0 && (most_negative == kTerms || x[r] < theta[most_negative])) {
        most_negative = free_terms[r];
      }
    }
    if (most_negative == kTerms) break;
    pinned[most_negative] = true;
    theta[most_negative] = 0;
  }
  for (double& t : theta) t = std::max(t, 0.0);
  model_.fixed_ms = theta[0] * scale_[0];
  model_.per_token_ms = theta[1] * scale_[1];
  model_.per_context_ms = theta[2] * scale_[2];
  model_.per_sampled_ms = theta[3] * scale_[3];
  model_.usable = num_observed_ >= config_.min_steps;
}

}  // namespace troupe::scheduler
