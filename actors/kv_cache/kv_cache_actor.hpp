// The kv-cache actor: home of the KV manager (BlockPool + PrefixCache, docs/design.md §1).
//
// Why a loan and not a request per allocation: the scheduling policy interleaves allocation
// with preemption decisions (a sequence that cannot grow preempts the lowest-priority one and
// tries again), so a round trip per allocate/free/match would cost dozens of hops per tick and
// tear the policy apart. Instead the scheduler actor borrows the whole manager once per tick —
// one batched exchange: LendKvCache at the start, ReturnKvCache at the end — and calls it
// synchronously in between, as vLLM's scheduler calls its KVCacheManager. Ownership moves with
// the unique_ptr, so exactly one actor can touch KV state at any moment, and between ticks this
// actor serves what is not the scheduler's business: the admin's flush and the KV statistics.
//
//   scheduler actor                 kv-cache actor
//     tick start ── LendKvCache ──►  home_ ──► lease
//     schedule(), step, on_step_complete() with the lease
//     tick end ─── ReturnKvCache ──► home_ (publish stats, serve waiting flushes)
//
// It also owns KV movement between servers (disaggregated prefill/decode): the transfer agent
// (kv_transfer_agent.hpp) with the transport, the handshakes, pulls in flight and leases.
//
// Why the loan survives now that this actor has real work of its own: pulls and leases never
// touch the block pool — the scheduler allocates destination blocks and frees released ones
// inside its tick, with the manager it borrowed; this actor only moves bytes into blocks the
// scheduler set aside and tells it when they are resident. Allocation stays synchronous with
// the policy (the reason for the loan) and the network stays off the tick.
//
// KV events (issue 20): the manager collects them while the scheduler uses it; this actor takes
// them when the manager comes home (once per tick) and after a flush, and hands them to the
// event sink (events/kv_event_publisher.hpp) as one batch — one lock-free push, no encoding or
// I/O on the engine thread.
//
// Thread-safety: set_transfer_agent() and set_event_sink() from the wiring thread before start(); start()/
// try_send()/deliver()/shutdown() as for every Actor; the rest runs on the actor's executor
// (the engine thread, shared with the scheduler actor by default).
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "actors/common/stats_board.hpp"
#include "actors/kv_cache/kv_cache_messages.hpp"
#include "actors/kv_cache/kv_transfer_agent.hpp"
#include "actors/runtime/actor.hpp"

namespace troupe::kv_cache {

class KvCacheActor final : public actors::runtime::Actor<KvCacheMessage> {
 public:
  KvCacheActor(const KvCacheConfig& config, std::shared_ptr<engine::StatsBoard> board,
               size_t mailbox_capacity);

  void set_transfer_agent(std::unique_ptr<KvTransferAgent> agent) { agent_ = std::move(agent); }
  void set_event_sink(std::shared_ptr<KvEventSink> sink) { events_ = std::move(sink); }
  // After start(): a timer on this actor's executor sends SweepKvLeases every `period` until
  // the mailbox closes.
  void start_lease_clock(std::chrono::milliseconds period);
  // try_send(), or when the mailbox is momentarily full a coroutine that waits for room: for
  // callbacks from other threads whose message must not be lost (a lost PullFinished would
  // keep its blocks forever).
  void deliver(KvCacheMessage message);

 protected:
  boost::asio::awaitable<void> handle(KvCacheMessage message) override;
  // Shutting down: a borrower gets an empty lease, a flush gets 0, a returned manager is kept.
  void abandon(KvCacheMessage message) override;

 private:
  void lend(LendKvCache& request);
  void take_back(ReturnKvCache& returned);
  void flush(FlushPrefixCache& request);
  void publish_stats();
  // The manager's collected KV events, as one batch to the sink.
  void forward_events();
  // KV movement between servers: the transfer agent's messages (PullKv ... SweepKvLeases).
  template <typename Message>
  void move_kv(Message& m);

  KvLease home_;  // null while lent
  std::vector<std::shared_ptr<std::promise<int64_t>>> waiting_flushes_;  // arrived while lent
  uint64_t num_loans_ = 0;
  std::shared_ptr<engine::StatsBoard> board_;
  std::unique_ptr<KvTransferAgent> agent_;  // null in tests that move no KV
  std::shared_ptr<KvEventSink> events_;     // null: KV events are off
};

}  // namespace troupe::kv_cache
