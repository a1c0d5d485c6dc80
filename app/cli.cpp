#include "app/cli.hpp"

#include <functional>
#include <map>

#include <fmt/format.h>

namespace troupe::app {
namespace {

using ServeFlags = std::map<std::string, std::optional<std::string> ServeOptions::*>;

// Flags that may be given more than once; each adds a value.
using RepeatedServeFlags = std::map<std::string, std::vector<std::string> ServeOptions::*>;

const RepeatedServeFlags& repeated_serve_flags() {
  static const RepeatedServeFlags flags = {{"--api-key", &ServeOptions::api_keys},
                                           {"--prefill-url", &ServeOptions::prefill_urls}};
  return flags;
}

const ServeFlags& serve_flags() {
  static const ServeFlags flags = {
      {"--config", &ServeOptions::config_path}, {"--model", &ServeOptions::model},
      {"--model-id", &ServeOptions::model_id},  {"--host", &ServeOptions::host},
      {"--port", &ServeOptions::port},          {"--backend", &ServeOptions::backend},
      {"--log-level", &ServeOptions::log_level},
      {"--admin-socket", &ServeOptions::admin_socket},
      {"--ssl-cert", &ServeOptions::ssl_cert},  {"--ssl-key", &ServeOptions::ssl_key},
      {"--role", &ServeOptions::role},          {"--kv-transport", &ServeOptions::kv_transport},
      {"--kv-events-topic", &ServeOptions::kv_events_topic},
      {"--advertise-host", &ServeOptions::advertise_host},
  };
  return flags;
}

std::variant<Command, UsageError> parse_serve(const std::vector<std::string>& args, size_t first) {
  ServeOptions options;
  const ServeFlags& flags = serve_flags();
  for (size_t i = first; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    if (flag == "--help" || flag == "-h") return Command{HelpCommand{"serve"}};
    auto it = flags.find(flag);
    auto repeated = repeated_serve_flags().find(flag);
    if (it == flags.end() && repeated == repeated_serve_flags().end()) {
      return UsageError{fmt::format("serve: unknown option '{}'", args[i])};
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return UsageError{fmt::format("serve: {} needs a value", flag)};
      inline_value = args[++i];
    }
    if (it != flags.end()) {
      options.*(it->second) = *inline_value;
    } else {
      (options.*(repeated->second)).push_back(*inline_value);
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
  troupe --version           print the version
  troupe --help              print this help

Exit codes: 0 success, 1 runtime failure (model cannot be loaded, port in use), 2 usage or
config error.
)";
}

std::vector<std::string> serve_flag_names() {
  std::vector<std::string> names;
  for (const auto& [name, member] : serve_flags()) names.push_back(name);
  for (const auto& [name, member] : repeated_serve_flags()) names.push_back(name);
  return names;
}

std::string serve_usage_text() {
  return R"(Usage: troupe serve [--config FILE] [--model PATH] [--model-id NAME] [--host H]
                    [--port P] [--backend cpu|cuda|auto] [--log-level L]
                    [--admin-socket PATH] [--api-key KEY]...
                    [--ssl-cert FILE --ssl-key FILE]

  --config FILE      JSON config (configs/default.json documents every key); flags override it
  --model PATH       GGUF model file (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --model-id NAME    name the API serves the model under (default: from the file name)
  --host H           listen address (default 127.0.0.1)
  --port P           listen port (default 8080; 0 picks a free one)
  --backend B        cpu, cuda or auto: auto takes CUDA when a device is present and every
                     weight type of the model is proven on a GPU (gpu/cuda_proven_types.cpp),
                     else the CPU; cuda refuses a model with an unproven type, naming it
  --log-level L      trace, debug, info, warn, error, critical or off
  --admin-socket P   the admin Unix socket (default $XDG_RUNTIME_DIR/troupe.sock, else
                     /tmp/troupe-$UID/troupe.sock); `troupe admin --socket P` talks to it
  --api-key KEY      require `Authorization: Bearer KEY` on /v1/*, /tokenize, /detokenize, the
                     WebSocket chat and (api.metrics_require_key) /metrics; repeatable. Keys
                     also come from api.keys_file ("NAME:KEY" lines) and $TROUPE_API_KEY
  --ssl-cert FILE    serve HTTPS and wss:// with this PEM certificate (chain); needs --ssl-key
  --ssl-key FILE     the certificate's PEM private key (http.ssl_cert_file/ssl_key_file)
  --role ROLE        combined (default), prefill or decode: disaggregated prefill/decode
                     (disagg.role; KV moves between servers over UCX)
  --prefill-url URL  decode role: a prefill server (host:port), repeatable (disagg.prefill_urls)
  --kv-transport T   UCX transports for KV pulls, e.g. tcp or posix,cma (disagg.ucx_tls)
  --kv-events-topic T  first frame of each KV-event message (kv_events.topic)
  --advertise-host H   prefill role: the address decode servers pull KV from (disagg.advertise_host)
)";
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
