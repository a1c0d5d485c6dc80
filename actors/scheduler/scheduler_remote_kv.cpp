// Scheduler: the decode side of disaggregated prefill/decode across servers. A request whose
// prompt KV a prefill server computed arrives with a RemoteKvSource (and usually the token that
// server sampled). It waits for admission like any request; admitted, it gets blocks instead of
// a prefill span, and the kv-cache actor pulls the remote blocks into the ones this pool's
// prefix cache did not already have:
//
//   add_request(remote_kv) ─► kWaiting (first token reported at once)
//        admit_remote() ─► kAwaitingKv, KvPullOrder{remote block -> local block}
//        kv_resident(ok) ─► kRunning, num_computed_tokens = remote num_tokens (decodes next)
//        kv_resident(!ok) ─► kWaiting at the front, remote_kv dropped: computes its prompt here
//
// NOTE: a sequence cancelled in kAwaitingKv gives up its blocks only at kv_resident(): until
// the pull is over the transport may still write into them.
#include <algorithm>
#include <utility>

#include "actors/scheduler/scheduler.hpp"
#include "actors/scheduler/stop_checker.hpp"

namespace troupe::scheduler {

bool Scheduler::start_remote(Sequence& seq, std::optional<int32_t> first_token_id) {
  const RemoteKvSource& source = *seq.remote_kv;
  // The remote blocks must hold exactly this prompt: anything else (a different tokenization,
  // a truncated block list) is computed here instead.
  const int32_t blocks_needed =
      kv_cache::KvCacheManager::blocks_for_tokens(source.num_tokens, config_.block_size);
  const int32_t next_position = first_token_id ? source.num_tokens : source.num_tokens - 1;
  const bool usable = source.num_tokens == seq.num_prompt_tokens &&
                      static_cast<int32_t>(source.block_ids.size()) >= blocks_needed &&
                      std::all_of(source.block_ids.begin(), source.block_ids.end(),
                                  [](int32_t b) { return b >= 0; }) &&
                      remote_windows_present(source, blocks_needed, next_position);
  if (!usable) {
    ++num_kv_pull_fallbacks_;
    drop_remote_source(seq);
  }
  if (!first_token_id) {
    seq.recompute_last_prompt_token = seq.remote_kv.has_value();
    return true;
  }
  // The prefill server sampled it with this request's parameters: it is this sequence's first
  // generated token, reported now (the client sees it before the KV arrives).
  seq.token_ids.push_back(*first_token_id);
  ++num_generated_tokens_;
  seq.first_token_step = num_steps_ == 0 ? 1 : num_steps_;
  kv_work_.events.tokens.push_back(
      GeneratedToken{seq.request_id, *first_token_id, 0.0f, {}, seq.num_generated_tokens()});
  if (const auto reason =
          check_stop_after_min_tokens(seq, config_.eos_token_ids, config_.max_model_len)) {
    kv_work_.events.finished.push_back(retire(seq, *reason));  // releases the remote lease
    return false;
  }
  return true;
}

bool Scheduler::remote_windows_present(const RemoteKvSource& source, int32_t blocks_needed,
                                       int32_t next_position) const {
  // Groups 1..: the pages the next token's window reaches must be there; the prefill server
  // freed the ones before it.
  if (source.sliding_block_ids.size() != static_cast<size_t>(config_.num_kv_groups - 1)) {
    return false;
  }
  const int32_t first = kv_cache::KvCacheManager::pages_before_window(
      next_position, config_.sliding_window, config_.block_size);
  for (const std::vector<int32_t>& group : source.sliding_block_ids) {
    if (static_cast<int32_t>(group.size()) < blocks_needed) return false;
    for (int32_t j = first; j < blocks_needed; ++j) {
      if (group[static_cast<size_t>(j)] < 0) return false;
    }
  }
  return true;
}

void Scheduler::drop_remote_source(Sequence& seq) {
  if (!seq.remote_kv) return;
  kv_work_.releases.push_back(std::move(*seq.remote_kv));
  seq.remote_kv.reset();
  seq.recompute_last_prompt_token = false;
}

bool Scheduler::admit_remote(Sequence& seq) {
  const RemoteKvSource& source = *seq.remote_kv;
  // No hit past the KV the peer computed: the pull brings the rest.
  const kv_cache::PrefixMatch match = kv().find_cached_prefix(seq.token_ids, source.num_tokens);
  // KV groups: sliding pages before the next token's window are never written here, so none
  // is allocated; a local hit's cached ones there go back to the cache before the pull.
  const int32_t next_position =
      seq.recompute_last_prompt_token ? source.num_tokens - 1 : source.num_tokens;
  if (!kv().allocate_slots(seq.kv, match, source.num_tokens, next_position)) return false;
  kv().release_out_of_window(seq.kv, next_position);
  waiting_.pop_front();
  kv().record_prefix_query(seq.num_tokens(), match.num_tokens);
  if (seq.first_scheduled_step == 0) {
    seq.first_scheduled_step = num_steps_ + 1;
    seq.num_cached_prompt_tokens = match.num_tokens;
  }
  KvPullOrder order;
  order.request_id = seq.request_id;
  order.source = source;
  const auto pull = [&](int32_t from, kv_cache::BlockId to) {
    order.copies.push_back({from, to});
    seq.pull_destinations.push_back(to);
  };
  for (size_t i = match.blocks.size(); i < seq.kv.blocks.size(); ++i) {
    pull(source.block_ids[i], seq.kv.blocks[i]);
  }
  for (size_t g = 0; g < seq.kv.sliding.size(); ++g) {
    for (size_t i = match.blocks.size(); i < seq.kv.sliding[g].size(); ++i) {
      if (seq.kv.sliding[g][i] == kv_cache::kNoBlock) continue;  // before the window
      pull(source.sliding_block_ids[g][i], seq.kv.sliding[g][i]);
    }
  }
  seq.state = SequenceState::kAwaitingKv;
  awaiting_kv_.push_back(&seq);
  if (order.copies.empty()) {
    // Everything was cached here already: nothing to pull, the lease can go.
    kv_work_.releases.push_back(std::move(order.source));
    kv_resident(seq.request_id, /*ok=*/true);
    return true;
  }
  ++num_kv_pulls_;
  kv_work_.pulls.push_back(std::move(order));
  return true;
}

void Scheduler::kv_resident(RequestId request_id, bool ok) {
  if (const auto parked = cancelled_pulls_.find(request_id); parked != cancelled_pulls_.end()) {
    kv().free_sequence(parked->second);
    cancelled_pulls_.erase(parked);
    return;
  }
  const auto it = sequences_.find(request_id);
  if (it == sequences_.end() || it->second->state != SequenceState::kAwaitingKv) return;
  Sequence& seq = *it->second;
  std::erase(awaiting_kv_, &seq);
  if (!ok) {
    // The prefill server is gone, slow, or incompatible: compute the prompt here. The kv-cache
    // actor already released (or gave up on) the lease.
    ++num_kv_pull_fallbacks_;
    seq.pull_destinations.clear();
    kv().free_sequence(seq.kv);
    seq.remote_kv.reset();
    seq.recompute_last_prompt_token = false;
    seq.num_computed_tokens = 0;
    seq.state = SequenceState::kWaiting;
    waiting_.push_front(&seq, WaitingQueue::RingPlace::kFront);
    return;
  }
  seq.num_computed_tokens = seq.remote_kv->num_tokens;
  // The pulled bytes are in the backend's host memory; the next step brings them in first (a
  // no-op where that memory is the KV itself, as on the CPU).
  kv_blocks_from_host_.insert(kv_blocks_from_host_.end(), seq.pull_destinations.begin(),
                              seq.pull_destinations.end());
  seq.pull_destinations.clear();
  // Without the prefill server's token, the last prompt position is computed again here to
  // sample from (its KV is rewritten with the same values).
  if (seq.recompute_last_prompt_token) --seq.num_computed_tokens;
  seq.remote_kv.reset();
  seq.recompute_last_prompt_token = false;
  // The pulled full blocks hold this prompt's KV now: other requests may share them.
  kv().cache_full_blocks(seq.kv, seq.token_ids, seq.num_computed_tokens);
  seq.state = SequenceState::kRunning;
  insert_running(&seq);
}

KvWork Scheduler::take_kv_work() { return std::exchange(kv_work_, KvWork{}); }

}  // namespace troupe::scheduler
