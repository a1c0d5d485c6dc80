// PrefixCache: a radix tree over full KV blocks, so a request reuses every full block of its
// prompt that some earlier (or concurrent) sequence already computed.
//
// A node IS a physical block: node id == BlockId. The key of a node is (parent block, the
// block_size tokens it holds), so equal token blocks under different prefixes never alias:
//
//   root ─┬─ [sys prompt 0..15] #7 ─── [sys 16..31] #3 ─┬─ [user A 32..47] #9
//         │                                              └─ [user B 32..47] #12
//         └─ [other prompt 0..15] #4
//
// Blocks are inserted as soon as they are full (KvCacheManager::cache_full_blocks after each
// step), not when a request ends. The cache holds no reference count of its own: BlockPool
// keeps an unreferenced cached block in its LRU eviction list, and when it reuses one it tells
// the cache to erase() it. NOTE: erase() requires a leaf; BlockPool's release order guarantees
// the eviction head is one (block_pool.hpp), and check_invariants() verifies it.
//
// Thread-safety: not thread-safe; one thread at a time (the kv-cache/scheduler actor's executor).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/kv_cache/block_pool.hpp"
#include "actors/messages/kv_types.hpp"

namespace troupe::kv_cache {

enum class InsertOutcome : uint8_t {
  kInserted,       // the block now represents this key
  kAlreadyCached,  // another block holds this key; the caller should share that one instead
  kCollision,      // a different token block hashes to the same key: not cacheable (rare)
};

struct InsertResult {
  InsertOutcome outcome = InsertOutcome::kInserted;
  BlockId block = kNoBlock;  // the block cached under the key (kNoBlock on kCollision)
};

class PrefixCache {
 public:
  PrefixCache(int32_t num_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t num_cached_blocks() const { return static_cast<int32_t>(index_.size()); }

  // The longest chain of cached blocks covering tokens[0, k * block_size), k <= max_blocks.
  // Does not count as a query (the scheduler may look a blocked request up every step).
  std::vector<BlockId> match(std::span<const int32_t> tokens, int32_t max_blocks) const;

  // Registers `block`, holding `block_tokens` (exactly block_size), as the child of `parent`
  // (kNoBlock: the root). `parent` must be cached.
  InsertResult insert(BlockId parent, std::span<const int32_t> block_tokens, BlockId block);

  // Forgets an evicted block. It must be a cached leaf (a bug otherwise: std::logic_error).
  void erase(BlockId block);

  bool contains(BlockId block) const { return node(block).cached; }
  BlockId parent_of(BlockId block) const { return node(block).parent; }
  int32_t num_children(BlockId block) const { return node(block).num_children; }
  std::span<const int32_t> tokens_of(BlockId block) const;

  void record_query(int32_t num_query_tokens, int32_t num_hit_tokens);
  const PrefixCacheCounters& counters() const { return counters_; }

  // Every node reachable by its key, parent links and child counts consistent. O(n).
  std::optional<std::string> check_invariants() const;

 private:
  struct Node {
    BlockId parent = kNoBlock;
    uint64_t token_hash = 0;
    int32_t num_children = 0;
    bool cached = false;
  };
  struct Key {
    BlockId parent;
    uint64_t token_hash;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };

  const Node& node(BlockId block) const;
  uint64_t hash_tokens(std::span<const int32_t> block_tokens) const;
  bool tokens_equal(BlockId block, std::span<const int32_t> block_tokens) const;

  int32_t block_size_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;  // [num_blocks x block_size]: the key tokens of cached nodes
  std::unordered_map<Key, BlockId, KeyHash> index_;
  PrefixCacheCounters counters_;
};

}  // namespace troupe::kv_cache
