// Command-line parsing for the `troupe` executable. Parsing is pure (argv in, a command value or
// a usage error out) so it is tested without running anything.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "app/generate.hpp"

namespace troupe::app {

// `troupe serve` flags; each set flag overrides the same key of the config file.
struct ServeOptions {
  std::optional<std::string> config_path;
  std::optional<std::string> model;
  std::optional<std::string> model_id;
  std::optional<std::string> host;
  std::optional<std::string> port;  // validated when applied, so the error names the flag
  std::optional<std::string> backend;
  std::optional<std::string> log_level;
  std::optional<std::string> admin_socket;
  std::optional<std::string> ssl_cert;
  std::optional<std::string> ssl_key;
  std::vector<std::string> api_keys;  // --api-key, repeatable
  std::optional<std::string> role;    // --role combined|prefill|decode
  std::vector<std::string> prefill_urls;  // --prefill-url, repeatable
  std::optional<std::string> kv_transport;  // --kv-transport (UCX_TLS for KV pulls)
  // --kv-events-topic (kv_events.topic): per pod, e.g. kv@$(POD_IP)@model in a Deployment
  std::optional<std::string> kv_events_topic;
  // --advertise-host (disagg.advertise_host): per pod, e.g. $(POD_IP) in a Deployment
  std::optional<std::string> advertise_host;
};

struct HelpCommand {
  std::string topic;  // empty: general help
};
struct VersionCommand {};
struct ServeCommand {
  ServeOptions options;
};

struct GenerateCommand {
  GenerateOptions options;
};

struct AdminCommand {
  std::vector<std::string> args;
};

using Command = std::variant<HelpCommand, VersionCommand, ServeCommand, GenerateCommand, AdminCommand>;

// A usage error, printed as one line; exit code 2.
struct UsageError {
  std::string message;
};

std::variant<Command, UsageError> parse_command_line(const std::vector<std::string>& args);

std::string usage_text();
std::string serve_usage_text();
// Every option `troupe serve` accepts (the help text must name each).
std::vector<std::string> serve_flag_names();
std::string generate_usage_text();

}  // namespace troupe::app
