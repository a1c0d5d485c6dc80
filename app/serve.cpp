#include "app/serve.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/batch/batch_actor.hpp"
#include "actors/batch/batch_store.hpp"
#include "actors/engine/engine.hpp"
#include "actors/runtime/executor_threads.hpp"
#include "app/credential_reload.hpp"
#include "app/file_limit.hpp"
#include "app/settings.hpp"
#include "app/version.hpp"
#include "model/gguf.hpp"
#include "model/model_info.hpp"
#include "net/admin_server.hpp"
#include "net/api_routes.hpp"
#include "net/batch_item_runner.hpp"
#include "net/batches_routes.hpp"
#include "net/dashboard_routes.hpp"
#include "net/http_server.hpp"
#include "net/openai_routes.hpp"
#include "net/http_peer_client.hpp"
#include "net/server_state.hpp"
#include "net/web_page.hpp"
#include "net/ws_chat.hpp"

namespace troupe::app {
namespace {

// The command line's settings over the config file's, in the order given; a repeatable flag's
// first use replaces the file's list. Errors name the flag (or `--set KEY`).
void apply_flags(const ServeOptions& options, ServerConfig& config) {
  std::vector<const Setting*> cleared;
  for (const SettingArgument& argument : options.settings) {
    const Setting* setting =
        argument.key.empty() ? setting_by_flag(argument.flag) : setting_by_key(argument.key);
    if (setting == nullptr) throw ConfigError(fmt::format("{}: not a setting", argument.given));
    if (setting->repeatable &&
        std::find(cleared.begin(), cleared.end(), setting) == cleared.end()) {
      if (setting->clear) setting->clear(config);
      cleared.push_back(setting);
    }
    if (setting->read_text) {
      setting->read_text(config, argument.text, argument.given);
    } else {  // an object setting (speculative): its value is JSON text
      simdjson::dom::parser parser;
      simdjson::dom::element value;
      if (parser.parse(simdjson::padded_string(argument.text)).get(value) != simdjson::SUCCESS) {
        throw ConfigError(fmt::format("{}: '{}' is not JSON", argument.given, argument.text));
      }
      setting->read_json(config, value, setting->key);
    }
  }
  // A secret, so from the environment only (like TROUPE_API_KEY): the key this decode server
  // presents to prefill servers that require one.
  if (const char* key = std::getenv("TROUPE_PREFILL_API_KEY"); key != nullptr && *key != '\0') {
    config.disagg.peer_api_key = key;
  }
}

void configure_logging(const LogConfig& log) {
  spdlog::set_level(spdlog::level::from_str(log.level));
  spdlog::set_pattern(log.pattern);
}

// Says who may use the API; warns when anyone on the network may (issue 16). Never logs a key.
void log_access(const net::AccessPolicy& access, const ServerConfig& config) {
  if (access.keys_required()) {
    spdlog::info("API keys: {} configured; /v1/*, /tokenize, /detokenize and the WebSocket chat "
                 "need one{}",
                 access.num_keys(), config.access.metrics_require_key ? ", /metrics too" : "");
    return;
  }
  if (is_loopback_host(config.http.host)) return;
  spdlog::warn("listening on {} with no API key: anyone who can reach this port can run "
               "generations, fill the queue and read /metrics; set one with --api-key KEY "
               "(or api.keys_file, or the TROUPE_API_KEY environment variable)",
               config.http.host);
}

}  // namespace

ServerConfig resolve_config(const ServeOptions& options) {
  ServerConfig config;
  if (options.config_path) config = load_config_file(*options.config_path);
  apply_flags(options, config);
  if (!std::filesystem::exists(config.model)) {
    throw ConfigError(fmt::format("model: file not found: {}", config.model.string()));
  }
  return config;
}

namespace {

// $TROUPE_API_KEY as it is at start (a reload reads the keys file again, not the environment).
std::string environment_api_key() {
  const char* key = std::getenv("TROUPE_API_KEY");
  return key != nullptr ? key : "";
}

// Who may use the API, from the config, the flags and $TROUPE_API_KEY. Throws ConfigError.
std::shared_ptr<const net::AccessPolicy> resolve_access(const ServerConfig& config) {
  return std::make_shared<const net::AccessPolicy>(
      access_policy_of(config.access, environment_api_key()));
}

// What must hold before the model loads: a usable certificate, enough file descriptors.
// False when the server cannot start (logged).
bool check_the_host(const ServerConfig& config) {
  try {
    net::HttpServer::check_tls(config.http);
  } catch (const net::TlsConfigError& e) {
    spdlog::error("{}", e.what());
    return false;
  }
  // Before any thread starts: every HTTP connection holds a descriptor (http.max_connections).
  const OpenFileLimit file_limit = raise_open_file_limit();
  if (file_limit.error != 0) {
    spdlog::warn("{}", describe(file_limit));
  } else {
    spdlog::info("{}", describe(file_limit));
  }
  return true;
}

// The engine (model, backend, actors); nullptr when the model cannot be served (logged).
std::unique_ptr<engine::Engine> start_engine(const ServerConfig& config) {
  try {
    std::shared_ptr<disagg::PeerClient> peers;
    if (config.disagg.role != disagg::Role::kCombined) {
      net::PeerClientConfig peer_config;
      peer_config.api_key = config.disagg.peer_api_key;
      peers = std::make_shared<net::HttpPeerClient>(peer_config);
    }
    return engine::Engine::start(engine_config_of(config), peers);
  } catch (const std::exception& e) {
    spdlog::error("cannot load model: {}", e.what());
    return nullptr;
  }
}

// The admin socket (stats, cancel, drain, ...): its drain command stops `signals_io`, which
// then drains like SIGTERM does. A socket path on the command line asks for the socket even
// where the file turned it off. False when a path the operator chose cannot be used (logged);
// the default path may be taken by another server, which only warns.
bool start_admin(const ServerConfig& config, const ServeOptions& options, engine::Engine& engine,
                 boost::asio::io_context& signals_io, net::AdminSources sources,
                 std::unique_ptr<net::AdminServer>& admin) {
  const bool socket_asked =
      std::any_of(options.settings.begin(), options.settings.end(),
                  [](const SettingArgument& a) { return a.key == "admin.socket_path"; });
  if (!config.admin.enabled && !socket_asked) return true;
  admin = std::make_unique<net::AdminServer>(
      config.admin, engine,
      [&signals_io] {
        spdlog::info("drain requested on the admin socket");
        signals_io.stop();
      },
      std::move(sources));
  try {
    admin->start();
  } catch (const std::exception& e) {
    admin.reset();
    if (!config.admin.socket_path.empty()) {
      spdlog::error("{}", e.what());
      return false;
    }
    spdlog::warn("no admin socket: {}", e.what());
  }
  return true;
}

// The durable stores (issue 40) and the batch actor on a thread of its own (it blocks on fsync).
struct Storage {
  std::shared_ptr<batch::FileStore> files;
  std::shared_ptr<batch::BatchStore> batches;
  std::unique_ptr<actors::runtime::ExecutorThreads> batch_thread;
  std::shared_ptr<batch::BatchActor> batch_actor;

  // What `troupe admin batches` shows.
  net::AdminBatchesSource admin_view() const {
    return [batches = batches, actor = std::weak_ptr(batch_actor)] {
      net::AdminBatchesView view;
      view.batches = batches->recent(20);
      if (auto live = actor.lock()) view.stats = live->stats();
      return view;
    };
  }
  // Stops feeding batch items to the engine (it is about to drain).
  void stop_feeding() {
    if (batch_actor) batch_actor->stop_feeding();
  }
  // After the engine drained: the completions it delivered are committed, then the actor ends.
  void shut_down() {
    if (!batch_actor) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    const actors::runtime::ShutdownOutcome outcome = batch_actor->shutdown(deadline);
    if (outcome != actors::runtime::ShutdownOutcome::kDrained) {
      spdlog::warn("batch actor: {} ({})", actors::runtime::to_string(outcome),
                   batch_actor->lifecycle().failure());
    }
    batch_thread->join(deadline + std::chrono::seconds(2));
  }
};

// The HTTP server with every route and the WebSocket chat (not started); the batch actor started.
std::unique_ptr<net::HttpServer> make_http_server(
    const ServerConfig& config, engine::Engine& engine, net::ServerState& state,
    std::shared_ptr<const net::AccessPolicy> access,
    const std::shared_ptr<net::ServingMetrics>& serving_metrics, Storage& storage) {
  auto router = std::make_shared<net::Router>();
  net::add_info_routes(*router, state);
  serving_metrics->rate_limits.set_limits(access->key_limits(), net::steady_now_s());
  auto openai = net::add_openai_routes(*router, engine, state, config.api, serving_metrics);
  net::add_files_routes(*router, engine, storage.files, config.files);
  storage.batch_thread = std::make_unique<actors::runtime::ExecutorThreads>("batch", 1);
  storage.batch_actor = std::make_shared<batch::BatchActor>(
      storage.batches, storage.files, std::make_shared<net::OpenAiItemRunner>(openai), config.batches,
      [] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
      },
      [&engine] {
        const engine::EngineStats stats = engine.stats();
        return static_cast<int64_t>(stats.num_running) + stats.num_waiting;
      });
  storage.batch_actor->start(storage.batch_thread->executor());
  serving_metrics->set_batch_stats([actor = std::weak_ptr(storage.batch_actor)] {
    auto live = actor.lock();
    return live ? live->stats() : batch::BatchStats{};
  });
  net::add_batches_routes(*router, engine, storage.files, storage.batches, storage.batch_actor);
  net::add_web_page_routes(*router);
  net::add_dashboard_routes(*router, engine, serving_metrics);
  auto server =
      std::make_unique<net::HttpServer>(http_server_config_of(config), router, state.connections);
  server->set_access_policy(std::move(access));
  net::WsChatConfig ws_chat;
  ws_chat.api = config.api;
  // One limit for every streaming surface: a WebSocket reader that slow is dropped too.
  ws_chat.max_pending_bytes = config.api.max_stream_buffer_bytes;
  ws_chat.served_model_id = state.model.id;
  server->add_websocket_route("/v1/chat/ws",
                              net::ws_chat_factory(engine, ws_chat, serving_metrics));
  return server;
}

// Re-reads the credentials on every SIGHUP until `signals_io` stops.
void reload_on_sighup(boost::asio::signal_set& hangups, CredentialReloader& reloader) {
  hangups.async_wait([&hangups, &reloader](const boost::system::error_code& ec, int) {
    if (ec) return;  // cancelled: shutting down
    spdlog::info("received SIGHUP: reloading the API keys and the TLS certificate");
    (void)reloader.reload();
    reload_on_sighup(hangups, reloader);
  });
}

// Waits for SIGINT/SIGTERM (or the admin's drain, which stops `signals_io`), reloading the
// credentials on SIGHUP meanwhile, then drains: new requests get 503, in-flight ones finish (up
// to drain_timeout), then the listener stops and the engine shuts down. WebSocket sessions close
// with 1001 as soon as their own generations have ended (idle ones at once), while the engine
// still drains; new upgrades get 503.
void serve_until_stopped(const ServerConfig& config, boost::asio::io_context& signals_io,
                         net::ServerState& state, net::HttpServer& server, engine::Engine& engine,
                         Storage& storage, CredentialReloader& reloader) {
  boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal_number) {
    if (ec) return;
    spdlog::info("received signal {}, shutting down", signal_number);
    signals_io.stop();  // the SIGHUP wait would keep run() going
  });
  boost::asio::signal_set hangups(signals_io, SIGHUP);
  reload_on_sighup(hangups, reloader);
  signals_io.run();
  state.phase.store(net::ServerPhase::kDraining, std::memory_order_release);
  server.begin_shutdown();
  storage.stop_feeding();  // batch items in flight finish; no new ones start
  spdlog::info("draining: new requests get 503; in-flight ones have {} ms to finish",
               config.drain_timeout.count());
  if (!engine.drain(config.drain_timeout)) {
    spdlog::warn("drain timed out after {} ms; cancelled what was left", config.drain_timeout.count());
  }
  storage.shut_down();  // unfinished batch items stay pending in the database for the restart
  server.stop();
}

}  // namespace

// Resolve the configuration (exit 2), load the model and start the actors (exit 1), wire the
// admin socket and the HTTP server, serve until a stop signal, drain.
int run_serve(const ServeOptions& options) {
  // A peer that goes away while we write to it (an HTTP client, a P/D peer, an admin client)
  // must cost a write error on that connection, never the process: Asio sends with
  // MSG_NOSIGNAL, but not every library this process links does.
  std::signal(SIGPIPE, SIG_IGN);
  ServerConfig config;
  std::shared_ptr<const net::AccessPolicy> access;
  try {
    config = resolve_config(options);
    access = resolve_access(config);
  } catch (const ConfigError& e) {
    std::cerr << "troupe: " << e.what() << "\n";
    return 2;
  }
  configure_logging(config.log);
  spdlog::info("troupe {} starting", kVersionString);
  if (!check_the_host(config)) return 2;

  auto state = std::make_unique<net::ServerState>();
  state->created_unix_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
  // Before the model loads: a server that cannot keep files fails at once, naming storage.dir.
  Storage storage;
  try {
    storage.files = batch::FileStore::open(config.storage_dir);
    storage.batches = batch::BatchStore::open(storage.files);
  } catch (const batch::StorageOpenError& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  std::unique_ptr<engine::Engine> engine = start_engine(config);
  if (!engine) return 1;
  state->api_key_required.store(access->keys_required(), std::memory_order_release);
  state->model = engine->model_card().info;
  state->backend = engine->model_card().backend;
  state->kv = engine->model_card().kv;
  const model::ModelInfo& m = state->model;
  spdlog::info("model {}: {} ({} layers, context {}, {} parameters, {})", m.id, m.architecture,
               m.num_layers, m.context_length, m.num_parameters, m.quantization);

  boost::asio::io_context signals_io;
  // One set of request counters and key limits for every surface: /metrics counts WebSocket
  // chats too, and a key's requests per minute span HTTP, WebSocket and batch items.
  auto serving_metrics = std::make_shared<net::ServingMetrics>();
  std::unique_ptr<net::HttpServer> server =
      make_http_server(config, *engine, *state, access, serving_metrics, storage);
  CredentialReloader reloader(config.access, environment_api_key(), access, *server, *state,
                              serving_metrics->rate_limits);
  std::unique_ptr<net::AdminServer> admin;
  net::AdminSources admin_sources{
      .batches = storage.admin_view(),
      .reload = [&reloader] { return reloader.reload(); },
      .keys = [serving_metrics] { return serving_metrics->rate_limits.usage(net::steady_now_s()); }};
  if (!start_admin(config, options, *engine, signals_io, std::move(admin_sources), admin)) {
    storage.shut_down();
    return 1;
  }
  try {
    server->start();
  } catch (const std::exception& e) {  // std::system_error (bind), TlsConfigError
    spdlog::error("{}", e.what());
    storage.shut_down();  // before the engine its items would reach goes
    return 1;
  }
  log_access(*access, config);
  state->phase.store(net::ServerPhase::kReady, std::memory_order_release);
  spdlog::info("serving {} on {}://{}:{}/ (backend {})", m.id,
               config.http.ssl_cert_file.empty() ? "http" : "https", config.http.host,
               server->port(), state->backend);

  serve_until_stopped(config, signals_io, *state, *server, *engine, storage, reloader);
  if (admin) admin->stop();
  engine.reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace troupe::app
