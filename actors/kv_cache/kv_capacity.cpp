#include "actors/kv_cache/kv_capacity.hpp"

#include <algorithm>

namespace troupe::kv_cache {

engine::KvCapacity kv_capacity(const gpu::KvCacheGeometry& g, int32_t conversation_tokens) {
  engine::KvCapacity c;
  c.dtype = std::string(gpu::kKvDtypeNames.name(g.dtype));
  c.blocks = g.num_blocks;
  c.block_size = g.block_size;
  c.tokens = static_cast<int64_t>(g.num_blocks) * g.block_size;
  c.bytes = g.bytes;
  c.conversation_tokens = conversation_tokens;
  if (g.block_size <= 0 || conversation_tokens <= 0) return c;
  const int64_t global_pages = (conversation_tokens + g.block_size - 1) / g.block_size;
  int64_t pages = global_pages;
  if (g.num_kv_groups > 1 && g.sliding_window > 0) {
    const int64_t window_pages = (g.sliding_window + g.block_size - 1) / g.block_size + 1;
    pages += static_cast<int64_t>(g.num_kv_groups - 1) * std::min(global_pages, window_pages);
  }
  c.conversations = g.num_blocks / pages;
  return c;
}

}  // namespace troupe::kv_cache
