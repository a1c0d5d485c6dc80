#include "net/openai_sink.hpp"

#include "model/tokenizer.hpp"

namespace troupe::net {

TokenTextFn OpenAiContext::token_text() const {
  const engine::Engine* e = &engine;
  return [e](int32_t id) { return e->tokenizer().token_piece(id); };
}

model::ToolCallFormat OpenAiContext::tool_format(const engine::GenerateRequest& request) const {
  return request.parses_tool_calls() ? engine.model_card().tool_call_format
                                     : model::ToolCallFormat::kNone;
}

std::shared_ptr<RequestRecord> OpenAiContext::record(std::string_view route, std::string id,
                                                    std::string detail, std::string key_name,
                                                    engine::RequestKind kind) const {
  return std::make_shared<RequestRecord>(
      metrics, RequestLabel{"http", std::string(route), std::move(id), std::move(detail),
                            std::move(key_name), kind});
}

std::optional<ApiError> OpenAiContext::admit(std::string_view key_name, ResponseStream* out) const {
  const RateDecision decision = metrics->rate_limits.admit(key_name, steady_now_s());
  if (!decision.admitted) return rate_limit_error(decision, key_name);
  if (out != nullptr) out->add_headers(rate_limit_headers(decision));
  return std::nullopt;
}

HttpResponse engine_error_response(const ApiError& error) {
  HttpResponse response = error_response(error);
  if (error.status == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

ApiError api_error_for(const engine::RequestError& error, std::string_view input_field) {
  ApiError api = api_error_from(error);
  if (api.param.empty() && error.code == engine::ErrorCode::kPromptTooLong) {
    api.param = std::string(input_field);
  }
  return api;
}

ApiError api_error_for(ApiKind kind, const engine::RequestError& error) {
  return api_error_for(error, kind == ApiKind::kChat ? "messages" : "prompt");
}

CompletionSink::CompletionSink(std::shared_ptr<OpenAiContext> context,
                               std::shared_ptr<ResponseStream> out, ResponseIdentity identity,
                               SinkOptions options, std::shared_ptr<RequestRecord> record,
                               int32_t num_choices)
    : context_(std::move(context)),
      out_(std::move(out)),
      identity_(std::move(identity)),
      options_(std::move(options)),
      record_(std::move(record)),
      token_text_(context_->token_text()),
      choices_(static_cast<size_t>(std::max(num_choices, 1))),
      collected_(num_choices, options_.logprobs, options_.tool_format, options_.echo) {}

bool CompletionSink::start_stream() {
  if (stream_started_) return true;
  stream_started_ = true;
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("X-Accel-Buffering", "no");
  return out_->begin_stream(std::move(head));
}

CompletionSink::Choice& CompletionSink::choice(int32_t index) {
  const auto i = static_cast<size_t>(std::max(index, 0));
  if (i >= choices_.size()) choices_.resize(i + 1);
  return choices_[i];
}

void CompletionSink::record_token_times(Choice& choice, int32_t num_generated_tokens) {
  const auto now = std::chrono::steady_clock::now();
  const int32_t new_tokens = num_generated_tokens - choice.num_tokens_seen;
  if (new_tokens <= 0) return;
  if (choice.num_tokens_seen > 0) {
    const double gap_s = std::chrono::duration<double>(now - choice.last_token_time).count() / new_tokens;
    for (int32_t i = 0; i < new_tokens; ++i) {
      context_->metrics->inter_token_latency_s.observe(gap_s);
    }
  }
  choice.num_tokens_seen = num_generated_tokens;
  choice.last_token_time = now;
}

bool CompletionSink::on_delta(engine::RequestId request_id, engine::TokenDelta delta) {
  record_->note_request_id(request_id);
  Choice& c = choice(delta.index);
  record_token_times(c, delta.num_generated_tokens);
  if (!options_.stream) {
    collected_.add(delta);
    return !out_->client_gone();
  }
  if (!start_stream()) return false;
  bool first = !c.started;
  c.started = true;
  if (delta.prompt) {
    const std::optional<std::string> chunk =
        prompt_chunk_json(identity_, *delta.prompt, delta.index, options_.echo, options_.logprobs,
                          token_text_);
    if (chunk) {
      if (options_.echo.echo) c.text_offset += delta.prompt->text.size();
      if (!out_->write(sse_event(*chunk))) return false;
      first = false;
    }
  }
  if (options_.tool_format != model::ToolCallFormat::kNone) {
    if (!c.tools) c.tools.emplace(options_.tool_format);
    return write_tool_pieces(c, delta.index, c.tools->feed(delta.text), delta.tokens, first);
  }
  if (delta.text.empty() && delta.tokens.empty() && !first) return !out_->client_gone();
  ChunkContent content{delta.text, delta.tokens, options_.logprobs, c.text_offset};
  content.index = delta.index;
  c.text_offset += delta.text.size();
  return out_->write(sse_event(chunk_json(identity_, content, first, std::nullopt, token_text_)));
}

// One chunk per piece (content text or tool-call pieces); the delta's logprobs ride on the first.
bool CompletionSink::write_tool_pieces(Choice& c, int32_t index,
                                       std::vector<ToolCallStreamer::Piece> pieces,
                                       std::span<const engine::TokenInfo> tokens, bool first) {
  if (pieces.empty() && (first || !tokens.empty())) pieces.emplace_back();
  for (const ToolCallStreamer::Piece& piece : pieces) {
    ChunkContent content{piece.content, tokens, options_.logprobs, c.text_offset};
    content.index = index;
    content.tool_calls = piece.calls;
    c.text_offset += piece.content.size();
    tokens = {};
    if (!out_->write(sse_event(chunk_json(identity_, content, first, std::nullopt, token_text_)))) {
      return false;
    }
    first = false;
  }
  return !out_->client_gone();
}

void CompletionSink::on_choice_end(engine::RequestId request_id, const engine::ChoiceEnd& end) {
  record_->note_request_id(request_id);
  Choice& c = choice(end.index);
  c.finish_reason = end.finish_reason;
  if (!options_.stream) {
    collected_.end(end);
    return;
  }
  start_stream();
  if (c.tools) {
    // Held text (a possible call start that never became one) comes out before the end.
    write_tool_pieces(c, end.index, c.tools->finish(), {}, !c.started);
    c.started = true;
    c.finish_reason = std::string(finish_reason_with_calls(end.finish_reason, c.tools->made_calls()));
  }
  ChunkContent empty{{}, {}, LogprobsOutput::kNone, c.text_offset};
  empty.index = end.index;
  const bool first = !c.started;
  c.started = true;
  out_->write(sse_event(chunk_json(identity_, empty, first, std::string_view(c.finish_reason), token_text_)));
}

void CompletionSink::on_finish(engine::RequestId request_id, engine::Completion completion) {
  record_->note_request_id(request_id);
  record_->finish(completion, out_->client_gone());
  if (!options_.stream) {
    out_->respond(json_response(200, collected_.body_json(identity_, completion, token_text_)));
    return;
  }
  start_stream();
  std::string events;
  if (options_.include_usage) events += sse_event(usage_chunk_json(identity_, completion.usage));
  events += kSseDone;
  out_->write(std::move(events));
  out_->end();
}

void CompletionSink::on_error(engine::RequestId request_id, engine::RequestError error) {
  const ApiError api = api_error_for(identity_.kind, error);
  record_->note_request_id(request_id);
  record_->fail(api, out_->client_gone());
  if (!stream_started_) {
    out_->respond(engine_error_response(api));
    return;
  }
  out_->write(sse_event(error_json(api)) + std::string(kSseDone));
  out_->end();
}

}  // namespace troupe::net
