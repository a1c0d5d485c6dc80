// The kv-cache actor's KV movement between servers (disaggregated prefill/decode, issue 17):
//
//   decode side   PullKv ─► handshake with the prefill server (GET /v1/kv/metadata, cached per
//                 host:port, refetched when its engine id changed) ─► compatibility check ─►
//                 transport pull of every (remote block -> local block) × layer × K/V run ─►
//                 KvResident(ok) to the scheduler, release of the lease to the prefill server.
//                 Any failure (peer down, incompatible, timeout) is KvResident(false): the
//                 scheduler computes the prompt locally.
//   prefill side  OpenKvLease when a held sequence finishes; ReleaseKvLease from the decode
//                 server, or expiry after disagg.kv_lease, frees it (ReleaseHeldKv to the
//                 scheduler, which owns the blocks).
//
// The transport's and the peer client's callbacks come back as messages (PeerMetadataArrived,
// PullFinished) through `Outbox::to_self`, so all state here is touched on one thread.
//
// Thread-safety: one thread at a time — the kv-cache actor's executor.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/common/stats_board.hpp"
#include "actors/disagg/disagg_config.hpp"
#include "actors/disagg/peer_client.hpp"
#include "actors/kv_cache/kv_cache_messages.hpp"
#include "actors/kv_cache/transfer/kv_transport.hpp"
#include "actors/messages/scheduler_messages.hpp"

namespace troupe::kv_cache {

class KvTransferAgent {
 public:
  using Clock = std::chrono::steady_clock;
  struct Outbox {
    std::function<void(KvCacheMessage)> to_self;  // from any thread; must not be lost
    std::function<void(scheduler::SchedulerMessage)> to_scheduler;
    std::function<void(disagg::PeerUnusable)> to_ingress;  // may be empty (tests)
  };

  // `transport` may be null (a combined server moves no KV: pulls fail at once, leases still
  // work). `peers` may be null likewise (no handshake possible).
  KvTransferAgent(disagg::DisaggConfig config, disagg::KvMetadata own,
                  std::unique_ptr<kv_transfer::KvTransport> transport,
                  std::shared_ptr<disagg::PeerClient> peers, Outbox outbox);

  void pull(scheduler::KvPullOrder order);
  void release_remote(const scheduler::RemoteKvSource& source);
  void on_metadata(const std::string& peer_key, disagg::MetadataReply reply);
  void on_pull_finished(scheduler::RequestId request_id, const kv_transfer::Status& status);

  void open_lease(scheduler::RequestId request_id, Clock::time_point now);
  bool release_lease(scheduler::RequestId request_id);
  void expire_leases(Clock::time_point now);

  // Shutting down: every pending pull is reported failed (its blocks get freed).
  void abandon_pending();

  engine::KvTransferStats snapshot() const;

 private:
  struct PendingPull {
    scheduler::KvPullOrder order;
    Clock::time_point ordered_at;
  };
  struct InFlightPull {
    scheduler::RemoteKvSource source;
    Clock::time_point started_at;
    uint64_t bytes = 0;
    uint64_t blocks = 0;
  };
  struct Peer {
    std::optional<disagg::KvMetadata> metadata;
    bool fetching = false;
    bool refetched = false;  // a stale engine id was refetched once already
    std::vector<PendingPull> waiting;  // pulls waiting for the handshake
  };

  void start_pull(Peer& peer, PendingPull pending);
  // The pull will not happen: the scheduler computes the prompt, the lease is given back.
  void fail(scheduler::RequestId request_id, const scheduler::RemoteKvSource& source,
            const std::string& why);
  void fetch_metadata(const std::string& peer_key, Peer& peer, const scheduler::RemoteKvSource& source);
  void record_pull_time(double ms);

  disagg::DisaggConfig config_;
  disagg::KvMetadata own_;
  std::unique_ptr<kv_transfer::KvTransport> transport_;
  std::shared_ptr<disagg::PeerClient> peers_;
  Outbox outbox_;
  std::unordered_map<std::string, Peer> peer_states_;  // by host:port
  std::unordered_map<scheduler::RequestId, InFlightPull> in_flight_;
  std::unordered_map<scheduler::RequestId, Clock::time_point> leases_;  // -> expiry
  engine::KvTransferStats stats_;
};

}  // namespace troupe::kv_cache
