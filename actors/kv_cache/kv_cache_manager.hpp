// KvCacheManager: the one door the scheduler uses for KV memory (vLLM v1's kv_cache_manager.py).
// It owns the BlockPool and the PrefixCache and keeps them consistent: a prefix hit takes
// references, a pool eviction erases the cache node, a newly full block is registered (or, when
// an identical block is already cached, swapped for the shared one, so no two blocks hold the
// same prefix and "holding a cached block implies holding its ancestors" stays true).
//
//   SequenceBlocks::blocks      [ b0 | b1 | b2 | b3 ]        block i holds tokens
//                                 └ cached ┘ └ private ┘      [i*bs, (i+1)*bs)
//                                 num_cached_blocks = 2
//
// KV groups (gpu/kv_groups.hpp, sliding-window models): a sequence holds one table per group;
// `blocks` is group 0's (the global layers), `sliding` the others'. Every group grows by the same
// number of pages; after each step release_out_of_window() frees the sliding groups' pages that
// the next token's window no longer reaches (entries become kNoBlock), so a long conversation
// holds ~window / block_size pages per sliding group and its full length only in group 0.
// The prefix tree is group 0's; a sliding group's page is cached beside the node of its position
// (window_pages.hpp) and evicted on its own. A hit of k blocks adopts group 0's k pages and, in
// each sliding group, the pages the next token's window reaches; a match whose window pages are
// not all cached is shortened until they are (find_cached_prefix). KV events stay off with
// groups (the router's block hashes say nothing of the window's pages).
//
// KV events (issue 20): with KvCacheConfig::emit_events, every block that enters the prefix
// cache gets the router's hash (kv_block_hash.hpp) once, when it is inserted, and the manager
// collects BlockStored / BlockRemoved / AllBlocksCleared values (kv_events.hpp) as it inserts,
// evicts and flushes; the kv-cache actor takes them once per tick (take_events()). Off: no
// hashing, no events, nothing allocated.
//
// Thread-safety: not thread-safe; one thread at a time (the kv-cache/scheduler actor's executor).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/kv_cache/block_pool.hpp"
#include "actors/kv_cache/kv_block_hash.hpp"
#include "actors/kv_cache/kv_events.hpp"
#include "actors/kv_cache/prefix_cache.hpp"
#include "actors/kv_cache/window_pages.hpp"

namespace troupe::kv_cache {

struct KvCacheConfig {
  int32_t num_blocks = 4096;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  // KV groups of the backend (KvCacheGeometry): > 1 caches the sliding groups' pages beside the
  // tree's (above) and emits no KV events.
  int32_t num_kv_groups = 1;
  int32_t sliding_window = 0;  // tokens the sliding groups keep
  // Collect KV events with the router's block hashes (needs prefix caching and one KV group).
  bool emit_events = false;
  std::string event_hash_seed;  // vLLM's PYTHONHASHSEED / llm-d's hashSeed
};

// The KV blocks one sequence holds (one reference each).
struct SequenceBlocks {
  std::vector<BlockId> blocks;
  // Groups 1.. (sliding windows), each as long as `blocks`; kNoBlock where freed.
  std::vector<std::vector<BlockId>> sliding;
  int32_t num_cached_blocks = 0;  // leading blocks registered in the prefix cache, as a chain
  bool caching_stopped = false;   // a hash collision broke the chain: cache nothing further
};

// Leading full blocks of a token sequence already in the cache.
struct PrefixMatch {
  std::vector<BlockId> blocks;
  // KV groups: groups 1.., each as long as `blocks`: the cached pages the next token's window
  // reaches, kNoBlock before it.
  std::vector<std::vector<BlockId>> sliding;
  int32_t num_tokens = 0;  // blocks.size() * block_size
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  int32_t block_size() const { return block_size_; }
  int32_t num_kv_groups() const { return num_kv_groups_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }

  static int32_t blocks_for_tokens(int32_t num_tokens, int32_t block_size) {
    return (num_tokens + block_size - 1) / block_size;
  }

  // Cached full blocks that prefix `tokens`, leaving at least the last token uncovered: the
  // last position must be computed to sample from it (and a hit must not write into a shared
  // block). With KV groups, only as many as the sliding groups' cached pages carry the window
  // for. Empty when prefix caching is off.
  PrefixMatch find_cached_prefix(std::span<const int32_t> tokens) const;
  // The same, covering at most max_tokens tokens (a P/D admission: the peer's KV brings the
  // rest). With KV groups the window pages are those of the shorter hit's window.
  PrefixMatch find_cached_prefix(std::span<const int32_t> tokens, int32_t max_tokens) const {
    const size_t cap = static_cast<size_t>(std::max(max_tokens, 0)) + 1;
    return find_cached_prefix(tokens.first(std::min(tokens.size(), cap)));
  }

  // Grows `seq` so its blocks can hold num_total_tokens tokens of KV (every group's, with KV
  // groups). An empty `seq` first adopts `prefix` (one reference per page). All or nothing:
  // false, and nothing changes, when the pool cannot supply the pages; the caller decides whom
  // to preempt.
  // KV groups, window_from >= 0: the sequence computes position window_from next and its
  // earlier KV arrives from elsewhere (P/D): new sliding pages wholly before that token's window
  // are never written, so they are left out (kNoBlock) instead of allocated.
  bool allocate_slots(SequenceBlocks& seq, const PrefixMatch& prefix, int32_t num_total_tokens,
                      int32_t window_from = -1);
  bool allocate_slots(SequenceBlocks& seq, int32_t num_total_tokens) {
    return allocate_slots(seq, PrefixMatch{}, num_total_tokens);
  }

  // Registers every block of `seq` that the first num_computed_tokens of `tokens` fill, with the
  // sliding groups' pages it still holds at those positions. Call only once that KV has been
  // computed (after the step), so a hit never reads unwritten KV.
  void cache_full_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens,
                         int32_t num_computed_tokens);

  // Releases the blocks past those num_tokens tokens need, last first (speculative decoding:
  // blocks only rejected drafts used). They were never cached: a block is cached only once
  // full of computed tokens, and these hold none that were kept.
  void release_tail(SequenceBlocks& seq, int32_t num_tokens);

  // Releases every block, last first, so a sequence's tail is evicted before its head.
  void free_sequence(SequenceBlocks& seq);

  // KV groups: frees the sliding groups' pages wholly before the window of the token at
  // next_position (the next one to compute): positions < next_position + 1 - sliding_window.
  // Cached ones stay in the cache, evictable. Returns how many pages went back. No-op without
  // groups.
  int32_t release_out_of_window(SequenceBlocks& seq, int32_t next_position);

  // KV groups: leading pages of a sequence that the window of the token at next_position no
  // longer reaches, in the sliding groups (0 without a window).
  static int32_t pages_before_window(int32_t next_position, int32_t sliding_window,
                                     int32_t block_size) {
    if (sliding_window <= 0) return 0;
    return std::max(0, next_position + 1 - sliding_window) / block_size;
  }
  int32_t pages_before_window(int32_t next_position) const {
    return pages_before_window(next_position, sliding_window_, block_size_);
  }

  // Pages `seq` holds, every group.
  static int32_t num_pages_held(const SequenceBlocks& seq);

  // Forgets every cached block no sequence references (the admin's "flush prefix cache"):
  // they return to the free list. Referenced cached blocks stay. Returns how many were dropped.
  int32_t flush_unreferenced_cache();

  void record_prefix_query(int32_t num_query_tokens, int32_t num_hit_tokens) {
    cache_.record_query(num_query_tokens, num_hit_tokens);
  }

  // The events collected since the last call, oldest first (empty unless emit_events).
  std::vector<KvEvent> take_events() { return std::exchange(events_, {}); }
  bool emits_events() const { return hasher_.has_value(); }
  // The router's key of a cached block (emit_events only): for tests.
  uint64_t event_key_of(BlockId block) const {
    return KvBlockHasher::engine_key(digests_[static_cast<size_t>(block)]);
  }

  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& prefix_cache() const { return cache_; }
  const WindowPages& window_pages() const { return windows_; }

  // Pool, tree and window-page invariants, plus their agreement (cached in pool <=> a node in the
  // tree or an attached window page; the eviction list orders the tree's descendants before
  // their ancestors; a referenced cached page's node is referenced too). O(n).
  std::optional<std::string> check_invariants() const;

 private:
  // KV events: hash a newly cached block and add it to `run` (consecutive blocks of one
  // sequence, parent first); queue a finished run; note evicted blocks before the tree forgets
  // them.
  void note_stored(BlockStored& run, BlockId parent, BlockId block,
                   std::span<const int32_t> block_tokens);
  void flush_stored(BlockStored& run);
  std::vector<uint64_t> keys_of(const std::vector<BlockId>& blocks) const;
  // The pool reused these cached blocks: the tree forgets its nodes, the window pages their
  // nodes (a node's pages are evicted before it: a node still holding one is a bug,
  // std::logic_error). The caller reports KV events.
  void forget_evicted(const std::vector<BlockId>& evicted);
  // KV groups: how many of `chain`'s leading blocks a hit may take, the window's pages cached.
  size_t window_covered(std::span<const BlockId> chain) const;
  // KV groups: caches (or swaps for the cached one) seq's sliding pages at block `index`, whose
  // tree node is `node`.
  void cache_window_pages(SequenceBlocks& seq, size_t index, BlockId node);

  int32_t block_size_;
  int32_t num_kv_groups_;
  int32_t sliding_window_;
  bool enable_prefix_caching_;
  BlockPool pool_;
  PrefixCache cache_;
  WindowPages windows_;
  std::optional<KvBlockHasher> hasher_;  // set with emit_events
  std::vector<BlockDigest> digests_;     // per block: its router hash while it is cached
  std::vector<KvEvent> events_;
};

}  // namespace troupe::kv_cache
