// Builds OpenAI response bodies: `chat.completion`, `chat.completion.chunk`, `text_completion`
// (whole and streamed), usage and logprobs, plus SSE framing. Pure text in, JSON text out.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/engine_types.hpp"
#include "net/openai_request.hpp"

namespace troupe::net {

// What every response and chunk of one request shares.
struct ResponseIdentity {
  ApiKind kind = ApiKind::kChat;
  std::string id;  // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;
  std::string model;
};

// A token id's text, for top_logprobs alternatives (the tokenizer's piece).
using TokenTextFn = std::function<std::string(int32_t)>;

// A token's text in the legacy /v1/completions logprobs (`tokens` and the `top_logprobs` keys):
// the text itself when it is valid UTF-8; else — a token holding part of a multi-byte
// character — "bytes:" and each byte as \xNN (OpenAI's legacy form), so that distinct byte
// tokens stay distinct keys instead of all becoming U+FFFD. vLLM decodes each token alone
// (giving U+FFFD) and its dict then silently keeps one of the colliding entries.
std::string legacy_token_string(std::string_view token_bytes);

// "chatcmpl-" or "cmpl-" followed by 24 random hex digits.
std::string make_response_id(ApiKind kind);
// `prefix` followed by 24 random hex digits ("call_…" for tool calls).
std::string random_id(std::string_view prefix);

// A tool call of a chat answer (issue 19): whole in a non-streamed message; in a stream, a piece
// of one — its first chunk carries id, type and name with arguments "", later chunks only
// argument fragments (as OpenAI streams them).
struct ToolCallOut {
  int32_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
  bool first = true;  // stream: the call's first chunk
};

// One server-sent event: "data: <json>\n\n".
std::string sse_event(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// A streamed piece: text and, when asked for, its tokens' logprobs. `text_offset` is where this
// piece starts in the completion text (completions' logprobs.text_offset).
// Whether a response carries logprobs, and how it names tokens in them: by their text (OpenAI),
// or as "token_id:N" (vLLM's return_tokens_as_token_ids: exact where texts repeat or split a
// UTF-8 character, which is what parity checks and evaluation harnesses compare).
enum class LogprobsOutput : uint8_t { kNone, kText, kTokenIds };

struct ChunkContent {
  std::string_view text;
  std::span<const engine::TokenInfo> tokens;
  LogprobsOutput logprobs = LogprobsOutput::kNone;
  size_t text_offset = 0;
  int32_t index = 0;  // the choice (`n` > 1 gives choices 0..n-1)
  // Chat with tools: the calls (whole, or this chunk's pieces); content is null in a message
  // with calls and no text.
  std::span<const ToolCallOut> tool_calls;
  // vLLM's `prompt_logprobs` (issue 37): the scored prompt, written as that list with
  // prompt_logprobs_n alternatives per token (completions: in the choice; chat: top level).
  const engine::PromptEcho* prompt_logprobs = nullptr;
  int32_t prompt_logprobs_n = 0;
};

// What a request shows of its prompt (issue 37).
struct EchoOptions {
  bool echo = false;       // completions' echo: the prompt first in text (and logprobs)
  int32_t top_logprobs = 0;  // ... each prompt token with this many alternatives (`logprobs`)
  std::optional<int32_t> prompt_logprobs;  // vLLM's list, with this many alternatives
};

// One finished choice of a non-streamed response.
struct ChoiceOutput {
  ChunkContent content;
  std::string_view finish_reason;
};

// Chat: `first` adds "role":"assistant" to the delta. `finish_reason` set: the final chunk.
std::string chunk_json(const ResponseIdentity& identity, const ChunkContent& content, bool first,
                       std::optional<std::string_view> finish_reason, const TokenTextFn& token_text);
// The trailing usage chunk (choices: []) of stream_options.include_usage.
std::string usage_chunk_json(const ResponseIdentity& identity, const engine::Usage& usage);
// The whole non-streamed response.
std::string completion_json(const ResponseIdentity& identity, const ChunkContent& content,
                            const engine::Completion& completion, const TokenTextFn& token_text);
// The whole non-streamed response with several choices (in the order given; each carries its
// index) and the request's usage (prompt counted once, completion tokens summed by the caller).
std::string multi_completion_json(const ResponseIdentity& identity,
                                  std::span<const ChoiceOutput> choices, const engine::Usage& usage,
                                  const TokenTextFn& token_text,
                                  const disagg::KvTransferParams* kv_transfer = nullptr);
// A non-streamed answer of one or more choices, gathered from the engine's deltas and choice
// ends (a choice without an end takes the Completion's reason), then written as one body.
// Thread-safety: one request's sink, one thread at a time.
class CollectedChoices {
 public:
  // tool_format other than kNone: each choice's text is parsed for tool calls
  // (net/openai_tool_calls.hpp) before it is written.
  // echo: what each choice shows of its prompt (EchoOptions).
  CollectedChoices(int32_t num_choices, LogprobsOutput logprobs,
                   model::ToolCallFormat tool_format = model::ToolCallFormat::kNone,
                   EchoOptions echo = {})
      : choices_(static_cast<size_t>(num_choices < 1 ? 1 : num_choices)),
        logprobs_(logprobs),
        tool_format_(tool_format),
        echo_(echo) {}
  void add(engine::TokenDelta& delta);
  void end(const engine::ChoiceEnd& end);
  std::string body_json(const ResponseIdentity& identity, const engine::Completion& completion,
                        const TokenTextFn& token_text) const;

 private:
  struct Choice {
    std::string text;
    std::vector<engine::TokenInfo> tokens;
    std::string finish_reason;
    std::optional<engine::PromptEcho> prompt;  // kept for the prompt_logprobs list
  };
  Choice& at(int32_t index);
  std::vector<Choice> choices_;
  LogprobsOutput logprobs_;
  model::ToolCallFormat tool_format_;
  EchoOptions echo_;
};

// A stream's echo: the chunk a choice's prompt goes out in, before its first generated text
// (text and logprobs when `echo`; the prompt_logprobs list when asked). nullopt: nothing to send.
std::optional<std::string> prompt_chunk_json(const ResponseIdentity& identity,
                                             const engine::PromptEcho& prompt, int32_t index,
                                             const EchoOptions& echo, LogprobsOutput logprobs,
                                             const TokenTextFn& token_text);
// The prompt's tokens as echoed in legacy logprobs: `top_logprobs` alternatives each (the engine
// scored the prompt with as many as the widest of echo and prompt_logprobs asked).
std::vector<engine::TokenInfo> echoed_tokens(const engine::PromptEcho& prompt, int32_t top_logprobs);

// An error inside a stream that already sent its headers: {"error":{...}}.
std::string error_json(const ApiError& error);

}  // namespace troupe::net
