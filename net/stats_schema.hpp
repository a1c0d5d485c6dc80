// The engine's statistics, declared once (issue 39): each figure's place in the admin socket's
// stats reply (a dotted JSON path), its Prometheus name (and label), its kind and help, and how
// it is read from EngineStats. /metrics (metrics.cpp), the admin socket's `stats`
// (admin_protocol.cpp) and `troupe admin stats --all` are all rendered from this list, so a new
// figure is one entry. What only one surface has stays beside it: the request-level histograms
// and counters net/ measures itself (ServingMetrics, ConnectionMetrics) and the info gauges
// whose values are labels are /metrics' own; the model's name and backend are the stats reply's.
//
// Thread-safety: the list is constant data; any thread.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "actors/messages/engine_types.hpp"

namespace troupe::net {

enum class StatKind : uint8_t {
  kGauge,    // Prometheus gauge; JSON number
  kCounter,  // Prometheus counter; JSON integer
  kFlag,     // Prometheus gauge of 0 or 1; JSON true/false
  kText,     // JSON string only (Prometheus shows such values as labels of an info gauge)
};

struct Stat {
  std::string_view json;    // "kv_blocks.used"; empty: /metrics only (a vLLM alias, say)
  std::string_view metric;  // "troupe:kv_blocks_used"; empty: the stats reply only
  // One label of the metric ("term=fixed"): consecutive stats of one metric form its family.
  std::string_view label;
  StatKind kind = StatKind::kGauge;
  std::string_view help;
  double (*value)(const engine::EngineStats&) = nullptr;      // not kText
  std::string (*text)(const engine::EngineStats&) = nullptr;  // kText
  // The metric's value is the JSON value times this (JSON milliseconds, Prometheus seconds).
  double metric_scale = 1.0;
};

// In the stats reply's order: the stats of one JSON object are consecutive.
std::span<const Stat> engine_stats_schema();

}  // namespace troupe::net
