// KV-cache events: what a prefix-aware router (llm-d's KV-cache indexer, anything that reads
// vLLM's KV events) needs to mirror this server's prefix cache. Plain values, in vLLM's terms
// (vllm/distributed/kv_events.py): a block entered the cache (BlockStored), left it
// (BlockRemoved), or everything went (AllBlocksCleared). KvCacheManager collects them while it
// works (kv_cache_manager.hpp) and the kv-cache actor hands each tick's list to the publisher
// (events/kv_event_publisher.hpp), which encodes and sends them off the engine thread.
//
// Block hashes are the router's own (kv_block_hash.hpp: vLLM's sha256_cbor chain, 64-bit
// engine keys), not the prefix cache's internal key, so a router can compute them from a
// prompt's tokens.
//
// Thread-safety: plain values; a KvEventSink says its own.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "actors/messages/kv_types.hpp"

namespace troupe::kv_cache {

// Consecutive full blocks of one sequence that entered the cache together, parent first.
struct BlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // the block before the first; none at the root
  std::vector<int32_t> token_ids;             // block_hashes.size() * block_size tokens
  int32_t block_size = 0;
  bool operator==(const BlockStored&) const = default;
};

// Cached blocks that were evicted (their memory reused) or flushed.
struct BlockRemoved {
  std::vector<uint64_t> block_hashes;
  bool operator==(const BlockRemoved&) const = default;
};

// The cache holds nothing any more (an admin flush that emptied it).
struct AllBlocksCleared {
  bool operator==(const AllBlocksCleared&) const = default;
};

using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// What leaves the engine once per tick (or per flush between ticks).
struct KvEventBatch {
  double timestamp = 0;  // seconds since the Unix epoch, as vLLM's time.time()
  std::vector<KvEvent> events;
};

// Where the kv-cache actor sends each tick's events: the ZeroMQ publisher
// (events/kv_event_publisher.hpp) in the server; unit tests record them instead.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // Must not block: false when the batch was dropped (and counted).
  virtual bool publish(KvEventBatch batch) = 0;
  virtual KvEventStats stats() const = 0;
};

}  // namespace troupe::kv_cache
