// EngineConfig: everything the engine needs to start — the model, the backend, the scheduling
// policy and the request limits. Built by app/ from configs/*.json and flags.
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "actors/disagg/disagg_config.hpp"
#include "actors/kv_cache/events/kv_events_config.hpp"
#include "actors/scheduler/scheduler_config.hpp"
#include "gpu/backend_defaults.hpp"
#include "gpu/backend_factory.hpp"
#include "gpu/cpu/attention_tiled_bf16.hpp"

namespace troupe::engine {

// Which backend (auto, cpu, cuda): the factory's own enum, so no layer translates it.
using BackendKind = gpu::BackendRequest;

struct CpuBackendOptions {
  int num_threads = 0;                    // 0: every core
  int64_t kv_memory_bytes = gpu::defaults::kCpuKvMemoryBytes;  // when scheduler.num_blocks is 0
  // Prompt attention: llama.cpp's exact bits, or bf16 (faster long prompts on CPUs with
  // AVX512-BF16, AMX above all; gpu/cpu/attention_tiled_bf16.hpp says what it changes).
  gpu::cpu::PrefillAttentionPrecision prefill_attention = gpu::cpu::PrefillAttentionPrecision::kExact;
};

// The KV cache (the config's "cache" object): its number format, what vLLM calls
// --kv-cache-dtype and llama.cpp -ctk/-ctv. q8_0 (CPU backend) holds 1.88x the tokens of f16 in
// the same memory (gpu/kv_dtype.hpp), with llama.cpp's own q8_0-cache arithmetic.
struct CacheOptions {
  gpu::KvDtype kv_dtype = gpu::KvDtype::kF16;
};

// The CUDA backend's memory budget (the config's "cuda" object). Its batch sizes are the
// scheduler's (engine.cpp's backend_options_of derives them), not settings of their own.
struct CudaBackendOptions {
  // Of the device's memory: weights + scratch + KV blocks.
  double gpu_memory_utilization = gpu::defaults::kGpuMemoryUtilization;
};

// Structured output's grammar compiler (model/grammar/grammar_compiler.hpp), the config file's
// "structured_output" object. Compilation has no time bound of its own in xgrammar: the size
// bound is what keeps a request from holding the prompt worker long.
struct StructuredOutputOptions {
  int32_t grammar_cache_size = 64;          // compiled grammars kept (LRU); 0: no cache
  int64_t max_grammar_bytes = 64ll << 10;   // a larger schema/regex/grammar is a 400, not compiled
  // Longest run of whitespace between JSON tokens (small models can emit newlines forever inside
  // an object); 0: unbounded, as xgrammar's default.
  int32_t json_max_whitespace = 4;
  int32_t compile_threads = 1;              // xgrammar's threads per compilation (1: the caller's)
};

struct EngineConfig {
  std::filesystem::path model_path;
  std::string model_id;        // served name; empty: derived from the file name
  std::string chat_template;   // template name ("chatml", "llama3", ...); empty: detect
  BackendKind backend = BackendKind::kAuto;
  CpuBackendOptions cpu;
  CudaBackendOptions cuda;
  CacheOptions cache;
  StructuredOutputOptions structured_output;
  // Policy knobs. num_blocks 0: sized by the backend from its memory budget. max_model_len 0:
  // the model's context length. eos_token_ids empty: the tokenizer's end-of-generation set.
  // The step budget suits the CPU backend (gpu/backend_defaults.hpp; configs/default.json
  // equals it, which a test checks): a 2048-token step of the default model takes ~2 s on two
  // cores, and every decoding stream waits for it, so prompts go in 512-token chunks.
  // max_step_ms 100: while streams decode, no step is planned past 100 ms, i.e. every stream
  // keeps >= 10 tokens/s (faster than anyone reads) whatever prompt arrives. A decode step of
  // the default model with 4-16 streams takes 10-40 ms on two cores, so the other 60-90 ms
  // still go to prefill, and a prompt's first token is late by little (issue 13's targets:
  // ITL p99 <= 150 ms during a long prefill, its TTFT <= 1.3x alone).
  // max_waiting_per_client 256: a quarter of max_queue, so one client can never fill the queue.
  // Speculative decoding on (n-gram drafts, k 4, lookup n in [2, 4], none past 4 decoding
  // sequences): measured on the default model and two cores (bench/RESULTS.md), copying text
  // at one stream runs ~1.5-2x faster, free chat within noise (its short failing spans are cut
  // to one draft by the adaptive rule), and 16 streams do not draft. A backend that cannot
  // verify spans (CUDA) runs without drafts.
  scheduler::SchedulerConfig scheduler = [] {
    scheduler::SchedulerConfig defaults;
    defaults.max_model_len = 0;
    defaults.num_blocks = 0;
    defaults.chunked_prefill_size = 512;
    defaults.max_step_ms = 100;
    defaults.fairness = scheduler::Fairness::kClient;
    defaults.max_waiting_per_client = 256;
    defaults.speculative = {.method = scheduler::SpeculativeMethod::kNgram,
                            .num_speculative_tokens = 4,
                            .prompt_lookup_min = 2,
                            .prompt_lookup_max = 4,
                            .disable_by_batch_size = 4};
    return defaults;
  }();
  int32_t default_max_tokens = 0;  // when a request names none; 0: up to the context length
  int32_t max_stop_strings = 16;
  int32_t mailbox_capacity = 4096;  // per actor; a full ingress mailbox refuses submits
  std::chrono::milliseconds stats_window{10'000};  // tokens/s is averaged over this window
  disagg::DisaggConfig disagg;
  // disagg.kv_transport ucx only: UCX's transports ("tcp", "posix,cma"); empty: UCX_TLS or
  // UCX's choice. The tcp transport's settings are in `disagg`.
  std::string kv_transport_tls;
  kv_cache::KvEventsConfig kv_events;  // KV-cache events for prefix-aware routers (issue 20)
};

// What the backend is built with: the engine's backend settings, and the sizes it must cover,
// derived from the scheduling policy (`policy`: the config's, completed by the engine) here and
// nowhere else: the policy never plans a step past max_num_batched_tokens tokens or
// max_num_seqs sampling rows, and the KV blocks are the policy's.
gpu::BackendOptions backend_options_of(const EngineConfig& config,
                                       const scheduler::SchedulerConfig& policy);

}  // namespace troupe::engine
