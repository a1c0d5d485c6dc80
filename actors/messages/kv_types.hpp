// The KV cache's vocabulary that leaves the kv-cache actor: block ids (in step batches, leases
// and pulls) and the statistics it publishes. The pool, the radix cache and the manager that own
// them are in kv_cache/.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>

namespace troupe::kv_cache {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

struct PrefixCacheCounters {
  uint64_t num_queries = 0;       // admissions that looked the cache up
  uint64_t num_hits = 0;          // ... and reused at least one block
  uint64_t num_query_tokens = 0;  // tokens those lookups asked for
  uint64_t num_hit_tokens = 0;    // tokens they did not have to compute (tokens saved)
  uint64_t num_evictions = 0;     // cached blocks reused for other contents

  // Fraction of looked-up tokens served from the cache (vLLM's prefix_cache_hit_rate).
  double hit_rate() const {
    return num_query_tokens == 0
               ? 0.0
               : static_cast<double>(num_hit_tokens) / static_cast<double>(num_query_tokens);
  }
};

struct KvCacheStats {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  bool prefix_caching = false;
  int32_t num_free = 0;                 // hold nothing
  int32_t num_cached_unreferenced = 0;  // evictable prefix-cache blocks
  int32_t num_referenced = 0;           // held by sequences
  double usage_ratio = 0.0;             // referenced / total (vLLM's kv_cache_usage_perc)
  int32_t num_cached_blocks = 0;        // in the prefix tree, referenced or not
  PrefixCacheCounters prefix;
};

// KV-cache events for routers (kv_cache/kv_events.hpp), as counted for the stats.
struct KvEventStats {
  uint64_t published_batches = 0;  // sent on the PUB socket (each also kept for replay)
  uint64_t published_events = 0;
  uint64_t dropped_events = 0;  // the publisher's queue was full: never waited for
  uint64_t replay_requests = 0;
};
}  // namespace troupe::kv_cache
