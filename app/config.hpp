// troupe's configuration: one struct per component, loaded from a JSON file (configs/*.json) and
// then overridden by command-line flags. Every key is known: an unknown key, a wrong type or a
// value out of range is a ConfigError naming the key ("http.max_body_bytes: expected an
// unsigned integer").
//
// Thread-safety: plain values, built on the main thread before anything starts.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "actors/batch/batch_actor.hpp"
#include "actors/engine/engine_config.hpp"
#include "net/admin_server.hpp"
#include "net/api_keys.hpp"
#include "actors/disagg/disagg_config.hpp"
#include "net/http_server.hpp"
#include "net/files_routes.hpp"
#include "net/openai_request.hpp"

namespace troupe::app {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LogConfig {
  std::string level = "info";  // trace|debug|info|warn|error|critical|off
  std::string pattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v";
};

// Who may use the API (issue 16; net/access_policy.hpp). Keys also come from --api-key and the
// TROUPE_API_KEY environment variable; none anywhere: every surface is open.
struct AccessConfig {
  std::vector<std::string> keys;                   // --api-key (never from the config file)
  std::optional<std::filesystem::path> keys_file;  // api.keys_file: "KEY" or "NAME:KEY" lines
  bool metrics_require_key = true;                 // api.metrics_require_key (with keys only)
  net::RateLimits default_limits;                  // api.rate_limit_rpm / _tpm: every key's
};

struct ServerConfig {
  std::filesystem::path model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string model_id;  // served name; empty => derived from the file name
  engine::BackendKind backend = engine::BackendKind::kAuto;
  std::string chat_template;  // template name; empty: detected from the model
  LogConfig log;
  net::HttpServerConfig http;   // host, port, io threads, limits, timeouts
  net::OpenAiApiConfig api;     // request defaults and limits of the OpenAI API
  AccessConfig access;          // API keys (the "api" object's keys_file, metrics_require_key)
  scheduler::SchedulerConfig scheduler = engine::EngineConfig{}.scheduler;
  engine::CpuBackendOptions cpu;
  engine::CudaBackendOptions cuda;
  engine::CacheOptions cache;  // the KV cache's format (cache.kv_dtype)
  engine::StructuredOutputOptions structured_output;  // the grammar compiler's cache and bounds
  net::AdminServerConfig admin;  // the admin socket (and the optional token-guarded TCP port)
  std::chrono::milliseconds drain_timeout{30'000};  // SIGTERM: in-flight requests may finish
  disagg::DisaggConfig disagg;   // disaggregated prefill/decode (role, prefill peers, leases)
  std::string kv_transport_tls;  // disagg.ucx_tls: UCX transports for KV pulls ("" = UCX's)
  kv_cache::KvEventsConfig kv_events;  // KV-cache events for prefix-aware routers (issue 20)
  // Durable files (issue 40): where the database and the files live, and an upload's limit.
  std::filesystem::path storage_dir = "troupe-storage";
  net::FilesConfig files;
  batch::BatchActorConfig batches;  // /v1/batches: items in flight, items per batch
};

// "host:port" or "http://host:port[/]" as --prefill-url and disagg.prefill_urls give a prefill
// server. Throws ConfigError naming `what`.
disagg::PeerAddress parse_peer_url(std::string_view text, std::string_view what);

// The engine's config from the server's.
engine::EngineConfig engine_config_of(const ServerConfig& config);
// The HTTP server's config: `http`, plus the API limits enforced by the server itself
// (api.max_stream_buffer_bytes: unsent streamed bytes before a slow client is dropped).
net::HttpServerConfig http_server_config_of(const ServerConfig& config);

// Parses a JSON config document over the defaults in `base`. Throws ConfigError.
ServerConfig parse_config(std::string_view json, ServerConfig base = {});

// Reads and parses a config file. Throws ConfigError (naming the path when it cannot be read).
ServerConfig load_config_file(const std::filesystem::path& path, ServerConfig base = {});

// The access policy of `access` plus the key in `environment_key` (TROUPE_API_KEY's value, "" when
// unset). Throws ConfigError for a malformed key or an unreadable keys file.
net::AccessPolicy access_policy_of(const AccessConfig& access, std::string_view environment_key);

// True for an address only this machine can reach (127.0.0.0/8, ::1, "localhost").
bool is_loopback_host(std::string_view host);

}  // namespace troupe::app
