// BlockPool: the fixed set of paged-KV blocks, their reference counts and the order in which
// unreferenced cached blocks are evicted (vLLM v1's block_pool.py, without the hash map, which
// lives in PrefixCache).
//
// Every block is in exactly one state:
//
//   kFree               ref_count == 0, holds nothing worth keeping   -> in free_blocks_ (a stack)
//   kCachedUnreferenced ref_count == 0, registered in the prefix cache -> in the eviction list
//   kReferenced         ref_count >= 1, held by that many sequences    -> in no list
//
//   allocate():  kFree first (nothing lost), then the head of the eviction list (the least
//                recently released cached block; it is evicted, and reported so the prefix cache
//                forgets it)                                            -> kReferenced, ref 1
//   touch():     kReferenced ref+1, or kCachedUnreferenced -> kReferenced (leaves the list)
//   free():      ref-1; at 0 a cached block goes to the eviction list's TAIL (most recently
//                used), an uncached one to the free stack
//
// NOTE: sequences release their blocks last-to-first, and a sequence holding a cached block
// holds every ancestor of it, so in the eviction list a block always comes after all of its
// cached descendants: the head is always a leaf of the prefix tree. PrefixCache relies on it.
// Sliding-window pages (window_pages.hpp) are cached but no tree nodes; a sequence holding one
// holds its node and releases it first, so they come before their node in the list.
//
// Thread-safety: not thread-safe; one thread at a time (the kv-cache/scheduler actor's executor).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/kv_types.hpp"

namespace troupe::kv_cache {

enum class BlockState : uint8_t { kFree, kCachedUnreferenced, kReferenced };

struct Allocation {
  std::vector<BlockId> blocks;   // ref_count 1 each, in allocation order
  std::vector<BlockId> evicted;  // cached blocks reused here; the prefix cache must forget them
};

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_blocks_.size()); }
  int32_t num_cached_unreferenced() const { return num_in_eviction_list_; }
  int32_t num_referenced() const { return num_blocks() - num_free() - num_in_eviction_list_; }
  // Blocks an allocation may take now: free ones plus evictable cached ones.
  int32_t num_allocatable() const { return num_free() + num_in_eviction_list_; }

  // Takes num_blocks blocks (ref 1 each). nullopt, and nothing changes, when fewer are
  // allocatable: running out is the caller's cue to preempt, not an error.
  std::optional<Allocation> allocate(int32_t num_blocks);

  // Takes one more reference on a block that is referenced or cached (a prefix-cache hit).
  // Touching a kFree block is a bug (its contents are garbage): throws std::logic_error.
  void touch(BlockId block);

  // Drops one reference. Freeing an unreferenced block is a bug: throws std::logic_error.
  void free(BlockId block);

  // The prefix cache registered (or forgot) the block's contents. Only a referenced block may
  // become cached (its KV was just computed by a sequence that holds it).
  void mark_cached(BlockId block);
  bool is_cached(BlockId block) const { return cached_[static_cast<size_t>(block)] != 0; }

  BlockState state(BlockId block) const;
  int32_t ref_count(BlockId block) const { return ref_counts_[static_cast<size_t>(block)]; }

  // Cached-unreferenced blocks from first-to-evict to last; O(n), for tests and debugging.
  std::vector<BlockId> eviction_order() const;

  // Walks every block and list; returns a description of the first broken invariant. O(n).
  std::optional<std::string> check_invariants() const;

 private:
  void check_block(BlockId block) const;
  void push_eviction_tail(BlockId block);
  void unlink_eviction(BlockId block);
  BlockId pop_eviction_head();

  std::vector<int32_t> ref_counts_;
  std::vector<uint8_t> cached_;
  std::vector<BlockId> free_blocks_;  // a stack: the most recently freed block is reused first
  // Intrusive doubly-linked eviction list over block ids (kNoBlock terminates).
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  std::vector<uint8_t> in_eviction_list_;
  BlockId eviction_head_ = kNoBlock;
  BlockId eviction_tail_ = kNoBlock;
  int32_t num_in_eviction_list_ = 0;
};

std::string_view to_string(BlockState state);

}  // namespace troupe::kv_cache
