// Scheduler: disaggregated prefill/decode. A kPrefillOnly scheduler computes prompts and
// samples each sequence's first token, then parks it; the actor takes the parked sequences,
// admits them into a decode scheduler (which allocates destination blocks, reusing its own
// prefix cache where it can), copies the KV block by block, and only then lets the source
// release its blocks:
//
//   prefill side                         decode side
//   on_step_complete -> kPrefillDone
//   take_completed_prefill() ──handoff──► admit_transferred() -> copies {src -> dst}
//                                         (KV copied before the decode side's next step)
//   release_transferred(id)  ◄──done────
#include <algorithm>

#include "actors/scheduler/scheduler.hpp"

namespace troupe::scheduler {

std::vector<PrefillHandoff> Scheduler::take_completed_prefill() {
  std::vector<PrefillHandoff> handoffs;
  handoffs.reserve(prefill_done_.size());
  for (Sequence* seq : prefill_done_) {
    PrefillHandoff handoff;
    handoff.request_id = seq->request_id;
    handoff.token_ids = std::move(seq->token_ids);
    handoff.num_prompt_tokens = seq->num_prompt_tokens;
    handoff.num_computed_tokens = seq->num_computed_tokens;
    handoff.source_blocks = seq->kv.blocks;
    handoff.sampling = seq->sampling;
    handoff.stop = std::move(seq->stop);
    handoff.priority = seq->priority;
    handoff.client = seq->client;
    handoff.num_cached_prompt_tokens = seq->num_cached_prompt_tokens;
    handoff.num_preemptions = seq->num_preemptions;
    handoff.first_token_step = seq->first_token_step;
    // The blocks stay referenced here (the copy reads them) until release_transferred().
    transferring_.emplace(seq->request_id, std::move(seq->kv));
    sequences_.erase(handoff.request_id);  // destroys seq
    handoffs.push_back(std::move(handoff));
  }
  prefill_done_.clear();
  return handoffs;
}

std::optional<HeldKv> Scheduler::hold_finished_kv(Sequence& seq, FinishReason reason) {
  if (!seq.hold_kv_when_finished || reason == FinishReason::kCancelled ||
      seq.state != SequenceState::kRunning || seq.num_computed_tokens == 0 ||
      seq.num_generated_tokens() == 0) {
    return std::nullopt;
  }
  HeldKv held;
  held.num_tokens = seq.num_computed_tokens;
  held.first_token_id = seq.token_ids[static_cast<size_t>(seq.num_prompt_tokens)];
  const int32_t num_blocks =
      kv_cache::KvCacheManager::blocks_for_tokens(seq.num_computed_tokens, config_.block_size);
  held.block_ids.assign(seq.kv.blocks.begin(), seq.kv.blocks.begin() + num_blocks);
  for (const std::vector<kv_cache::BlockId>& group : seq.kv.sliding) {
    held.sliding_block_ids.emplace_back(group.begin(), group.begin() + num_blocks);
  }
  // The blocks stay referenced (a decode server reads them) until release_transferred().
  transferring_.emplace(seq.request_id, std::move(seq.kv));
  seq.kv = {};
  return held;
}

bool Scheduler::release_transferred(RequestId request_id) {
  const auto it = transferring_.find(request_id);
  if (it == transferring_.end()) return false;
  kv().free_sequence(it->second);
  transferring_.erase(it);
  return true;
}

AddResult Scheduler::check_transferable(const PrefillHandoff& handoff) const {
  if (sequences_.contains(handoff.request_id) || transferring_.contains(handoff.request_id)) {
    return AddResult::kDuplicateId;
  }
  const auto num_tokens = static_cast<int32_t>(handoff.token_ids.size());
  if (handoff.num_prompt_tokens <= 0 || num_tokens <= handoff.num_computed_tokens ||
      handoff.num_computed_tokens <= 0) {
    return AddResult::kEmptyPrompt;  // nothing prefilled, or nothing left to decode from
  }
  if (handoff.stop.max_tokens < 1) return AddResult::kInvalidMaxTokens;
  if (num_tokens >= config_.max_model_len) return AddResult::kPromptTooLong;
  const int64_t final_len = std::min<int64_t>(
      int64_t{handoff.num_prompt_tokens} + handoff.stop.max_tokens, config_.max_model_len);
  const int64_t max_blocks = (final_len - 1 + config_.block_size - 1) / config_.block_size;
  if (max_blocks > config_.num_blocks) return AddResult::kNeverFits;
  const int32_t num_source_blocks =
      kv_cache::KvCacheManager::blocks_for_tokens(handoff.num_computed_tokens, config_.block_size);
  if (static_cast<int32_t>(handoff.source_blocks.size()) < num_source_blocks) {
    return AddResult::kNeverFits;  // the pools disagree on block_size: the KV cannot move
  }
  if (num_sequence_slots_used() >= config_.max_num_seqs) return AddResult::kRetryLater;
  return AddResult::kAccepted;
}

TransferAdmission Scheduler::admit_transferred(const PrefillHandoff& handoff) {
  TransferAdmission admission;
  admission.result = check_transferable(handoff);
  if (admission.result != AddResult::kAccepted) return admission;

  auto seq = std::make_unique<Sequence>();
  // No hit past the KV the peer computed: the pull brings the rest.
  const kv_cache::PrefixMatch match =
      kv().find_cached_prefix(handoff.token_ids, handoff.num_computed_tokens);
  if (!kv().allocate_slots(seq->kv, match, handoff.num_computed_tokens)) {
    admission.result = AddResult::kRetryLater;
    return admission;
  }
  kv().record_prefix_query(handoff.num_computed_tokens, match.num_tokens);
  for (size_t i = match.blocks.size(); i < seq->kv.blocks.size(); ++i) {
    admission.copies.push_back({handoff.source_blocks[i], seq->kv.blocks[i]});
  }
  seq->request_id = handoff.request_id;
  seq->token_ids = handoff.token_ids;
  seq->num_prompt_tokens = handoff.num_prompt_tokens;
  seq->num_computed_tokens = handoff.num_computed_tokens;
  seq->sampling = handoff.sampling;
  seq->stop = handoff.stop;
  seq->priority = handoff.priority;
  seq->client = handoff.client;
  seq->arrival_index = next_arrival_index_++;
  seq->state = SequenceState::kRunning;
  seq->num_preemptions = handoff.num_preemptions;
  seq->num_cached_prompt_tokens = handoff.num_cached_prompt_tokens;
  seq->arrival_step = num_steps_;
  seq->first_scheduled_step = num_steps_ + 1;
  seq->first_token_step = num_steps_;
  // NOTE: the copied blocks are registered in this prefix cache after the sequence's first
  // step here completes (cache_full_blocks), by which time the copies have landed.
  insert_running(seq.get());
  ++num_requests_accepted_;
  sequences_.emplace(handoff.request_id, std::move(seq));
  return admission;
}

}  // namespace troupe::scheduler
