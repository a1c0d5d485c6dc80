// The msgpack encoding of a KV event batch, byte for byte what vLLM's ZmqEventPublisher sends
// (msgspec structs from vllm/distributed/kv_events.py):
//
//   batch            [ts: float64, [event...], data_parallel_rank: 0]
//   map format       {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64|nil,
//                     "token_ids": [...], "block_size": n, "lora_id": nil, "medium": m,
//                     "lora_name": nil, "extra_keys": [nil per block], "group_idx": 0,
//                     "kv_cache_spec_kind": "full_attention"}
//                    {"type": "BlockRemoved", "block_hashes": [...], "medium": m, "group_idx": 0}
//                    {"type": "AllBlocksCleared"}
//   array format     ["BlockStored", hashes, parent, token_ids, block_size, nil, medium, nil]
//                    ["BlockRemoved", hashes, medium]      ["AllBlocksCleared"]
//
// (vLLM's msgspec omits fields left at their defaults: the array form stops at lora_name.)
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "actors/kv_cache/events/kv_events_config.hpp"
#include "actors/kv_cache/kv_events.hpp"

namespace troupe::kv_cache {

// `medium`: where the blocks live ("GPU" for device memory as vLLM says it, "CPU" here on the
// CPU backend).
std::string encode_kv_event_batch(const KvEventBatch& batch, KvEventFormat format,
                                  std::string_view medium);

}  // namespace troupe::kv_cache
