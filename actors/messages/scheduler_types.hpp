// The scheduler's vocabulary that other actors see: a new request and where its KV may already
// be, why a sequence finished, admission results, the per-step update, stats and the slots view,
// and the disaggregated prefill/decode handoff. (StepPlan, the policy's own output, is in
// scheduler/step_plan.hpp.)
//
// Thread-safety: plain values; built on the scheduler's executor, safe to move to any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/kv_types.hpp"
#include "actors/messages/priority.hpp"
#include "gpu/step.hpp"
#include "model/pooling.hpp"
#include "model/sampling_params.hpp"

namespace troupe::model::grammar {
class CompiledGrammar;
}

namespace troupe::scheduler {

// Chosen by the engine; doubles as gpu::SequenceSlice::seq_id.
using RequestId = uint64_t;

// Disaggregated prefill/decode, decode side: where a request's prompt KV already is. A prefill
// server computed token_ids[0, num_tokens) into `block_ids` of its pool and holds them under a
// lease named `request_id`; the kv-cache actor pulls them (scheduler_remote_kv.cpp).
struct RemoteKvSource {
  std::string engine_id;  // the prefill server's (its KV metadata must carry the same id)
  std::string host;       // its HTTP surface (metadata handshake, lease release)
  int32_t port = 0;
  std::string request_id;  // the lease to release once pulled
  std::vector<int32_t> block_ids;
  // KV groups: groups 1..'s tables, each as long as block_ids, -1 where freed (the prefill
  // server keeps the pages the next token's window reaches).
  std::vector<std::vector<int32_t>> sliding_block_ids;
  int32_t num_tokens = 0;
};

// What the engine hands the scheduler for a new generation (prompt already tokenized).
struct NewRequest {
  RequestId request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  model::StopConditions stop;
  Priority priority = Priority::kNormal;
  // Who sent it, for fair share (SchedulerConfig::fairness): an opaque key chosen upstream (API
  // key, user, connection). Requests with equal keys are one client; "" is a client too.
  std::string client;
  // Prefill side of P/D: when it finishes (not cancelled), keep its KV blocks held for a decode
  // server to pull, until release_transferred() (see FinishedSequence::held_kv).
  bool hold_kv_when_finished = false;
  // Decode side of P/D: the prompt's KV is on a prefill server. With first_token_id (sampled
  // there) the sequence starts with that token generated; without, the prompt's last position
  // is recomputed here to sample from, as vLLM's decode side does.
  std::optional<RemoteKvSource> remote_kv;
  std::optional<int32_t> first_token_id;
  // Structured output (issue 19): the compiled grammar every generated token must follow. Only
  // the scheduler actor's StructuredOutput reads it (the policy never does); ingress keeps such
  // requests local (no remote prefill, no KV transfer).
  std::shared_ptr<const model::grammar::CompiledGrammar> grammar;
  // Prompt outputs (issue 37). prompt_logprobs >= 0: score every prompt token after the first,
  // with that many alternatives. pooling: an embedding of the prompt's final-norm hidden states.
  // Either computes the whole prompt (no prefix-cache hit). prompt_only: nothing is sampled; the
  // sequence finishes (kPromptDone) once its prompt is computed (max_tokens may then be 0).
  int32_t prompt_logprobs = -1;
  std::optional<model::Pooling> pooling;
  bool prompt_only = false;
};

enum class FinishReason : uint8_t {
  kEos,          // the model emitted one of the config's eos_token_ids
  kStopToken,    // one of the request's stop_token_ids
  kStopString,   // the detokenizer matched a stop string (finish() from the ingress side)
  kMaxTokens,    // generated StopConditions::max_tokens
  kMaxModelLen,  // prompt + generated reached max_model_len
  kCancelled,    // cancel(): client went away, admin cancel, ...
  kGrammarEnd,   // structured output: the grammar accepted its end (or, a bug, refused a token)
  kPromptDone,   // a prompt-only sequence (embedding, echo with max_tokens 0) computed its prompt
};

std::string_view to_string(FinishReason reason);
// OpenAI's finish_reason: "stop" | "length" | "cancelled".
std::string_view openai_finish_reason(FinishReason reason);

// add_request()/admit_transferred() outcome. Refusals are values (HTTP 429/400/413 upstream).
enum class AddResult : uint8_t {
  kAccepted,
  kQueueFull,         // max_queue requests already wait: retry later (429 + Retry-After)
  kClientQueueFull,   // this client already has max_waiting_per_client waiting: 429 to it only
  kEmptyPrompt,       // nothing to condition on
  kInvalidMaxTokens,  // max_tokens < 1
  kPromptTooLong,     // prompt leaves no room below max_model_len
  kNeverFits,         // its KV could not fit even in the whole, empty pool
  kDuplicateId,       // the id is already in use here
  kRetryLater,        // admit_transferred only: no sequence slot or blocks free right now
};
std::string_view to_string(AddResult result);

struct GeneratedToken {
  RequestId request_id = 0;
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<gpu::TokenLogprob> top_logprobs;
  int32_t num_generated_tokens = 0;  // including this one; 1 means "first token"
};

// The KV a finished hold_kv_when_finished sequence left held for a decode server: blocks
// holding token positions [0, num_tokens), and the token sampled after them.
struct HeldKv {
  std::vector<kv_cache::BlockId> block_ids;
  int32_t num_tokens = 0;
  int32_t first_token_id = -1;
  // KV groups: groups 1..'s pages at the same positions, kNoBlock where out of the window.
  std::vector<std::vector<kv_cache::BlockId>> sliding_block_ids;
};

struct FinishedSequence {
  RequestId request_id = 0;
  FinishReason reason = FinishReason::kEos;
  int32_t num_prompt_tokens = 0;
  int32_t num_generated_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  std::optional<HeldKv> held_kv;  // set when the KV stays held until release_transferred()
};

// Prompt logprobs of one sequence: prompt tokens [first_position + 1, ...) scored by the
// logits of positions [first_position, ...) (gpu::PromptScores).
struct PromptLogprobs {
  RequestId request_id = 0;
  int32_t first_position = 0;
  std::vector<gpu::ScoredToken> tokens;
};

// A prompt-only sequence's embedding, pooled (not normalized), sent with its finish.
struct Embedding {
  RequestId request_id = 0;
  std::vector<float> values;
};

// Result of on_step_complete(): every token sampled this step, then who finished and why.
// The engine turns it into one TokenEvents message per step. Prompt logprobs come before the
// tokens of the same sequence (a sequence's prompt is scored before its first sample).
struct StepUpdate {
  uint64_t step_id = 0;
  std::vector<PromptLogprobs> prompt_logprobs;
  std::vector<Embedding> embeddings;
  std::vector<GeneratedToken> tokens;
  std::vector<FinishedSequence> finished;
  // kPrefillOnly: sequences parked this step, ready for take_completed_prefill().
  std::vector<RequestId> prefill_completed;
};

struct SchedulerStats {
  int32_t num_waiting = 0;            // in the queue, preempted ones included
  int32_t num_preempted_waiting = 0;  // ... of which were preempted at least once
  int32_t num_running = 0;
  int32_t num_awaiting_transfer = 0;   // parked or handed off, KV still held here
  int32_t num_awaiting_kv = 0;         // decode side: blocks allocated, remote pull in flight
  uint64_t num_kv_pulls = 0;           // pull orders issued
  uint64_t num_kv_pull_fallbacks = 0;  // pulls that failed: the prompt was computed here
  kv_cache::KvCacheStats kv;
  double prefix_cache_hit_rate = 0.0;
  int32_t num_waiting_clients = 0;  // clients with at least one waiting request
  uint64_t num_preemptions = 0;
  uint64_t num_fairness_preemptions = 0;  // ... of which made room for a lighter client
  uint64_t num_time_budgeted_steps = 0;   // steps whose prefill the step-time budget cut
  uint64_t num_first_token_steps = 0;     // steps of newcomers' prompts alone
  uint64_t num_interrupted_steps = 0;     // steps given up for a newcomer's first token
  uint64_t num_prefix_deferrals = 0;      // admissions postponed for an in-flight shared block
  uint64_t num_steps = 0;
  int32_t last_step_num_tokens = 0;
  int32_t last_step_num_seqs = 0;
  uint64_t num_requests_accepted = 0;
  uint64_t num_requests_refused = 0;
  uint64_t num_requests_finished = 0;
  uint64_t num_prompt_tokens = 0;     // of accepted requests
  uint64_t num_generated_tokens = 0;  // sampled, over all requests
  // Speculative decoding (vLLM's spec_decode counters): verify spans, drafts in them, drafts
  // accepted. Acceptance rate = accepted / draft tokens.
  uint64_t num_spec_drafts = 0;
  uint64_t num_spec_draft_tokens = 0;
  uint64_t num_spec_accepted_tokens = 0;
};

enum class SlotPhase : uint8_t { kWaiting, kPreempted, kPrefill, kDecode, kAwaitingTransfer };
std::string_view to_string(SlotPhase phase);

// One line of the admin socket's `requests` view (llama.cpp's /slots).
struct SlotInfo {
  RequestId request_id = 0;
  SlotPhase phase = SlotPhase::kWaiting;
  Priority priority = Priority::kNormal;
  std::string client;
  int32_t num_prompt_tokens = 0;
  int32_t num_tokens = 0;
  int32_t num_computed_tokens = 0;
  int32_t num_generated_tokens = 0;
  int32_t max_tokens = 0;
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_blocks = 0;
  int32_t num_preemptions = 0;
  uint64_t arrival_step = 0;
  uint64_t first_scheduled_step = 0;
  uint64_t first_token_step = 0;
};

// A prefilled sequence moving from a kPrefillOnly scheduler to another one. source_blocks hold
// the KV of token_ids[0, num_computed_tokens) in the source pool, and stay held there until the
// source's release_transferred(request_id), i.e. until the KV copy is done.
struct PrefillHandoff {
  RequestId request_id = 0;
  std::vector<int32_t> token_ids;  // prompt + generated (at least the first sampled token)
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;
  std::vector<kv_cache::BlockId> source_blocks;
  model::SamplingParams sampling;
  model::StopConditions stop;
  Priority priority = Priority::kNormal;
  std::string client;
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  uint64_t first_token_step = 0;  // in the source scheduler's step count
};

// Copy the KV of one block of the source pool into one block of the destination pool.
struct BlockCopy {
  kv_cache::BlockId source = kv_cache::kNoBlock;
  kv_cache::BlockId destination = kv_cache::kNoBlock;
};

// Decode side: fill `copies` (source = the prefill server's block, destination = ours) from
// the remote pool, then report kv_resident(request_id, ok).
struct KvPullOrder {
  RequestId request_id = 0;
  RemoteKvSource source;
  std::vector<BlockCopy> copies;
};

// What the scheduler decided outside a step: the kv-cache actor's work (pulls, and leases on
// prefill servers no longer needed), and tokens/finishes to report (a remote first token).
struct KvWork {
  std::vector<KvPullOrder> pulls;
  std::vector<RemoteKvSource> releases;
  StepUpdate events;  // step_id 0

  bool empty() const {
    return pulls.empty() && releases.empty() && events.tokens.empty() && events.finished.empty();
  }
};

struct TransferAdmission {
  AddResult result = AddResult::kAccepted;
  // Blocks the destination did not already have in its prefix cache. They must be copied
  // before the destination's next planned step runs.
  std::vector<BlockCopy> copies;
};

}  // namespace troupe::scheduler
