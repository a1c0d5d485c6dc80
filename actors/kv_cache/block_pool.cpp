// BlockPool: reference counts, the free stack and the LRU eviction list (see block_pool.hpp).
#include "actors/kv_cache/block_pool.hpp"

#include "model/enum_names.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::kv_cache {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks <= 0) throw std::invalid_argument("BlockPool needs at least one block");
  const auto n = static_cast<size_t>(num_blocks);
  ref_counts_.assign(n, 0);
  cached_.assign(n, 0);
  prev_.assign(n, kNoBlock);
  next_.assign(n, kNoBlock);
  in_eviction_list_.assign(n, 0);
  free_blocks_.reserve(n);
  // Reversed so that the first allocations hand out 0, 1, 2, ...: easier to read in tests.
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
}

void BlockPool::check_block(BlockId block) const {
  if (block < 0 || block >= num_blocks()) {
    throw std::logic_error(fmt::format("block id {} outside the pool of {}", block, num_blocks()));
  }
}

std::optional<Allocation> BlockPool::allocate(int32_t num_blocks) {
  if (num_blocks < 0 || num_blocks > num_allocatable()) return std::nullopt;
  Allocation allocation;
  allocation.blocks.reserve(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) {
    BlockId block;
    if (!free_blocks_.empty()) {
      block = free_blocks_.back();
      free_blocks_.pop_back();
    } else {
      block = pop_eviction_head();
      cached_[static_cast<size_t>(block)] = 0;
      allocation.evicted.push_back(block);
    }
    ref_counts_[static_cast<size_t>(block)] = 1;
    allocation.blocks.push_back(block);
  }
  return allocation;
}

void BlockPool::touch(BlockId block) {
  check_block(block);
  const auto i = static_cast<size_t>(block);
  if (ref_counts_[i] == 0) {
    if (!cached_[i]) throw std::logic_error(fmt::format("touch of free block {}", block));
    unlink_eviction(block);
  }
  ++ref_counts_[i];
}

void BlockPool::free(BlockId block) {
  check_block(block);
  const auto i = static_cast<size_t>(block);
  if (ref_counts_[i] <= 0) throw std::logic_error(fmt::format("free of unreferenced block {}", block));
  if (--ref_counts_[i] > 0) return;
  if (cached_[i]) {
    push_eviction_tail(block);
  } else {
    free_blocks_.push_back(block);
  }
}

void BlockPool::mark_cached(BlockId block) {
  check_block(block);
  const auto i = static_cast<size_t>(block);
  if (ref_counts_[i] <= 0) {
    throw std::logic_error(fmt::format("only a referenced block may become cached ({})", block));
  }
  cached_[i] = 1;
}

BlockState BlockPool::state(BlockId block) const {
  check_block(block);
  const auto i = static_cast<size_t>(block);
  if (ref_counts_[i] > 0) return BlockState::kReferenced;
  return cached_[i] ? BlockState::kCachedUnreferenced : BlockState::kFree;
}

void BlockPool::push_eviction_tail(BlockId block) {
  const auto i = static_cast<size_t>(block);
  prev_[i] = eviction_tail_;
  next_[i] = kNoBlock;
  if (eviction_tail_ != kNoBlock) {
    next_[static_cast<size_t>(eviction_tail_)] = block;
  } else {
    eviction_head_ = block;
  }
  eviction_tail_ = block;
  in_eviction_list_[i] = 1;
  ++num_in_eviction_list_;
}

void BlockPool::unlink_eviction(BlockId block) {
  const auto i = static_cast<size_t>(block);
  const BlockId before = prev_[i];
  const BlockId after = next_[i];
  if (before != kNoBlock) {
    next_[static_cast<size_t>(before)] = after;
  } else {
    eviction_head_ = after;
  }
  if (after != kNoBlock) {
    prev_[static_cast<size_t>(after)] = before;
  } else {
    eviction_tail_ = before;
  }
  prev_[i] = kNoBlock;
  next_[i] = kNoBlock;
  in_eviction_list_[i] = 0;
  --num_in_eviction_list_;
}

BlockId BlockPool::pop_eviction_head() {
  const BlockId block = eviction_head_;
  unlink_eviction(block);
  return block;
}

std::vector<BlockId> BlockPool::eviction_order() const {
  std::vector<BlockId> order;
  for (BlockId b = eviction_head_; b != kNoBlock; b = next_[static_cast<size_t>(b)]) {
    order.push_back(b);
  }
  return order;
}

std::optional<std::string> BlockPool::check_invariants() const {
  const auto n = static_cast<size_t>(num_blocks());
  std::vector<uint8_t> in_free(n, 0);
  for (BlockId b : free_blocks_) {
    if (b < 0 || b >= num_blocks()) return fmt::format("free stack holds bad id {}", b);
    if (in_free[static_cast<size_t>(b)]++) return fmt::format("block {} twice in free stack", b);
  }
  int32_t listed = 0;
  BlockId previous = kNoBlock;
  for (BlockId b = eviction_head_; b != kNoBlock; b = next_[static_cast<size_t>(b)]) {
    if (++listed > num_blocks()) return std::string("eviction list has a cycle");
    if (prev_[static_cast<size_t>(b)] != previous) return fmt::format("bad prev link at {}", b);
    if (!in_eviction_list_[static_cast<size_t>(b)]) return fmt::format("{} unflagged in list", b);
    previous = b;
  }
  if (previous != eviction_tail_) return std::string("eviction tail is not the last element");
  if (listed != num_in_eviction_list_) return std::string("eviction list count is wrong");
  for (size_t i = 0; i < n; ++i) {
    const int32_t ref = ref_counts_[i];
    const bool in_list = in_eviction_list_[i] != 0;
    if (ref < 0) return fmt::format("block {} has negative ref count", i);
    if (ref > 0 && (in_free[i] || in_list)) {
      return fmt::format("block {} is referenced ({}) but also free/evictable", i, ref);
    }
    if (ref == 0 && cached_[i] && (!in_list || in_free[i])) {
      return fmt::format("cached unreferenced block {} is not (only) in the eviction list", i);
    }
    if (ref == 0 && !cached_[i] && (!in_free[i] || in_list)) {
      return fmt::format("free block {} is not (only) in the free stack", i);
    }
  }
  return std::nullopt;
}

constexpr EnumNames<BlockState, 3> kBlockStateNames{{{
    {BlockState::kFree, "free"}, {BlockState::kCachedUnreferenced, "cached_unreferenced"},
    {BlockState::kReferenced, "referenced"}}}};
static_assert(kBlockStateNames.dense());

std::string_view to_string(BlockState state) { return kBlockStateNames.name(state); }

}  // namespace troupe::kv_cache
