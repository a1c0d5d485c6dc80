// PrefixCache: the radix tree's index, insertion and leaf eviction (see prefix_cache.hpp).
#include "actors/kv_cache/prefix_cache.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::kv_cache {
namespace {

// splitmix64's finaliser: cheap, and every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

size_t PrefixCache::KeyHash::operator()(const Key& key) const {
  return static_cast<size_t>(mix(key.token_hash ^ (static_cast<uint64_t>(key.parent) + 1) *
                                                      0x9e3779b97f4a7c15ULL));
}

PrefixCache::PrefixCache(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    throw std::invalid_argument("PrefixCache needs positive num_blocks and block_size");
  }
  nodes_.resize(static_cast<size_t>(num_blocks));
  tokens_.resize(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size));
  index_.reserve(static_cast<size_t>(num_blocks));
}

const PrefixCache::Node& PrefixCache::node(BlockId block) const {
  if (block < 0 || static_cast<size_t>(block) >= nodes_.size()) {
    throw std::logic_error(fmt::format("prefix cache: block id {} out of range", block));
  }
  return nodes_[static_cast<size_t>(block)];
}

std::span<const int32_t> PrefixCache::tokens_of(BlockId block) const {
  node(block);  // range check
  return {tokens_.data() + static_cast<size_t>(block) * static_cast<size_t>(block_size_),
          static_cast<size_t>(block_size_)};
}

uint64_t PrefixCache::hash_tokens(std::span<const int32_t> block_tokens) const {
  uint64_t h = 0x84222325cbf29ce4ULL;
  for (int32_t t : block_tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

bool PrefixCache::tokens_equal(BlockId block, std::span<const int32_t> block_tokens) const {
  const auto stored = tokens_of(block);
  return std::equal(stored.begin(), stored.end(), block_tokens.begin(), block_tokens.end());
}

std::vector<BlockId> PrefixCache::match(std::span<const int32_t> tokens,
                                        int32_t max_blocks) const {
  std::vector<BlockId> chain;
  const auto bs = static_cast<size_t>(block_size_);
  const auto limit = std::min<size_t>(tokens.size() / bs, static_cast<size_t>(std::max(0, max_blocks)));
  BlockId parent = kNoBlock;
  for (size_t i = 0; i < limit; ++i) {
    const auto block_tokens = tokens.subspan(i * bs, bs);
    const auto it = index_.find(Key{parent, hash_tokens(block_tokens)});
    if (it == index_.end() || !tokens_equal(it->second, block_tokens)) break;
    chain.push_back(it->second);
    parent = it->second;
  }
  return chain;
}

InsertResult PrefixCache::insert(BlockId parent, std::span<const int32_t> block_tokens,
                                 BlockId block) {
  if (static_cast<int32_t>(block_tokens.size()) != block_size_) {
    throw std::logic_error("prefix cache: insert of a block that is not full");
  }
  if (parent != kNoBlock && !contains(parent)) {
    throw std::logic_error(fmt::format("prefix cache: parent {} of {} is not cached", parent, block));
  }
  if (contains(block)) {
    throw std::logic_error(fmt::format("prefix cache: block {} is already cached", block));
  }
  const uint64_t token_hash = hash_tokens(block_tokens);
  const auto [it, inserted] = index_.try_emplace(Key{parent, token_hash}, block);
  if (!inserted) {
    if (tokens_equal(it->second, block_tokens)) {
      return {InsertOutcome::kAlreadyCached, it->second};
    }
    return {InsertOutcome::kCollision, kNoBlock};
  }
  Node& n = nodes_[static_cast<size_t>(block)];
  n = Node{parent, token_hash, 0, true};
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  if (parent != kNoBlock) ++nodes_[static_cast<size_t>(parent)].num_children;
  return {InsertOutcome::kInserted, block};
}

void PrefixCache::erase(BlockId block) {
  const Node& n = node(block);
  if (!n.cached) throw std::logic_error(fmt::format("prefix cache: erase of uncached {}", block));
  if (n.num_children != 0) {
    throw std::logic_error(fmt::format("prefix cache: evicting block {} with {} cached children",
                                       block, n.num_children));
  }
  index_.erase(Key{n.parent, n.token_hash});
  if (n.parent != kNoBlock) --nodes_[static_cast<size_t>(n.parent)].num_children;
  nodes_[static_cast<size_t>(block)] = Node{};
  ++counters_.num_evictions;
}

void PrefixCache::record_query(int32_t num_query_tokens, int32_t num_hit_tokens) {
  ++counters_.num_queries;
  if (num_hit_tokens > 0) ++counters_.num_hits;
  counters_.num_query_tokens += static_cast<uint64_t>(std::max(0, num_query_tokens));
  counters_.num_hit_tokens += static_cast<uint64_t>(std::max(0, num_hit_tokens));
}

std::optional<std::string> PrefixCache::check_invariants() const {
  std::vector<int32_t> children(nodes_.size(), 0);
  size_t num_cached = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.cached) continue;
    ++num_cached;
    const auto it = index_.find(Key{n.parent, n.token_hash});
    if (it == index_.end() || it->second != static_cast<BlockId>(i)) {
      return fmt::format("cached block {} is not reachable by its key", i);
    }
    if (n.token_hash != hash_tokens(tokens_of(static_cast<BlockId>(i)))) {
      return fmt::format("cached block {} has a stale token hash", i);
    }
    if (n.parent != kNoBlock) {
      if (!nodes_[static_cast<size_t>(n.parent)].cached) {
        return fmt::format("cached block {} has an uncached parent {}", i, n.parent);
      }
      ++children[static_cast<size_t>(n.parent)];
    }
  }
  if (num_cached != index_.size()) return std::string("index size differs from cached nodes");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (children[i] != nodes_[i].num_children) {
      return fmt::format("block {} counts {} children, has {}", i, nodes_[i].num_children,
                         children[i]);
    }
  }
  return std::nullopt;
}

}  // namespace troupe::kv_cache
