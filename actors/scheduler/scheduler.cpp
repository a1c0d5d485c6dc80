// Scheduler: request lifecycle (add, cancel, finish), stats, the slots view and the invariant
// check. Planning lives in scheduler_admission.cpp, step building and completion in
// scheduler_step.cpp, disaggregated prefill/decode in scheduler_transfer.cpp.
#include "actors/scheduler/scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace troupe::scheduler {
namespace {

const SchedulerConfig& validated(const SchedulerConfig& config) {
  if (auto error = validate(config)) {
    throw std::invalid_argument("invalid scheduler config: " + *error);
  }
  return config;
}

}  // namespace

kv_cache::KvCacheConfig Scheduler::kv_cache_config(const SchedulerConfig& config) {
  return {.num_blocks = config.num_blocks,
          .block_size = config.block_size,
          .enable_prefix_caching = config.enable_prefix_caching,
          .num_kv_groups = config.num_kv_groups,
          .sliding_window = config.sliding_window};
}

Scheduler::Scheduler(SchedulerConfig config, KvCacheHome home)
    : config_(validated(config)),
      waiting_(config_.fairness, [this](const std::string& client) { return running_of(client); }) {
  if (home == KvCacheHome::kOwned) {
    kv_ = std::make_unique<kv_cache::KvCacheManager>(kv_cache_config(config_));
  }
  running_.reserve(static_cast<size_t>(config_.max_num_seqs));
}

void Scheduler::attach_kv_cache(std::unique_ptr<kv_cache::KvCacheManager> kv) {
  if (kv_ != nullptr) throw std::logic_error("Scheduler: a KV manager is already attached");
  if (kv == nullptr) throw std::logic_error("Scheduler: attaching no KV manager");
  if (kv->num_blocks() != config_.num_blocks || kv->block_size() != config_.block_size ||
      kv->num_kv_groups() != config_.num_kv_groups ||
      kv->prefix_caching_enabled() != config_.enable_prefix_caching) {
    throw std::logic_error("Scheduler: the KV manager's geometry differs from the config");
  }
  kv_ = std::move(kv);
}

std::unique_ptr<kv_cache::KvCacheManager> Scheduler::detach_kv_cache() {
  if (kv_ == nullptr) throw std::logic_error("Scheduler: no KV manager to detach");
  return std::move(kv_);
}

kv_cache::KvCacheManager& Scheduler::kv() {
  if (kv_ == nullptr) throw std::logic_error("Scheduler: KV used while lent to the kv-cache actor");
  return *kv_;
}

const kv_cache::KvCacheManager& Scheduler::kv() const {
  if (kv_ == nullptr) throw std::logic_error("Scheduler: KV used while lent to the kv-cache actor");
  return *kv_;
}

AddResult Scheduler::check_admissible(const NewRequest& request, size_t group_size) const {
  if (sequences_.contains(request.request_id) || transferring_.contains(request.request_id) ||
      cancelled_pulls_.contains(request.request_id)) {
    return AddResult::kDuplicateId;
  }
  if (request.prompt_token_ids.empty()) return AddResult::kEmptyPrompt;
  if (request.stop.max_tokens < (request.prompt_only ? 0 : 1)) return AddResult::kInvalidMaxTokens;
  const auto num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  // A prompt-only sequence generates nothing, so its whole context may be prompt.
  if (num_prompt > config_.max_model_len ||
      (num_prompt == config_.max_model_len && !request.prompt_only)) {
    return AddResult::kPromptTooLong;
  }
  // The last token of a finished sequence is never computed, so its KV peaks one below its
  // final length; a prompt-only sequence computes every prompt token. A sequence that cannot
  // fit alone would preempt itself forever.
  const int64_t final_len =
      request.prompt_only ? num_prompt + 1
                          : std::min<int64_t>(num_prompt + request.stop.max_tokens, config_.max_model_len);
  const int64_t max_blocks = (final_len - 1 + config_.block_size - 1) / config_.block_size;
  if (max_blocks > config_.num_blocks) return AddResult::kNeverFits;
  if (config_.max_waiting_per_client > 0 &&
      static_cast<int64_t>(waiting_.num_waiting_of(request.client) + group_size) >
          config_.max_waiting_per_client) {
    return AddResult::kClientQueueFull;
  }
  if (static_cast<int64_t>(waiting_.size() + group_size) > config_.max_queue) {
    return AddResult::kQueueFull;
  }
  return AddResult::kAccepted;
}

AddResult Scheduler::add_requests(std::vector<NewRequest> requests) {
  for (const NewRequest& request : requests) {
    const AddResult result = check_admissible(request, requests.size());
    if (result != AddResult::kAccepted) {
      num_requests_refused_ += requests.size();
      return result;
    }
  }
  for (NewRequest& request : requests) admit(std::move(request));
  return AddResult::kAccepted;
}

AddResult Scheduler::add_request(NewRequest request) {
  const AddResult result = check_admissible(request);
  if (result != AddResult::kAccepted) {
    ++num_requests_refused_;
    return result;
  }
  admit(std::move(request));
  return AddResult::kAccepted;
}

void Scheduler::admit(NewRequest request) {
  auto seq = std::make_unique<Sequence>();
  seq->request_id = request.request_id;
  seq->num_prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
  seq->token_ids = std::move(request.prompt_token_ids);
  seq->sampling = request.sampling;
  seq->stop = std::move(request.stop);
  seq->priority = request.priority;
  seq->client = std::move(request.client);
  seq->arrival_index = next_arrival_index_++;
  seq->arrival_step = num_steps_;
  seq->hold_kv_when_finished = request.hold_kv_when_finished;
  seq->remote_kv = std::move(request.remote_kv);
  // No drafts for a grammar's rows (each token must pass the matcher before the next is
  // masked) nor for KV another server will take (its length must be what was generated).
  seq->may_draft = request.grammar == nullptr && !request.hold_kv_when_finished && !request.prompt_only;
  seq->prompt_logprobs = request.prompt_logprobs;
  seq->pooling = request.pooling;
  seq->prompt_only = request.prompt_only;
  waiting_.push_back(seq.get());
  ++num_requests_accepted_;
  num_prompt_tokens_ += static_cast<uint64_t>(seq->num_prompt_tokens);
  Sequence& added = *seq;
  sequences_.emplace(seq->request_id, std::move(seq));
  if (added.remote_kv) start_remote(added, request.first_token_id);
}

std::optional<FinishedSequence> Scheduler::cancel(RequestId request_id) {
  return finish(request_id, FinishReason::kCancelled);
}

std::optional<FinishedSequence> Scheduler::finish(RequestId request_id, FinishReason reason) {
  const auto it = sequences_.find(request_id);
  if (it == sequences_.end()) return std::nullopt;
  return retire(*it->second, reason);
}

// Removes the sequence from wherever it is, releases its KV and forgets it. NOTE: when a step
// is in flight the released blocks may still be written by it; that is safe because nothing
// can allocate them before on_step_complete() (schedule() refuses to run until then).
FinishedSequence Scheduler::retire(Sequence& seq, FinishReason reason) {
  FinishedSequence finished{seq.request_id,          reason, seq.num_prompt_tokens,
                            seq.num_generated_tokens(), seq.num_cached_prompt_tokens,
                            seq.num_preemptions};
  switch (seq.state) {
    case SequenceState::kWaiting:
      waiting_.erase(&seq);
      // Never pulled: the prefill server's lease is not needed any more.
      if (seq.remote_kv) kv_work_.releases.push_back(std::move(*seq.remote_kv));
      break;
    case SequenceState::kRunning: erase_running(&seq); break;
    case SequenceState::kPrefillDone:
      std::erase(prefill_done_, &seq);
      break;
    case SequenceState::kAwaitingKv:
      // NOTE: the pull may still be writing into these blocks; they are freed when
      // kv_resident() reports it over (the kv-cache actor always reports).
      std::erase(awaiting_kv_, &seq);
      cancelled_pulls_.emplace(seq.request_id, std::move(seq.kv));
      seq.kv = {};
      break;
  }
  finished.held_kv = hold_finished_kv(seq, reason);
  // Before the KV manager is needed: a remote request whose first token ended it holds none.
  if (!seq.kv.blocks.empty()) kv().free_sequence(seq.kv);
  ++num_requests_finished_;
  sequences_.erase(seq.request_id);  // destroys seq
  return finished;
}

const Sequence* Scheduler::find(RequestId request_id) const {
  const auto it = sequences_.find(request_id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_waiting = waiting_.size();
  waiting_.for_each([&s](const Sequence& seq) {
    if (seq.num_preemptions > 0) ++s.num_preempted_waiting;
  });
  s.num_running = static_cast<int32_t>(running_.size());
  s.num_awaiting_transfer = static_cast<int32_t>(prefill_done_.size() + transferring_.size());
  s.num_awaiting_kv = static_cast<int32_t>(awaiting_kv_.size());
  s.num_kv_pulls = num_kv_pulls_;
  s.num_kv_pull_fallbacks = num_kv_pull_fallbacks_;
  if (kv_ != nullptr) {  // lent out: the kv-cache actor publishes the KV figures itself
    s.kv = kv_->stats();
    s.prefix_cache_hit_rate = s.kv.prefix.hit_rate();
  }
  s.num_waiting_clients = waiting_.num_clients();
  s.num_preemptions = num_preemptions_;
  s.num_fairness_preemptions = num_fairness_preemptions_;
  s.num_time_budgeted_steps = num_time_budgeted_steps_;
  s.num_first_token_steps = num_first_token_steps_;
  s.num_interrupted_steps = num_interrupted_steps_;
  s.num_prefix_deferrals = num_prefix_deferrals_;
  s.num_steps = num_steps_;
  s.last_step_num_tokens = last_step_num_tokens_;
  s.last_step_num_seqs = last_step_num_seqs_;
  s.num_requests_accepted = num_requests_accepted_;
  s.num_requests_refused = num_requests_refused_;
  s.num_requests_finished = num_requests_finished_;
  s.num_prompt_tokens = num_prompt_tokens_;
  s.num_generated_tokens = num_generated_tokens_;
  s.num_spec_drafts = num_spec_drafts_;
  s.num_spec_draft_tokens = num_spec_draft_tokens_;
  s.num_spec_accepted_tokens = num_spec_accepted_tokens_;
  return s;
}

namespace {

SlotInfo slot_of(const Sequence& seq, SlotPhase phase) {
  SlotInfo slot;
  slot.request_id = seq.request_id;
  slot.phase = phase;
  slot.priority = seq.priority;
  slot.client = seq.client;
  slot.num_prompt_tokens = seq.num_prompt_tokens;
  slot.num_tokens = seq.num_tokens();
  // Drafts in flight count as computed until the step settles them.
  slot.num_computed_tokens = std::min(seq.num_computed_tokens, seq.num_tokens());
  slot.num_generated_tokens = seq.num_generated_tokens();
  slot.max_tokens = seq.stop.max_tokens;
  slot.num_cached_prompt_tokens = seq.num_cached_prompt_tokens;
  slot.num_blocks = kv_cache::KvCacheManager::num_pages_held(seq.kv);
  slot.num_preemptions = seq.num_preemptions;
  slot.arrival_step = seq.arrival_step;
  slot.first_scheduled_step = seq.first_scheduled_step;
  slot.first_token_step = seq.first_token_step;
  return slot;
}

}  // namespace

std::vector<SlotInfo> Scheduler::slots() const {
  std::vector<SlotInfo> result;
  result.reserve(sequences_.size());
  for (const Sequence* seq : running_) {
    // More than one token left to compute: prompt (or recompute after preemption) in progress.
    result.push_back(
        slot_of(*seq, seq->num_remaining_tokens() > 1 ? SlotPhase::kPrefill : SlotPhase::kDecode));
  }
  waiting_.for_each([&result](const Sequence& seq) {
    result.push_back(slot_of(seq, seq.num_preemptions > 0 ? SlotPhase::kPreempted
                                                          : SlotPhase::kWaiting));
  });
  for (const Sequence* seq : prefill_done_) {
    result.push_back(slot_of(*seq, SlotPhase::kAwaitingTransfer));
  }
  for (const Sequence* seq : awaiting_kv_) {
    result.push_back(slot_of(*seq, SlotPhase::kAwaitingTransfer));
  }
  return result;
}

std::optional<std::string> Scheduler::check_invariants() const {
  if (auto error = kv().check_invariants()) return error;
  const auto& pool = kv().pool();
  std::vector<int32_t> holders(static_cast<size_t>(pool.num_blocks()), 0);
  auto count = [&holders](const kv_cache::SequenceBlocks& kv) {
    for (kv_cache::BlockId b : kv.blocks) ++holders[static_cast<size_t>(b)];
    for (const auto& group : kv.sliding) {
      for (kv_cache::BlockId b : group) {
        if (b != kv_cache::kNoBlock) ++holders[static_cast<size_t>(b)];
      }
    }
  };
  size_t num_placed = 0;
  for (const auto& [id, seq] : sequences_) {
    count(seq->kv);
    if (seq->num_computed_tokens > seq->num_tokens()) return fmt::format("{} over-computed", id);
    const int32_t needed =
        kv_cache::KvCacheManager::blocks_for_tokens(seq->num_computed_tokens, kv().block_size());
    if (static_cast<int32_t>(seq->kv.blocks.size()) < needed) {
      return fmt::format("request {} computed {} tokens but holds {} blocks", id,
                         seq->num_computed_tokens, seq->kv.blocks.size());
    }
    // A block reaches the prefix cache only once full of computed, kept tokens (never the KV
    // of a rejected draft).
    if (seq->state == SequenceState::kRunning &&
        seq->kv.num_cached_blocks * kv().block_size() > seq->num_computed_tokens) {
      return fmt::format("request {} has {} cached blocks but only {} computed tokens", id,
                         seq->kv.num_cached_blocks, seq->num_computed_tokens);
    }
    if (seq->state == SequenceState::kWaiting && (!seq->kv.blocks.empty() || seq->num_computed_tokens != 0)) {
      return fmt::format("waiting request {} holds KV", id);
    }
  }
  for (const auto& [id, kv] : transferring_) count(kv);
  for (const auto& [id, kv] : cancelled_pulls_) count(kv);
  for (kv_cache::BlockId b = 0; b < pool.num_blocks(); ++b) {
    if (holders[static_cast<size_t>(b)] != pool.ref_count(b)) {
      return fmt::format("block {} has ref count {} but {} holders", b, pool.ref_count(b),
                         holders[static_cast<size_t>(b)]);
    }
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence* seq = running_[i];
    if (seq->state != SequenceState::kRunning) return fmt::format("{} in running_ but not running", seq->request_id);
    if (i > 0 && std::pair(-static_cast<int>(running_[i - 1]->priority), running_[i - 1]->arrival_index) >
                     std::pair(-static_cast<int>(seq->priority), seq->arrival_index)) {
      return std::string("running_ is not sorted by (priority desc, arrival asc)");
    }
  }
  if (num_sequence_slots_used() > config_.max_num_seqs) return std::string("too many running");
  std::unordered_map<std::string, int32_t> per_client;
  for (const Sequence* seq : running_) ++per_client[seq->client];
  if (per_client != running_per_client_) return std::string("running_per_client_ is out of step");
  num_placed = running_.size() + prefill_done_.size() + awaiting_kv_.size() +
               static_cast<size_t>(waiting_.size());
  if (num_placed != sequences_.size()) {
    return fmt::format("{} sequences but {} placed in queues", sequences_.size(), num_placed);
  }
  return std::nullopt;
}

}  // namespace troupe::scheduler
