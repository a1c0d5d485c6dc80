#include "app/cli.hpp"

#include <functional>
#include <map>

#include <fmt/format.h>

namespace troupe::app {
namespace {

std::variant<Command, UsageError> parse_serve(const std::vector<std::string>& args, size_t first) {
  ServeOptions options;
  const std::map<std::string, std::optional<std::string> ServeOptions::*> flags = {
      {"--config", &ServeOptions::config_path}, {"--model", &ServeOptions::model},
      {"--model-id", &ServeOptions::model_id},  {"--host", &ServeOptions::host},
      {"--port", &ServeOptions::port},          {"--backend", &ServeOptions::backend},
      {"--log-level", &ServeOptions::log_level},
  };
  for (size_t i = first; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    if (flag == "--help" || flag == "-h") return Command{HelpCommand{"serve"}};
    auto it = flags.find(flag);
    if (it == flags.end()) return UsageError{fmt::format("serve: unknown option '{}'", args[i])};
    if (!inline_value) {
      if (i + 1 >= args.size()) return UsageError{fmt::format("serve: {} needs a value", flag)};
      inline_value = args[++i];
    }
    options.*(it->second) = *inline_value;
  }
  return Command{ServeCommand{std::move(options)}};
}

}  // namespace

std::variant<Command, UsageError> parse_command_line(const std::vector<std::string>& args) {
  if (args.empty()) return Command{HelpCommand{}};
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") {
    return Command{HelpCommand{args.size() > 1 ? args[1] : ""}};
  }
  if (first == "--version" || first == "-V" || first == "version") return Command{VersionCommand{}};
  if (first == "serve") return parse_serve(args, 1);
  return UsageError{fmt::format("unknown command '{}' (try 'troupe --help')", first)};
}

std::string usage_text() {
  return R"(troupe — an LLM inference server

Usage:
  troupe serve [options]     serve the OpenAI-compatible HTTP API (see 'troupe serve --help')
  troupe --version           print the version
  troupe --help              print this help

Exit codes: 0 success, 1 runtime failure (model cannot be loaded, port in use), 2 usage or
config error.
)";
}

std::string serve_usage_text() {
  return R"(Usage: troupe serve [--config FILE] [--model PATH] [--model-id NAME] [--host H]
                    [--port P] [--backend cpu|cuda|auto] [--log-level L]

  --config FILE      JSON config (configs/default.json documents every key); flags override it
  --model PATH       GGUF model file (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --model-id NAME    name the API serves the model under (default: from the file name)
  --host H           listen address (default 127.0.0.1)
  --port P           listen port (default 8080; 0 picks a free one)
  --backend B        cpu, cuda or auto (CUDA when a device is present, else CPU)
  --log-level L      trace, debug, info, warn, error, critical or off
)";
}

}  // namespace troupe::app
