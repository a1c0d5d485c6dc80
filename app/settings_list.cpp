// The settings list itself (settings.hpp): one entry per setting, section by section, in the
// order the README shows them.
#include <string>
#include <vector>

#include "app/setting_builders.hpp"

namespace troupe::app {
namespace {

using namespace setting_builders;

// The model, the backend, logging and draining.
void add_server_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(text_setting(
      "model", "GGUF file to serve", [](auto& c) -> auto& { return c.model; }, "--model"));
  add(text_setting(
      "model_id", "name in the API; empty: the file name without `.gguf` and quant suffix",
      [](auto& c) -> auto& { return c.model_id; }, "--model-id"));
  add(enum_setting(
      "backend",
      {{"auto", engine::BackendKind::kAuto},
       {"cpu", engine::BackendKind::kCpu},
       {"cuda", engine::BackendKind::kCuda}},
      "`auto`: CUDA when a device is present and the model's graph (llama; gemma3 not yet) and "
      "every weight type of it are proven on a GPU (`gpu/cuda_proven_types.cpp`), else the CPU; "
      "`cuda` refuses a model with an unproven graph or type, naming it "
      "(`TROUPE_CUDA_UNPROVEN_TYPES=allow` overrides, for proving it)",
      [](auto& c) -> auto& { return c.backend; }, "--backend"));
  add(text_setting(
      "chat_template",
      "`chatml`, `llama3`, `llama2`, `llama2-sys`, `mistral-v1`, `gemma`, … ; empty: detected from the GGUF",
      [](auto& c) -> auto& { return c.chat_template; }));
  add(ms_setting(
      "drain_timeout_ms", 0, 3'600'000,
      "on SIGTERM or admin `drain`, in-flight requests may finish this long",
      [](auto& c) -> auto& { return c.drain_timeout; }));
  add(enum_setting(
      "log.level",
      {{"trace", "trace"},
       {"debug", "debug"},
       {"info", "info"},
       {"warn", "warn"},
       {"error", "error"},
       {"critical", "critical"},
       {"off", "off"}},
      "log level", [](auto& c) -> auto& { return c.log.level; }, "--log-level"));
  add(text_setting(
      "log.pattern", "spdlog pattern", [](auto& c) -> auto& { return c.log.pattern; }));
}

// The HTTP/WebSocket listener.
void add_http_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(text_setting(
      "http.host", "listen address", [](auto& c) -> auto& { return c.http.host; }, "--host"));
  add(uint_setting(
      "http.port", 0, 65535, "listen port (0 picks a free one)",
      [](auto& c) -> auto& { return c.http.port; }, "--port"));
  add(uint_setting(
      "http.io_threads", 1, 256, "io threads serving sockets",
      [](auto& c) -> auto& { return c.http.io_threads; }));
  add(uint_setting(
      "http.max_body_bytes", 1024, uint64_t{1} << 32, "larger request bodies get 413",
      [](auto& c) -> auto& { return c.http.max_body_bytes; }));
  add(uint_setting(
      "http.max_header_bytes", 1024, 1u << 24, "larger headers get 431",
      [](auto& c) -> auto& { return c.http.max_header_bytes; }));
  add(uint_setting(
      "http.max_connections", 1, 1'000'000,
      "open HTTP and WebSocket connections; one more is answered 503 "
      "(`too_many_connections`, `Retry-After: 1`) and closed. Each holds a file "
      "descriptor: keep it below the open-file limit less ~64 (`troupe serve` raises its "
      "soft limit to the hard one and warns when this does not fit); past the limit "
      "accept() fails and the listener backs off (50 ms doubling to 1 s)",
      [](auto& c) -> auto& { return c.http.max_connections; }));
  add(ms_setting(
      "http.read_timeout_ms", 1, 3'600'000,
      "time to read one request, from its first byte (a connection's first request: from the "
      "accept)",
      [](auto& c) -> auto& { return c.http.read_timeout; }));
  add(ms_setting(
      "http.keep_alive_timeout_ms", 1, 3'600'000,
      "idle time between requests on a connection (until the next request's first byte)",
      [](auto& c) -> auto& { return c.http.keep_alive_timeout; }));
  add(ms_setting(
      "http.shutdown_grace_ms", 0, 600'000, "open connections may finish after the drain",
      [](auto& c) -> auto& { return c.http.shutdown_grace; }));
  add(ms_setting(
      "http.ws_idle_timeout_ms", 1000, 86'400'000, "WebSocket idle limit (pings count)",
      [](auto& c) -> auto& { return c.http.ws_idle_timeout; }));
  add(uint_setting(
      "http.ws_max_message_bytes", 1024, uint64_t{1} << 30,
      "larger WebSocket messages close the socket (1009)",
      [](auto& c) -> auto& { return c.http.ws_max_message_bytes; }));
  add(ms_setting(
      "http.ws_close_timeout_ms", 10, 600'000,
      "on shutdown, how long a WebSocket client may take to answer our close (1001)",
      [](auto& c) -> auto& { return c.http.ws_close_timeout; }));
  add(text_setting(
      "http.ssl_cert_file",
      "PEM certificate (chain): HTTPS, SSE and wss:// (TLS 1.2+), with `http.ssl_key_file`",
      [](auto& c) -> auto& { return c.http.ssl_cert_file; }, "--ssl-cert"));
  add(text_setting(
      "http.ssl_key_file", "the certificate's PEM private key",
      [](auto& c) -> auto& { return c.http.ssl_key_file; }, "--ssl-key"));
}

// The scheduling policy (and speculative decoding, read as one object).
void add_scheduler_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(uint_setting(
      "scheduler.max_num_seqs", 1, 4096,
      "sequences in one step (also the CUDA backend's sampling rows)",
      [](auto& c) -> auto& { return c.scheduler.max_num_seqs; }));
  add(uint_setting(
      "scheduler.max_num_batched_tokens", 1, 1 << 20,
      "tokens in one step (decode first, prefill chunks fill the rest; also the CUDA backend's "
      "scratch)",
      [](auto& c) -> auto& { return c.scheduler.max_num_batched_tokens; }));
  add(uint_setting(
      "scheduler.chunked_prefill_size", 0, 1 << 20,
      "most prompt tokens one sequence computes per step",
      [](auto& c) -> auto& { return c.scheduler.chunked_prefill_size; }));
  add(uint_setting(
      "scheduler.max_model_len", 0, 1 << 24, "prompt + output limit; 0: the model's context length",
      [](auto& c) -> auto& { return c.scheduler.max_model_len; }));
  add(uint_setting(
      "scheduler.max_queue", 1, 1 << 20, "waiting requests before new ones get 429",
      [](auto& c) -> auto& { return c.scheduler.max_queue; }));
  add(uint_setting(
      "scheduler.block_size", 1, 256, "KV block size in tokens",
      [](auto& c) -> auto& { return c.scheduler.block_size; }));
  add(uint_setting(
      "scheduler.num_blocks", 0, 1 << 24,
      "KV blocks; 0: from `cpu.kv_memory_mb` (CPU) or `cuda.gpu_memory_utilization` (CUDA)",
      [](auto& c) -> auto& { return c.scheduler.num_blocks; }));
  add(bool_setting(
      "scheduler.enable_prefix_caching", "reuse cached full prompt blocks across requests",
      [](auto& c) -> auto& { return c.scheduler.enable_prefix_caching; }));
  add(bool_setting(
      "scheduler.enable_priority_preemption",
      "a waiting higher-priority request may preempt a running lower one",
      [](auto& c) -> auto& { return c.scheduler.enable_priority_preemption; }));
  add(number(
      "scheduler.max_step_ms", {}, 0, 3'600'000,
      "while streams decode, prefill chunks are cut so a step's predicted time stays under this "
      "(an inter-token latency target); `0`: token budget only",
      [](ServerConfig& c, uint64_t n) { c.scheduler.max_step_ms = static_cast<double>(n); },
      [](const ServerConfig& c) { return static_cast<uint64_t>(c.scheduler.max_step_ms); }));
  add(enum_setting(
      "scheduler.fairness",
      {{"fifo", scheduler::Fairness::kFifo}, {"client", scheduler::Fairness::kClient}},
      "`client`: round robin / fair share across clients within a priority; `fifo`: first come, "
      "first served",
      [](auto& c) -> auto& { return c.scheduler.fairness; }));
  add(bool_setting(
      "scheduler.first_token_steps",
      "a flooded server runs a newcomer's short prompt in a step of its own "
      "([first-token steps](#architecture-in-ten-minutes)): its TTFT falls, the running "
      "streams' ITL p99 rises; `false`: steadier ITL",
      [](auto& c) -> auto& { return c.scheduler.first_token_steps; }));
  add(bool_setting(
      "scheduler.first_token_interrupts",
      "such a newcomer has the step in flight given up (CPU backend, first half of the "
      "step only) instead of waiting for it; the work redone is counted in "
      "`troupe:interrupted_step_seconds_total`",
      [](auto& c) -> auto& { return c.scheduler.first_token_interrupts; }));
  add(speculative_setting());
}

// The CPU and CUDA backends, and structured output's grammar compiler.
void add_backends_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(uint_setting(
      "cpu.threads", 0, 1024, "CPU backend: compute threads (0: all cores)",
      [](auto& c) -> auto& { return c.cpu.num_threads; }));
  add(number(
      "cpu.kv_memory_mb", {}, 1, 1 << 20,
      "CPU backend: KV memory (MiB) when `scheduler.num_blocks` is 0",
      [](ServerConfig& c, uint64_t n) { c.cpu.kv_memory_bytes = static_cast<int64_t>(n) << 20; },
      [](const ServerConfig& c) { return static_cast<uint64_t>(c.cpu.kv_memory_bytes >> 20); }));
  add(enum_setting(
      "cpu.prefill_attention",
      {{"exact", gpu::cpu::PrefillAttentionPrecision::kExact},
       {"bf16", gpu::cpu::PrefillAttentionPrecision::kBf16}},
      "prompt tokens' attention: `exact` reproduces llama.cpp's arithmetic bit for bit; "
      "`bf16` rounds Q, K, V and the probabilities to bf16 (fp32 sums) on AMX-BF16 or "
      "AVX512-BF16: a 4k-token prompt prefills ~1.5× faster on an AMX CPU, greedy output "
      "may differ from llama.cpp's ([long prompts](#long-prompts-bf16-attention))",
      [](auto& c) -> auto& { return c.cpu.prefill_attention; }));
  add(enum_setting(
      "cache.kv_dtype",
      {{"f16", gpu::KvDtype::kF16}, {"q8_0", gpu::KvDtype::kQ8_0}, {"fp8_e4m3", gpu::KvDtype::kFp8E4M3}},
      "the KV cache's number format (vLLM's `--kv-cache-dtype`, llama.cpp's `-ctk/-ctv`): "
      "`q8_0` (CPU backend) holds 1.88× the tokens of `f16` in the same memory, computed as "
      "llama.cpp's `-ctk q8_0 -ctv q8_0 -fa on` (its Hadamard rotation included, logits equal "
      "to the bit); `fp8_e4m3` (CUDA backend, vLLM's `fp8`) holds 2× the tokens of `f16`, "
      "scale 1.0; its kernels await a GPU run's proof (`gpu/cuda_proven_types.cpp`), so it is "
      "refused unless `TROUPE_CUDA_UNPROVEN_TYPES=allow`",
      [](auto& c) -> auto& { return c.cache.kv_dtype; }, "--kv-cache-dtype"));
  add(fraction_setting(
      "cuda.gpu_memory_utilization", 0.05, 1.0,
      "CUDA backend: share of the device's memory for weights, scratch and KV "
      "blocks (vLLM's `--gpu-memory-utilization`); KV takes what the rest leaves",
      [](auto& c) -> auto& { return c.cuda.gpu_memory_utilization; }));

  add(uint_setting(
      "structured_output.grammar_cache_size", 0, 1 << 16,
      "compiled grammars kept, least recently used evicted first (keyed by the minified "
      "schema/regex/grammar); `0`: no cache",
      [](auto& c) -> auto& { return c.structured_output.grammar_cache_size; }));
  add(uint_setting(
      "structured_output.max_grammar_bytes", 1, 64 << 20,
      "a larger schema, regex, choice list or grammar is a 400 without compiling "
      "(xgrammar has no compile-time limit of its own)",
      [](auto& c) -> auto& { return c.structured_output.max_grammar_bytes; }));
  add(uint_setting(
      "structured_output.json_max_whitespace", 0, 1 << 10,
      "longest run of whitespace between JSON tokens a schema or `json_object` allows "
      "(small models otherwise emit newlines forever); `0`: unbounded",
      [](auto& c) -> auto& { return c.structured_output.json_max_whitespace; }));
  add(uint_setting(
      "structured_output.compile_threads", 1, 256,
      "xgrammar's threads per compilation (1: the prompt worker's own)",
      [](auto& c) -> auto& { return c.structured_output.compile_threads; }));
}

// The OpenAI surface's limits and who may use it.
void add_api_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(uint_setting(
      "api.default_max_tokens", 1, 1 << 24, "when a request names none",
      [](auto& c) -> auto& { return c.api.default_max_tokens; }));
  add(uint_setting(
      "api.max_stop_strings", 0, 64, "stop strings per request",
      [](auto& c) -> auto& { return c.api.max_stop_strings; }));
  add(uint_setting(
      "api.max_logit_bias_entries", 0, 1 << 20, "`logit_bias` entries per request",
      [](auto& c) -> auto& { return c.api.max_logit_bias_entries; }));
  add(uint_setting(
      "api.max_batch_items", 1, 1 << 20, "`/v1/batch` items per request (more: 413)",
      [](auto& c) -> auto& { return c.api.max_batch_items; }));
  add(uint_setting(
      "api.max_n", 1, 128, "choices per request (`n`)",
      [](auto& c) -> auto& { return c.api.max_n; }));
  add(uint_setting(
      "api.max_stream_buffer_bytes", 1024, uint64_t{1} << 32,
      "unsent streamed bytes (SSE, WebSocket chat) before a slow reader is dropped and its "
      "generations cancelled",
      [](auto& c) -> auto& { return c.api.max_stream_buffer_bytes; }));
  add(enum_setting(
      "embeddings.pooling",
      {{"mean", model::Pooling::kMean}, {"last", model::Pooling::kLast}, {"cls", model::Pooling::kCls}},
      "how `/v1/embeddings` pools an input's final hidden states when the request names none "
      "(its `pooling` field)",
      [](auto& c) -> auto& { return c.api.embedding_pooling; }, "--pooling"));
  add(bool_setting(
      "embeddings.matryoshka",
      "allow `dimensions` on `/v1/embeddings` (truncate, then renormalize): only for a model "
      "trained for it, which a GGUF does not say",
      [](auto& c) -> auto& { return c.api.embedding_matryoshka; }));
  add(uint_setting(
      "embeddings.max_inputs", 1, 1 << 20, "inputs per `/v1/embeddings` request",
      [](auto& c) -> auto& { return c.api.max_embedding_inputs; }));
  add(text_setting(
      "storage.dir",
      "where uploaded files (`/v1/files`) and batches live: a SQLite database and the files "
      "beside it; created at start, which fails naming it when it cannot be written",
      [](auto& c) -> auto& { return c.storage_dir; }, "--storage-dir"));
  add(uint_setting(
      "storage.max_file_bytes", 1, uint64_t{1} << 40,
      "largest upload to `/v1/files` (413 above); an upload is also one HTTP body, so "
      "`http.max_body_bytes` must be at least as large",
      [](auto& c) -> auto& { return c.files.max_file_bytes; }));
  add(uint_setting(
      "batches.max_in_flight", 1, 4096,
      "items of `/v1/batches` batches in the engine at once (all batches together); they run at "
      "the lowest priority, so interactive requests come first",
      [](auto& c) -> auto& { return c.batches.max_in_flight; }));
  add(uint_setting(
      "batches.max_in_flight_busy", 1, 4096,
      "the same bound while the engine also runs or queues other requests (every running decode "
      "is in every step: the batch's share of interactive users' step time), and the most items "
      "started at once",
      [](auto& c) -> auto& { return c.batches.max_in_flight_busy; }));
  add(uint_setting(
      "batches.max_items", 1, 1'000'000,
      "requests in one `/v1/batches` input file; a larger file fails its batch",
      [](auto& c) -> auto& { return c.batches.max_items; }));
  add(uint_setting(
      "api.max_waiting_per_client", 0, 1 << 20,
      "waiting requests one client may have; more get 429 (others are still served); `0`: no cap",
      [](auto& c) -> auto& { return c.api.max_waiting_per_client; }));
  {
    Setting keys =
        base("api.keys_file", {}, "path",
             "API keys, one a line, `KEY` or `NAME:KEY`, then optionally that key's limits "
             "`rpm=N tpm=N` (`#` comments); with `--api-key` and `$TROUPE_API_KEY` (see "
             "[Securing troupe](#securing-troupe)); re-read on SIGHUP");
    keys.read_text = [](ServerConfig& c, std::string_view t, const std::string&) {
      if (t.empty()) {
        c.access.keys_file.reset();
      } else {
        c.access.keys_file = std::filesystem::path(t);
      }
    };
    keys.read_json = [read = keys.read_text](ServerConfig& c, element v, const std::string& where) {
      read(c, json_string(v, where), where);
    };
    keys.show = [](const ServerConfig& c) {
      return c.access.keys_file ? c.access.keys_file->string() : std::string("\"\"");
    };
    add(std::move(keys));
  }
  {
    Setting key =
        base({}, "--api-key", "KEY",
             "require `Authorization: Bearer KEY` on /v1/*, /tokenize, /detokenize, the "
             "WebSocket chat and (api.metrics_require_key) /metrics; repeatable; never read "
             "from the config file");
    key.repeatable = true;
    key.read_text = [](ServerConfig& c, std::string_view t, const std::string&) {
      c.access.keys.emplace_back(t);
    };
    key.clear = [](ServerConfig&) {};  // keys from the command line add to $TROUPE_API_KEY's
    key.show = [](const ServerConfig&) { return std::string("none"); };
    add(std::move(key));
  }
  add(uint_setting(
      "api.rate_limit_rpm", 0, uint64_t{1} << 40,
      "requests per minute each API key may start (HTTP, WebSocket chats, batch items); more "
      "get 429 with OpenAI's `x-ratelimit-*` headers and `Retry-After`; a keys-file `rpm=` "
      "overrides it per key; `0`: no limit ([per-key limits](#per-key-rate-limits))",
      [](auto& c) -> auto& { return c.access.default_limits.requests_per_minute; }));
  add(uint_setting(
      "api.rate_limit_tpm", 0, uint64_t{1} << 40,
      "tokens per minute (prompt + completion) each API key may use, counted as requests end; "
      "a keys-file `tpm=` overrides it per key; `0`: no limit",
      [](auto& c) -> auto& { return c.access.default_limits.tokens_per_minute; }));
  add(bool_setting(
      "api.metrics_require_key", "with keys configured, `/metrics` needs one too",
      [](auto& c) -> auto& { return c.access.metrics_require_key; }));
}

// Disaggregated prefill/decode, and KV-cache events for routers.
void add_disagg_and_kv_events_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  const auto non_empty = [](std::string_view t, const std::string& where) {
    if (t.empty()) throw ConfigError(fmt::format("{}: must not be empty", where));
  };
  add(enum_setting(
      "disagg.role",
      {{"combined", disagg::Role::kCombined},
       {"prefill", disagg::Role::kPrefill},
       {"decode", disagg::Role::kDecode}},
      "`prefill` or `decode`: [disaggregated prefill/decode](#disaggregated-prefilldecode) across "
      "two servers",
      [](auto& c) -> auto& { return c.disagg.role; }, "--role"));
  add(prefill_urls_setting());
  add(uint_setting(
      "disagg.min_remote_prefill_tokens", 1, 1 << 24, "shorter prompts are prefilled locally",
      [](auto& c) -> auto& { return c.disagg.min_remote_prefill_tokens; }));
  add(ms_setting(
      "disagg.kv_lease_ms", 100, 3'600'000,
      "prefill role: how long a finished prefill's KV waits to be pulled",
      [](auto& c) -> auto& { return c.disagg.kv_lease; }));
  add(ms_setting(
      "disagg.prefill_timeout_ms", 100, 3'600'000,
      "decode role: a slower prefill call falls back to a local prefill",
      [](auto& c) -> auto& { return c.disagg.prefill_timeout; }));
  add(ms_setting(
      "disagg.pull_timeout_ms", 100, 3'600'000,
      "decode role: a slower KV pull falls back to a local prefill",
      [](auto& c) -> auto& { return c.disagg.pull_timeout; }));
  add(text_setting(
      "disagg.advertise_host",
      "`remote_host` in `kv_transfer_params`, and the host peers read KV from (`tcp` transport); "
      "empty: the listen host, `127.0.0.1` for `0.0.0.0`",
      [](auto& c) -> auto& { return c.disagg.advertise_host; }, "--advertise-host"));
  add(enum_setting(
      "disagg.kv_transport",
      {{"tcp", disagg::KvTransportKind::kTcp}, {"ucx", disagg::KvTransportKind::kUcx}},
      "what moves KV between prefill and decode servers: `tcp` (troupe's own sockets; a dead "
      "peer is an error, never fatal) or `ucx` (for RDMA hosts); both ends must agree",
      [](auto& c) -> auto& { return c.disagg.kv_transport; }, "--kv-transport"));
  add(uint_setting(
      "disagg.kv_port", 0, 65535,
      "`tcp` transport: the port peers read KV from, on `http.host` (0 picks a free one)",
      [](auto& c) -> auto& { return c.disagg.kv_port; }, "--kv-port"));
  add(text_setting(
      "disagg.ucx_tls",
      "`ucx` transport: UCX transports for KV pulls, e.g. `tcp`; empty: `UCX_TLS` or UCX's choice",
      [](auto& c) -> auto& { return c.kv_transport_tls; }, "--ucx-tls"));

  add(bool_setting(
      "kv_events.enabled",
      "publish KV-cache events for prefix-aware routers ([Running many "
      "replicas](#running-many-replicas))",
      [](auto& c) -> auto& { return c.kv_events.enabled; }));
  add(text_setting(
      "kv_events.endpoint",
      "ZeroMQ PUB address (bound when it has `*` or `::` or is `ipc://`, else connected, as vLLM "
      "does)",
      [](auto& c) -> auto& { return c.kv_events.endpoint; }, {}, non_empty));
  add(text_setting(
      "kv_events.replay_endpoint", "ROUTER address for replay (`\"\"`: none)",
      [](auto& c) -> auto& { return c.kv_events.replay_endpoint; }));
  add(text_setting(
      "kv_events.topic", "first frame of every message; llm-d expects `kv@<pod IP>@<model>`",
      [](auto& c) -> auto& { return c.kv_events.topic; }, "--kv-events-topic"));
  add(text_setting(
      "kv_events.hash_seed",
      "seed of the block hashes: the router's `hashSeed`, vLLM's `PYTHONHASHSEED`",
      [](auto& c) -> auto& { return c.kv_events.hash_seed; }));
  add(enum_setting(
      "kv_events.format",
      {{"map", kv_cache::KvEventFormat::kMap}, {"array", kv_cache::KvEventFormat::kArray}},
      "`map` (vLLM 0.24+: each event a tagged map) or `array` (vLLM up to 0.23: tagged positional "
      "arrays)",
      [](auto& c) -> auto& { return c.kv_events.format; }));
  add(uint_setting(
      "kv_events.buffer_steps", 1, 10'000'000, "batches kept for replay",
      [](auto& c) -> auto& { return c.kv_events.buffer_steps; }));
  add(uint_setting(
      "kv_events.hwm", 1, 100'000'000, "PUB high-water mark per subscriber",
      [](auto& c) -> auto& { return c.kv_events.hwm; }));
  add(uint_setting(
      "kv_events.max_queue_batches", 1, 10'000'000,
      "engine→publisher queue (beyond: dropped, counted)",
      [](auto& c) -> auto& { return c.kv_events.max_queue_batches; }));
}

// The admin socket.
void add_admin_settings(std::vector<Setting>& s) {
  auto add = [&s](Setting setting) { s.push_back(std::move(setting)); };
  add(bool_setting(
      "admin.enabled", "the admin socket", [](auto& c) -> auto& { return c.admin.enabled; }));
  add(text_setting(
      "admin.socket_path",
      "the admin Unix socket; empty: `$XDG_RUNTIME_DIR/troupe.sock`, else "
      "`/tmp/troupe-$UID/troupe.sock` (`troupe admin --socket P` talks to it)",
      [](auto& c) -> auto& { return c.admin.socket_path; }, "--admin-socket"));
  add(uint_setting(
      "admin.max_connections", 1, 4096,
      "admin connections; at the cap a newcomer closes the one idle the longest (refused "
      "only when none is idle: all run a command or a watch)",
      [](auto& c) -> auto& { return c.admin.max_connections; }));
  add(ms_setting(
      "admin.idle_timeout_ms", 1, 86'400'000,
      "an admin connection with no command for this long is closed (a running `watch` is not idle)",
      [](auto& c) -> auto& { return c.admin.idle_timeout; }));
  add(uint_setting(
      "admin.max_line_bytes", 1024, 16u << 20,
      "a longer command line gets an error and the connection closes",
      [](auto& c) -> auto& { return c.admin.max_line_bytes; }));
  add(bool_setting(
      "admin.tcp.enabled", "the optional token-guarded TCP admin listener",
      [](auto& c) -> auto& { return c.admin.tcp.enabled; }));
  add(text_setting(
      "admin.tcp.host", "its address (a non-loopback one is logged as a warning)",
      [](auto& c) -> auto& { return c.admin.tcp.host; }));
  add(uint_setting(
      "admin.tcp.port", 0, 65535, "its port (0 picks a free one)",
      [](auto& c) -> auto& { return c.admin.tcp.port; }));
  add(text_setting(
      "admin.tcp.token_file",
      "the file whose trimmed content is the bearer token (required when enabled)",
      [](auto& c) -> auto& { return c.admin.tcp.token_file; }));
}

}  // namespace

std::vector<Setting> build_settings() {
  std::vector<Setting> s;
  add_server_settings(s);
  add_http_settings(s);
  add_scheduler_settings(s);
  add_backends_settings(s);
  add_api_settings(s);
  add_disagg_and_kv_events_settings(s);
  add_admin_settings(s);
  return s;
}

}  // namespace troupe::app
