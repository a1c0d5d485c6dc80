#include "app/serve.hpp"

#include <charconv>
#include <chrono>
#include <csignal>
#include <iostream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/version.hpp"
#include "gpu/device_probe.hpp"
#include "model/gguf.hpp"
#include "model/model_info.hpp"
#include "net/api_routes.hpp"
#include "net/http_server.hpp"
#include "net/server_state.hpp"

namespace troupe::app {
namespace {

void apply_flags(const ServeOptions& options, ServerConfig& config) {
  if (options.model) config.model = *options.model;
  if (options.model_id) config.model_id = *options.model_id;
  if (options.host) config.http.host = *options.host;
  if (options.port) {
    unsigned port = 0;
    const std::string& text = *options.port;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port > 65535) {
      throw ConfigError(fmt::format("--port: '{}' is not a port number (0-65535)", text));
    }
    config.http.port = static_cast<uint16_t>(port);
  }
  if (options.backend) {
    const auto choice = parse_backend(*options.backend);
    if (!choice) {
      throw ConfigError(fmt::format("--backend: '{}' is not one of auto, cpu, cuda", *options.backend));
    }
    config.backend = *choice;
  }
  if (options.log_level) {
    if (!is_valid_log_level(*options.log_level)) {
      throw ConfigError(fmt::format("--log-level: '{}' is not a log level", *options.log_level));
    }
    config.log.level = *options.log_level;
  }
}

void configure_logging(const LogConfig& log) {
  spdlog::set_level(spdlog::level::from_str(log.level));
  spdlog::set_pattern(log.pattern);
}

// Which backend serves: CUDA when asked for or when `auto` finds a device, else CPU.
std::string choose_backend(BackendChoice choice) {
  const gpu::DeviceProbe probe = gpu::probe_devices();
  switch (choice) {
    case BackendChoice::kCpu: return "cpu";
    case BackendChoice::kCuda:
      if (probe.cuda_devices.empty()) {
        spdlog::warn("backend 'cuda' requested but unavailable ({}); using the CPU backend",
                     probe.cuda_status);
        return "cpu";
      }
      return "cuda";
    case BackendChoice::kAuto:
      if (probe.cuda_devices.empty()) {
        spdlog::info("no CUDA device ({}); using the CPU backend", probe.cuda_status);
        return "cpu";
      }
      return "cuda";
  }
  return "cpu";
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

int run_serve(const ServeOptions& options) {
  ServerConfig config;
  try {
    config = resolve_config(options);
  } catch (const ConfigError& e) {
    std::cerr << "troupe: " << e.what() << "\n";
    return 2;
  }
  configure_logging(config.log);
  spdlog::info("troupe {} starting", kVersionString);

  auto state = std::make_unique<net::ServerState>();
  state->created_unix_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
  try {
    const model::GgufFile file = model::GgufFile::open(config.model);
    state->model = model::read_model_info(file, config.model_id);
  } catch (const model::GgufError& e) {
    spdlog::error("cannot load model: {}", e.what());
    return 1;
  }
  const model::ModelInfo& m = state->model;
  spdlog::info("model {}: {} ({} layers, context {}, {} parameters, {})", m.id, m.architecture,
               m.num_layers, m.context_length, m.num_parameters, m.quantization);
  state->backend = choose_backend(config.backend);

  auto router = std::make_shared<net::Router>();
  net::add_info_routes(*router, *state);
  net::HttpServer server(config.http, router);
  try {
    server.start();
  } catch (const std::system_error& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  state->phase.store(net::ServerPhase::kReady, std::memory_order_release);
  spdlog::info("serving {} on http://{}:{}/ (backend {})", m.id, config.http.host, server.port(),
               state->backend);

  // The main thread only waits for a stop signal; the io threads serve.
  boost::asio::io_context signals_io;
  boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal_number) {
    if (!ec) spdlog::info("received signal {}, shutting down", signal_number);
  });
  signals_io.run();

  state->phase.store(net::ServerPhase::kDraining, std::memory_order_release);
  server.stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace troupe::app
