// Values that cross the Engine facade: what a client asks for, what it gets back, and the
// snapshots the admin socket and /metrics read.
//
// Thread-safety: plain values, except RequestSink, whose contract is below.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/disagg_types.hpp"
#include "actors/messages/priority.hpp"
#include "model/chat_template.hpp"
#include "model/grammar/grammar_spec.hpp"
#include "model/model_info.hpp"
#include "model/pooling.hpp"
#include "model/sampling_params.hpp"

namespace troupe::engine {

using RequestId = uint64_t;

enum class RequestOrigin : uint8_t { kHttp, kWebSocket, kBatch, kCli };
std::string_view to_string(RequestOrigin origin);

// What a request computes, for metrics and the access log: text (chat or completion), an
// embedding, or a prompt's scores alone (echo with max_tokens 0: nothing generated).
enum class RequestKind : uint8_t { kGenerate, kEmbedding, kScore };
std::string_view to_string(RequestKind kind);

// One input of an embeddings request: text (tokenized as llama-server does for /v1/embeddings:
// BOS and EOS as the model's tokenizer adds them, special tokens parsed) or token ids as given.
struct EmbeddingInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

// An embeddings request (issue 37). Each input is its own prefill-only sequence (input i is
// choice i, as with `n`): admitted together, cancelled together, sharing the step and token
// budgets, fairness and priorities with generation; none samples, none enters the prefix cache.
// The Completion carries one raw pooled vector per input; net truncates and normalizes.
struct EmbeddingSpec {
  model::Pooling pooling = model::Pooling::kMean;
  std::vector<EmbeddingInput> inputs;
};

// A generation request after the wire codec checked its types. Exactly one input is set:
// chat messages (ingress applies the model's chat template), prompt text, or prompt token ids.
struct GenerateRequest {
  RequestOrigin origin = RequestOrigin::kHttp;
  std::string client_label;  // the client's own id (WS id, batch custom_id), for logs and admin
  // Who the request counts against for fair share and api.max_waiting_per_client (net's
  // client_key(): API key hash, user, or connection). Requests with equal keys are one client.
  std::string client;
  std::vector<model::ChatMessage> messages;
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  model::StopConditions stop;  // stop.max_tokens <= 0: as many as the context leaves
  Priority priority = Priority::kNormal;
  bool include_stop_string_in_output = false;
  // Disaggregated prefill/decode, vLLM's field: do_remote_decode (a prefill server holds the
  // KV for a decode server) or do_remote_prefill (the KV is on that prefill server).
  std::optional<disagg::KvTransferParams> kv_transfer;
  // OpenAI's `n`: choices sampled from the one prompt, each its own sequence (choice i samples
  // with sampling.seed + i), admitted together, cancelled together, one sink for all.
  int32_t n = 1;
  // Structured output (issue 19): what the whole generated text must match, from
  // `response_format`, `structured_outputs` or vLLM's older `guided_*` fields; compiled on a
  // prompt worker, enforced by a token mask per step. `structured_output_field` names the field
  // it came from, for the 400 when it does not compile.
  std::optional<model::grammar::GrammarSpec> structured_output;
  std::string structured_output_field;
  // OpenAI tool calling (issue 19), chat only: `tools` are rendered into the prompt by the chat
  // template; unless tool_choice is "none", ingress builds the grammar that enforces the choice
  // (model/tool_calling.hpp) and net parses the calls out of the text (tool_call_parser.hpp).
  std::vector<model::ToolDefinition> tools;
  model::ToolChoice tool_choice;
  // Whether the output is parsed for tool calls (tools given and tool_choice not "none").
  bool parses_tool_calls() const {
    return !tools.empty() && tool_choice.mode != model::ToolChoiceMode::kNone;
  }
  // Completions' `echo`: every choice's first delta carries the prompt (engine::PromptEcho).
  bool echo = false;
  // Prompt logprobs (echo with logprobs, vLLM's `prompt_logprobs`): -1 off; else every prompt
  // token after the first gets its logprob, rank and this many top alternatives. The prompt is
  // then computed whole (no prefix-cache hit: every position's logits are needed).
  int32_t prompt_logprobs = -1;
  // Set: an embeddings request (the prompt fields, sampling and stop are unused; n = inputs).
  std::optional<EmbeddingSpec> embedding;
  // Scoring without generating: echo with max_tokens 0 (the prompt is computed, nothing sampled;
  // each choice ends "length" with 0 completion tokens).
  bool prompt_only = false;

  RequestKind kind() const {
    if (embedding) return RequestKind::kEmbedding;
    return prompt_only ? RequestKind::kScore : RequestKind::kGenerate;
  }
};

enum class ErrorCode : uint8_t {
  kInvalidRequest,  // 400: bad parameter value, empty prompt, ...
  kPromptTooLong,   // 400: prompt + max_tokens exceed the context
  kQueueFull,       // 429 + Retry-After
  kDraining,        // 503: the server is shutting down
  kInternal,        // 500: the backend failed the step
};
std::string_view to_string(ErrorCode code);
int http_status(ErrorCode code);

struct RequestError {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string param;  // the offending request field, when there is one
};

struct TokenInfo {
  int32_t token_id = 0;
  std::string text;  // this token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // (token id, logprob), best first
  int32_t rank = 0;  // prompt tokens: 1 + tokens with a higher logit (vLLM's rank); 0: unknown
  bool has_logprob = true;  // false: an echoed prompt token that was not scored (the first one)
};

// A choice's prompt, echoed (GenerateRequest::echo) or scored (prompt_logprobs >= 0): its text
// (the prompt as given, or its ids detokenized) and tokens. When scored, tokens[i] for i >= 1
// holds the logprob of prompt token i given tokens [0, i); tokens[0] has none (null on the wire,
// as OpenAI and vLLM answer).
struct PromptEcho {
  std::string text;
  std::vector<TokenInfo> tokens;
  bool scored = false;
};

// New output of one step for one request. `text` is whole UTF-8 characters only; it may be empty
// while a multi-byte character or a possible stop string is held back.
struct TokenDelta {
  int32_t index = 0;  // the choice it belongs to (GenerateRequest::n)
  // Echo: in the choice's first delta only, before any generated token.
  std::optional<PromptEcho> prompt;
  std::string text;
  std::vector<TokenInfo> tokens;     // filled when the request asked for logprobs
  int32_t num_generated_tokens = 0;  // so far, including this delta
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

struct Timings {
  double queue_ms = 0;  // submit -> first scheduled
  double time_to_first_token_ms = 0;
  double total_ms = 0;
  double decode_tokens_per_s = 0;  // after the first token
};

// One choice of a request ended (its last delta came before). A request of n choices ends
// each choice once, in the order they end, then gets its Completion.
struct ChoiceEnd {
  int32_t index = 0;
  std::string finish_reason;  // as Completion::finish_reason
  int32_t completion_tokens = 0;
};

struct Completion {
  // OpenAI's: "stop" | "length" | "cancelled". With n > 1 the request's overall reason:
  // "cancelled" when any choice was cancelled, else "length" when any hit its limit, else "stop"
  // (each choice's own reason is in its ChoiceEnd).
  std::string finish_reason;
  Usage usage;  // n > 1: the prompt counted once, completion tokens summed over the choices
  Timings timings;
  // A do_remote_decode request: where a decode server finds its KV (do_remote_prefill set).
  std::optional<disagg::KvTransferParams> kv_transfer;
  // An embeddings request: one pooled vector per input, in input order, as pooled (not
  // normalized). usage.prompt_tokens sums the inputs' tokens.
  std::vector<std::vector<float>> embeddings;
};

// Implemented by net per request (an HTTP stream, a WS generation, a batch item, ...).
// Called only on the ingress actor's thread, in order: on_delta* interleaved with one
// on_choice_end per choice, then exactly one of on_finish or on_error (an error may come
// before every choice ended; nothing follows it). Implementations must not block: hand the
// data to the connection's own executor.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // false: the client is gone; ingress cancels the request and sends no more deltas. The final
  // on_finish (normally "cancelled") or on_error still comes, so that every request is
  // accounted for (access log, metrics) in one place: the sink's final call.
  virtual bool on_delta(RequestId request_id, TokenDelta delta) = 0;
  // A single-choice sink may ignore it: on_finish repeats the reason.
  virtual void on_choice_end(RequestId /*request_id*/, const ChoiceEnd& /*end*/) {}
  virtual void on_finish(RequestId request_id, Completion completion) = 0;
  virtual void on_error(RequestId request_id, RequestError error) = 0;
};

// The KV cache's size as a user reads it (the start-up log, /v1/models meta, troupe admin stats):
// blocks, tokens, and how many conversations of conversation_tokens (max_model_len) fit at once.
struct KvCapacity {
  std::string dtype = "f16";  // cache.kv_dtype
  int64_t blocks = 0;
  int32_t block_size = 0;
  int64_t tokens = 0;  // blocks x block_size (a sliding-window model's pages hold one group)
  int64_t bytes = 0;
  int32_t conversation_tokens = 0;
  int64_t conversations = 0;
};

struct ModelCard {
  model::ModelInfo info;
  std::string backend;  // "cpu" | "cuda"
  // Whether the backend computes prompt outputs: embeddings and prompt logprobs (gpu::Backend::
  // supports_prompt_outputs). Without, those requests are refused naming the backend.
  bool prompt_outputs = false;
  KvCapacity kv;
  // How the chat template writes tool calls (kNone: `tools` is refused).
  model::ToolCallFormat tool_call_format = model::ToolCallFormat::kNone;
};

struct LatencySummary {
  double p50_ms = 0;
  double p99_ms = 0;
};

// The step-time budget (scheduler.max_step_ms) and the cost model it plans with, as the
// scheduler actor last fitted it, with how well its predictions matched the steps they planned.
struct StepCostStats {
  double max_step_ms = 0;  // 0: the budget is off
  bool model_usable = false;
  double fixed_ms = 0;
  double per_token_ms = 0;
  double per_context_ms = 0;  // per (query, key) attention pair
  double per_sampled_ms = 0;
  double last_predicted_ms = 0;
  double last_actual_ms = 0;
  double mean_abs_error_ratio = 0;  // |predicted - actual| / actual, over ~100 recent steps
  // What the policy keeps free: steps are planned to max_step_ms / (1 + margin)
  // (scheduler::PlanningMargin).
  double planning_margin = 0;
  uint64_t num_predicted = 0;            // steps planned with a usable model
  uint64_t num_time_budgeted_steps = 0;  // steps whose prefill the budget cut
  uint64_t num_first_token_steps = 0;    // steps of newcomers' prompts alone
  uint64_t num_interrupted_steps = 0;    // steps given up for a newcomer's first token
  double interrupted_ms = 0;             // backend time those steps had used (wasted)
};

// Where the step loop's wall time went since it started (issue 42: the account of a served
// run), in milliseconds. The loop runs one step at a time, so
//   wall = idle + engine + decode_layers + prompt_layers + logits + sampling + prompt_outputs
//          + backend_other + interrupted
// exactly. A step's own time is split as the backend reports it (gpu::StepTimings); its layers'
// share between decode rows and prompt tokens in proportion to their token counts (each token
// goes through the same matmuls; a prompt token's attention to its chunk is a little dearer).
struct StepAccount {
  double wall_ms = 0;            // since the loop started
  double idle_ms = 0;            // nothing to run: asleep on the mailbox
  double engine_ms = 0;          // the loop's own work around steps: plan, masks, KV, reports
  double decode_layers_ms = 0;   // the layers, decode rows' share
  double prompt_layers_ms = 0;   // the layers, prompt tokens' share (and draft tokens')
  double logits_ms = 0;          // final norm and vocabulary projection of sampled rows
  double sampling_ms = 0;
  double prompt_outputs_ms = 0;  // prompt logprobs, hidden rows
  // Step time the backend did not place in a phase: the hand-off to its compute thread and
  // back, its queue, and a whole step of a backend that does not time its phases.
  double backend_other_ms = 0;
  double interrupted_ms = 0;     // steps given up for a newcomer (their work is redone)
  uint64_t decode_only_steps = 0;  // steps of one-token decode rows only
  uint64_t mixed_steps = 0;        // decode rows beside prompt tokens
  uint64_t prompt_only_steps = 0;  // prompt tokens only
  uint64_t decode_rows = 0;
  uint64_t prompt_tokens = 0;
};

// Structured output's cost in the step loop: filling the grammars' token bitmasks on the
// scheduler thread before each step (StructuredOutput::fill_bitmasks).
struct StructuredOutputStats {
  uint64_t num_masked_steps = 0;  // steps with at least one constrained sampling slot
  uint64_t num_masked_rows = 0;   // bitmask rows filled (rows where every token is allowed: none)
  double mask_fill_ms_total = 0;
  double mask_fill_ms_max = 0;  // the slowest step's fill
};

// Speculative decoding (vLLM's spec_decode counters): verify spans, the drafts in them, and
// the drafts accepted.
struct SpeculativeStats {
  uint64_t num_drafts = 0;
  uint64_t num_draft_tokens = 0;
  uint64_t num_accepted_tokens = 0;
  double acceptance_rate() const {
    return num_draft_tokens == 0 ? 0.0
                                 : static_cast<double>(num_accepted_tokens) / num_draft_tokens;
  }
};

inline constexpr std::array<double, 11> kPullMsBuckets{1,   2,   5,   10,   20,  50,
                                                       100, 200, 500, 1000, 5000};

struct KvTransferStats {
  std::string role = "combined";
  std::string engine_id;
  std::string transport;   // "" when this server moves no KV
  int32_t num_leases = 0;  // prefill side: held sequences a decode server may pull
  uint64_t num_leases_expired = 0;
  uint64_t num_leases_released = 0;
  int32_t num_pulls_in_flight = 0;
  uint64_t num_pulls_ok = 0;
  uint64_t num_pulls_failed = 0;
  uint64_t num_blocks_pulled = 0;
  uint64_t bytes_pulled = 0;
  double pull_seconds_total = 0;
  // Pull durations: counts per bucket of kPullMsBuckets (upper bounds, ms), last one +Inf.
  std::array<uint64_t, 12> pull_ms_buckets{};
  int32_t num_peers = 0;
  uint64_t num_handshake_failures = 0;
  // Decode side: prompts sent to prefill servers, those that came back unusable (and were
  // computed here), and pulls that failed (computed here too).
  uint64_t num_remote_prefills = 0;
  uint64_t num_remote_prefill_fallbacks = 0;
  uint64_t num_kv_pull_fallbacks = 0;
  int32_t num_awaiting_kv = 0;
};

struct EngineStats {
  int32_t num_waiting = 0;
  int32_t num_running = 0;
  int32_t num_preempted = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;    // referenced by a sequence
  int64_t kv_blocks_cached = 0;  // cached prefix, unreferenced (evictable)
  int64_t kv_blocks_free = 0;
  int32_t kv_block_size = 0;  // tokens per KV block
  std::string kv_cache_dtype = "f16";  // cache.kv_dtype (vllm:cache_config_info's cache_dtype)
  bool prefix_caching = false;
  double kv_usage_ratio = 0;
  uint64_t kv_events_published = 0;  // KV-cache events sent to routers (issue 20)
  uint64_t kv_events_dropped = 0;    // ... dropped because the publisher fell behind
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  double prefix_cache_hit_rate = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_fairness_preemptions = 0;  // ... made for a client running fewer sequences
  int32_t num_waiting_clients = 0;        // clients with a request waiting
  uint64_t num_prefix_deferrals = 0;
  uint64_t num_requests_finished = 0;
  uint64_t num_requests_refused = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t num_steps = 0;
  double tokens_per_s_10s = 0;  // generated tokens per second over the last 10 s
  LatencySummary step_time;     // a whole tick: schedule, device step, bookkeeping
  StepCostStats step_cost;
  StepAccount step_account;
  StructuredOutputStats structured_output;
  SpeculativeStats speculative;
  // Time the engine spent outside the backend, as a share of all tick time since start
  // (docs/design.md §2: the scheduler must stay a rounding error next to a forward pass).
  double engine_overhead_ratio = 0;
  LatencySummary time_to_first_token;
  double uptime_s = 0;
  bool draining = false;
  KvTransferStats kv_transfer;
};

enum class RequestPhase : uint8_t { kWaiting, kPreempted, kPrefill, kDecode, kFinishing };
std::string_view to_string(RequestPhase phase);

// One live request, for the admin socket's `requests` view.
struct RequestInfo {
  RequestId request_id = 0;
  std::string client_label;
  std::string client;  // the fair-share client (GenerateRequest::client)
  RequestOrigin origin = RequestOrigin::kHttp;
  RequestPhase phase = RequestPhase::kWaiting;
  Priority priority = Priority::kNormal;
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double age_ms = 0;
};

}  // namespace troupe::engine
