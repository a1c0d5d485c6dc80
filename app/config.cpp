// Config loading with simdjson's DOM: the document is small and walked once, key by key, against
// the settings list (settings.hpp), so that unknown keys are reported by their full dotted path.
#include "app/config.hpp"

#include <simdjson.h>

#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "app/settings.hpp"

namespace troupe::app {

disagg::PeerAddress parse_peer_url(std::string_view text, std::string_view what) {
  std::string_view rest = text;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  uint32_t port = 0;
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(rest.data() + colon + 1, rest.data() + rest.size(), port).ec != std::errc() ||
      port == 0 || port > 65535 || rest.substr(colon + 1).find_first_not_of("0123456789") != std::string_view::npos) {
    throw ConfigError(fmt::format("{}: '{}' is not host:port or http://host:port", what, text));
  }
  return disagg::PeerAddress{std::string(rest.substr(0, colon)), static_cast<uint16_t>(port)};
}

engine::EngineConfig engine_config_of(const ServerConfig& config) {
  engine::EngineConfig e;
  e.model_path = config.model;
  e.model_id = config.model_id;
  e.chat_template = config.chat_template;
  e.backend = config.backend;
  e.cpu = config.cpu;
  e.cuda = config.cuda;
  e.cache = config.cache;
  e.structured_output = config.structured_output;
  e.scheduler = config.scheduler;
  // A request limit of the API (429 to the client), enforced where the waiting queue lives.
  e.scheduler.max_waiting_per_client = config.api.max_waiting_per_client;
  e.max_stop_strings = config.api.max_stop_strings;
  e.disagg = config.disagg;
  e.kv_events = config.kv_events;
  // remote_host/remote_port in kv_transfer_params: how peers reach this server's HTTP.
  if (e.disagg.advertise_host.empty()) {
    const std::string& host = config.http.host;
    e.disagg.advertise_host = (host.empty() || host == "0.0.0.0" || host == "::") ? "127.0.0.1" : host;
  }
  if (e.disagg.advertise_port == 0) e.disagg.advertise_port = config.http.port;
  e.disagg.kv_listen_host = config.http.host;
  e.kv_transport_tls = config.kv_transport_tls;
  return e;
}

net::HttpServerConfig http_server_config_of(const ServerConfig& config) {
  net::HttpServerConfig http = config.http;
  http.max_stream_buffer_bytes = config.api.max_stream_buffer_bytes;
  return http;
}

net::AccessPolicy access_policy_of(const AccessConfig& access, std::string_view environment_key) {
  try {
    return net::AccessPolicy(
        net::ApiKeys::from_sources(access.keys, access.keys_file, environment_key,
                                   access.default_limits),
        access.metrics_require_key);
  } catch (const net::ApiKeyError& e) {
    throw ConfigError(e.what());
  }
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return host.starts_with("127.");
}

ServerConfig parse_config(std::string_view json, ServerConfig base) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (auto error = parser.parse(padded).get(root); error != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("config: invalid JSON: {}", simdjson::error_message(error)));
  }
  ServerConfig config = std::move(base);
  read_settings_object(config, root, "");
  return config;
}

ServerConfig load_config_file(const std::filesystem::path& path, ServerConfig base) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read config file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_config(text.str(), std::move(base));
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

}  // namespace troupe::app
