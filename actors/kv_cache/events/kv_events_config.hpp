// The `kv_events` config section (issue 20): where and how KV-cache events are published.
// Defaults are vLLM's KVEventsConfig ones (vllm/config/kv_events.py) where it has them.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::kv_cache {

// How each event inside a batch is encoded. The batch itself is always the positional
// [ts, [events...], data_parallel_rank].
enum class KvEventFormat : uint8_t {
  // Tagged maps {"type": "BlockStored", "block_hashes": ...}: vLLM since PR #42892 (0.24+);
  // llm-d-kv-cache reads both since its PR #661.
  kMap,
  // Tagged positional arrays ["BlockStored", hashes, parent, ...]: vLLM up to 0.23, and
  // subscribers written against it.
  kArray,
};
std::string_view to_string(KvEventFormat format);
std::optional<KvEventFormat> parse_kv_event_format(std::string_view text);

struct KvEventsConfig {
  bool enabled = false;
  // PUB socket. Bound when it has a wildcard ("tcp://*:5557", "tcp://[::]:5557") or is ipc:// or
  // inproc://, else connected (an indexer that binds, as llm-d's central subscriber does) —
  // vLLM's rule.
  std::string endpoint = "tcp://*:5557";
  // ROUTER socket for replay ("" = none): a client sends an 8-byte big-endian start sequence
  // number and gets every buffered batch from it on, then the end marker (sequence -1).
  std::string replay_endpoint;
  std::string topic;  // the first frame of every message; llm-d expects kv@<pod>@<model>
  int32_t buffer_steps = 10'000;        // batches kept for replay
  int32_t hwm = 100'000;                // PUB high-water mark: messages queued per subscriber
  int32_t max_queue_batches = 10'000;   // engine -> publisher queue; beyond it batches drop
  std::string hash_seed;                // the router's seed (vLLM: PYTHONHASHSEED)
  KvEventFormat format = KvEventFormat::kMap;
};

}  // namespace troupe::kv_cache
