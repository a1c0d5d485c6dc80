// Every setting of `troupe serve`, declared once (issue 39): its dotted key in the JSON config,
// its command-line flag when it has one, its bounds, its help line, and where in ServerConfig it
// lives. The config-file reader (config.cpp), the flags (cli.cpp, serve.cpp), `troupe serve
// --help`, `troupe help settings` (the README's settings table, which a test compares) and the
// error messages all come from this one list. A default is ServerConfig's own member initializer
// (one value, in the struct); the list shows it from a default-constructed ServerConfig.
//
// Every setting also has a flag-free form on the command line: `--set KEY=VALUE`.
//
// Thread-safety: settings() builds the list once (a function-local static); read-only after.
#pragma once

#include <simdjson.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "app/config.hpp"

namespace troupe::app {

struct Setting {
  // "scheduler.max_step_ms"; empty for a flag-only setting (an API key is never read from the
  // config file).
  std::string key;
  std::string flag;   // "--port"; empty: none of its own (`--set KEY=VALUE` reaches it)
  std::string value;  // what a value looks like ("0..65535", "true|false", "auto|cpu|cuda", "text")
  std::string help;   // one line of Markdown
  // Each use of the flag adds a value; the first use replaces the config file's list.
  bool repeatable = false;

  // Reads the JSON value found at `where` into `config`. Throws ConfigError naming `where`.
  std::function<void(ServerConfig& config, simdjson::dom::element value, const std::string& where)>
      read_json;
  // Reads a command-line value (or one use of a repeatable flag). Throws ConfigError naming
  // `where` (the flag).
  std::function<void(ServerConfig& config, std::string_view text, const std::string& where)>
      read_text;
  // Repeatable settings: empties the list before the command line's first value.
  std::function<void(ServerConfig& config)> clear;
  // The value in `config`, as the README's table shows it.
  std::function<std::string(const ServerConfig& config)> show;
};

// In the order the README lists them.
const std::vector<Setting>& settings();
const Setting* setting_by_key(std::string_view key);
const Setting* setting_by_flag(std::string_view flag);
// True when `prefix` names an object of the config: some setting's key starts with "prefix.".
bool is_settings_object(std::string_view prefix);

// Reads a whole JSON config document's object at `prefix` ("" for the root) over `config`: every
// key must be a setting or an object of settings. Throws ConfigError naming the first bad key.
void read_settings_object(ServerConfig& config, simdjson::dom::element value,
                          const std::string& prefix);

// The README's settings table (Markdown), from the list and ServerConfig's defaults.
std::string settings_table();

// `troupe serve --help`'s list of flags (and `--set`), one or two lines each.
std::string settings_flags_help();

}  // namespace troupe::app
