// Messages the kv-cache actor receives: the scheduler actor's once-per-tick loan of the KV
// manager, and the admin's flush (through the Engine facade).
//
// Thread-safety: plain values, moved through the kv-cache actor's mailbox.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <variant>

#include "actors/kv_cache/kv_cache_manager.hpp"
#include "actors/kv_cache/transfer/kv_transport.hpp"
#include "actors/messages/peer_messages.hpp"
#include "actors/messages/scheduler_types.hpp"
#include "actors/runtime/completion_slot.hpp"

namespace troupe::kv_cache {

// Whoever holds the lease is the only one who may touch the block pool and prefix cache.
using KvLease = std::unique_ptr<KvCacheManager>;

// The scheduler actor, at the start of a tick. The manager comes back through `reply`; an empty
// lease when the kv-cache actor cannot lend it (lent already, which is a wiring bug, or
// shutting down).
struct LendKvCache {
  std::shared_ptr<actors::runtime::CompletionSlot<KvLease>> reply;
};

// The scheduler actor, at the end of the tick: the manager goes home.
struct ReturnKvCache {
  KvLease lease;
};

// Admin: drop every unreferenced cached prefix block; the count goes back through `reply`.
// While the manager is lent, the flush waits for its return (at most one tick).
struct FlushPrefixCache {
  std::shared_ptr<std::promise<int64_t>> reply;
};

// --- KV movement between servers (disaggregated prefill/decode, kv_transfer_agent.hpp) ------

// The scheduler actor: pull these blocks from a prefill server (decode side).
struct PullKv {
  scheduler::KvPullOrder order;
};

// The scheduler actor: a prefill server's lease is not needed (the request ended first).
struct ReleaseRemoteKv {
  scheduler::RemoteKvSource source;
};

// The peer client: a prefill server's KV metadata (the handshake), or why not.
struct PeerMetadataArrived {
  std::string peer_key;  // host:port
  disagg::MetadataReply reply;
};

// The transport: a pull is over; its blocks are no longer written.
struct PullFinished {
  scheduler::RequestId request_id = 0;
  kv_transfer::Status status;
};

// The scheduler actor (prefill side): a finished sequence's KV is held for a decode server.
struct OpenKvLease {
  scheduler::RequestId request_id = 0;
};

// A decode server (POST /v1/kv/release, through the Engine): done with a held sequence's KV.
// The reply says whether the lease existed.
struct ReleaseKvLease {
  scheduler::RequestId request_id = 0;
  std::shared_ptr<std::promise<bool>> reply;
};

// The lease clock: free what no decode server pulled in time.
struct SweepKvLeases {};

using KvCacheMessage =
    std::variant<LendKvCache, ReturnKvCache, FlushPrefixCache, PullKv, ReleaseRemoteKv,
                 PeerMetadataArrived, PullFinished, OpenKvLease, ReleaseKvLease, SweepKvLeases>;

}  // namespace troupe::kv_cache
