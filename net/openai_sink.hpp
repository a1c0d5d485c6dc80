// The RequestSink of one chat/completions HTTP request: turns the engine's deltas into SSE
// chunks (stream) or one JSON body (no stream) on the request's ResponseStream, and ends its
// RequestRecord (access-log line, metrics) from the final call, which the engine makes even
// after the client went away.
//
// `n` > 1 is the same sink: the engine runs the choices as one request and tags each delta and
// choice end with its index. A stream's chunks carry that `index`, each choice ends with its own
// finish_reason chunk when it ends, then come the usage chunk (include_usage) and one
// `data: [DONE]`; without a stream, one body lists every choice. With tools (issue 19) each
// choice's text goes through a ToolCallStreamer: content chunks, then `delta.tool_calls` chunks,
// and finish_reason "tool_calls" once a call was made. An error of the request (one
// for all its choices) answers with a status, or with an error event when streaming began.
//
// Thread-safety: the engine calls the sink on its ingress thread, in order (on_delta*, then one
// of on_finish/on_error); the sink only appends to the ResponseStream, which never blocks.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "actors/engine/engine.hpp"
#include "net/metrics.hpp"
#include "net/openai_request.hpp"
#include "net/openai_response.hpp"
#include "net/openai_tool_calls.hpp"
#include "net/request_record.hpp"
#include "net/response_stream.hpp"
#include "net/server_state.hpp"

namespace troupe::net {

// What every OpenAI handler shares; kept alive by the routes and by every live sink.
struct OpenAiContext {
  OpenAiContext(engine::Engine& e, const ServerState& s, OpenAiApiConfig c,
                std::shared_ptr<ServingMetrics> m)
      : engine(e), state(s), config(c), metrics(std::move(m)) {}
  engine::Engine& engine;
  const ServerState& state;
  OpenAiApiConfig config;
  const std::shared_ptr<ServingMetrics> metrics;  // shared with the WebSocket chat
  TokenTextFn token_text() const;
  // The format a request's answer is parsed with for tool calls (kNone: not parsed).
  model::ToolCallFormat tool_format(const engine::GenerateRequest& request) const;
  // Admits one request of API key `key_name` against its rate limits (net/rate_limits.hpp):
  // nullopt, with the key's x-ratelimit-* headers added to `out` when there is one, or the 429
  // to answer (it carries its headers).
  std::optional<ApiError> admit(std::string_view key_name, ResponseStream* out = nullptr) const;
  // A record for one request of `route` (id "-" until it has one).
  // `key_name`: the API key that authenticated it (HttpRequest::api_key_name).
  std::shared_ptr<RequestRecord> record(std::string_view route, std::string id,
                                        std::string detail = {}, std::string key_name = {},
                                        engine::RequestKind kind = engine::RequestKind::kGenerate) const;
};

struct SinkOptions {
  std::string route;
  bool stream = false;
  bool include_usage = false;
  LogprobsOutput logprobs = LogprobsOutput::kNone;
  model::ToolCallFormat tool_format = model::ToolCallFormat::kNone;  // OpenAiContext::tool_format
  EchoOptions echo;  // echo_options(): what the answer shows of the prompt
};

// What a parsed request asked to see of its prompt.
inline EchoOptions echo_options(const CompletionRequest& request) {
  return {request.echo, request.generate.sampling.top_logprobs, request.prompt_logprobs};
}

// What the request asked of logprobs (none, by text, or by token id).
inline LogprobsOutput logprobs_output(const CompletionRequest& request) {
  if (!request.generate.sampling.logprobs) return LogprobsOutput::kNone;
  return request.return_tokens_as_token_ids ? LogprobsOutput::kTokenIds : LogprobsOutput::kText;
}

class CompletionSink final : public engine::RequestSink {
 public:
  CompletionSink(std::shared_ptr<OpenAiContext> context, std::shared_ptr<ResponseStream> out,
                 ResponseIdentity identity, SinkOptions options,
                 std::shared_ptr<RequestRecord> record, int32_t num_choices = 1);

  bool on_delta(engine::RequestId request_id, engine::TokenDelta delta) override;
  void on_choice_end(engine::RequestId request_id, const engine::ChoiceEnd& end) override;
  void on_finish(engine::RequestId request_id, engine::Completion completion) override;
  void on_error(engine::RequestId request_id, engine::RequestError error) override;

 private:
  // A choice's stream state (and its inter-token timing, both ways).
  struct Choice {
    size_t text_offset = 0;                 // stream: completions' logprobs.text_offset
    bool started = false;                   // stream: its first chunk was sent
    std::string finish_reason;
    std::chrono::steady_clock::time_point last_token_time;
    int32_t num_tokens_seen = 0;
    std::optional<ToolCallStreamer> tools;  // stream with tools: the calls read so far
  };

  bool start_stream();
  bool write_tool_pieces(Choice& c, int32_t index, std::vector<ToolCallStreamer::Piece> pieces,
                         std::span<const engine::TokenInfo> tokens, bool first);
  Choice& choice(int32_t index);
  void record_token_times(Choice& choice, int32_t num_generated_tokens);

  std::shared_ptr<OpenAiContext> context_;
  std::shared_ptr<ResponseStream> out_;
  ResponseIdentity identity_;
  SinkOptions options_;
  std::shared_ptr<RequestRecord> record_;
  TokenTextFn token_text_;
  bool stream_started_ = false;
  std::vector<Choice> choices_;  // grows to the highest index seen (n is known upstream)
  CollectedChoices collected_;   // no stream: the whole answer
};

// The response for an engine error (429 carries Retry-After).
HttpResponse engine_error_response(const ApiError& error);

// An engine error as the client sees it; a prompt-too-long error that names no field names
// `input_field`, the one holding the prompt.
ApiError api_error_for(const engine::RequestError& error, std::string_view input_field);
// ... "messages" on chat, "prompt" on completions.
ApiError api_error_for(ApiKind kind, const engine::RequestError& error);

}  // namespace troupe::net
