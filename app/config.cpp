// Config loading with simdjson's DOM: the document is small and walked once, key by key, so
// that unknown keys can be reported by their full dotted path.
#include "app/config.hpp"

#include <charconv>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <simdjson.h>

namespace troupe::app {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Dispatches each key of a JSON object to a reader; an unknown key is an error naming its path.
class ObjectReader {
 public:
  using Reader = std::function<void(element, const std::string& path)>;

  ObjectReader(std::string prefix) : prefix_(std::move(prefix)) {}

  ObjectReader& on(std::string key, Reader reader) {
    readers_.emplace(std::move(key), std::move(reader));
    return *this;
  }

  void read(element value) const {
    object obj;
    if (value.get_object().get(obj) != simdjson::SUCCESS) {
      throw ConfigError(fmt::format("{}: expected an object", prefix_.empty() ? "config" : prefix_));
    }
    for (auto [key, field] : obj) {
      const std::string path = prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
      auto it = readers_.find(std::string(key));
      if (it == readers_.end()) throw ConfigError(fmt::format("{}: unknown config key", path));
      it->second(field, path);
    }
  }

 private:
  std::string prefix_;
  std::map<std::string, Reader, std::less<>> readers_;
};

std::string read_string(element value, const std::string& path) {
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected a string", path));
  }
  return std::string(text);
}

uint64_t read_uint(element value, const std::string& path, uint64_t min, uint64_t max) {
  uint64_t number = 0;
  if (value.get_uint64().get(number) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected an unsigned integer", path));
  }
  if (number < min || number > max) {
    throw ConfigError(fmt::format("{}: {} is outside [{}, {}]", path, number, min, max));
  }
  return number;
}

ObjectReader log_reader(LogConfig& log) {
  ObjectReader reader("log");
  reader.on("level", [&log](element v, const std::string& path) {
    log.level = read_string(v, path);
    if (!is_valid_log_level(log.level)) {
      throw ConfigError(fmt::format("{}: '{}' is not a log level (trace, debug, info, warn, "
                                    "error, critical, off)", path, log.level));
    }
  });
  reader.on("pattern", [&log](element v, const std::string& path) {
    log.pattern = read_string(v, path);
  });
  return reader;
}

ObjectReader http_reader(net::HttpServerConfig& http) {
  using std::chrono::milliseconds;
  ObjectReader reader("http");
  reader.on("host", [&http](element v, const std::string& p) { http.host = read_string(v, p); });
  reader.on("port", [&http](element v, const std::string& p) {
    http.port = static_cast<uint16_t>(read_uint(v, p, 0, 65535));
  });
  reader.on("io_threads", [&http](element v, const std::string& p) {
    http.io_threads = static_cast<int>(read_uint(v, p, 1, 256));
  });
  reader.on("max_body_bytes", [&http](element v, const std::string& p) {
    http.max_body_bytes = read_uint(v, p, 1024, uint64_t{1} << 32);
  });
  reader.on("max_header_bytes", [&http](element v, const std::string& p) {
    http.max_header_bytes = static_cast<uint32_t>(read_uint(v, p, 1024, 1u << 24));
  });
  reader.on("max_connections", [&http](element v, const std::string& p) {
    http.max_connections = static_cast<int>(read_uint(v, p, 1, 1'000'000));
  });
  reader.on("read_timeout_ms", [&http](element v, const std::string& p) {
    http.read_timeout = milliseconds(read_uint(v, p, 1, 3'600'000));
  });
  reader.on("keep_alive_timeout_ms", [&http](element v, const std::string& p) {
    http.keep_alive_timeout = milliseconds(read_uint(v, p, 1, 3'600'000));
  });
  reader.on("ws_idle_timeout_ms", [&http](element v, const std::string& p) {
    http.ws_idle_timeout = milliseconds(read_uint(v, p, 1000, 86'400'000));
  });
  reader.on("ws_max_message_bytes", [&http](element v, const std::string& p) {
    http.ws_max_message_bytes = read_uint(v, p, 1024, uint64_t{1} << 30);
  });
  reader.on("ws_close_timeout_ms", [&http](element v, const std::string& p) {
    http.ws_close_timeout = milliseconds(read_uint(v, p, 10, 600'000));
  });
  reader.on("ssl_cert_file", [&http](element v, const std::string& p) {
    http.ssl_cert_file = read_string(v, p);
  });
  reader.on("ssl_key_file", [&http](element v, const std::string& p) {
    http.ssl_key_file = read_string(v, p);
  });
  reader.on("shutdown_grace_ms", [&http](element v, const std::string& p) {
    http.shutdown_grace = milliseconds(read_uint(v, p, 0, 600'000));
  });
  return reader;
}

bool read_bool(element value, const std::string& path) {
  bool flag = false;
  if (value.get_bool().get(flag) != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("{}: expected true or false", path));
  }
  return flag;
}

int32_t read_int32(element value, const std::string& path, int32_t min, int32_t max) {
  return static_cast<int32_t>(read_uint(value, path, static_cast<uint64_t>(min), static_cast<uint64_t>(max)));
}

ObjectReader scheduler_reader(scheduler::SchedulerConfig& s) {
  ObjectReader reader("scheduler");
  const auto int_field = [&reader](const char* key, int32_t& field, int32_t min, int32_t max) {
    reader.on(key, [&field, min, max](element v, const std::string& p) { field = read_int32(v, p, min, max); });
  };
  int_field("max_num_seqs", s.max_num_seqs, 1, 4096);
  int_field("max_num_batched_tokens", s.max_num_batched_tokens, 1, 1 << 20);
  int_field("chunked_prefill_size", s.chunked_prefill_size, 0, 1 << 20);
  int_field("max_model_len", s.max_model_len, 0, 1 << 24);
  int_field("max_queue", s.max_queue, 1, 1 << 20);
  int_field("block_size", s.block_size, 1, 256);
  int_field("num_blocks", s.num_blocks, 0, 1 << 24);
  reader.on("enable_prefix_caching", [&s](element v, const std::string& p) {
    s.enable_prefix_caching = read_bool(v, p);
  });
  reader.on("enable_priority_preemption", [&s](element v, const std::string& p) {
    s.enable_priority_preemption = read_bool(v, p);
  });
  reader.on("max_step_ms", [&s](element v, const std::string& p) {
    s.max_step_ms = static_cast<double>(read_uint(v, p, 0, 3'600'000));
  });
  reader.on("fairness", [&s](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto fairness = scheduler::parse_fairness(text);
    if (!fairness) throw ConfigError(fmt::format("{}: \"{}\" is not \"fifo\" or \"client\"", p, text));
    s.fairness = *fairness;
  });
  reader.on("first_token_steps", [&s](element v, const std::string& p) {
    s.first_token_steps = read_bool(v, p);
  });
  reader.on("first_token_interrupts", [&s](element v, const std::string& p) {
    s.first_token_interrupts = read_bool(v, p);
  });
  return reader;
}

// vLLM's speculative_config: "method", "num_speculative_tokens", "prompt_lookup_min",
// "prompt_lookup_max" (unset lookup bounds: 5 and 5, or the one that is set),
// "disable_by_batch_size" (0: never; unset: the engine's default, 4). The object is read whole
// each time: a later config file or flag replaces it, never half of it — so it names its method
// (the engine's default object, ngram, applies only when there is no "speculative" at all).
void read_speculative(element value, scheduler::SpeculativeConfig& spec) {
  scheduler::SpeculativeConfig read;
  std::optional<int32_t> min_n;
  std::optional<int32_t> max_n;
  bool has_method = false;
  bool has_k = false;
  ObjectReader reader("speculative");
  reader.on("method", [&read, &has_method](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto method = scheduler::parse_speculative_method(text);
    if (!method) throw ConfigError(fmt::format("{}: \"{}\" is not \"none\" or \"ngram\"", p, text));
    read.method = *method;
    has_method = true;
  });
  reader.on("num_speculative_tokens", [&read, &has_k](element v, const std::string& p) {
    read.num_speculative_tokens = read_int32(v, p, 1, scheduler::kMaxSpeculativeTokens);
    has_k = true;
  });
  reader.on("prompt_lookup_min", [&min_n](element v, const std::string& p) {
    min_n = read_int32(v, p, 1, 1024);
  });
  reader.on("prompt_lookup_max", [&max_n](element v, const std::string& p) {
    max_n = read_int32(v, p, 1, 1024);
  });
  read.disable_by_batch_size = engine::EngineConfig{}.scheduler.speculative.disable_by_batch_size;
  reader.on("disable_by_batch_size", [&read](element v, const std::string& p) {
    read.disable_by_batch_size = read_int32(v, p, 0, 1 << 20);
  });
  reader.read(value);
  if (!has_method) throw ConfigError("speculative.method: required (\"ngram\" or \"none\")");
  if (read.method == scheduler::SpeculativeMethod::kNgram && !has_k) {
    throw ConfigError("speculative.num_speculative_tokens: required with method \"ngram\"");
  }
  read.prompt_lookup_min = min_n.value_or(max_n.value_or(5));
  read.prompt_lookup_max = max_n.value_or(min_n.value_or(5));
  if (read.prompt_lookup_max < read.prompt_lookup_min) {
    throw ConfigError(fmt::format("speculative.prompt_lookup_max: {} is below prompt_lookup_min {}",
                                  read.prompt_lookup_max, read.prompt_lookup_min));
  }
  spec = read;
}

ObjectReader cpu_reader(engine::CpuBackendOptions& cpu) {
  ObjectReader reader("cpu");
  reader.on("threads", [&cpu](element v, const std::string& p) {
    cpu.num_threads = static_cast<int>(read_uint(v, p, 0, 1024));
  });
  reader.on("kv_memory_mb", [&cpu](element v, const std::string& p) {
    cpu.kv_memory_bytes = static_cast<int64_t>(read_uint(v, p, 1, 1 << 20)) << 20;
  });
  reader.on("prefill_attention", [&cpu](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto precision = gpu::cpu::parse_prefill_attention_precision(text);
    if (!precision) throw ConfigError(fmt::format("{}: \"{}\" is not \"exact\" or \"bf16\"", p, text));
    cpu.prefill_attention = *precision;
  });
  return reader;
}

ObjectReader structured_output_reader(engine::StructuredOutputOptions& so) {
  ObjectReader reader("structured_output");
  reader.on("grammar_cache_size", [&so](element v, const std::string& p) {
    so.grammar_cache_size = read_int32(v, p, 0, 1 << 16);
  });
  reader.on("max_grammar_bytes", [&so](element v, const std::string& p) {
    so.max_grammar_bytes = static_cast<int64_t>(read_uint(v, p, 1, 64 << 20));
  });
  reader.on("json_max_whitespace", [&so](element v, const std::string& p) {
    so.json_max_whitespace = read_int32(v, p, 0, 1 << 10);
  });
  reader.on("compile_threads", [&so](element v, const std::string& p) {
    so.compile_threads = read_int32(v, p, 1, 256);
  });
  return reader;
}

ObjectReader api_reader(net::OpenAiApiConfig& api, AccessConfig& access) {
  ObjectReader reader("api");
  reader.on("keys_file", [&access](element v, const std::string& p) {
    const std::string path = read_string(v, p);
    if (path.empty()) {
      access.keys_file.reset();
    } else {
      access.keys_file = path;
    }
  });
  reader.on("metrics_require_key", [&access](element v, const std::string& p) {
    access.metrics_require_key = read_bool(v, p);
  });
  reader.on("default_max_tokens", [&api](element v, const std::string& p) {
    api.default_max_tokens = read_int32(v, p, 1, 1 << 24);
  });
  reader.on("max_stop_strings", [&api](element v, const std::string& p) {
    api.max_stop_strings = read_int32(v, p, 0, 64);
  });
  reader.on("max_n", [&api](element v, const std::string& p) {
    api.max_n = read_int32(v, p, 1, 128);
  });
  reader.on("max_logit_bias_entries", [&api](element v, const std::string& p) {
    api.max_logit_bias_entries = read_int32(v, p, 0, 1 << 20);
  });
  reader.on("max_batch_items", [&api](element v, const std::string& p) {
    api.max_batch_items = read_int32(v, p, 1, 1 << 20);
  });
  reader.on("max_stream_buffer_bytes", [&api](element v, const std::string& p) {
    api.max_stream_buffer_bytes = read_uint(v, p, 1024, uint64_t{1} << 32);
  });
  reader.on("max_waiting_per_client", [&api](element v, const std::string& p) {
    api.max_waiting_per_client = read_int32(v, p, 0, 1 << 20);
  });
  return reader;
}

ObjectReader admin_reader(net::AdminServerConfig& admin) {
  ObjectReader reader("admin");
  reader.on("enabled", [&admin](element v, const std::string& p) { admin.enabled = read_bool(v, p); });
  reader.on("socket_path", [&admin](element v, const std::string& p) {
    admin.socket_path = read_string(v, p);
  });
  reader.on("max_line_bytes", [&admin](element v, const std::string& p) {
    admin.max_line_bytes = read_uint(v, p, 1024, 16u << 20);
  });
  reader.on("max_connections", [&admin](element v, const std::string& p) {
    admin.max_connections = static_cast<int>(read_uint(v, p, 1, 4096));
  });
  reader.on("idle_timeout_ms", [&admin](element v, const std::string& p) {
    admin.idle_timeout = std::chrono::milliseconds(read_uint(v, p, 1, 86'400'000));
  });
  reader.on("tcp", [&admin](element v, const std::string&) {
    ObjectReader tcp("admin.tcp");
    tcp.on("enabled", [&admin](element t, const std::string& p) { admin.tcp.enabled = read_bool(t, p); });
    tcp.on("host", [&admin](element t, const std::string& p) { admin.tcp.host = read_string(t, p); });
    tcp.on("port", [&admin](element t, const std::string& p) {
      admin.tcp.port = static_cast<uint16_t>(read_uint(t, p, 0, 65535));
    });
    tcp.on("token_file", [&admin](element t, const std::string& p) {
      admin.tcp.token_file = read_string(t, p);
    });
    tcp.read(v);
  });
  return reader;
}

}  // namespace

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

namespace {

ObjectReader disagg_reader(ServerConfig& config) {
  using std::chrono::milliseconds;
  disagg::DisaggConfig& d = config.disagg;
  ObjectReader reader("disagg");
  reader.on("role", [&d](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto role = disagg::parse_role(text);
    if (!role) throw ConfigError(fmt::format("{}: '{}' is not one of combined, prefill, decode", p, text));
    d.role = *role;
  });
  reader.on("prefill_urls", [&d](element v, const std::string& p) {
    simdjson::dom::array urls;
    if (v.get(urls) != simdjson::SUCCESS) throw ConfigError(p + ": expected an array of strings");
    d.prefill_peers.clear();
    for (element url : urls) d.prefill_peers.push_back(parse_peer_url(read_string(url, p), p));
  });
  reader.on("min_remote_prefill_tokens", [&d](element v, const std::string& p) {
    d.min_remote_prefill_tokens = read_int32(v, p, 1, 1 << 24);
  });
  reader.on("kv_lease_ms", [&d](element v, const std::string& p) {
    d.kv_lease = milliseconds(read_uint(v, p, 100, 3'600'000));
  });
  reader.on("prefill_timeout_ms", [&d](element v, const std::string& p) {
    d.prefill_timeout = milliseconds(read_uint(v, p, 100, 3'600'000));
  });
  reader.on("pull_timeout_ms", [&d](element v, const std::string& p) {
    d.pull_timeout = milliseconds(read_uint(v, p, 100, 3'600'000));
  });
  reader.on("advertise_host", [&d](element v, const std::string& p) { d.advertise_host = read_string(v, p); });
  reader.on("ucx_tls", [&config](element v, const std::string& p) { config.kv_transport_tls = read_string(v, p); });
  return reader;
}

}  // namespace

// kv_events: KV-cache events for prefix-aware routers (issue 20).
ObjectReader kv_events_reader(kv_cache::KvEventsConfig& k) {
  ObjectReader reader("kv_events");
  reader.on("enabled", [&k](element v, const std::string& p) { k.enabled = read_bool(v, p); });
  reader.on("endpoint", [&k](element v, const std::string& p) {
    k.endpoint = read_string(v, p);
    if (k.endpoint.empty()) throw ConfigError(fmt::format("{}: must not be empty", p));
  });
  reader.on("replay_endpoint", [&k](element v, const std::string& p) {
    k.replay_endpoint = read_string(v, p);
  });
  reader.on("topic", [&k](element v, const std::string& p) { k.topic = read_string(v, p); });
  reader.on("buffer_steps", [&k](element v, const std::string& p) {
    k.buffer_steps = static_cast<int32_t>(read_uint(v, p, 1, 10'000'000));
  });
  reader.on("hwm", [&k](element v, const std::string& p) {
    k.hwm = static_cast<int32_t>(read_uint(v, p, 1, 100'000'000));
  });
  reader.on("max_queue_batches", [&k](element v, const std::string& p) {
    k.max_queue_batches = static_cast<int32_t>(read_uint(v, p, 1, 10'000'000));
  });
  reader.on("hash_seed", [&k](element v, const std::string& p) { k.hash_seed = read_string(v, p); });
  reader.on("format", [&k](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto format = kv_cache::parse_kv_event_format(text);
    if (!format) throw ConfigError(fmt::format("{}: '{}' is not one of map, array", p, text));
    k.format = *format;
  });
  return reader;
}

engine::EngineConfig engine_config_of(const ServerConfig& config) {
  engine::EngineConfig e;
  e.model_path = config.model;
  e.model_id = config.model_id;
  e.chat_template = config.chat_template;
  switch (config.backend) {
    case BackendChoice::kAuto: e.backend = engine::BackendKind::kAuto; break;
    case BackendChoice::kCpu: e.backend = engine::BackendKind::kCpu; break;
    case BackendChoice::kCuda: e.backend = engine::BackendKind::kCuda; break;
  }
  e.cpu = config.cpu;
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
        net::ApiKeys::from_sources(access.keys, access.keys_file, environment_key),
        access.metrics_require_key);
  } catch (const net::ApiKeyError& e) {
    throw ConfigError(e.what());
  }
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return host.starts_with("127.");
}

std::string_view to_string(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::kAuto: return "auto";
    case BackendChoice::kCpu: return "cpu";
    case BackendChoice::kCuda: return "cuda";
  }
  return "auto";
}

std::optional<BackendChoice> parse_backend(std::string_view text) {
  if (text == "auto") return BackendChoice::kAuto;
  if (text == "cpu") return BackendChoice::kCpu;
  if (text == "cuda") return BackendChoice::kCuda;
  return std::nullopt;
}

bool is_valid_log_level(std::string_view level) {
  for (std::string_view known : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == known) return true;
  }
  return false;
}

ServerConfig parse_config(std::string_view json, ServerConfig base) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  if (auto error = parser.parse(padded).get(root); error != simdjson::SUCCESS) {
    throw ConfigError(fmt::format("config: invalid JSON: {}", simdjson::error_message(error)));
  }
  ServerConfig config = std::move(base);
  ObjectReader reader("");
  reader.on("model", [&config](element v, const std::string& p) { config.model = read_string(v, p); });
  reader.on("model_id", [&config](element v, const std::string& p) {
    config.model_id = read_string(v, p);
  });
  reader.on("backend", [&config](element v, const std::string& p) {
    const std::string text = read_string(v, p);
    const auto choice = parse_backend(text);
    if (!choice) throw ConfigError(fmt::format("{}: '{}' is not one of auto, cpu, cuda", p, text));
    config.backend = *choice;
  });
  reader.on("chat_template", [&config](element v, const std::string& p) {
    config.chat_template = read_string(v, p);
  });
  reader.on("drain_timeout_ms", [&config](element v, const std::string& p) {
    config.drain_timeout = std::chrono::milliseconds(read_uint(v, p, 0, 3'600'000));
  });
  reader.on("log", [&config](element v, const std::string&) { log_reader(config.log).read(v); });
  reader.on("scheduler", [&config](element v, const std::string&) {
    scheduler_reader(config.scheduler).read(v);
  });
  reader.on("speculative", [&config](element v, const std::string&) {
    read_speculative(v, config.scheduler.speculative);
  });
  reader.on("cpu", [&config](element v, const std::string&) { cpu_reader(config.cpu).read(v); });
  reader.on("structured_output", [&config](element v, const std::string&) {
    structured_output_reader(config.structured_output).read(v);
  });
  reader.on("api", [&config](element v, const std::string&) {
    api_reader(config.api, config.access).read(v);
  });
  reader.on("admin", [&config](element v, const std::string&) { admin_reader(config.admin).read(v); });
  reader.on("http", [&config](element v, const std::string&) { http_reader(config.http).read(v); });
  reader.on("disagg", [&config](element v, const std::string&) { disagg_reader(config).read(v); });
  reader.on("kv_events", [&config](element v, const std::string&) {
    kv_events_reader(config.kv_events).read(v);
  });
  reader.read(root);
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
