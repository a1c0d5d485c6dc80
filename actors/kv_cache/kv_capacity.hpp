// What the KV memory holds, in the units users plan with: tokens, and conversations of the
// configured max_model_len at once. A conversation of M tokens holds ceil(M / block_size) pages
// of the global KV group and, in each sliding-window group (gpu/kv_groups.hpp), only the pages
// its window still sees (kv_cache_manager.hpp frees the rest), at most ceil(window / block_size)
// + 1 (the window straddles a page boundary).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "actors/messages/engine_types.hpp"
#include "gpu/backend.hpp"

namespace troupe::kv_cache {

engine::KvCapacity kv_capacity(const gpu::KvCacheGeometry& geometry, int32_t conversation_tokens);

}  // namespace troupe::kv_cache
