// Scheduler: speculative decoding with n-gram drafts (issue 21). A decoding sequence's entry
// of one token becomes a verify span of 1 + k tokens — its last token and k drafts proposed
// by prompt lookup (ngram_proposer.hpp) — and the backend keeps the drafts its own sampling
// agrees with (gpu/step.hpp, SequenceSlice::num_draft_tokens). on_step_complete() then takes
// back the KV positions of rejected drafts and the blocks only they needed
// (scheduler_step.cpp).
//
// Drafts are the cheapest thing to drop: they take only what the step's token budget, its
// time budget and the free KV blocks leave after the decodes (never evicting cached prefixes,
// never preempting anyone), none in a step decoding more than disable_by_batch_size
// sequences, none while the step-time budget applies and a prompt is pending (see
// prompts_pending()), and a sequence whose drafts keep failing pauses drafting.
#include <algorithm>

#include "actors/scheduler/ngram_proposer.hpp"
#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {
namespace {

// The adaptive rule, two parts, a few numbers per sequence and no clock:
// - Length (Hugging Face's assisted-generation heuristic): a verify whose drafts were all
//   accepted lets the next carry kDraftLengthGrowth more, any rejection one fewer (down to 1).
//   A draft row is not free on the CPU (a token through every layer and a logits row over the
//   vocabulary; ~20 % of a batch-1 step, bench/RESULTS.md), so a sequence whose lookups keep
//   failing at the first draft spends one row on them, not k.
// - Pause: an exponential average of each verify's accepted / drafted share. Below
//   kMinAcceptance even short spans cost more than they save, so the sequence decodes plainly
//   for kPauseSteps steps, then tries again from kResumeAcceptance (a fresh chance, but one
//   more bad verify pauses it again).
constexpr int32_t kDraftLengthGrowth = 2;
constexpr double kAcceptanceWeight = 0.5;
constexpr double kMinAcceptance = 0.25;
constexpr double kResumeAcceptance = 0.4;
constexpr int32_t kPauseSteps = 16;

}  // namespace

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
  return std::max(0, std::min({config_.speculative.num_speculative_tokens, seq.draft_length,
                               token_budget, left - 1}));
}

void Scheduler::schedule_drafts(Draft& draft) {
  // After a preemption for KV the blocks just freed are for the victim's betters, not drafts.
  if (!config_.speculative.enabled() || !draft.preempted.empty()) return;
  const SpeculativeConfig& spec = config_.speculative;
  const int32_t block_size = kv().block_size();
  // A large batch is bound by arithmetic, where a draft row costs about what a decoded token
  // brings (vLLM's disable_by_batch_size); every entry so far is a decode.
  const int32_t limit = spec.disable_by_batch_size;
  if (limit > 0 && static_cast<int32_t>(draft.entries.size()) > limit) return;
  if (draft.time_bound && prompts_pending()) return;  // see prompts_pending()
  for (Scheduled& entry : draft.entries) {
    Sequence& seq = *entry.seq;
    // Every entry so far is a decode (one token, the sequence's last).
    int32_t k = max_drafts(seq, draft.token_budget);
    if (k <= 0) continue;
    propose_ngram(seq.token_ids, {spec.prompt_lookup_min, spec.prompt_lookup_max, k},
                  seq.draft_token_ids);
    k = fit_drafts_to_time_budget(draft, entry, static_cast<int32_t>(seq.draft_token_ids.size()));
    // KV for the drafts from free blocks only: speculation must not evict a cached prefix.
    const int32_t held_capacity = static_cast<int32_t>(seq.kv.blocks.size()) * block_size;
    const int32_t free_capacity = held_capacity + kv().pool().num_free() * block_size;
    k = std::min(k, free_capacity - (seq.num_computed_tokens + 1));
    if (k <= 0 || !kv().allocate_slots(seq.kv, seq.num_computed_tokens + 1 + k)) {
      seq.draft_token_ids.clear();
      continue;
    }
    seq.draft_token_ids.resize(static_cast<size_t>(k));
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
  const int32_t k = config_.speculative.num_speculative_tokens;
  seq.draft_length = num_accepted == num_drafts
                         ? std::min(k, std::max(seq.draft_length, num_drafts + kDraftLengthGrowth))
                         : std::max(1, std::min(seq.draft_length, num_drafts) - 1);
  const double share = static_cast<double>(num_accepted) / num_drafts;
  seq.draft_acceptance += kAcceptanceWeight * (share - seq.draft_acceptance);
  if (seq.draft_acceptance < kMinAcceptance) seq.draft_pause_steps = kPauseSteps;
}

}  // namespace troupe::scheduler
