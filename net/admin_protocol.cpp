// Admin command parsing (simdjson) and reply formatting (JsonWriter). See admin_protocol.hpp.
#include "net/admin_protocol.hpp"

#include <simdjson.h>

#include <charconv>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/api_routes.hpp"
#include "net/json_input.hpp"
#include "net/json_writer.hpp"
#include "net/stats_schema.hpp"

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
  if (cmd == "batches") return AdminCommand{AdminBatches{}};
  if (cmd == "reload") return AdminCommand{AdminReload{}};
  if (cmd == "keys") return AdminCommand{AdminKeys{}};
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
      "unknown command '{}' (stats, watch, requests, cancel, drain, log_level, "
      "flush_prefix_cache, batches, reload, keys)",
      cmd));
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
  write_kv_capacity(json, card.kv);
  // Every schema stat with a JSON path (stats_schema.hpp), nesting objects by the path's dots:
  // the schema lists the stats of one object together.
  std::vector<std::string_view> open;  // the objects open now, outermost first
  for (const Stat& stat : engine_stats_schema()) {
    if (stat.json.empty()) continue;
    std::vector<std::string_view> path;
    for (size_t from = 0;;) {
      const size_t dot = stat.json.find('.', from);
      path.push_back(stat.json.substr(
          from, dot == std::string_view::npos ? std::string_view::npos : dot - from));
      if (dot == std::string_view::npos) break;
      from = dot + 1;
    }
    size_t common = 0;
    while (common < open.size() && common + 1 < path.size() && open[common] == path[common])
      ++common;
    for (; open.size() > common; open.pop_back()) json.end_object();
    for (; open.size() + 1 < path.size(); open.push_back(path[open.size()]))
      json.key(path[open.size()]).begin_object();
    json.key(path.back());
    switch (stat.kind) {
      case StatKind::kText: json.value(stat.text(stats)); break;
      case StatKind::kFlag: json.value(stat.value(stats) != 0); break;
      case StatKind::kCounter: json.value(static_cast<uint64_t>(stat.value(stats))); break;
      case StatKind::kGauge: json.value(stat.value(stats)); break;
    }
  }
  for (; !open.empty(); open.pop_back()) json.end_object();
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

std::string admin_batches_reply(const AdminBatchesView& view) {
  JsonWriter json;
  json.begin_object().field("ok", true).key("items").begin_object();
  json.field("succeeded", view.stats.items_succeeded).field("failed", view.stats.items_failed);
  json.field("in_flight", view.stats.items_in_flight).field("queued", view.stats.items_queued);
  json.end_object().field("live_batches", view.stats.live_batches).key("batches").begin_array();
  for (const batch::BatchRecord& b : view.batches) {
    json.begin_object().field("id", b.id).field("owner", b.owner).field("status", batch::to_string(b.status));
    json.field("endpoint", b.endpoint).field("total", b.total).field("completed", b.completed);
    json.field("failed", b.failed).field("created_at", b.created_at).end_object();
  }
  json.end_array().end_object();
  return json.take();
}

std::string admin_reload_reply(const std::vector<ReloadPart>& parts) {
  bool all_ok = true;
  for (const ReloadPart& part : parts) all_ok = all_ok && part.ok;
  JsonWriter json;
  json.begin_object().field("ok", all_ok).key("reloaded").begin_array();
  for (const ReloadPart& part : parts) {
    json.begin_object().field("what", part.what).field("ok", part.ok);
    json.field("detail", part.detail).end_object();
  }
  json.end_array().end_object();
  return json.take();
}

std::string admin_keys_reply(const std::vector<KeyUsage>& keys) {
  JsonWriter json;
  json.begin_object().field("ok", true).key("keys").begin_array();
  for (const KeyUsage& k : keys) {
    const RateLimitStatus& s = k.status;
    json.begin_object().field("name", k.name);
    json.field("rpm", s.limits.requests_per_minute).field("tpm", s.limits.tokens_per_minute);
    json.field("remaining_requests", s.remaining_requests);
    json.field("remaining_tokens", s.remaining_tokens);
    json.field("reset_requests_s", s.reset_requests_s).field("reset_tokens_s", s.reset_tokens_s);
    json.field("requests", k.requests).field("tokens", k.tokens).field("refused", k.refused);
    json.end_object();
  }
  json.end_array().end_object();
  return json.take();
}

AdminOutcome execute_admin_command(const AdminCommand& command, engine::Engine& engine,
                                   const AdminSources& sources) {
  struct Visitor {
    engine::Engine& engine;
    const AdminSources& sources;

    AdminOutcome operator()(const AdminBatches&) const {
      if (!sources.batches) return {admin_error_reply("this server keeps no batches")};
      return {admin_batches_reply(sources.batches())};
    }
    AdminOutcome operator()(const AdminKeys&) const {
      if (!sources.keys) return {admin_error_reply("this server has no API keys")};
      return {admin_keys_reply(sources.keys())};
    }
    AdminOutcome operator()(const AdminReload&) const {
      if (!sources.reload) return {admin_error_reply("this server has nothing to reload")};
      spdlog::info("admin: reload requested");
      return {admin_reload_reply(sources.reload())};
    }

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
  return std::visit(Visitor{engine, sources}, command);
}

}  // namespace troupe::net
