// Scheduler planning: who runs in the next step, how many tokens each gets, and who is
// preempted to make room (the policy is summarised in scheduler.hpp).
#include <algorithm>
#include <stdexcept>

#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {
namespace {

// Service order of the running set: higher priority first, then earlier arrival.
bool runs_before(const Sequence* a, const Sequence* b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->arrival_index < b->arrival_index;
}

}  // namespace

StepPlan Scheduler::schedule() {
  if (in_flight_) throw std::logic_error("Scheduler::schedule() while a step is in flight");
  Draft draft;
  draft.token_budget = config_.max_num_batched_tokens;
  draft.entries.reserve(running_.size() + 1);
  // Decode first: one token each keeps every running stream moving (inter-token latency),
  // then running prefills continue, then new requests fill what is left.
  schedule_running(draft, /*decode_pass=*/true);
  schedule_running(draft, /*decode_pass=*/false);
  // NOTE: after a preemption for KV the pool is exhausted; admitting now would only preempt
  // again (vLLM v1 does the same).
  if (draft.preempted.empty()) schedule_waiting(draft);
  return build_plan(draft);
}

int32_t Scheduler::prefill_chunk(const Sequence& seq, int32_t budget) const {
  int32_t num_tokens = std::min(seq.num_remaining_tokens(), budget);
  if (config_.chunked_prefill_size > 0) num_tokens = std::min(num_tokens, config_.chunked_prefill_size);
  return num_tokens;
}

void Scheduler::schedule_running(Draft& draft, bool decode_pass) {
  const uint64_t planned_step = num_steps_ + 1;
  // NOTE: preemption only removes running_.back(), which is at or after index i, so indices
  // below i stay valid, and a preempted seq at i ends the loop.
  for (size_t i = 0; i < running_.size() && draft.token_budget > 0; ++i) {
    Sequence& seq = *running_[i];
    if (seq.last_scheduled_step == planned_step) continue;
    const bool decoding = seq.num_remaining_tokens() == 1;
    if (decoding != decode_pass) continue;
    const int32_t num_tokens = decode_pass ? 1 : prefill_chunk(seq, draft.token_budget);
    if (!grow_or_preempt(draft, seq, num_tokens)) continue;  // seq itself was the victim
    draft.entries.push_back({&seq, num_tokens});
    draft.token_budget -= num_tokens;
    seq.last_scheduled_step = planned_step;
  }
}

// Makes room in the KV pool for num_tokens more tokens of `seq`, preempting the
// lowest-priority, latest-arrived running sequences until it fits. false when `seq` itself
// had to go (nothing behind it was left to preempt).
bool Scheduler::grow_or_preempt(Draft& draft, Sequence& seq, int32_t num_tokens) {
  while (!kv().allocate_slots(seq.kv, seq.num_computed_tokens + num_tokens)) {
    Sequence* victim = running_.back();
    preempt(draft, *victim);
    if (victim == &seq) return false;
  }
  return true;
}

void Scheduler::schedule_waiting(Draft& draft) {
  auto may_preempt_for = [this](const Sequence& head) {
    return config_.enable_priority_preemption && !running_.empty() &&
           running_.back()->priority < head.priority;
  };
  // Requests stepped over this step because a running prefill is computing their next
  // uncached block; they go back to the front of the queue, in order, at the end.
  std::vector<Sequence*> deferred;
  while (draft.token_budget > 0) {
    Sequence* head = waiting_.front();
    if (head == nullptr) break;
    // Just preempted to make room: it must not bounce straight back in this step.
    if (std::find(draft.preempted.begin(), draft.preempted.end(), head->request_id) !=
        draft.preempted.end()) {
      break;
    }
    const bool has_slot = running_.size() < static_cast<size_t>(config_.max_num_seqs);
    if (has_slot) {
      const kv_cache::PrefixMatch match = kv().find_cached_prefix(head->token_ids);
      if (deferred.size() < kMaxPrefixDeferralsPerStep && next_block_in_progress(*head, match)) {
        waiting_.pop_front();
        deferred.push_back(head);
        ++num_prefix_deferrals_;
        continue;
      }
      if (try_admit(draft, *head, match)) continue;
    }
    if (!may_preempt_for(*head)) break;  // FCFS: nobody behind the head jumps the queue
    preempt(draft, *running_.back());
  }
  // NOTE: every deferred request ranks at or above the last head in service order, and a
  // priority preemption's victim ranks below it, so pushing them back to the front in reverse
  // restores the order they had.
  for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) waiting_.push_front(*it);
}

// In-flight prefix sharing (SGLang defers the same way): when requests with a common prompt
// prefix arrive together, nothing of it is cached yet, and admitting them all would compute
// the prefix once per request in the same steps. Instead the later ones wait while one running
// prefill computes the next shared block; it is cached when that step completes, and they
// reuse it. Waiting costs them little: computing the block themselves would have taken the
// same step. Only prompt blocks count (a running decode adds one token per step; waiting on it
// could take block_size steps).
bool Scheduler::next_block_in_progress(const Sequence& seq, const kv_cache::PrefixMatch& match) const {
  if (!kv().prefix_caching_enabled()) return false;
  const int32_t block_end = match.num_tokens + kv().block_size();
  // A cache hit never covers the last token (it must be computed to sample from).
  if (block_end > seq.num_tokens() - 1) return false;
  const auto prefix_end = seq.token_ids.begin() + block_end;
  for (const Sequence* other : running_) {
    if (other->num_computed_tokens >= block_end || block_end > other->num_prompt_tokens) continue;
    if (other->kv.caching_stopped) continue;  // its blocks will not reach the cache
    if (std::equal(seq.token_ids.begin(), prefix_end, other->token_ids.begin())) return true;
  }
  return false;
}

bool Scheduler::try_admit(Draft& draft, Sequence& seq, const kv_cache::PrefixMatch& match) {
  const int32_t num_tokens =
      std::min(seq.num_tokens() - match.num_tokens, prefill_chunk(seq, draft.token_budget));
  if (!kv().allocate_slots(seq.kv, match, match.num_tokens + num_tokens)) return false;
  const uint64_t planned_step = num_steps_ + 1;
  waiting_.pop_front();
  kv().record_prefix_query(seq.num_tokens(), match.num_tokens);
  seq.num_computed_tokens = match.num_tokens;
  if (seq.first_scheduled_step == 0) {
    seq.first_scheduled_step = planned_step;
    seq.num_cached_prompt_tokens = match.num_tokens;
  }
  seq.state = SequenceState::kRunning;
  seq.last_scheduled_step = planned_step;
  insert_running(&seq);
  draft.entries.push_back({&seq, num_tokens});
  draft.token_budget -= num_tokens;
  return true;
}

// Preemption by recompute: drop the victim's KV (its full blocks stay in the prefix cache
// until evicted, so resuming is usually cheap), keep its tokens, and queue it first in its
// priority.
void Scheduler::preempt(Draft& draft, Sequence& victim) {
  const auto it = std::find_if(draft.entries.begin(), draft.entries.end(),
                               [&victim](const Scheduled& s) { return s.seq == &victim; });
  if (it != draft.entries.end()) {
    draft.token_budget += it->num_tokens;
    draft.entries.erase(it);
  }
  erase_running(&victim);
  kv().free_sequence(victim.kv);
  victim.num_computed_tokens = 0;
  victim.state = SequenceState::kWaiting;
  victim.last_scheduled_step = 0;
  ++victim.num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(&victim);
  draft.preempted.push_back(victim.request_id);
}

void Scheduler::insert_running(Sequence* seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, runs_before), seq);
}

void Scheduler::erase_running(const Sequence* seq) {
  // The victim is usually the last one: search from the back.
  const auto it = std::find(running_.rbegin(), running_.rend(), seq);
  if (it != running_.rend()) running_.erase(std::next(it).base());
}

}  // namespace troupe::scheduler
