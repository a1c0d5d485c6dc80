#include "net/openai_sink.hpp"

#include "model/tokenizer.hpp"

namespace troupe::net {

TokenTextFn OpenAiContext::token_text() const {
  const engine::Engine* e = &engine;
  return [e](int32_t id) { return e->tokenizer().token_piece(id); };
}

std::shared_ptr<RequestRecord> OpenAiContext::record(std::string_view route, std::string id,
                                                    std::string detail,
                                                    std::string key_name) const {
  return std::make_shared<RequestRecord>(
      metrics, RequestLabel{"http", std::string(route), std::move(id), std::move(detail),
                            std::move(key_name)});
}

HttpResponse engine_error_response(const ApiError& error) {
  HttpResponse response = error_response(error);
  if (error.status == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

ApiError api_error_for(ApiKind kind, const engine::RequestError& error) {
  ApiError api = api_error_from(error);
  if (api.param.empty() && error.code == engine::ErrorCode::kPromptTooLong) {
    api.param = kind == ApiKind::kChat ? "messages" : "prompt";
  }
  return api;
}

CompletionSink::CompletionSink(std::shared_ptr<OpenAiContext> context,
                               std::shared_ptr<ResponseStream> out, ResponseIdentity identity,
                               SinkOptions options, std::shared_ptr<RequestRecord> record)
    : context_(std::move(context)),
      out_(std::move(out)),
      identity_(std::move(identity)),
      options_(std::move(options)),
      record_(std::move(record)),
      token_text_(context_->token_text()) {}

bool CompletionSink::start_stream() {
  if (stream_started_) return true;
  stream_started_ = true;
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("X-Accel-Buffering", "no");
  return out_->begin_stream(std::move(head));
}

void CompletionSink::record_token_times(int32_t num_generated_tokens) {
  const auto now = std::chrono::steady_clock::now();
  const int32_t new_tokens = num_generated_tokens - num_tokens_seen_;
  if (new_tokens <= 0) return;
  if (num_tokens_seen_ > 0) {
    const double gap_s = std::chrono::duration<double>(now - last_token_time_).count() / new_tokens;
    for (int32_t i = 0; i < new_tokens; ++i) {
      context_->metrics->inter_token_latency_s.observe(gap_s);
    }
  }
  num_tokens_seen_ = num_generated_tokens;
  last_token_time_ = now;
}

bool CompletionSink::on_delta(engine::RequestId request_id, engine::TokenDelta delta) {
  record_->note_request_id(request_id);
  record_token_times(delta.num_generated_tokens);
  if (!options_.stream) {
    text_ += delta.text;
    if (options_.with_logprobs) {
      for (auto& token : delta.tokens) tokens_.push_back(std::move(token));
    }
    return !out_->client_gone();
  }
  const bool first = !stream_started_;
  if (!start_stream()) return false;
  if (delta.text.empty() && delta.tokens.empty() && !first) return !out_->client_gone();
  const ChunkContent content{delta.text, delta.tokens, options_.with_logprobs, text_offset_};
  text_offset_ += delta.text.size();
  return out_->write(sse_event(chunk_json(identity_, content, first, std::nullopt, token_text_)));
}

void CompletionSink::on_finish(engine::RequestId request_id, engine::Completion completion) {
  record_->note_request_id(request_id);
  record_->finish(completion, out_->client_gone());
  if (!options_.stream) {
    const ChunkContent content{text_, tokens_, options_.with_logprobs, 0};
    out_->respond(json_response(200, completion_json(identity_, content, completion, token_text_)));
    return;
  }
  const bool first = !stream_started_;
  start_stream();
  const ChunkContent empty{{}, {}, false, text_offset_};
  std::string events = sse_event(
      chunk_json(identity_, empty, first, std::string_view(completion.finish_reason), token_text_));
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
