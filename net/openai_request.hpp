// Decodes OpenAI `chat/completions` and `completions` request bodies (simdjson DOM) into an
// engine::GenerateRequest plus the wire options only net needs (stream, usage, ...). Unknown
// fields are ignored; the tool-calling fields (`tools`, `tool_choice`, `parallel_tool_calls`,
// messages' `tool_calls` / `tool_call_id`: openai_tools.hpp) and the structured-output fields
// (openai_structured_output.hpp) are read; a present field of the wrong type or out of range is a
// 400 naming it.
// Chat messages, as OpenAI checks them: `role` is one of system, developer, user, assistant,
// tool, function; `content` is a string or an array of {"type":"text","text":...} parts, and
// may be null or absent only on an assistant message with `tool_calls` or `function_call`.
// Completions' `echo` (issue 37): the prompt comes first in each choice's text, with its
// logprobs when `logprobs` is set (the first token's null); with `max_tokens: 0` only the prompt
// is scored. vLLM's `prompt_logprobs` (both APIs): the prompt's logprobs as their own list.
//
// Thread-safety: pure functions (a thread_local simdjson parser inside).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "actors/messages/engine_types.hpp"
#include "model/pooling.hpp"
#include "net/http_types.hpp"

namespace troupe::net {

enum class ApiKind : uint8_t { kChat, kCompletion };

// Limits and defaults of the OpenAI surface (the `api` config section).
struct OpenAiApiConfig {
  int32_t default_max_tokens = 256;  // when the request gives none
  int32_t max_stop_strings = 4;
  int32_t max_top_logprobs = 20;
  // logit_bias entries per request. Each entry costs work on every sampled token (and bytes in
  // every step's device upload), so a request must not be able to send thousands; 300 covers
  // banning or forcing any realistic word list in a few tokenizations each.
  int32_t max_logit_bias_entries = 300;
  int32_t max_batch_items = 1000;    // /v1/batch: more is 413
  // `n` (choices per request) on /v1/completions and /v1/chat/completions: each choice is its
  // own engine request, so this bounds the work one HTTP request can queue.
  int32_t max_n = 16;
  uint64_t max_stream_buffer_bytes = 8u << 20;  // per request, before a slow client is dropped
  // Requests one client (API key, `user`, else connection) may have waiting; more get 429
  // while other clients are served (the scheduler enforces it). 0: only max_queue limits.
  int32_t max_waiting_per_client = 256;
  // /v1/embeddings (issue 37): the pooling when a request names none; whether `dimensions`
  // (truncate, then renormalize) is allowed — only for a Matryoshka-trained model, which a GGUF
  // does not say, so the operator does; inputs per request (OpenAI's limit: 2048).
  model::Pooling embedding_pooling = model::Pooling::kMean;
  bool embedding_matryoshka = false;
  int32_t max_embedding_inputs = 2048;
};

struct CompletionRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;  // as sent ("" when absent)
  engine::GenerateRequest generate;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
  int32_t n = 1;          // choices (also in generate.n)
  bool has_seed = false;  // `seed` was given (else n > 1 starts from a random seed)
  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N" instead of by text.
  bool return_tokens_as_token_ids = false;
  // Completions' `echo` (also in generate.echo), and vLLM's `prompt_logprobs` field: the
  // prompt's scores with that many alternatives, as a `prompt_logprobs` list (completions: per
  // choice; chat: top level).
  bool echo = false;
  std::optional<int32_t> prompt_logprobs;
};

using ParsedCompletion = std::variant<CompletionRequest, ApiError>;

// `served_model_id`: the only model name accepted (an absent or empty `model` means it too);
// any other name is a 404.
ParsedCompletion parse_completion_request(ApiKind kind, std::string_view body,
                                          std::string_view served_model_id,
                                          const OpenAiApiConfig& config);

// The status, OpenAI error type and code for an engine error.
ApiError api_error_from(const engine::RequestError& error);

}  // namespace troupe::net
