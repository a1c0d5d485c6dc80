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

// One setting given on the command line (settings.hpp): a flag of its own, or `--set KEY=VALUE`.
struct SettingArgument {
  std::string given;  // as written, for errors: "--port" or "--set scheduler.max_step_ms"
  std::string key;    // the setting's config key ("" for a flag-only setting such as --api-key)
  std::string flag;   // the setting's flag ("" when given with --set)
  std::string text;   // its value, validated when applied (resolve_config) so errors name `given`
};

// `troupe serve`'s command line: an optional config file, then settings that override it, in
// the order given.
struct ServeOptions {
  std::optional<std::string> config_path;
  std::vector<SettingArgument> settings;
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
// `troupe help settings`: every setting, as the README's table.
std::string settings_usage_text();
std::string generate_usage_text();

}  // namespace troupe::app
