// Scheduler: the step-time budget (stall-free batching, issue 13). While a step decodes, every
// decoding stream waits for the whole step before its next token, so prefill chunks are cut to
// what the StepCostModel predicts fits in config.max_step_ms. The policy stays clock-free: the
// model's coefficients come from the actor, which fits them to measured step times.
#include <algorithm>

#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {
namespace {

// While requests wait for admission, a running prefill may take this share of the step's
// remaining time; the rest is left for admissions, so a short prompt arriving behind a long
// one gets its first token within a few steps instead of after the whole long prefill.
constexpr double kRunningPrefillShareWhileOthersWait = 0.5;

}  // namespace

void Scheduler::start_time_budget(Draft& draft) const {
  // Only decoding streams suffer from a long step; a step of prefills alone runs at full size.
  draft.time_bound = config_.max_step_ms > 0 && step_cost_.usable && !draft.entries.empty();
}

StepShape Scheduler::shape_of(const Draft& draft) const {
  StepShape shape;
  for (const Scheduled& entry : draft.entries) {
    const Sequence& seq = *entry.seq;
    const bool samples = seq.num_computed_tokens + entry.num_tokens == seq.num_tokens();
    shape += span_shape(seq.num_computed_tokens, entry.num_tokens, samples);
  }
  return shape;
}

int32_t Scheduler::fit_to_time_budget(Draft& draft, const Sequence& seq, int32_t first_position,
                                      int32_t num_tokens, bool admitting) const {
  if (!draft.time_bound || num_tokens <= 0) return num_tokens;
  const StepShape base = shape_of(draft);
  const double base_ms = step_cost_.predict_ms(base);
  double limit_ms = config_.max_step_ms / (1.0 + step_cost_.margin);
  const bool others_wait =
      !waiting_.empty() && running_.size() < static_cast<size_t>(config_.max_num_seqs);
  if (!admitting && others_wait) {
    limit_ms = base_ms + std::max(0.0, limit_ms - base_ms) * kRunningPrefillShareWhileOthersWait;
  }
  const int32_t end_of_sequence = seq.num_tokens();
  auto fits = [&](int32_t n) {
    StepShape shape = base;
    shape += span_shape(first_position, n, first_position + n == end_of_sequence);
    return step_cost_.predict_ms(shape) <= limit_ms;
  };
  // The predicted time grows with n: binary search for the largest n that fits.
  int32_t fitting = 0;
  for (int32_t low = 1, high = num_tokens; low <= high;) {
    const int32_t mid = low + (high - low) / 2;
    if (fits(mid)) {
      fitting = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  // Nobody starves: the step's first prefill advances at least a block even when the decodes
  // alone fill the budget (a block, so its KV reaches the prefix cache as it goes).
  if (fitting == 0 && !draft.prefill_advanced) fitting = std::min(num_tokens, config_.block_size);
  if (fitting < num_tokens) draft.time_cut = true;
  return fitting;
}

}  // namespace troupe::scheduler
