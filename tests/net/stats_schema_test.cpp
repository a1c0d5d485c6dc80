// The stats schema (net/stats_schema.hpp) is the one list both /metrics and the admin socket's
// stats reply render: every figure in it reaches both surfaces it names, with the same value.
#include "net/stats_schema.hpp"

#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "net/admin_protocol.hpp"
#include "net/metrics.hpp"

namespace troupe::net {
namespace {

// Distinct, non-zero values everywhere, so a figure read from the wrong field shows.
engine::EngineStats distinct_stats() {
  engine::EngineStats s;
  s.num_waiting = 3, s.num_running = 5, s.num_preempted = 7;
  s.kv_blocks_total = 1000, s.kv_blocks_used = 11, s.kv_blocks_cached = 13, s.kv_blocks_free = 976;
  s.kv_block_size = 16, s.kv_usage_ratio = 0.125;
  s.kv_events_published = 17, s.kv_events_dropped = 19;
  s.prefix_cache_queries = 23, s.prefix_cache_hits = 29, s.prefix_cache_hit_rate = 0.375;
  s.num_preemptions = 31, s.num_fairness_preemptions = 37, s.num_waiting_clients = 41;
  s.num_prefix_deferrals = 43, s.num_requests_finished = 47, s.num_requests_refused = 53;
  s.prompt_tokens_total = 59, s.generation_tokens_total = 61, s.num_steps = 67;
  s.tokens_per_s_10s = 71.5, s.step_time = {73, 79}, s.time_to_first_token = {83, 89};
  s.step_cost.max_step_ms = 97, s.step_cost.last_predicted_ms = 101,
  s.step_cost.last_actual_ms = 103;
  s.step_cost.mean_abs_error_ratio = 0.0625, s.step_cost.planning_margin = 0.25;
  s.step_cost.num_time_budgeted_steps = 107, s.step_cost.num_first_token_steps = 109;
  s.step_cost.num_interrupted_steps = 113, s.step_cost.interrupted_ms = 127;
  s.step_cost.fixed_ms = 2, s.step_cost.per_token_ms = 0.5, s.step_cost.per_context_ms = 0.25;
  s.step_cost.per_sampled_ms = 4, s.step_cost.model_usable = true;
  s.structured_output = {131, 137, 139, 1};
  s.step_account = {.wall_ms = 3001, .idle_ms = 251, .engine_ms = 257, .decode_layers_ms = 263,
                    .prompt_layers_ms = 269, .logits_ms = 271, .sampling_ms = 277,
                    .prompt_outputs_ms = 281, .backend_other_ms = 283, .interrupted_ms = 293,
                    .decode_only_steps = 307, .mixed_steps = 311, .prompt_only_steps = 313,
                    .decode_rows = 317, .prompt_tokens = 331};
  s.speculative = {.num_drafts = 149, .num_draft_tokens = 160, .num_accepted_tokens = 40};
  s.engine_overhead_ratio = 0.03125, s.uptime_s = 163, s.draining = true;
  s.kv_transfer.role = "decode", s.kv_transfer.engine_id = "troupe-1",
  s.kv_transfer.transport = "ucx";
  s.kv_transfer.num_leases = 167, s.kv_transfer.num_leases_expired = 173,
  s.kv_transfer.num_leases_released = 179;
  s.kv_transfer.num_pulls_in_flight = 181, s.kv_transfer.num_pulls_ok = 191,
  s.kv_transfer.num_pulls_failed = 193;
  s.kv_transfer.num_blocks_pulled = 197, s.kv_transfer.bytes_pulled = 4'000'000'000,
  s.kv_transfer.pull_seconds_total = 2;
  s.kv_transfer.num_peers = 199, s.kv_transfer.num_handshake_failures = 211,
  s.kv_transfer.num_remote_prefills = 223;
  s.kv_transfer.num_remote_prefill_fallbacks = 227, s.kv_transfer.num_kv_pull_fallbacks = 229;
  s.kv_transfer.num_awaiting_kv = 233;
  return s;
}

TEST(StatsSchema, NamesAreUniqueAndFamiliesAreConsecutive) {
  std::set<std::string_view> json_paths;
  std::set<std::pair<std::string_view, std::string_view>> metric_samples;
  std::set<std::string_view> closed_families;
  std::string_view previous_metric;
  for (const Stat& stat : engine_stats_schema()) {
    EXPECT_FALSE(stat.json.empty() && stat.metric.empty()) << "a stat nobody shows";
    if (!stat.json.empty()) EXPECT_TRUE(json_paths.insert(stat.json).second) << stat.json;
    EXPECT_TRUE(stat.kind == StatKind::kText ? stat.text != nullptr : stat.value != nullptr)
        << stat.json;
    if (stat.metric.empty()) continue;
    EXPECT_TRUE(metric_samples.insert({stat.metric, stat.label}).second)
        << stat.metric << " " << stat.label;
    if (stat.metric != previous_metric) {
      EXPECT_FALSE(closed_families.count(stat.metric)) << stat.metric << " is split in two";
      EXPECT_FALSE(stat.help.empty()) << stat.metric << ": a family's first stat carries its help";
      if (!previous_metric.empty()) closed_families.insert(previous_metric);
    }
    previous_metric = stat.metric;
  }
}

// Every figure reaches both surfaces it names, with the value the schema reads (scaled for
// Prometheus' seconds).
TEST(StatsSchema, EveryFigureReachesMetricsAndTheStatsReply) {
  const engine::EngineStats s = distinct_stats();
  engine::ModelCard card;
  card.info.id = "m";
  card.backend = "cpu";
  const std::string metrics = render_metrics(s, ServingMetrics{}, "M");
  simdjson::dom::parser parser;
  const simdjson::dom::element reply = parser.parse(admin_stats_reply(s, card));
  for (const Stat& stat : engine_stats_schema()) {
    if (!stat.metric.empty() && stat.kind != StatKind::kText) {
      std::string sample = std::string(stat.metric) + "{model_name=\"M\"";
      if (!stat.label.empty()) {
        const size_t eq = stat.label.find('=');
        sample += fmt::format(",{}=\"{}\"", stat.label.substr(0, eq), stat.label.substr(eq + 1));
      }
      sample += fmt::format("}} {}\n", stat.value(s) * stat.metric_scale);
      EXPECT_NE(metrics.find(sample), std::string::npos) << sample;
    }
    if (stat.json.empty()) continue;
    std::string pointer = "/" + std::string(stat.json);
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    simdjson::dom::element value;
    ASSERT_EQ(reply.at_pointer(pointer).get(value), simdjson::SUCCESS) << stat.json;
    switch (stat.kind) {
      case StatKind::kText: EXPECT_EQ(value.get_string().value(), stat.text(s)) << stat.json; break;
      case StatKind::kFlag:
        EXPECT_EQ(value.get_bool().value(), stat.value(s) != 0) << stat.json;
        break;
      case StatKind::kCounter:
      case StatKind::kGauge:
        EXPECT_DOUBLE_EQ(value.get_double().value(), stat.value(s)) << stat.json;
        break;
    }
  }
}

}  // namespace
}  // namespace troupe::net
