// WindowPages: the sliding-window groups' pages that the prefix cache keeps beside its nodes
// (gpu/kv_groups.hpp; vLLM's hybrid KV cache manager does the same per group).
//
// The prefix tree (prefix_cache.hpp) is built over group 0's pages: a node is a global-layer page
// and its key the whole token prefix up to it. A sliding group's page at the same position holds
// KV that depends on exactly the same prefix, so it can be shared under the same node. Unlike
// group 0, a sliding group's pages leave a sequence from the FRONT (kv_cache_manager.hpp:
// release_out_of_window) and are evicted on their own, in LRU order, so they are not tree nodes:
// each is attached to the node of its position, at most one per (node, sliding group).
//
//   node #7 [tokens 0..15]   group 1: page 40   group 2: —        (evicted, or never attached)
//   node #3 [tokens 16..31]  group 1: page 41   group 2: page 52
//
// A hit of k blocks needs, in every sliding group, the pages the next token's window reaches
// (the positions from k * block_size + 1 - window on); KvCacheManager::find_cached_prefix shortens
// a match until they are all there.
//
// Thread-safety: a plain value; one thread at a time (the kv-cache/scheduler actor's executor).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "actors/messages/kv_types.hpp"

namespace troupe::kv_cache {

class WindowPages {
 public:
  // num_groups counts group 0 (which has no window pages): groups 1..num_groups-1 do.
  WindowPages(int32_t num_blocks, int32_t num_groups);

  int32_t num_sliding_groups() const { return num_sliding_; }
  int32_t num_attached() const { return num_attached_; }

  // `group` in 1..num_groups-1; kNoBlock when none is attached.
  BlockId page_of(BlockId node, int32_t group) const;
  bool is_attached(BlockId page) const { return owner_[static_cast<size_t>(page)] != kNoBlock; }

  // Attaches `page` as `node`'s page in `group`. The slot must be empty and the page unattached
  // (a bug otherwise: std::logic_error).
  void attach(BlockId node, int32_t group, BlockId page);

  // The pool evicted `page`: its node forgets it. No-op for a page that is not attached.
  void detach_page(BlockId page);

  // The tree forgot `node`: every page still attached to it is detached and returned (none, by
  // the eviction order: kv_cache_manager.cpp checks).
  std::vector<BlockId> detach_node(BlockId node);

  // Whether `node` has a page in every sliding group (a hit may end past it only then, when the
  // next token's window reaches it).
  bool has_every_group(BlockId node) const;

  // Owner links and node slots agree, counts add up. O(n).
  std::optional<std::string> check_invariants() const;

 private:
  size_t slot(BlockId node, int32_t group) const;

  int32_t num_sliding_;
  int32_t num_attached_ = 0;
  std::vector<BlockId> pages_;  // [node][group - 1]
  std::vector<BlockId> owner_;  // [page]: the node it is attached to, or kNoBlock
};

}  // namespace troupe::kv_cache
