#include "net/openai_multi_sink.hpp"

#include <algorithm>
#include <random>

namespace troupe::net {
namespace {

uint64_t random_seed() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return random();
}

}  // namespace

MultiChoiceResponse::MultiChoiceResponse(std::shared_ptr<OpenAiContext> context,
                                         std::shared_ptr<ResponseStream> out,
                                         ResponseIdentity identity, SinkOptions options,
                                         int32_t num_choices, std::shared_ptr<RequestRecord> record)
    : context_(std::move(context)),
      out_(std::move(out)),
      identity_(std::move(identity)),
      options_(std::move(options)),
      token_text_(context_->token_text()),
      record_(std::move(record)),
      choices_(static_cast<size_t>(num_choices)) {}

void MultiChoiceResponse::start(const engine::GenerateRequest& request, bool has_seed) {
  const int32_t num_choices = static_cast<int32_t>(choices_.size());
  std::vector<engine::RequestId> ids;
  ids.reserve(choices_.size());
  for (int32_t i = 0; i < num_choices; ++i) {
    engine::GenerateRequest choice_request = request;
    choice_request.sampling.seed =
        has_seed ? request.sampling.seed + static_cast<uint64_t>(i) : random_seed();
    auto sink = std::make_shared<ChoiceSink>(shared_from_this(), i);
    ids.push_back(context_->engine.submit(std::move(choice_request), std::move(sink)));
  }
  bool failed = false;
  int32_t failed_choice = -1;
  {
    std::lock_guard lock(mutex_);
    request_ids_ = ids;
    submitting_ = false;
    failed = failed_;
    failed_choice = failed_choice_;
    if (!failed_) {
      for (auto& [index, delta] : held_deltas_) (void)take_delta(index, std::move(delta));
      for (auto& [index, completion] : held_finishes_) take_finish(index, std::move(completion));
    }
    held_deltas_.clear();
    held_finishes_.clear();
  }
  // NOTE: a choice may fail (queue full) before its siblings were submitted; they are cancelled
  // here, since on_error could not name them yet.
  if (failed) cancel_all_but(failed_choice, ids);
  std::shared_ptr<OpenAiContext> context = context_;
  out_->on_client_gone([context, ids] {
    for (const engine::RequestId id : ids) context->engine.cancel(id);
  });
}

bool MultiChoiceResponse::start_stream() {
  if (stream_started_) return true;
  stream_started_ = true;
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("X-Accel-Buffering", "no");
  return out_->begin_stream(std::move(head));
}

bool MultiChoiceResponse::on_delta(int32_t index, engine::TokenDelta delta) {
  std::lock_guard lock(mutex_);
  if (failed_) return false;
  if (submitting_) {
    held_deltas_.emplace_back(index, std::move(delta));
    return true;
  }
  return take_delta(index, std::move(delta));
}

bool MultiChoiceResponse::take_delta(int32_t index, engine::TokenDelta delta) {
  Choice& choice = choices_[static_cast<size_t>(index)];
  if (!options_.stream) {
    choice.text += delta.text;
    if (options_.with_logprobs) {
      for (auto& token : delta.tokens) choice.tokens.push_back(std::move(token));
    }
    return !out_->client_gone();
  }
  if (!start_stream()) return false;
  const bool first = !choice.started;
  choice.started = true;
  if (delta.text.empty() && delta.tokens.empty() && !first) return !out_->client_gone();
  ChunkContent content{delta.text, delta.tokens, options_.with_logprobs, choice.text_offset};
  content.index = index;
  choice.text_offset += delta.text.size();
  return out_->write(sse_event(chunk_json(identity_, content, first, std::nullopt, token_text_)));
}

void MultiChoiceResponse::on_finish(int32_t index, engine::Completion completion) {
  std::lock_guard lock(mutex_);
  if (failed_) return;
  if (submitting_) {
    held_finishes_.emplace_back(index, std::move(completion));
    return;
  }
  take_finish(index, std::move(completion));
}

void MultiChoiceResponse::take_finish(int32_t index, engine::Completion completion) {
  record_->observe(completion);
  Choice& choice = choices_[static_cast<size_t>(index)];
  choice.done = true;
  choice.finish_reason = completion.finish_reason;
  choice.usage = completion.usage;
  ++num_done_;
  if (options_.stream) {
    start_stream();
    ChunkContent empty{{}, {}, false, choice.text_offset};
    empty.index = index;
    const bool first = !choice.started;
    choice.started = true;
    out_->write(sse_event(
        chunk_json(identity_, empty, first, std::string_view(choice.finish_reason), token_text_)));
  }
  if (num_done_ == static_cast<int32_t>(choices_.size())) finish_all();
}

void MultiChoiceResponse::finish_all() {
  const engine::Usage usage = total_usage();
  record_->finish(overall_finish_reason(), usage, out_->client_gone());
  if (!options_.stream) {
    std::vector<ChoiceOutput> outputs;
    outputs.reserve(choices_.size());
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChunkContent content{choices_[i].text, choices_[i].tokens, options_.with_logprobs, 0};
      content.index = static_cast<int32_t>(i);
      outputs.push_back(ChoiceOutput{content, choices_[i].finish_reason});
    }
    out_->respond(
        json_response(200, multi_completion_json(identity_, outputs, usage, token_text_)));
    return;
  }
  std::string events;
  if (options_.include_usage) events += sse_event(usage_chunk_json(identity_, usage));
  events += kSseDone;
  out_->write(std::move(events));
  out_->end();
}

// The prompt is counted once (every choice has the same one; choice 0's cached-token count is
// reported, as vLLM does); completion tokens are summed over the choices.
engine::Usage MultiChoiceResponse::total_usage() const {
  engine::Usage usage = choices_[0].usage;
  usage.completion_tokens = 0;
  for (const Choice& choice : choices_) usage.completion_tokens += choice.usage.completion_tokens;
  return usage;
}

void MultiChoiceResponse::on_error(int32_t index, engine::RequestError error) {
  std::vector<engine::RequestId> ids;
  {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    failed_ = true;
    failed_choice_ = index;
    ids = request_ids_;
    const ApiError api = api_error_for(identity_.kind, error);
    record_->fail(api, out_->client_gone());
    if (!stream_started_) {
      out_->respond(engine_error_response(api));
    } else {
      out_->write(sse_event(error_json(api)) + std::string(kSseDone));
      out_->end();
    }
  }
  cancel_all_but(index, ids);  // empty until start() stored them; start() cancels then
}

void MultiChoiceResponse::cancel_all_but(int32_t choice,
                                         const std::vector<engine::RequestId>& ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<int32_t>(i) != choice) context_->engine.cancel(ids[i]);
  }
}

std::string_view MultiChoiceResponse::overall_finish_reason() const {
  const auto any = [this](std::string_view reason) {
    return std::any_of(choices_.begin(), choices_.end(),
                       [reason](const Choice& choice) { return choice.finish_reason == reason; });
  };
  if (any("cancelled")) return "cancelled";
  if (any("length")) return "length";
  return "stop";
}

}  // namespace troupe::net
