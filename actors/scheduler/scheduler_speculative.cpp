// Scheduler: speculative decoding with n-gram drafts (issue 21). A decoding sequence's entry
// of one token becomes a verify span of 1 + k tokens — its last token and k drafts proposed
// by prompt lookup (ngram_proposer.hpp) — and the backend keeps the drafts its own sampling
// agrees with (gpu/step.hpp, SequenceSlice::num_draft_tokens). on_step_complete() then takes
// back the KV positions of rejected drafts and the blocks only they needed
// (scheduler_step.cpp).
//
// Drafts are the cheapest thing to drop: they take only what the step's token budget, its
// time budget and the free KV blocks leave after the decodes (never evicting cached prefixes,
// never preempting anyone), and a sequence whose drafts keep failing pauses drafting.
#include <algorithm>

#include "actors/scheduler/ngram_proposer.hpp"
#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {
namespace {

// The adaptive rule: an exponential average of each verify's accepted / drafted share. Below
// kMinAcceptance a verify span costs more than its accepted tokens save (a span of 1 + k
// tokens is not free: k more logits rows and attention items), so the sequence decodes plainly
// for kPauseSteps steps, then tries again from kResumeAcceptance (a fresh chance, but one more
// bad verify pauses it again). Cheap: two numbers per sequence, no clock.
constexpr double kAcceptanceWeight = 0.5;
constexpr double kMinAcceptance = 0.25;
constexpr double kResumeAcceptance = 0.4;
constexpr int32_t kPauseSteps = 16;
// A sequence the cost rule (worth_drafting) declines gets no verify to update its estimate, so
// the estimate drifts back toward optimism by this share a step: it tries again now and then
// (the text may have started repeating), and one bad verify pulls it down again.
constexpr double kRelaxWeight = 1.0 / 16;

// Tokens that n drafts add when each is accepted with probability a, given the ones before it
// were: a + a^2 + ... + a^n.
double expected_accepted(double a, int32_t n) {
  double sum = 0;
  double p = 1;
  for (int32_t i = 0; i < n; ++i) sum += (p *= a);
  return sum;
}

}  // namespace

// Drafts are not free: each is a token through every layer and a logits row over the whole
// vocabulary. At batch 1 the step is bound by reading the weights and a few more rows cost
// little; at batch 16 it is bound by arithmetic and a draft row costs about what a decoded
// token does. So with a usable cost model, a sequence gets the most drafts whose expected
// tokens per predicted millisecond at least match what the step yields per millisecond
// without them (ratio falls with n: the gain is concave, the cost about linear).
int32_t Scheduler::worth_drafting(const Sequence& seq, int32_t num_drafts, const StepShape& step,
                                  double step_tokens) const {
  if (!step_cost_.usable || num_drafts <= 0) return num_drafts;
  const double step_ms = step_cost_.predict_ms(step);
  if (step_ms <= 0 || step_tokens <= 0) return num_drafts;
  const double rate = step_tokens / step_ms;
  for (int32_t n = num_drafts; n > 0; --n) {
    StepShape grown = step;
    grown += draft_shape(seq.num_computed_tokens, n);
    const double cost_ms = step_cost_.predict_ms(grown) - step_ms;
    if (cost_ms <= 0 || expected_accepted(seq.draft_acceptance, n) >= rate * cost_ms) return n;
  }
  return 0;
}

int32_t Scheduler::max_drafts(Sequence& seq, int32_t token_budget) {
  if (!seq.may_draft || config_.role != SchedulerRole::kPrefillAndDecode) return 0;
  if (seq.draft_pause_steps > 0) {
    if (--seq.draft_pause_steps == 0) seq.draft_acceptance = kResumeAcceptance;
    return 0;
  }
  // The token sampled after the last draft makes 1 + k new tokens: never past max_tokens or
  // the context.
  const int32_t left = std::min(seq.stop.max_tokens - seq.num_generated_tokens(),
                                config_.max_model_len - seq.num_tokens());
  return std::max(0, std::min({config_.speculative.num_speculative_tokens, token_budget, left - 1}));
}

void Scheduler::schedule_drafts(Draft& draft) {
  // After a preemption for KV the blocks just freed are for the victim's betters, not drafts.
  if (!config_.speculative.enabled() || !draft.preempted.empty()) return;
  const SpeculativeConfig& spec = config_.speculative;
  const int32_t block_size = kv().block_size();
  // The step as planned so far, and the tokens it is expected to produce (one per decode,
  // plus the drafts expected to be accepted), for worth_drafting().
  StepShape step = shape_of(draft);
  double step_tokens = static_cast<double>(draft.entries.size());
  for (Scheduled& entry : draft.entries) {
    Sequence& seq = *entry.seq;
    // Every entry so far is a decode (one token, the sequence's last).
    int32_t k = max_drafts(seq, draft.token_budget);
    if (k <= 0) continue;
    propose_ngram(seq.token_ids, {spec.prompt_lookup_min, spec.prompt_lookup_max, k},
                  seq.draft_token_ids);
    k = fit_drafts_to_time_budget(draft, entry, static_cast<int32_t>(seq.draft_token_ids.size()));
    if (k > 0) {
      const int32_t offered = k;
      k = worth_drafting(seq, k, step, step_tokens);
      if (k == 0 && offered > 0) seq.draft_acceptance += kRelaxWeight * (1.0 - seq.draft_acceptance);
    }
    // KV for the drafts from free blocks only: speculation must not evict a cached prefix.
    const int32_t held_capacity = static_cast<int32_t>(seq.kv.blocks.size()) * block_size;
    const int32_t free_capacity = held_capacity + kv().pool().num_free() * block_size;
    k = std::min(k, free_capacity - (seq.num_computed_tokens + 1));
    if (k <= 0 || !kv().allocate_slots(seq.kv, seq.num_computed_tokens + 1 + k)) {
      seq.draft_token_ids.clear();
      continue;
    }
    seq.draft_token_ids.resize(static_cast<size_t>(k));
    step += draft_shape(seq.num_computed_tokens, k);
    step_tokens += expected_accepted(seq.draft_acceptance, k);
    entry.num_draft_tokens = k;
    entry.num_tokens += k;
    draft.token_budget -= k;
  }
}

void Scheduler::settle_drafts(Sequence& seq, int32_t num_drafts, int32_t num_accepted) {
  seq.draft_token_ids.clear();
  if (num_drafts <= 0) return;
  ++num_spec_drafts_;
  num_spec_draft_tokens_ += static_cast<uint64_t>(num_drafts);
  num_spec_accepted_tokens_ += static_cast<uint64_t>(num_accepted);
  const double share = static_cast<double>(num_accepted) / num_drafts;
  seq.draft_acceptance += kAcceptanceWeight * (share - seq.draft_acceptance);
  if (seq.draft_acceptance < kMinAcceptance) seq.draft_pause_steps = kPauseSteps;
}

}  // namespace troupe::scheduler
