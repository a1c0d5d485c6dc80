// Admin command parsing (simdjson) and reply formatting (JsonWriter). See admin_protocol.hpp.
#include "net/admin_protocol.hpp"

#include <charconv>

#include <fmt/format.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "net/json_input.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {
namespace {

namespace dom = simdjson::dom;

constexpr std::chrono::milliseconds kMaxWatchInterval{3'600'000};

AdminError bad_request(std::string message) {
  return AdminError{AdminErrorKind::kBadRequest, std::move(message)};
}

std::optional<engine::RequestId> request_id_of(dom::element id) {
  uint64_t number = 0;
  if (id.get(number) == simdjson::SUCCESS) return number;
  std::string_view text;
  if (id.get(text) != simdjson::SUCCESS || text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}

std::variant<AdminCommand, AdminError> parse_watch(dom::object object) {
  AdminWatch watch;
  dom::element interval;
  if (object["interval_ms"].get(interval) != simdjson::SUCCESS) return AdminCommand{watch};
  int64_t ms = 0;
  if (interval.get(ms) != simdjson::SUCCESS) {
    return bad_request("\"interval_ms\" must be an integer (milliseconds)");
  }
  if (ms < kMinWatchInterval.count() || ms > kMaxWatchInterval.count()) {
    return bad_request(fmt::format("\"interval_ms\" must be between {} and {}",
                                   kMinWatchInterval.count(), kMaxWatchInterval.count()));
  }
  watch.interval = std::chrono::milliseconds(ms);
  return AdminCommand{watch};
}

std::variant<AdminCommand, AdminError> parse_fields(std::string_view cmd, dom::object object) {
  if (cmd == "stats") return AdminCommand{AdminStats{}};
  if (cmd == "watch") return parse_watch(object);
  if (cmd == "requests") return AdminCommand{AdminRequests{}};
  if (cmd == "drain") return AdminCommand{AdminDrain{}};
  if (cmd == "flush_prefix_cache") return AdminCommand{AdminFlushPrefixCache{}};
  if (cmd == "cancel") {
    dom::element id;
    if (object["id"].get(id) != simdjson::SUCCESS) {
      return bad_request("cancel needs \"id\": the request id (a number or a string of digits)");
    }
    const std::optional<engine::RequestId> request_id = request_id_of(id);
    if (!request_id) {
      return bad_request("\"id\" must be a request id: a non-negative integer or a string of digits");
    }
    return AdminCommand{AdminCancel{*request_id}};
  }
  if (cmd == "log_level") {
    std::string_view level;
    if (object["level"].get(level) != simdjson::SUCCESS || !is_admin_log_level(level)) {
      return bad_request(
          "log_level needs \"level\": one of trace, debug, info, warn, error, critical, off");
    }
    return AdminCommand{AdminLogLevel{std::string(level)}};
  }
  return bad_request(fmt::format(
      "unknown command '{}' (stats, watch, requests, cancel, drain, log_level, flush_prefix_cache)",
      cmd));
}

void write_latency(JsonWriter& json, std::string_view name, const engine::LatencySummary& latency) {
  json.key(name).begin_object();
  json.field("p50", latency.p50_ms).field("p99", latency.p99_ms);
  json.end_object();
}

}  // namespace

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Touches every byte of the longer input whatever the contents, and folds the length
  // difference in, so timing reveals neither where they differ nor a matching prefix.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool is_admin_log_level(std::string_view level) {
  for (std::string_view name : {"trace", "debug", "info", "warn", "warning", "error", "err",
                                "critical", "off"}) {
    if (level == name) return true;
  }
  return false;
}

std::variant<AdminCommand, AdminError> parse_admin_command(
    std::string_view line, const std::optional<std::string>& required_token) {
  thread_local dom::parser parser;
  const simdjson::padded_string padded(line);
  dom::element root;
  const simdjson::error_code parse_error = parser.parse(padded).get(root);
  dom::object object;
  const bool is_object = !parse_error && root.get(object) == simdjson::SUCCESS;
  if (required_token) {
    std::string_view token;
    const bool authorized = is_object && object["token"].get(token) == simdjson::SUCCESS &&
                            constant_time_equals(token, *required_token);
    if (!authorized) return AdminError{AdminErrorKind::kUnauthorized, "unauthorized"};
  }
  if (parse_error) {
    return bad_request("invalid JSON: " +
                       describe_bad_json(line, simdjson::error_message(parse_error)));
  }
  if (!is_object) return bad_request("a command must be a JSON object such as {\"cmd\":\"stats\"}");
  std::string_view cmd;
  if (object["cmd"].get(cmd) != simdjson::SUCCESS) {
    return bad_request("missing \"cmd\" (a string such as \"stats\")");
  }
  return parse_fields(cmd, object);
}

std::string admin_error_reply(std::string_view message) {
  JsonWriter json;
  json.begin_object().field("ok", false).field("error", message).end_object();
  return json.take();
}

std::string admin_stats_reply(const engine::EngineStats& stats, const engine::ModelCard& card) {
  JsonWriter json;
  json.begin_object().field("ok", true);
  json.field("model", card.info.id).field("backend", card.backend);
  json.field("uptime_s", stats.uptime_s).field("draining", stats.draining);
  json.key("requests").begin_object();
  json.field("waiting", stats.num_waiting)
      .field("running", stats.num_running)
      .field("preempted", stats.num_preempted);
  json.end_object();
  json.key("kv_blocks").begin_object();
  json.field("total", stats.kv_blocks_total)
      .field("used", stats.kv_blocks_used)
      .field("cached", stats.kv_blocks_cached)
      .field("free", stats.kv_blocks_free)
      .field("usage_ratio", stats.kv_usage_ratio);
  json.end_object();
  json.key("prefix_cache").begin_object();
  json.field("queries", stats.prefix_cache_queries)
      .field("hits", stats.prefix_cache_hits)
      .field("hit_rate", stats.prefix_cache_hit_rate);
  json.end_object();
  json.field("tokens_per_s", stats.tokens_per_s_10s);
  write_latency(json, "step_time_ms", stats.step_time);
  write_latency(json, "ttft_ms", stats.time_to_first_token);
  const engine::StepCostStats& cost = stats.step_cost;
  json.key("step_budget").begin_object();
  json.field("max_step_ms", cost.max_step_ms)
      .field("model_usable", cost.model_usable)
      .field("predicted_ms", cost.last_predicted_ms)
      .field("actual_ms", cost.last_actual_ms)
      .field("mean_abs_error_ratio", cost.mean_abs_error_ratio)
      .field("margin", cost.planning_margin)
      .field("budgeted_steps", cost.num_time_budgeted_steps)
      .field("first_token_steps", cost.num_first_token_steps)
      .field("interrupted_steps", cost.num_interrupted_steps)
      .field("interrupted_ms", cost.interrupted_ms);
  json.key("model").begin_object();
  json.field("fixed_ms", cost.fixed_ms)
      .field("per_token_ms", cost.per_token_ms)
      .field("per_context_ms", cost.per_context_ms)
      .field("per_sampled_ms", cost.per_sampled_ms);
  json.end_object().end_object();
  const engine::SpeculativeStats& spec = stats.speculative;
  json.key("speculative").begin_object();
  json.field("drafts", spec.num_drafts)
      .field("draft_tokens", spec.num_draft_tokens)
      .field("accepted_tokens", spec.num_accepted_tokens)
      .field("acceptance_rate", spec.acceptance_rate());
  json.end_object();
  json.key("fairness").begin_object();
  json.field("waiting_clients", stats.num_waiting_clients)
      .field("preemptions", stats.num_fairness_preemptions);
  json.end_object();
  const engine::KvTransferStats& kv = stats.kv_transfer;
  json.key("disagg").begin_object();
  json.field("role", kv.role)
      .field("engine_id", kv.engine_id)
      .field("transport", kv.transport)
      .field("peers", kv.num_peers)
      .field("leases_held", kv.num_leases)
      .field("leases_expired", kv.num_leases_expired)
      .field("transfers_in_flight", kv.num_pulls_in_flight)
      .field("transfers_ok", kv.num_pulls_ok)
      .field("transfers_failed", kv.num_pulls_failed)
      .field("bytes_pulled", kv.bytes_pulled)
      .field("remote_prefills", kv.num_remote_prefills)
      .field("fallbacks", kv.num_remote_prefill_fallbacks + kv.num_kv_pull_fallbacks);
  json.end_object();
  json.key("totals").begin_object();
  json.field("finished", stats.num_requests_finished)
      .field("refused", stats.num_requests_refused)
      .field("preemptions", stats.num_preemptions)
      .field("prompt_tokens", stats.prompt_tokens_total)
      .field("generation_tokens", stats.generation_tokens_total)
      .field("steps", stats.num_steps);
  json.end_object();
  json.end_object();
  return json.take();
}

std::string admin_requests_reply(const std::vector<engine::RequestInfo>& requests) {
  JsonWriter json;
  json.begin_object().field("ok", true).key("requests").begin_array();
  for (const engine::RequestInfo& r : requests) {
    json.begin_object();
    json.field("id", r.request_id)
        .field("client_label", r.client_label)
        .field("client", r.client)
        .field("origin", engine::to_string(r.origin))
        .field("phase", engine::to_string(r.phase))
        .field("priority", to_string(r.priority))
        .field("prompt_tokens", r.prompt_tokens)
        .field("generated_tokens", r.generated_tokens)
        .field("age_ms", r.age_ms);
    json.end_object();
  }
  json.end_array().end_object();
  return json.take();
}

AdminOutcome execute_admin_command(const AdminCommand& command, engine::Engine& engine) {
  struct Visitor {
    engine::Engine& engine;

    AdminOutcome operator()(const AdminStats&) const {
      return {admin_stats_reply(engine.stats(), engine.model_card())};
    }
    AdminOutcome operator()(const AdminWatch&) const {
      // The server streams watch itself; answering it here would be a bug in the caller.
      return {admin_error_reply("watch is a stream and cannot be executed as one reply")};
    }
    AdminOutcome operator()(const AdminRequests&) const {
      return {admin_requests_reply(engine.requests())};
    }
    AdminOutcome operator()(const AdminCancel& cancel) const {
      // NOTE: "was live" is read from the published snapshot just before cancelling; a request
      // that finishes in between is reported live and its cancel is a no-op (Engine::cancel is
      // idempotent and ignores unknown ids).
      bool was_live = false;
      for (const engine::RequestInfo& r : engine.requests()) {
        if (r.request_id == cancel.request_id) was_live = true;
      }
      engine.cancel(cancel.request_id);
      spdlog::info("admin: cancel request {} ({})", cancel.request_id,
                   was_live ? "live" : "not live");
      JsonWriter json;
      json.begin_object().field("ok", true).field("id", cancel.request_id);
      json.field("was_live", was_live).end_object();
      return {json.take()};
    }
    AdminOutcome operator()(const AdminDrain&) const {
      spdlog::info("admin: drain requested");
      JsonWriter json;
      json.begin_object().field("ok", true).field("draining", true).end_object();
      return {json.take(), true};
    }
    AdminOutcome operator()(const AdminLogLevel& log_level) const {
      const std::string previous(spdlog::level::to_string_view(spdlog::get_level()).data(),
                                 spdlog::level::to_string_view(spdlog::get_level()).size());
      const spdlog::level::level_enum level = spdlog::level::from_str(log_level.level);
      spdlog::set_level(level);
      spdlog::info("admin: log level {} -> {}", previous, spdlog::level::to_string_view(level));
      JsonWriter json;
      json.begin_object().field("ok", true);
      const auto name = spdlog::level::to_string_view(level);
      json.field("level", std::string_view(name.data(), name.size()));
      json.field("previous", previous).end_object();
      return {json.take()};
    }
    AdminOutcome operator()(const AdminFlushPrefixCache&) const {
      const int64_t num_freed = engine.flush_prefix_cache();
      spdlog::info("admin: flushed the prefix cache ({} blocks freed)", num_freed);
      JsonWriter json;
      json.begin_object().field("ok", true).field("blocks_freed", num_freed).end_object();
      return {json.take()};
    }
  };
  return std::visit(Visitor{engine}, command);
}

}  // namespace troupe::net
