// KvCacheManager: allocation with prefix reuse, full-block caching, release (see the header).
#include "actors/kv_cache/kv_cache_manager.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::kv_cache {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : block_size_(config.block_size),
      num_kv_groups_(std::max(config.num_kv_groups, 1)),
      sliding_window_(config.sliding_window),
      enable_prefix_caching_(config.enable_prefix_caching),
      pool_(config.num_blocks),
      cache_(config.num_blocks, config.block_size),
      windows_(config.num_blocks, num_kv_groups_) {
  if (config.emit_events && enable_prefix_caching_ && num_kv_groups_ == 1) {
    hasher_.emplace(config.event_hash_seed);
    digests_.resize(static_cast<size_t>(config.num_blocks));
  }
}

void KvCacheManager::note_stored(BlockStored& run, BlockId parent, BlockId block,
                                 std::span<const int32_t> block_tokens) {
  const BlockDigest& parent_digest =
      parent == kNoBlock ? hasher_->root() : digests_[static_cast<size_t>(parent)];
  BlockDigest& digest = digests_[static_cast<size_t>(block)];
  digest = hasher_->block(parent_digest, block_tokens);
  if (run.block_hashes.empty() && parent != kNoBlock) {
    run.parent_block_hash = KvBlockHasher::engine_key(parent_digest);
  }
  run.block_hashes.push_back(KvBlockHasher::engine_key(digest));
  run.token_ids.insert(run.token_ids.end(), block_tokens.begin(), block_tokens.end());
}

void KvCacheManager::flush_stored(BlockStored& run) {
  if (run.block_hashes.empty()) return;
  run.block_size = block_size_;
  events_.emplace_back(std::exchange(run, BlockStored{}));
}

std::vector<uint64_t> KvCacheManager::keys_of(const std::vector<BlockId>& blocks) const {
  std::vector<uint64_t> keys;
  keys.reserve(blocks.size());
  for (BlockId b : blocks) keys.push_back(KvBlockHasher::engine_key(digests_[static_cast<size_t>(b)]));
  return keys;
}

PrefixMatch KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens) const {
  PrefixMatch match;
  if (!enable_prefix_caching_ || tokens.size() < 2) return match;
  const auto max_blocks = static_cast<int32_t>((tokens.size() - 1) / static_cast<size_t>(block_size_));
  match.blocks = cache_.match(tokens, max_blocks);
  if (num_kv_groups_ > 1) {
    match.blocks.resize(window_covered(match.blocks));
    const auto first = static_cast<size_t>(
        std::min(pages_before_window(static_cast<int32_t>(match.blocks.size()) * block_size_),
                 static_cast<int32_t>(match.blocks.size())));
    match.sliding.assign(static_cast<size_t>(num_kv_groups_ - 1),
                         std::vector<BlockId>(match.blocks.size(), kNoBlock));
    for (int32_t g = 1; g < num_kv_groups_; ++g) {
      std::vector<BlockId>& pages = match.sliding[static_cast<size_t>(g - 1)];
      for (size_t j = first; j < pages.size(); ++j) pages[j] = windows_.page_of(match.blocks[j], g);
    }
  }
  match.num_tokens = static_cast<int32_t>(match.blocks.size()) * block_size_;
  return match;
}

size_t KvCacheManager::window_covered(std::span<const BlockId> chain) const {
  // last_gap[j]: the last node at or before j that lacks a page in some sliding group. A hit of
  // k blocks needs pages at every node from pages_before_window(k * block_size) to k - 1.
  std::vector<int32_t> last_gap(chain.size());
  int32_t gap = -1;
  for (size_t j = 0; j < chain.size(); ++j) {
    if (!windows_.has_every_group(chain[j])) gap = static_cast<int32_t>(j);
    last_gap[j] = gap;
  }
  for (size_t k = chain.size(); k > 0; --k) {
    if (last_gap[k - 1] < pages_before_window(static_cast<int32_t>(k) * block_size_)) return k;
  }
  return 0;
}

void KvCacheManager::forget_evicted(const std::vector<BlockId>& evicted) {
  for (BlockId block : evicted) {
    if (windows_.is_attached(block)) {
      windows_.detach_page(block);
    } else {
      cache_.erase(block);
      // A holder of a window page holds its node and releases the page first, so a node's
      // pages are evicted before it (check_invariants verifies the order).
      if (!windows_.detach_node(block).empty()) {
        throw std::logic_error(fmt::format("evicted node {} still had window pages", block));
      }
    }
  }
}

bool KvCacheManager::allocate_slots(SequenceBlocks& seq, const PrefixMatch& prefix,
                                    int32_t num_total_tokens, int32_t window_from) {
  const bool adopt = seq.blocks.empty() && !prefix.blocks.empty();
  const auto num_held = static_cast<int32_t>(adopt ? prefix.blocks.size() : seq.blocks.size());
  const int32_t num_new = std::max(0, blocks_for_tokens(num_total_tokens, block_size_) - num_held);
  if (num_new == 0 && !adopt) return true;
  // A hit on an evictable page takes it out of the allocatable set: count it before touching.
  int32_t num_hit_evictable = 0;
  const auto count_evictable = [&](const std::vector<BlockId>& pages) {
    for (BlockId b : pages) {
      if (b != kNoBlock && pool_.state(b) == BlockState::kCachedUnreferenced) ++num_hit_evictable;
    }
  };
  if (adopt) {
    count_evictable(prefix.blocks);
    for (const std::vector<BlockId>& group : prefix.sliding) count_evictable(group);
  }
  // Group 0 grows by num_new pages, each sliding group by those of them from window_from's
  // window on.
  const int32_t first_new = num_held;
  const int32_t first_used =
      std::max(first_new, window_from < 0 ? 0 : pages_before_window(window_from));
  const int32_t num_sliding_new = std::max(0, first_new + num_new - first_used);
  const int32_t num_pages = num_new + (num_kv_groups_ - 1) * num_sliding_new;
  if (num_pages > pool_.num_allocatable() - num_hit_evictable) return false;
  if (adopt) {
    for (BlockId b : prefix.blocks) pool_.touch(b);
    for (const std::vector<BlockId>& group : prefix.sliding) {
      for (BlockId b : group) {
        if (b != kNoBlock) pool_.touch(b);
      }
    }
    seq.blocks = prefix.blocks;
    seq.sliding = prefix.sliding;
    seq.num_cached_blocks = static_cast<int32_t>(prefix.blocks.size());
    seq.caching_stopped = false;
  }
  seq.sliding.resize(static_cast<size_t>(num_kv_groups_ - 1));
  if (num_new == 0) return true;
  auto allocation = pool_.allocate(num_pages);
  if (!allocation) throw std::logic_error("block pool refused an allocation it had room for");
  if (hasher_ && !allocation->evicted.empty()) {  // one KV group: every evicted block is a node
    events_.emplace_back(BlockRemoved{keys_of(allocation->evicted)});
  }
  forget_evicted(allocation->evicted);
  auto next = allocation->blocks.begin();
  seq.blocks.insert(seq.blocks.end(), next, next + num_new);
  next += num_new;
  for (std::vector<BlockId>& group : seq.sliding) {
    group.insert(group.end(), static_cast<size_t>(num_new - num_sliding_new), kNoBlock);
    group.insert(group.end(), next, next + num_sliding_new);
    next += num_sliding_new;
  }
  return true;
}

int32_t KvCacheManager::flush_unreferenced_cache() {
  const int32_t num_cached = pool_.num_cached_unreferenced();
  if (num_cached == 0) {
    // An empty cache stays empty; say so, as vLLM does on every reset, so a router that
    // missed events starts over in step with us.
    if (hasher_ && cache_.num_cached_blocks() == 0) events_.emplace_back(AllBlocksCleared{});
    return 0;
  }
  // Allocating everything allocatable takes the free blocks first, then evicts every cached,
  // unreferenced one (the pool reports them so the tree forgets them); freeing the whole
  // allocation returns all of it to the free list, uncached.
  auto allocation = pool_.allocate(pool_.num_allocatable());
  if (!allocation) throw std::logic_error("block pool refused an allocation it had room for");
  std::vector<uint64_t> removed;
  if (hasher_) removed = keys_of(allocation->evicted);
  forget_evicted(allocation->evicted);
  for (BlockId block : allocation->blocks) pool_.free(block);
  // Blocks a running sequence holds stay cached: then only the flushed ones are removed.
  if (hasher_) {
    if (cache_.num_cached_blocks() == 0) {
      events_.emplace_back(AllBlocksCleared{});
    } else {
      events_.emplace_back(BlockRemoved{std::move(removed)});
    }
  }
  return static_cast<int32_t>(allocation->evicted.size());
}

void KvCacheManager::cache_full_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens,
                                       int32_t num_computed_tokens) {
  if (!enable_prefix_caching_ || seq.caching_stopped) return;
  const auto bs = static_cast<size_t>(block_size_);
  const int32_t num_full = std::min<int32_t>(num_computed_tokens / block_size_,
                                             static_cast<int32_t>(seq.blocks.size()));
  BlockStored run;  // KV events: the blocks this call inserts, as consecutive runs
  for (int32_t i = seq.num_cached_blocks; i < num_full; ++i) {
    const auto index = static_cast<size_t>(i);
    const BlockId parent = i == 0 ? kNoBlock : seq.blocks[index - 1];
    const BlockId own = seq.blocks[index];
    const auto block_tokens = tokens.subspan(index * bs, bs);
    const InsertResult result = cache_.insert(parent, block_tokens, own);
    switch (result.outcome) {
      case InsertOutcome::kInserted:
        pool_.mark_cached(own);
        if (hasher_) note_stored(run, parent, own, block_tokens);
        if (num_kv_groups_ > 1) cache_window_pages(seq, index, own);
        break;
      case InsertOutcome::kAlreadyCached:
        // Same tokens under the same prefix, computed concurrently: share the cached block
        // and drop ours, so every cached child's holder also holds its parent.
        pool_.touch(result.block);
        pool_.free(own);
        seq.blocks[index] = result.block;
        if (num_kv_groups_ > 1) cache_window_pages(seq, index, result.block);
        flush_stored(run);  // the next run's parent is the shared block
        break;
      case InsertOutcome::kCollision:
        seq.caching_stopped = true;
        flush_stored(run);
        return;
    }
    seq.num_cached_blocks = i + 1;
  }
  flush_stored(run);
}

void KvCacheManager::cache_window_pages(SequenceBlocks& seq, size_t index, BlockId node) {
  for (int32_t g = 1; g < num_kv_groups_; ++g) {
    BlockId& own = seq.sliding[static_cast<size_t>(g - 1)][index];
    if (own == kNoBlock) continue;  // already out of the window: nothing to offer
    const BlockId shared = windows_.page_of(node, g);
    if (shared == kNoBlock) {
      pool_.mark_cached(own);
      windows_.attach(node, g, own);
    } else if (shared != own) {
      // Another sequence's page of the same prefix is cached: hold that one, as for the node.
      pool_.touch(shared);
      pool_.free(own);
      own = shared;
    }
  }
}

void KvCacheManager::release_tail(SequenceBlocks& seq, int32_t num_tokens) {
  const auto keep = static_cast<size_t>(std::max(blocks_for_tokens(num_tokens, block_size_), 0));
  if (keep < static_cast<size_t>(seq.num_cached_blocks)) {
    throw std::logic_error("release_tail would release a cached block");
  }
  while (seq.blocks.size() > keep) {
    pool_.free(seq.blocks.back());
    seq.blocks.pop_back();
  }
  for (std::vector<BlockId>& group : seq.sliding) {
    while (group.size() > keep) {
      if (group.back() != kNoBlock) pool_.free(group.back());
      group.pop_back();
    }
  }
}

int32_t KvCacheManager::release_out_of_window(SequenceBlocks& seq, int32_t next_position) {
  if (num_kv_groups_ <= 1 || sliding_window_ <= 0) return 0;
  const int32_t whole_blocks = pages_before_window(next_position);  // pages wholly before it
  int32_t released = 0;
  for (std::vector<BlockId>& group : seq.sliding) {
    const auto end = std::min(group.size(), static_cast<size_t>(whole_blocks));
    for (size_t i = 0; i < end; ++i) {
      if (group[i] == kNoBlock) continue;
      pool_.free(group[i]);
      group[i] = kNoBlock;
      ++released;
    }
  }
  return released;
}

int32_t KvCacheManager::num_pages_held(const SequenceBlocks& seq) {
  auto held = static_cast<int32_t>(seq.blocks.size());
  for (const std::vector<BlockId>& group : seq.sliding) {
    held += static_cast<int32_t>(std::count_if(group.begin(), group.end(),
                                               [](BlockId b) { return b != kNoBlock; }));
  }
  return held;
}

void KvCacheManager::free_sequence(SequenceBlocks& seq) {
  for (std::vector<BlockId>& group : seq.sliding) {
    for (auto it = group.rbegin(); it != group.rend(); ++it) {
      if (*it != kNoBlock) pool_.free(*it);
    }
  }
  seq.sliding.clear();
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) pool_.free(*it);
  seq.blocks.clear();
  seq.num_cached_blocks = 0;
  seq.caching_stopped = false;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s;
  s.num_blocks = pool_.num_blocks();
  s.block_size = block_size_;
  s.prefix_caching = enable_prefix_caching_;
  s.num_free = pool_.num_free();
  s.num_cached_unreferenced = pool_.num_cached_unreferenced();
  s.num_referenced = pool_.num_referenced();
  s.usage_ratio = static_cast<double>(s.num_referenced) / static_cast<double>(s.num_blocks);
  s.num_cached_blocks = cache_.num_cached_blocks() + windows_.num_attached();
  s.prefix = cache_.counters();
  return s;
}

std::optional<std::string> KvCacheManager::check_invariants() const {
  if (auto error = pool_.check_invariants()) return "block pool: " + *error;
  if (auto error = cache_.check_invariants()) return "prefix cache: " + *error;
  if (auto error = windows_.check_invariants()) return "window pages: " + *error;
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    if (cache_.contains(b) && windows_.is_attached(b)) {
      return fmt::format("block {} is both a tree node and a window page", b);
    }
    if (pool_.is_cached(b) != (cache_.contains(b) || windows_.is_attached(b))) {
      return fmt::format("block {}: pool says cached={}, tree and window pages disagree", b,
                         pool_.is_cached(b));
    }
    for (int32_t g = 1; cache_.contains(b) && g < num_kv_groups_; ++g) {
      // A holder of a window page holds the page's node (its whole prefix).
      const BlockId page = windows_.page_of(b, g);
      if (page != kNoBlock && pool_.ref_count(page) > 0 && pool_.ref_count(b) == 0) {
        return fmt::format("window page {} is referenced but its node {} is not", page, b);
      }
    }
    // A referenced child implies a referenced parent (holders hold whole chains).
    if (cache_.contains(b) && pool_.ref_count(b) > 0 && cache_.parent_of(b) != kNoBlock &&
        pool_.ref_count(cache_.parent_of(b)) == 0) {
      return fmt::format("block {} is referenced but its cached parent is not", b);
    }
  }
  // Eviction order: every block's parent comes later in the list, so the head is a leaf.
  std::vector<int32_t> position(static_cast<size_t>(pool_.num_blocks()), -1);
  const auto order = pool_.eviction_order();
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!cache_.contains(order[i])) continue;  // a window page: no order among them
    for (int32_t g = 1; g < num_kv_groups_; ++g) {
      // An unreferenced node's pages are unreferenced and listed before it.
      const BlockId page = windows_.page_of(order[i], g);
      if (page != kNoBlock && !(position[static_cast<size_t>(page)] >= 0 &&
                                position[static_cast<size_t>(page)] < static_cast<int32_t>(i))) {
        return fmt::format("window page {} is not evicted before its node {}", page, order[i]);
      }
    }
    const BlockId parent = cache_.parent_of(order[i]);
    if (parent != kNoBlock && position[static_cast<size_t>(parent)] >= 0 &&
        position[static_cast<size_t>(parent)] < static_cast<int32_t>(i)) {
      return fmt::format("eviction list puts parent {} before its child {}", parent, order[i]);
    }
  }
  return std::nullopt;
}

}  // namespace troupe::kv_cache
