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
  if (first_token_step_due()) {
    draft.first_tokens_only = true;
    schedule_waiting(draft);
    if (!draft.entries.empty()) return build_plan(draft);
    draft.first_tokens_only = false;  // nobody could be admitted after all: an ordinary step
  }
  // Decode first: one token each keeps every running stream moving (inter-token latency),
  // then running prefills continue, then new requests fill what is left.
  schedule_running(draft, /*decode_pass=*/true);
  start_time_budget(draft);
  // Drafts next (speculative decoding): cheap extra tokens for the running streams, cut to
  // what the step's budgets leave.
  schedule_drafts(draft);
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

void Scheduler::add_entry(Draft& draft, Sequence& seq, int32_t num_tokens) {
  draft.entries.push_back({&seq, num_tokens});
  draft.token_budget -= num_tokens;
  seq.last_scheduled_step = num_steps_ + 1;
}

void Scheduler::schedule_running(Draft& draft, bool decode_pass) {
  const uint64_t planned_step = num_steps_ + 1;
  // A snapshot: a preemption may take any running sequence (the fair victim), so walk a copy
  // and skip whoever left the running set meanwhile.
  const std::vector<Sequence*> order = running_;
  for (Sequence* candidate : order) {
    if (draft.token_budget <= 0) break;
    Sequence& seq = *candidate;
    if (seq.state != SequenceState::kRunning || seq.last_scheduled_step == planned_step) continue;
    const bool decoding = seq.num_remaining_tokens() == 1;
    if (decoding != decode_pass) continue;
    int32_t num_tokens = 1;
    if (!decode_pass) {
      num_tokens = fit_to_time_budget(draft, seq, seq.num_computed_tokens,
                                      prefill_chunk(seq, draft.token_budget), /*admitting=*/false);
      if (num_tokens == 0) continue;
    }
    if (!grow_or_preempt(draft, seq, num_tokens)) continue;  // seq itself was the victim
    add_entry(draft, seq, num_tokens);
  }
}

// Makes room in the KV pool for num_tokens more tokens of `seq`, preempting victims until it
// fits. false when `seq` itself had to go.
bool Scheduler::grow_or_preempt(Draft& draft, Sequence& seq, int32_t num_tokens) {
  while (!kv().allocate_slots(seq.kv, seq.num_computed_tokens + num_tokens)) {
    Sequence* victim = kv_preemption_victim();
    preempt(draft, *victim, WaitingQueue::RingPlace::kFront);
    if (victim == &seq) return false;
  }
  return true;
}

int32_t Scheduler::running_of(const std::string& client) const {
  const auto it = running_per_client_.find(client);
  return it == running_per_client_.end() ? 0 : it->second;
}

// The lowest priority's latest arrival; with kClient fairness, of the client that runs the most
// sequences (ties: the one whose latest arrival came last). running_ is sorted by (priority
// desc, arrival asc), so walking it from the back meets each client's latest arrival first.
Sequence* Scheduler::kv_preemption_victim() const {
  Sequence* last = running_.back();
  if (config_.fairness == Fairness::kFifo) return last;
  Sequence* victim = last;
  int32_t victim_load = running_of(last->client);
  for (auto it = running_.rbegin(); it != running_.rend() && (*it)->priority == last->priority; ++it) {
    const int32_t load = running_of((*it)->client);
    if (load > victim_load) {
      victim = *it;
      victim_load = load;
    }
  }
  return victim;
}

Sequence* Scheduler::admission_victim(const Sequence& head) const {
  if (running_.empty()) return nullptr;
  const Sequence* lowest = running_.back();
  if (config_.enable_priority_preemption && lowest->priority < head.priority) {
    return kv_preemption_victim();
  }
  if (config_.fairness != Fairness::kClient || lowest->priority != head.priority) return nullptr;
  // Fair share: a client running more than one sequence more than the head's client gives one
  // up. The margin of one keeps two clients from preempting each other back and forth.
  Sequence* victim = kv_preemption_victim();
  if (victim->client == head.client) return nullptr;
  return running_of(victim->client) > running_of(head.client) + 1 ? victim : nullptr;
}

void Scheduler::schedule_waiting(Draft& draft) {
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
    if (draft.first_tokens_only && !joins_first_token_step(draft, *head)) break;
    const bool has_slot = num_sequence_slots_used() < config_.max_num_seqs;
    if (has_slot && head->remote_kv) {
      // Its prompt is computed elsewhere: blocks and a pull, no prefill tokens this step. Short
      // of blocks it may preempt below, as an ordinary admission would.
      if (admit_remote(*head)) continue;
    } else if (has_slot) {
      // Prompt outputs need every position computed: such a sequence takes no cached prefix
      // (vLLM turns prefix caching off for prompt logprobs the same way).
      const kv_cache::PrefixMatch match = head->computes_whole_prompt()
                                              ? kv_cache::PrefixMatch{}
                                              : kv().find_cached_prefix(head->token_ids);
      if (!head->computes_whole_prompt() && deferred.size() < kMaxPrefixDeferralsPerStep &&
          next_block_in_progress(*head, match)) {
        waiting_.pop_front();
        deferred.push_back(head);
        ++num_prefix_deferrals_;
        continue;
      }
      const int32_t num_tokens = fit_to_time_budget(
          draft, *head, match.num_tokens,
          std::min(head->num_tokens() - match.num_tokens, prefill_chunk(*head, draft.token_budget)),
          /*admitting=*/true);
      if (num_tokens == 0) break;  // the step's time is spent; admissions resume next step
      if (try_admit(draft, *head, match, num_tokens)) continue;
    }
    Sequence* victim = admission_victim(*head);
    if (victim == nullptr) break;  // nobody behind the head jumps the queue
    if (victim->priority == head->priority) ++num_fairness_preemptions_;
    preempt(draft, *victim, WaitingQueue::RingPlace::kKeep);
  }
  // NOTE: deferred requests were popped in service order; pushing them back to the front in
  // reverse, each client first, restores the order (and the ring) they had. A victim preempted
  // for the head meanwhile kept its client's place behind them.
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

bool Scheduler::try_admit(Draft& draft, Sequence& seq, const kv_cache::PrefixMatch& match,
                          int32_t num_tokens) {
  if (!kv().allocate_slots(seq.kv, match, match.num_tokens + num_tokens)) return false;
  const uint64_t planned_step = num_steps_ + 1;
  waiting_.pop_front();
  // Whoever may not use the cache did not ask it: the hit rate counts real queries only.
  if (!seq.computes_whole_prompt()) kv().record_prefix_query(seq.num_tokens(), match.num_tokens);
  seq.num_computed_tokens = match.num_tokens;
  if (seq.first_scheduled_step == 0) {
    seq.first_scheduled_step = planned_step;
    seq.num_cached_prompt_tokens = match.num_tokens;
  }
  seq.state = SequenceState::kRunning;
  insert_running(&seq);
  add_entry(draft, seq, num_tokens);
  draft.admission_progressed = true;
  return true;
}

// Preemption by recompute: drop the victim's KV (its full blocks stay in the prefix cache
// until evicted, so resuming is usually cheap), keep its tokens, and queue it first in its
// priority.
void Scheduler::preempt(Draft& draft, Sequence& victim, WaitingQueue::RingPlace place) {
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
  waiting_.push_front(&victim, place);
  draft.preempted.push_back(victim.request_id);
}

void Scheduler::insert_running(Sequence* seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, runs_before), seq);
  ++running_per_client_[seq->client];
}

void Scheduler::erase_running(const Sequence* seq) {
  // The victim is usually the last one: search from the back.
  const auto it = std::find(running_.rbegin(), running_.rend(), seq);
  if (it == running_.rend()) return;
  running_.erase(std::next(it).base());
  const auto count = running_per_client_.find(seq->client);
  if (--count->second == 0) running_per_client_.erase(count);
}

}  // namespace troupe::scheduler
