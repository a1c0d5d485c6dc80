// Messages the kv-cache actor receives: the scheduler actor's once-per-tick loan of the KV
// manager, and the admin's flush (through the Engine facade).
//
// Thread-safety: plain values, moved through the kv-cache actor's mailbox.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <variant>

#include "actors/kv_cache/kv_cache_manager.hpp"
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

using KvCacheMessage = std::variant<LendKvCache, ReturnKvCache, FlushPrefixCache>;

}  // namespace troupe::kv_cache
