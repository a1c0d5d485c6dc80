#include "app/cli.hpp"

#include <functional>
#include <map>

#include <fmt/format.h>

#include "app/settings.hpp"

namespace troupe::app {
namespace {

std::variant<Command, UsageError> parse_serve(const std::vector<std::string>& args, size_t first) {
  ServeOptions options;
  for (size_t i = first; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    if (flag == "--help" || flag == "-h") return Command{HelpCommand{"serve"}};
    const Setting* setting = setting_by_flag(flag);
    if (flag != "--config" && flag != "--set" && setting == nullptr) {
      return UsageError{fmt::format("serve: unknown option '{}'", args[i])};
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return UsageError{fmt::format("serve: {} needs a value", flag)};
      inline_value = args[++i];
    }
    if (flag == "--config") {
      options.config_path = *inline_value;
    } else if (flag == "--set") {
      const size_t eq = inline_value->find('=');
      const std::string key = inline_value->substr(0, eq);
      if (eq == std::string::npos || setting_by_key(key) == nullptr) {
        return UsageError{
            fmt::format("serve: --set {}: expected KEY=VALUE with a setting's key "
                        "(troupe help settings lists them)",
                        *inline_value)};
      }
      options.settings.push_back({"--set " + key, key, "", inline_value->substr(eq + 1)});
    } else {
      options.settings.push_back({flag, setting->key, setting->flag, *inline_value});
    }
  }
  return Command{ServeCommand{std::move(options)}};
}

std::variant<Command, UsageError> parse_generate(const std::vector<std::string>& args, size_t first) {
  GenerateOptions options;
  const std::map<std::string, std::optional<std::string> GenerateOptions::*> optional_flags = {
      {"--system", &GenerateOptions::system},      {"--max-tokens", &GenerateOptions::max_tokens},
      {"--temperature", &GenerateOptions::temperature}, {"--seed", &GenerateOptions::seed},
      {"--top-k", &GenerateOptions::top_k},        {"--top-p", &GenerateOptions::top_p},
      {"--threads", &GenerateOptions::threads},
  };
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") return Command{HelpCommand{"generate"}};
    if (flag == "--chat") {
      options.chat = true;
      continue;
    }
    if (flag == "--stats") {
      options.show_stats = true;
      continue;
    }
    if (i + 1 >= args.size()) return UsageError{fmt::format("generate: {} needs a value", flag)};
    if (flag == "--model") {
      options.model = args[++i];
    } else if (flag == "--prompt" || flag == "-p") {
      options.prompt = args[++i];
    } else if (auto it = optional_flags.find(flag); it != optional_flags.end()) {
      options.*(it->second) = args[++i];
    } else {
      return UsageError{fmt::format("generate: unknown option '{}'", flag)};
    }
  }
  return Command{GenerateCommand{std::move(options)}};
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
  if (first == "generate") return parse_generate(args, 1);
  if (first == "admin") return Command{AdminCommand{std::vector<std::string>(args.begin() + 1, args.end())}};
  return UsageError{fmt::format("unknown command '{}' (try 'troupe --help')", first)};
}

std::string usage_text() {
  return R"(troupe — an LLM inference server

Usage:
  troupe serve [options]     serve the OpenAI-compatible HTTP API (see 'troupe serve --help')
  troupe generate [options]  stream one generation to stdout (see 'troupe generate --help')
  troupe help settings       every setting of serve: key, default, flag, meaning (Markdown)
  troupe --version           print the version
  troupe --help              print this help

Exit codes: 0 success, 1 runtime failure (model cannot be loaded, port in use), 2 usage or
config error.
)";
}

std::vector<std::string> serve_flag_names() {
  std::vector<std::string> names = {"--config", "--set"};
  for (const Setting& s : settings()) {
    if (!s.flag.empty()) names.push_back(s.flag);
  }
  return names;
}

std::string serve_usage_text() {
  return "Usage: troupe serve [--config FILE] [--FLAG VALUE]... [--set KEY=VALUE]...\n\n"
         "  --config FILE              JSON config (configs/default.json); the flags override "
         "it\n" +
         settings_flags_help() +
         "\nEvery setting, its default and its bounds: troupe help settings. An unknown key, a "
         "wrong type or\na value out of bounds stops the server with exit code 2.\n";
}

std::string settings_usage_text() {
  return settings_table();
}

}  // namespace troupe::app

namespace troupe::app {

std::string generate_usage_text() {
  return R"(Usage: troupe generate --prompt TEXT [--model PATH] [--chat] [--system TEXT]
                       [--max-tokens N] [--temperature T] [--seed S] [--top-k K] [--top-p P]
                       [--threads N] [--stats]

  Streams one generation to stdout through the engine, on the CPU backend.
  --chat             wrap the prompt as a user message in the model's chat template
  --temperature T    0 is greedy (default 0.8); --top-k 40 and --top-p 0.95 by default
  --stats            print token counts, time to first token and decode speed to stderr
)";
}

}  // namespace troupe::app
