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

// When the decodes alone fill the budget, the prefill that must still progress may add this
// share of max_step_ms to the step (at least a block): a short prompt then finishes in one
// step instead of one block per step, for a bounded overrun of everyone's inter-token latency.
constexpr double kMinProgressShareOfBudget = 0.25;

// What a step may be predicted to take: max_step_ms, less the model's recent error.
double planning_limit_ms(const SchedulerConfig& config, const StepCostModel& model) {
  return config.max_step_ms / (1.0 + model.margin);
}

// The largest n in [0, max_n] with fits(n), for fits monotone (true up to some n, then false).
template <typename Fits>
int32_t largest_fitting(int32_t max_n, Fits fits) {
  int32_t fitting = 0;
  for (int32_t low = 1, high = max_n; low <= high;) {
    const int32_t mid = low + (high - low) / 2;
    if (fits(mid)) {
      fitting = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  return fitting;
}

}  // namespace

void Scheduler::start_time_budget(Draft& draft) const {
  // Only decoding streams suffer from a long step; a step of prefills alone runs at full size.
  draft.time_bound = config_.max_step_ms > 0 && step_cost_.usable && !draft.entries.empty();
  if (!draft.time_bound) return;
  const uint64_t planned_step = num_steps_ + 1;
  for (const Sequence* seq : running_) {
    const bool prefilling = seq->num_remaining_tokens() > 1;
    if (seq->state != SequenceState::kRunning || !prefilling ||
        seq->last_scheduled_step == planned_step) {
      continue;
    }
    if (draft.min_progress_running == nullptr ||
        progresses_before(*seq, *draft.min_progress_running)) {
      draft.min_progress_running = seq;
    }
  }
}

bool Scheduler::progresses_before(const Sequence& a, const Sequence& b) const {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (config_.fairness == Fairness::kClient) {
    const int32_t load_a = running_of(a.client);
    const int32_t load_b = running_of(b.client);
    if (load_a != load_b) return load_a < load_b;
  }
  return a.arrival_index < b.arrival_index;
}

// Nobody starves: when the decodes alone fill the budget, the running prefill first in fair
// order still advances (a block, so its KV reaches the prefix cache as it goes). Were that
// simply the first prefill in arrival order, a client that floods would always own it: its
// earlier requests prefill one block a step while a newcomer's short prompt waits behind all
// of them. So an admission may advance a block as well when it comes first in fair order.
bool Scheduler::gets_min_progress(const Draft& draft, const Sequence& seq, bool admitting) const {
  if (!admitting) return &seq == draft.min_progress_running;
  if (draft.admission_progressed) return false;
  return draft.min_progress_running == nullptr ||
         progresses_before(seq, *draft.min_progress_running);
}

StepShape Scheduler::shape_of(const Draft& draft) const {
  StepShape shape;
  for (const Scheduled& entry : draft.entries) {
    const Sequence& seq = *entry.seq;
    const bool samples =
        seq.num_computed_tokens + entry.num_tokens - entry.num_draft_tokens == seq.num_tokens();
    shape += span_shape(seq.num_computed_tokens, entry.num_tokens, samples);
    shape.num_sampled += entry.num_draft_tokens;  // a logits row per draft
  }
  return shape;
}

int32_t Scheduler::fit_to_time_budget(Draft& draft, const Sequence& seq, int32_t first_position,
                                      int32_t num_tokens, bool admitting) const {
  if (!draft.time_bound || num_tokens <= 0) return num_tokens;
  const StepShape base = shape_of(draft);
  const double base_ms = step_cost_.predict_ms(base);
  double limit_ms = planning_limit_ms(config_, step_cost_);
  const bool others_wait =
      !waiting_.empty() && running_.size() < static_cast<size_t>(config_.max_num_seqs);
  if (!admitting && others_wait) {
    limit_ms = base_ms + std::max(0.0, limit_ms - base_ms) * kRunningPrefillShareWhileOthersWait;
  }
  const int32_t end_of_sequence = seq.num_tokens();
  auto predict_with = [&](int32_t n) {
    StepShape shape = base;
    shape += span_shape(first_position, n, first_position + n == end_of_sequence);
    return step_cost_.predict_ms(shape);
  };
  // The predicted time grows with n.
  int32_t fitting = largest_fitting(num_tokens, [&](int32_t n) { return predict_with(n) <= limit_ms; });
  if (fitting == 0 && gets_min_progress(draft, seq, admitting)) {
    const double allowance_ms = config_.max_step_ms * kMinProgressShareOfBudget;
    fitting = std::max(std::min(num_tokens, config_.block_size),
                       largest_fitting(num_tokens, [&](int32_t n) {
                         return predict_with(n) - base_ms <= allowance_ms;
                       }));
  }
  if (fitting < num_tokens) draft.time_cut = true;
  return fitting;
}

// A newcomer (a client with nothing running) waits for its first token with nothing else to
// show; folded into the next step, that token waits for every decode of the step too. On a CPU a
// step of 64 decodes costs several times a short prompt's prefill, so the lone user of a flooded
// server would wait several idle TTFTs (issue 13's flood). SGLang runs prefill batches apart
// from decode batches for the same reason; here only when it pays: see scheduler.hpp.
bool Scheduler::first_token_steps_apply() const {
  return config_.first_token_steps && config_.fairness == Fairness::kClient &&
         config_.max_step_ms > 0 && step_cost_.usable;
}

bool Scheduler::first_token_step_due() const {
  if (!first_token_steps_apply()) return false;
  if (last_first_token_step_ != 0 && last_first_token_step_ == num_steps_) return false;
  const Sequence* head = waiting_.front();
  if (head == nullptr) return false;
  const std::optional<StepShape> prompt = newcomer_prompt_shape(*head);
  if (!prompt) return false;
  StepShape decodes;
  for (const Sequence* seq : running_) {
    // While a step is in flight (interrupt_due()) its decodes count as computed already.
    if (seq->state == SequenceState::kRunning && seq->num_remaining_tokens() <= 1) {
      decodes += span_shape(seq->num_computed_tokens, 1, /*samples=*/true);
    }
  }
  if (decodes.num_tokens == 0) return false;
  const double alone_ms = step_cost_.predict_ms(*prompt);
  StepShape together = decodes;
  together += *prompt;
  // Whether it fits the budget is joins_first_token_step()'s to say.
  return 2.0 * alone_ms <= step_cost_.predict_ms(together);
}

bool Scheduler::interruptible(const Draft& draft, uint64_t step_id) const {
  // Only where an interrupt could ever be due: the scheduler actor awaits an interruptible step
  // together with its mailbox, which costs a little every step.
  if (!config_.first_token_interrupts || !first_token_steps_apply() || draft.first_tokens_only) {
    return false;
  }
  // The decodes right after a first-token step have waited for it once already; those right
  // after an interrupted step too (its newcomer may not have been admitted after all, and
  // another message must not take this step from them as well).
  const auto follows = [step_id](uint64_t step) { return step != 0 && step + 1 == step_id; };
  return !follows(last_first_token_step_) && !follows(last_interrupted_step_);
}

bool Scheduler::interrupt_due() const {
  return in_flight_ && in_flight_->interruptible && first_token_step_due();
}

std::optional<StepShape> Scheduler::newcomer_prompt_shape(const Sequence& seq) const {
  if (seq.remote_kv || running_of(seq.client) != 0) return std::nullopt;
  if (!running_.empty() && seq.priority < running_.front()->priority) return std::nullopt;
  const int32_t cached = kv().find_cached_prefix(seq.token_ids).num_tokens;
  const int32_t num_tokens = seq.num_tokens() - cached;
  // The whole prompt in this one step, or the step is no shortcut to its first token.
  if (num_tokens > config_.max_num_batched_tokens ||
      (config_.chunked_prefill_size > 0 && num_tokens > config_.chunked_prefill_size)) {
    return std::nullopt;
  }
  return span_shape(cached, num_tokens, /*samples=*/true);
}

bool Scheduler::joins_first_token_step(const Draft& draft, const Sequence& seq) const {
  const std::optional<StepShape> prompt = newcomer_prompt_shape(seq);
  if (!prompt || prompt->num_tokens > draft.token_budget) return false;
  StepShape step = shape_of(draft);
  step += *prompt;
  // Inside the budget like any step: the decodes it delays wait one step's budget more, once.
  return step_cost_.predict_ms(step) <= planning_limit_ms(config_, step_cost_);
}

// Drafts only spend time no prompt needs: schedule_drafts() makes none while this holds and the
// budget applies. Given a share of the step instead, they took it from a long prompt in every
// step of its prefill (beside four speculating streams its TTFT was 2.2x its TTFT alone, 1.35x
// without drafts: bench/RESULTS.md), for streams whose inter-token latency the budget bounds.
bool Scheduler::prompts_pending() const {
  if (!waiting_.empty() && num_sequence_slots_used() < config_.max_num_seqs) return true;
  return std::any_of(running_.begin(), running_.end(),
                     [](const Sequence* s) { return s->num_remaining_tokens() > 1; });
}

int32_t Scheduler::fit_drafts_to_time_budget(const Draft& draft, const Scheduled& entry,
                                             int32_t num_drafts) const {
  if (!draft.time_bound || num_drafts <= 0) return num_drafts;
  const StepShape base = shape_of(draft);
  const double limit_ms = planning_limit_ms(config_, step_cost_);
  const int32_t position = entry.seq->num_computed_tokens;
  return largest_fitting(num_drafts, [&](int32_t n) {
    StepShape shape = base;
    shape += draft_shape(position, n);
    return step_cost_.predict_ms(shape) <= limit_ms;
  });
}

}  // namespace troupe::scheduler
