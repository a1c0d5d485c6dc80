// SchedulerConfig: the knobs of the scheduling policy and of the KV pool it manages, loaded from
// configs/*.json by the app and passed in whole (no long argument lists).
//
// Thread-safety: plain values; copy freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/backend_defaults.hpp"

namespace troupe::scheduler {

// Disaggregated prefill/decode (docs/design.md §2): a kPrefillOnly scheduler parks every sequence
// whose prompt is computed and first token sampled, for take_completed_prefill(); any scheduler
// can take such a sequence in with admit_transferred().
enum class SchedulerRole : uint8_t { kPrefillAndDecode, kPrefillOnly };

// Who goes next among waiting requests of equal priority (issue 13).
//   kFifo    first come, first served: whoever floods the queue owns it.
//   kClient  round robin across clients (NewRequest::client), and a request of a client with
//            few running sequences may preempt one of a client with many (fair share).
enum class Fairness : uint8_t { kFifo, kClient };

// Speculative decoding (issue 21), vLLM's `speculative_config` names: with method kNgram a
// decoding sequence proposes up to num_speculative_tokens draft tokens by prompt lookup
// (ngram_proposer.hpp) and the step verifies them, emitting every accepted draft plus one
// token sampled by the model. Only a backend that verifies spans may get drafts
// (gpu::Backend::supports_speculation(); the engine turns speculation off otherwise).
enum class SpeculativeMethod : uint8_t { kNone, kNgram };

// A verify span computes logits at each of its 1 + k positions; past a few drafts prompt
// lookup rarely stays right, so a larger k only spends compute.
inline constexpr int32_t kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int32_t num_speculative_tokens = 0;  // k: drafts per step at most (required with kNgram)
  // The n-gram lengths matched against the sequence's own tokens: the longest match in
  // [prompt_lookup_min, prompt_lookup_max] wins (vLLM's defaults: 5 and 5 when both are unset,
  // the other's value when one is).
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;
  // No drafts in a step that decodes more sequences than this (vLLM's disable_by_batch_size):
  // a large batch is bound by arithmetic, and there a draft row costs about what a decoded
  // token brings. 0: never disabled (vLLM's default); troupe's config default is 4 (measured
  // on the CPU backend, bench/RESULTS.md).
  int32_t disable_by_batch_size = 0;

  bool enabled() const { return method != SpeculativeMethod::kNone && num_speculative_tokens > 0; }
};

std::string_view to_string(SpeculativeMethod method);
// "none" | "ngram"; nullopt for anything else.
std::optional<SpeculativeMethod> parse_speculative_method(std::string_view text);

struct SchedulerConfig {
  int32_t max_num_seqs = gpu::defaults::kMaxNumSeqs;  // sequences in one step
  // Tokens in one step (decode + prefill).
  int32_t max_num_batched_tokens = gpu::defaults::kMaxNumBatchedTokens;
  int32_t chunked_prefill_size = 2048;    // most prompt tokens one sequence computes per step;
                                          // 0: only the step budget limits a chunk
  int32_t max_model_len = 8192;           // prompt + generated tokens of one sequence
  int32_t max_queue = 1024;               // waiting requests (incl. preempted) before refusing
  int32_t block_size = gpu::defaults::kBlockSize;  // tokens per KV block
  int32_t num_blocks = 4096;              // KV blocks in the pool
  bool enable_prefix_caching = true;
  // The backend's KV groups (gpu/kv_groups.hpp): > 1 for a sliding-window model, whose sliding
  // groups keep the last sliding_window tokens' pages. Set from the backend, not configured.
  int32_t num_kv_groups = 1;
  int32_t sliding_window = 0;
  // A waiting request may preempt a running one of strictly lower priority when blocks or
  // sequence slots run out.
  bool enable_priority_preemption = true;
  Fairness fairness = Fairness::kClient;
  // Waiting requests one client may have; past it only that client is refused
  // (kClientQueueFull). 0: no per-client cap (max_queue still holds).
  int32_t max_waiting_per_client = 0;
  // Step-time budget (stall-free batching): while sequences decode, prefill chunks are sized so
  // the step's predicted time (StepCostModel, fitted by the actor) stays under this, so no
  // stream waits longer than about this between two tokens. 0: off (token budget only).
  double max_step_ms = 0;
  // First-token steps (scheduler.hpp): on a flooded server a newcomer's prompt runs in a step of
  // its own while the running streams wait that step. They buy newcomers' TTFT with the running
  // streams' inter-token latency (bench/RESULTS.md: a flood's lone client 104 ms median instead
  // of 158-242; ITL p99 155-160 ms instead of 110 at 64 streams of one-request connections).
  // false: steady ITL, newcomers' prompts join the decodes' steps.
  bool first_token_steps = true;
  // First-token interrupts (scheduler.hpp): a newcomer due a first-token step may have the step
  // in flight given up for it (while that step is in its first half), instead of waiting for it.
  // Only with first_token_steps, and only where the backend can stop a step (the CPU backend).
  bool first_token_interrupts = true;
  // The model's end-of-generation ids (GGUF eos / eot). Finish a sequence unless ignore_eos;
  // StopConditions::stop_token_ids finish it regardless.
  std::vector<int32_t> eos_token_ids;
  SchedulerRole role = SchedulerRole::kPrefillAndDecode;
  SpeculativeConfig speculative;
};

// nullopt when the config is usable, else what is wrong with it.
std::optional<std::string> validate(const SchedulerConfig& config);

std::string_view to_string(SchedulerRole role);
std::string_view to_string(Fairness fairness);
// "fifo" | "client"; nullopt for anything else.
std::optional<Fairness> parse_fairness(std::string_view text);

}  // namespace troupe::scheduler
