// What the HTTP front knows about the server as a whole: the served model's card, the
// server's phase (loading -> ready -> draining), which /health reports, and the listener's
// connection counters, which /metrics reports.
//
// Thread-safety: `model` is written once before serving starts and read-only afterwards;
// `phase` and `api_key_required` (a key reload may change it) are atomic and may be changed
// from any thread; `connections` holds atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "actors/messages/engine_types.hpp"
#include "model/model_info.hpp"
#include "net/connection_metrics.hpp"

namespace troupe::net {

enum class ServerPhase : uint8_t { kLoading, kReady, kDraining };

std::string_view to_string(ServerPhase phase);

struct ServerState {
  model::ModelInfo model;
  std::string backend;            // "cpu", "cuda"
  engine::KvCapacity kv;          // the KV cache's size, for /v1/models meta
  int64_t created_unix_seconds = 0;  // the `created` field of /v1/models
  std::atomic<bool> api_key_required{false};  // /v1/models: "auth": "api_key" (else "none")
  std::atomic<ServerPhase> phase{ServerPhase::kLoading};
  // Shared with the HttpServer that updates it (it may outlive this struct during shutdown).
  std::shared_ptr<ConnectionMetrics> connections = std::make_shared<ConnectionMetrics>();
};

}  // namespace troupe::net
