#include "app/config.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "app/serve.hpp"
#include "tests/support/source_dir.hpp"

namespace troupe::app {
namespace {

void expect_config_error(std::string_view json, std::string_view needle) {
  try {
    (void)parse_config(json);
    FAIL() << "expected ConfigError containing '" << needle << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos) << e.what();
  }
}

// Issue 21: vLLM's speculative_config keys, their defaults, and errors naming the key.
TEST(Config, SpeculativeDecoding) {
  // On by default (the engine's defaults, measured in bench/RESULTS.md).
  const scheduler::SpeculativeConfig defaults = parse_config("{}").scheduler.speculative;
  EXPECT_EQ(defaults.method, scheduler::SpeculativeMethod::kNgram);
  EXPECT_EQ(defaults.num_speculative_tokens, 4);
  EXPECT_EQ(defaults.prompt_lookup_min, 2);
  EXPECT_EQ(defaults.prompt_lookup_max, 4);
  EXPECT_EQ(defaults.disable_by_batch_size, 4);
  ServerConfig c = parse_config(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 4}})");
  EXPECT_EQ(c.scheduler.speculative.method, scheduler::SpeculativeMethod::kNgram);
  EXPECT_EQ(c.scheduler.speculative.num_speculative_tokens, 4);
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_min, 5);  // vLLM's defaults
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_max, 5);
  EXPECT_EQ(c.scheduler.speculative.disable_by_batch_size, 4);  // troupe's CPU default
  EXPECT_TRUE(c.scheduler.speculative.enabled());
  c = parse_config(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                       "disable_by_batch_size": 0}})");
  EXPECT_EQ(c.scheduler.speculative.disable_by_batch_size, 0);
  c = parse_config(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                       "prompt_lookup_max": 4}})");
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_min, 4);  // the one set, for both
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_max, 4);
  c = parse_config(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 3,
                                       "prompt_lookup_min": 2, "prompt_lookup_max": 6}})");
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_min, 2);
  EXPECT_EQ(c.scheduler.speculative.prompt_lookup_max, 6);
  EXPECT_FALSE(parse_config(R"({"speculative": {"method": "none"}})").scheduler.speculative.enabled());
  expect_config_error(R"({"speculative": {"method": "eagle"}})", "speculative.method: \"eagle\"");
  expect_config_error(R"({"speculative": {"method": "ngram"}})",
                      "speculative.num_speculative_tokens: required");
  expect_config_error(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 0}})",
                      "speculative.num_speculative_tokens: 0 is outside");
  expect_config_error(R"({"speculative": {"method": "ngram", "num_speculative_tokens": "4"}})",
                      "speculative.num_speculative_tokens: expected an unsigned integer");
  expect_config_error(R"({"speculative": {"method": "ngram", "num_speculative_tokens": 2,
                                          "prompt_lookup_min": 5, "prompt_lookup_max": 3}})",
                      "speculative.prompt_lookup_max");
  expect_config_error(R"({"speculative": {"k": 2}})", "speculative.k: unknown config key");
  // The object replaces the default whole, so it must say which method it means.
  expect_config_error(R"({"speculative": {"num_speculative_tokens": 2}})", "speculative.method: required");
  expect_config_error(R"({"speculative": {}})", "speculative.method: required");
  expect_config_error(R"({"speculative": 3})", "speculative: expected an object");
}

TEST(Config, DefaultsWhenEmpty) {
  const ServerConfig c = parse_config("{}");
  EXPECT_EQ(c.http.host, "127.0.0.1");
  EXPECT_EQ(c.http.port, 8080);
  EXPECT_EQ(c.backend, engine::BackendKind::kAuto);
  EXPECT_EQ(c.http.max_body_bytes, 8u << 20);
}

TEST(Config, ReadsEveryKey) {
  const ServerConfig c = parse_config(R"({
    "model": "m.gguf", "model_id": "x", "backend": "cpu",
    "log": {"level": "debug", "pattern": "%v"},
    "http": {"host": "0.0.0.0", "port": 9000, "io_threads": 3, "max_body_bytes": 2048,
             "max_header_bytes": 4096, "read_timeout_ms": 10, "keep_alive_timeout_ms": 20,
             "shutdown_grace_ms": 30, "ws_close_timeout_ms": 40}})");
  EXPECT_EQ(c.model, "m.gguf");
  EXPECT_EQ(c.model_id, "x");
  EXPECT_EQ(c.backend, engine::BackendKind::kCpu);
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.http.host, "0.0.0.0");
  EXPECT_EQ(c.http.port, 9000);
  EXPECT_EQ(c.http.io_threads, 3);
  EXPECT_EQ(c.http.max_body_bytes, 2048u);
  EXPECT_EQ(c.http.shutdown_grace.count(), 30);
  EXPECT_EQ(c.http.ws_close_timeout.count(), 40);
}

// api.max_stream_buffer_bytes is the one documented limit for slow streaming readers: it must
// reach the HTTP server (SSE) — it once was parsed and read by nobody.
TEST(Config, TheStreamBufferLimitReachesTheHttpServer) {
  const ServerConfig c = parse_config(R"({"api": {"max_stream_buffer_bytes": 65536}})");
  EXPECT_EQ(c.api.max_stream_buffer_bytes, 65536u);
  EXPECT_EQ(http_server_config_of(c).max_stream_buffer_bytes, 65536u);
  EXPECT_EQ(http_server_config_of(parse_config("{}")).max_stream_buffer_bytes, 8u << 20);
}

TEST(Config, ErrorsNameTheKey) {
  expect_config_error(R"({"modle": "x"})", "modle: unknown config key");
  expect_config_error(R"({"http": {"prot": 1}})", "http.prot: unknown config key");
  expect_config_error(R"({"http": {"port": "80"}})", "http.port: expected an unsigned integer");
  expect_config_error(R"({"http": {"port": 70000}})", "http.port: 70000 is outside");
  expect_config_error(R"({"http": {"port": -1}})", "http.port: expected an unsigned integer");
  expect_config_error(R"({"backend": "tpu"})", "backend: 'tpu' is not one of");
  expect_config_error(R"({"log": {"level": "loud"}})", "log.level: 'loud' is not one of trace");
  expect_config_error(R"({"http": 5})", "http: expected an object");
  expect_config_error(R"([1,2])", "config: expected an object");
  expect_config_error(R"({"model": )", "invalid JSON");
}

// First-token steps trade running streams' ITL for newcomers' TTFT: on unless switched off.
TEST(Config, ReadsTheFirstTokenStepsSwitch) {
  EXPECT_TRUE(parse_config("{}").scheduler.first_token_steps);
  EXPECT_FALSE(
      parse_config(R"({"scheduler": {"first_token_steps": false}})").scheduler.first_token_steps);
  EXPECT_TRUE(
      parse_config(R"({"scheduler": {"first_token_steps": true}})").scheduler.first_token_steps);
  expect_config_error(R"({"scheduler": {"first_token_steps": "yes"}})",
                      "scheduler.first_token_steps: expected true or false");
  expect_config_error(R"({"scheduler": {"first_token_steps": 0}})",
                      "scheduler.first_token_steps: expected true or false");
}

// First-token interrupts give a step in flight up for a newcomer: on unless switched off.
TEST(Config, ReadsTheFirstTokenInterruptsSwitch) {
  EXPECT_TRUE(parse_config("{}").scheduler.first_token_interrupts);
  EXPECT_FALSE(parse_config(R"({"scheduler": {"first_token_interrupts": false}})")
                   .scheduler.first_token_interrupts);
  expect_config_error(R"({"scheduler": {"first_token_interrupts": 1}})",
                      "scheduler.first_token_interrupts: expected true or false");
}

// cpu.prefill_attention: exact by default (llama.cpp's bits), bf16 when asked, anything else
// named.
TEST(Config, ReadsThePrefillAttentionPrecision) {
  using gpu::cpu::PrefillAttentionPrecision;
  EXPECT_EQ(parse_config("{}").cpu.prefill_attention, PrefillAttentionPrecision::kExact);
  EXPECT_EQ(parse_config(R"({"cpu": {"prefill_attention": "bf16"}})").cpu.prefill_attention,
            PrefillAttentionPrecision::kBf16);
  EXPECT_EQ(engine_config_of(parse_config(R"({"cpu": {"prefill_attention": "bf16"}})"))
                .cpu.prefill_attention,
            PrefillAttentionPrecision::kBf16);
  expect_config_error(R"({"cpu": {"prefill_attention": "fp8"}})",
                      "cpu.prefill_attention: 'fp8' is not one of exact, bf16");
  expect_config_error(R"({"cpu": {"prefill_attention": 16}})", "cpu.prefill_attention");
}

// The grammar compiler's settings (structured output): defaults as before the keys existed, each
// key read, and out-of-range or ill-typed values named.
TEST(Config, ReadsTheStructuredOutputSettings) {
  const ServerConfig defaults = parse_config("{}");
  EXPECT_EQ(defaults.structured_output.grammar_cache_size, 64);
  EXPECT_EQ(defaults.structured_output.max_grammar_bytes, 64 * 1024);
  EXPECT_EQ(defaults.structured_output.json_max_whitespace, 4);
  EXPECT_EQ(defaults.structured_output.compile_threads, 1);
  const ServerConfig c = parse_config(R"({"structured_output": {"grammar_cache_size": 0,
      "max_grammar_bytes": 1000, "json_max_whitespace": 0, "compile_threads": 2}})");
  const engine::EngineConfig e = engine_config_of(c);
  EXPECT_EQ(e.structured_output.grammar_cache_size, 0);
  EXPECT_EQ(e.structured_output.max_grammar_bytes, 1000);
  EXPECT_EQ(e.structured_output.json_max_whitespace, 0);
  EXPECT_EQ(e.structured_output.compile_threads, 2);
  expect_config_error(R"({"structured_output": {"cache_size": 8}})",
                      "structured_output.cache_size: unknown config key");
  expect_config_error(R"({"structured_output": {"max_grammar_bytes": 0}})",
                      "structured_output.max_grammar_bytes: 0 is outside");
  expect_config_error(R"({"structured_output": {"json_max_whitespace": "4"}})",
                      "structured_output.json_max_whitespace: expected an unsigned integer");
  expect_config_error(R"({"structured_output": {"compile_threads": 0}})",
                      "structured_output.compile_threads: 0 is outside");
}

TEST(Config, ReadsTheAccessKeys) {
  const ServerConfig defaults = parse_config("{}");
  EXPECT_FALSE(defaults.access.keys_file);
  EXPECT_TRUE(defaults.access.metrics_require_key);
  const ServerConfig c =
      parse_config(R"({"api": {"keys_file": "/etc/troupe/keys", "metrics_require_key": false}})");
  EXPECT_EQ(c.access.keys_file, std::filesystem::path("/etc/troupe/keys"));
  EXPECT_FALSE(c.access.metrics_require_key);
  EXPECT_FALSE(parse_config(R"({"api": {"keys_file": ""}})").access.keys_file);
  expect_config_error(R"({"api": {"metrics_require_key": 1}})",
                      "api.metrics_require_key: expected true or false");
  expect_config_error(R"({"api": {"keys_file": 3}})", "api.keys_file: expected a string");
  expect_config_error(R"({"api": {"keys": ["x"]}})", "api.keys: unknown config key");
}

// Keys from the flag, the file and the environment all count; no key anywhere: all open.
TEST(Config, AccessPolicyGathersEverySource) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("troupe_keys_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto keys_file = dir / "keys";
  std::ofstream(keys_file) << "# team keys\nalice:sk-file-alice\n\nsk-file-anonymous\n";
  AccessConfig access;
  EXPECT_FALSE(access_policy_of(access, "").keys_required());
  access.keys = {"sk-flag"};
  access.keys_file = keys_file;
  const net::AccessPolicy policy = access_policy_of(access, "sk-env");
  EXPECT_EQ(policy.num_keys(), 4u);
  EXPECT_EQ(policy.check("/v1/models", "Bearer sk-file-alice", "").key_name, "alice");
  EXPECT_FALSE(policy.check("/v1/models", "Bearer sk-flag", "").refusal);
  EXPECT_FALSE(policy.check("/v1/models", "Bearer sk-env", "").refusal);
  EXPECT_FALSE(policy.check("/v1/models", "Bearer sk-file-anonymous", "").refusal);
  EXPECT_TRUE(policy.check("/metrics", "", "").refusal);
  access.metrics_require_key = false;
  EXPECT_FALSE(access_policy_of(access, "").check("/metrics", "", "").refusal);

  access.keys_file = dir / "missing";
  try {
    (void)access_policy_of(access, "");
    FAIL() << "an unreadable keys file must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Config, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) {
    EXPECT_TRUE(is_loopback_host(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.2"}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
}

TEST(Config, ReadsConnectionLimitsAndTimeouts) {
  const ServerConfig c = parse_config(R"({
    "http": {"read_timeout_ms": 10, "keep_alive_timeout_ms": 20, "max_connections": 7},
    "admin": {"max_connections": 5, "idle_timeout_ms": 250}})");
  EXPECT_EQ(c.http.read_timeout.count(), 10);
  EXPECT_EQ(c.http.keep_alive_timeout.count(), 20);
  EXPECT_EQ(c.http.max_connections, 7);
  EXPECT_EQ(c.admin.max_connections, 5);
  EXPECT_EQ(c.admin.idle_timeout.count(), 250);
  expect_config_error(R"({"http": {"max_connections": 0}})", "http.max_connections: 0 is outside");
  expect_config_error(R"({"admin": {"idle_timeout_ms": "60s"}})",
                      "admin.idle_timeout_ms: expected an unsigned integer");
}

TEST(Config, FlagsOverrideTheFileAndAreValidated) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto model = dir / "model.gguf";
  std::ofstream(model) << "x";
  const auto config_path = dir / "c.json";
  std::ofstream(config_path) << R"({"model": ")" << model.string() << R"(", "http": {"port": 1234}})";

  ServeOptions options;
  options.config_path = config_path.string();
  options.settings = {{"--port", "http.port", "--port", "4321"},
                      {"--backend", "backend", "--backend", "cpu"}};
  const ServerConfig c = resolve_config(options);
  EXPECT_EQ(c.http.port, 4321);
  EXPECT_EQ(c.backend, engine::BackendKind::kCpu);
  EXPECT_EQ(c.model, model);
  // Per-pod values a Deployment passes as flags ($(POD_IP)), not in the shared ConfigMap.
  options.settings.push_back(
      {"--kv-events-topic", "kv_events.topic", "--kv-events-topic", "kv@10.0.0.7@m"});
  options.settings.push_back(
      {"--advertise-host", "disagg.advertise_host", "--advertise-host", "10.0.0.7"});
  const ServerConfig pod = resolve_config(options);
  EXPECT_EQ(pod.kv_events.topic, "kv@10.0.0.7@m");
  EXPECT_EQ(pod.disagg.advertise_host, "10.0.0.7");
  EXPECT_EQ(engine_config_of(pod).disagg.advertise_host, "10.0.0.7");
  // The KV transport: troupe's tcp by default, on the HTTP listen host; ucx by name.
  EXPECT_EQ(pod.disagg.kv_transport, disagg::KvTransportKind::kTcp);
  EXPECT_EQ(engine_config_of(pod).disagg.kv_listen_host, pod.http.host);
  options.settings.push_back({"--kv-transport", "disagg.kv_transport", "--kv-transport", "ucx"});
  options.settings.push_back({"--ucx-tls", "disagg.ucx_tls", "--ucx-tls", "tcp"});
  options.settings.push_back({"--kv-port", "disagg.kv_port", "--kv-port", "7500"});
  const ServerConfig ucx = resolve_config(options);
  EXPECT_EQ(ucx.disagg.kv_transport, disagg::KvTransportKind::kUcx);
  EXPECT_EQ(ucx.kv_transport_tls, "tcp");
  EXPECT_EQ(ucx.disagg.kv_port, 7500);
  options.settings.push_back({"--kv-transport", "disagg.kv_transport", "--kv-transport", "posix,cma"});
  EXPECT_THROW((void)resolve_config(options), ConfigError) << "a UCX list is not a transport";
  options.settings.resize(options.settings.size() - 4);

  options.settings.push_back({"--port", "http.port", "--port", "80x"});
  EXPECT_THROW((void)resolve_config(options), ConfigError);
  options.settings.pop_back();
  options.settings.push_back({"--model", "model", "--model", (dir / "missing.gguf").string()});
  try {
    (void)resolve_config(options);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.gguf"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST(Config, ShippedPresetsParse) {
  const std::filesystem::path configs = ::troupe::test_support::source_dir() / "configs";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_NO_THROW((void)load_config_file(entry.path())) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 1);
}

// kv_events (issue 20): every key read, off by default, bad keys and values named.
TEST(Config, KvEventsSection) {
  const ServerConfig defaults = parse_config("{}");
  EXPECT_FALSE(defaults.kv_events.enabled);
  EXPECT_EQ(defaults.kv_events.endpoint, "tcp://*:5557");
  EXPECT_EQ(defaults.kv_events.format, kv_cache::KvEventFormat::kMap);
  const ServerConfig c = parse_config(R"({"kv_events": {"enabled": true,
    "endpoint": "tcp://indexer:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv@p@m",
    "buffer_steps": 50, "hwm": 60, "max_queue_batches": 70, "hash_seed": "42",
    "format": "array"}})");
  EXPECT_TRUE(c.kv_events.enabled);
  EXPECT_EQ(c.kv_events.endpoint, "tcp://indexer:5557");
  EXPECT_EQ(c.kv_events.replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(c.kv_events.topic, "kv@p@m");
  EXPECT_EQ(c.kv_events.buffer_steps, 50);
  EXPECT_EQ(c.kv_events.hwm, 60);
  EXPECT_EQ(c.kv_events.max_queue_batches, 70);
  EXPECT_EQ(c.kv_events.hash_seed, "42");
  EXPECT_EQ(c.kv_events.format, kv_cache::KvEventFormat::kArray);
  EXPECT_EQ(engine_config_of(c).kv_events.hash_seed, "42");
  EXPECT_TRUE(engine_config_of(c).kv_events.enabled);
  expect_config_error(R"({"kv_events": {"enable": true}})", "kv_events.enable: unknown config key");
  expect_config_error(R"({"kv_events": {"enabled": 1}})", "kv_events.enabled: expected true or false");
  expect_config_error(R"({"kv_events": {"hwm": 0}})", "kv_events.hwm: 0 is outside");
  expect_config_error(R"({"kv_events": {"format": "json"}})", "kv_events.format: 'json' is not one of");
  expect_config_error(R"({"kv_events": {"endpoint": ""}})", "kv_events.endpoint: must not be empty");
}

}  // namespace
}  // namespace troupe::app
