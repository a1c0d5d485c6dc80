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
  while (!kv_.allocate_slots(seq.kv, seq.num_computed_tokens + num_tokens)) {
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
  while (draft.token_budget > 0) {
    Sequence* head = waiting_.front();
    if (head == nullptr) break;
    // Just preempted to make room: it must not bounce straight back in this step.
    if (std::find(draft.preempted.begin(), draft.preempted.end(), head->request_id) !=
        draft.preempted.end()) {
      break;
    }
    const bool has_slot = running_.size() < static_cast<size_t>(config_.max_num_seqs);
    if (has_slot && try_admit(draft, *head)) continue;
    if (!may_preempt_for(*head)) break;  // FCFS: nobody behind the head jumps the queue
    preempt(draft, *running_.back());
  }
}

bool Scheduler::try_admit(Draft& draft, Sequence& seq) {
  const kv_cache::PrefixMatch match = kv_.find_cached_prefix(seq.token_ids);
  const int32_t num_tokens =
      std::min(seq.num_tokens() - match.num_tokens, prefill_chunk(seq, draft.token_budget));
  if (!kv_.allocate_slots(seq.kv, match, match.num_tokens + num_tokens)) return false;
  const uint64_t planned_step = num_steps_ + 1;
  waiting_.pop_front();
  kv_.record_prefix_query(seq.num_tokens(), match.num_tokens);
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
  kv_.free_sequence(victim.kv);
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
