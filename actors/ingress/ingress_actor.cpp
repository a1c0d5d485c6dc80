#include "actors/ingress/ingress_actor.hpp"

#include <type_traits>

#include <boost/asio/post.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::ingress {

using actors::runtime::SendStatus;
using engine::ErrorCode;
using engine::RequestError;

namespace {

double milliseconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// `input_field`: the request field holding the prompt ("messages" or "prompt").
RequestError error_for(scheduler::AddResult result, std::string_view input_field) {
  using scheduler::AddResult;
  switch (result) {
    case AddResult::kQueueFull:
      return {ErrorCode::kQueueFull, "the server is overloaded (waiting queue full); retry later", ""};
    case AddResult::kClientQueueFull:
      return {ErrorCode::kQueueFull,
              "too many of your requests are waiting (api.max_waiting_per_client); retry later", ""};
    case AddResult::kPromptTooLong:
    case AddResult::kNeverFits:
      return {ErrorCode::kPromptTooLong,
              fmt::format("the request cannot fit in the KV cache ({})", scheduler::to_string(result)),
              std::string(input_field)};
    case AddResult::kEmptyPrompt:
      return {ErrorCode::kInvalidRequest, "the prompt is empty", std::string(input_field)};
    case AddResult::kInvalidMaxTokens:
      return {ErrorCode::kInvalidRequest, "max_tokens must be at least 1", "max_tokens"};
    case AddResult::kDuplicateId:
    case AddResult::kRetryLater:
    case AddResult::kAccepted: break;
  }
  return {ErrorCode::kInternal, fmt::format("admission failed: {}", scheduler::to_string(result)), ""};
}

}  // namespace

IngressActor::IngressActor(PromptBuilder prompts, boost::asio::any_io_executor prompt_executor,
                           std::shared_ptr<engine::StatsBoard> board,
                           std::chrono::milliseconds stats_window, size_t mailbox_capacity)
    : Actor("ingress", mailbox_capacity),
      prompts_(std::make_shared<const PromptBuilder>(std::move(prompts))),
      prompt_executor_(std::move(prompt_executor)),
      board_(std::move(board)),
      generated_tokens_(stats_window) {}

void IngressActor::connect(std::shared_ptr<SchedulerActorBase> scheduler) {
  scheduler_ = std::move(scheduler);
}

void IngressActor::disconnect() { scheduler_.reset(); }

boost::asio::awaitable<void> IngressActor::handle(IngressMessage message) {
  flush_pending_control();
  std::visit(
      [this](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Submit>) {
          on_submit(m);
        } else if constexpr (std::is_same_v<T, PromptBuilt>) {
          on_prompt_built(m);
        } else if constexpr (std::is_same_v<T, CancelRequest>) {
          on_cancel(m.request_id);
        } else if constexpr (std::is_same_v<T, CancelAll>) {
          std::vector<engine::RequestId> ids;
          for (const auto& [id, request] : live_) ids.push_back(id);
          for (engine::RequestId id : ids) on_cancel(id);
        } else if constexpr (std::is_same_v<T, StepEvents>) {
          on_step_events(m);
        } else if constexpr (std::is_same_v<T, SequencesEnded>) {
          const Clock::time_point now = Clock::now();
          on_sequences_ended(m.finished, now);
        } else if constexpr (std::is_same_v<T, AdmissionRefused>) {
          on_refused(m);
        } else if constexpr (std::is_same_v<T, StepFailed>) {
          on_step_failed(m);
        } else if constexpr (std::is_same_v<T, RemotePrefillDone>) {
          on_remote_prefill_done(m);
        } else {
          static_assert(std::is_same_v<T, disagg::PeerUnusable>);
          on_peer_unusable(m);
        }
      },
      message);
  publish_stats();
  co_return;
}

void IngressActor::abandon(IngressMessage message) {
  // Shutting down past the deadline: whoever still waits gets an answer.
  if (auto* submit = std::get_if<Submit>(&message)) {
    submit->sink->on_error(submit->request_id,
                           RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
    return;
  }
  for (auto& [id, request] : live_) {
    fail(request, RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
  }
  live_.clear();
}

void IngressActor::send_to_scheduler(scheduler::SchedulerMessage message) {
  if (!pending_control_.empty() || scheduler_->try_send(std::move(message)) == SendStatus::kFull) {
    pending_control_.push_back(std::move(message));
  }
}

void IngressActor::flush_pending_control() {
  while (!pending_control_.empty()) {
    if (scheduler_->try_send(std::move(pending_control_.front())) == SendStatus::kFull) return;
    pending_control_.pop_front();
  }
}

boost::asio::awaitable<void> IngressActor::run() {
  auto loop = Actor::run();  // named: g++ 12.2 co_await temporaries
  co_await std::move(loop);
  // The mailbox is drained and closed: a prompt still on a worker can no longer come back, and
  // the scheduler will confirm no more ends (shutdown past its deadline). Whoever has not had
  // a final call gets one now.
  for (auto& [id, request] : live_) {
    fail(request, RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
  }
  live_.clear();
}

void IngressActor::on_submit(Submit& submit) {
  engine::GenerateRequest& request = submit.request;
  LiveRequest live{
      .request_id = submit.request_id,
      .client_label = request.client_label,
      .client = request.client,
      .origin = request.origin,
      .sink = std::move(submit.sink),
      .detokenizer = model::IncrementalDetokenizer(prompts_->tokenizer()),
      .stop = StopMatcher(request.stop.stop_strings, request.include_stop_string_in_output),
      .want_logprobs = request.sampling.logprobs,
      .top_logprobs = request.sampling.top_logprobs,
      .min_tokens = request.sampling.min_tokens,
      .input_field = request.messages.empty() ? "prompt" : "messages",
      .submitted_at = submit.submitted_at,
  };
  live_.emplace(submit.request_id, std::move(live));
  build_prompt(submit.request_id, std::move(request));
}

// The job holds the builder and a weak reference to this actor: whichever is gone first, the
// other is never touched after it.
void IngressActor::build_prompt(engine::RequestId request_id, engine::GenerateRequest request) {
  std::weak_ptr<Actor<IngressMessage>> self = weak_from_this();
  std::shared_ptr<const PromptBuilder> prompts = prompts_;
  boost::asio::post(prompt_executor_, [self, prompts, request_id, request = std::move(request)]() mutable {
    std::variant<BuiltPrompt, RequestError> built = prompts->build(request);
    std::shared_ptr<Actor<IngressMessage>> actor = self.lock();
    if (!actor) return;  // the engine is gone
    // NOTE: a full mailbox must not lose the result (the request would hang).
    actors::runtime::deliver(std::move(actor), IngressMessage{PromptBuilt{request_id, std::move(built), std::move(request)}});
  });
}

void IngressActor::on_prompt_built(PromptBuilt& built) {
  auto it = live_.find(built.request_id);
  if (it == live_.end()) return;
  it->second.building = false;
  auto* error = std::get_if<RequestError>(&built.built);
  if (!it->second.cancelled_building && error == nullptr) {
    admit(it->second, std::get<BuiltPrompt>(built.built), built.request);
    return;
  }
  // It ends before the scheduler ever saw it: off the live list first, then its client hears
  // the end (as for every other end).
  LiveRequest ended = std::move(it->second);
  live_.erase(it);
  publish_stats();
  if (ended.cancelled_building) {
    if (!ended.closed) ended.sink->on_finish(ended.request_id, completion_of(ended, "cancelled", nullptr, Clock::now()));
    return;
  }
  ++num_refused_;
  fail(ended, std::move(*error));
}

void IngressActor::admit(LiveRequest& live, BuiltPrompt& prompt, engine::GenerateRequest& request) {
  scheduler::NewRequest admit;
  admit.request_id = live.request_id;
  admit.prompt_token_ids = std::move(prompt.token_ids);
  admit.sampling = request.sampling;
  admit.stop = request.stop;
  admit.stop.max_tokens = prompt.max_tokens;
  admit.priority = request.priority;
  admit.client = request.client;
  live.num_prompt_tokens = static_cast<int32_t>(admit.prompt_token_ids.size());
  if (auto error = apply_kv_transfer(admit, request)) {
    ++num_refused_;
    fail(live, std::move(*error));
    live_.erase(live.request_id);
    return;
  }
  if (start_remote_prefill(live, admit, request)) return;
  send_admission(live, std::move(admit));
}

void IngressActor::send_admission(LiveRequest& live, scheduler::NewRequest admit) {
  scheduler::SchedulerMessage message{scheduler::Admit{std::move(admit)}};
  const SendStatus status = scheduler_->try_send(std::move(message));
  if (status != SendStatus::kAccepted) {
    ++num_refused_;
    fail(live, status == SendStatus::kFull
                   ? RequestError{ErrorCode::kQueueFull, "the server is overloaded; retry later", ""}
                   : RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
    live_.erase(live.request_id);
  }
}

void IngressActor::on_cancel(engine::RequestId request_id) {
  auto it = live_.find(request_id);
  if (it == live_.end()) return;
  if (it->second.building) {
    it->second.cancelled_building = true;  // ends when its prompt (or prefill) comes back
    // A prefill server working for it: drop the call, which makes that server cancel too.
    if (it->second.awaiting_remote_prefill && disagg_.peers) disagg_.peers->cancel(it->second.prefill_call_id);
    return;
  }
  // The scheduler answers with a FinishedSequence (kCancelled), which ends the request.
  send_to_scheduler(scheduler::CancelSequence{request_id});
}

void IngressActor::on_step_events(StepEvents& events) {
  for (engine::RequestId id : events.scheduled) {
    auto it = live_.find(id);
    if (it != live_.end() && !it->second.first_scheduled_at) {
      it->second.first_scheduled_at = events.step_started_at;
    }
  }
  generated_tokens_.add(events.step_done_at, events.update.tokens.size());
  for (const scheduler::GeneratedToken& token : events.update.tokens) {
    auto it = live_.find(token.request_id);
    if (it == live_.end() || it->second.closed || it->second.client_gone) continue;
    on_token(it->second, token, events.step_done_at);
  }
  on_sequences_ended(events.update.finished, events.step_done_at);
}

void IngressActor::on_token(LiveRequest& request, const scheduler::GeneratedToken& token,
                            Clock::time_point now) {
  request.num_generated_tokens = token.num_generated_tokens;
  if (!request.first_token_at) {
    request.first_token_at = now;
    time_to_first_token_.add(milliseconds_between(request.submitted_at, now));
  }
  engine::TokenDelta delta;
  delta.num_generated_tokens = token.num_generated_tokens;
  if (request.want_logprobs) {
    engine::TokenInfo info;
    info.token_id = token.token_id;
    info.text = prompts_->tokenizer().token_piece(token.token_id);
    info.logprob = token.logprob;
    for (const gpu::TokenLogprob& alt : token.top_logprobs) {
      info.top_logprobs.emplace_back(alt.token_id, alt.logprob);
    }
    delta.tokens.push_back(std::move(info));
  }
  const std::string text = request.detokenizer.push(token.token_id);
  // As vLLM: stop strings are looked for only once more than min_tokens tokens exist (the
  // scheduler holds back EOS and stop ids until then the same way).
  StopMatcher::Result stopped = token.num_generated_tokens > request.min_tokens
                                    ? request.stop.push(text)
                                    : StopMatcher::Result{text, false};
  delta.text = std::move(stopped.text);
  if (!delta.text.empty() || !delta.tokens.empty()) {
    if (!request.sink->on_delta(request.request_id, std::move(delta))) {
      // No more deltas; the scheduler's confirmation of the cancel brings the final call.
      request.client_gone = true;
      send_to_scheduler(scheduler::CancelSequence{request.request_id});
      return;
    }
  }
  if (stopped.stopped) {
    request.closed = true;
    publish_stats();  // no longer live (see on_sequences_ended)
    send_to_scheduler(scheduler::FinishSequence{request.request_id, scheduler::FinishReason::kStopString});
    request.sink->on_finish(request.request_id, completion_of(request, "stop", nullptr, now));
  }
}

void IngressActor::on_sequences_ended(std::span<const scheduler::FinishedSequence> finished,
                                      Clock::time_point now) {
  std::vector<std::pair<LiveRequest, const scheduler::FinishedSequence*>> ended;
  for (const scheduler::FinishedSequence& f : finished) {
    auto it = live_.find(f.request_id);
    if (it == live_.end()) continue;
    ended.emplace_back(std::move(it->second), &f);
    live_.erase(it);
  }
  if (ended.empty()) return;
  // The board forgets the requests before their clients hear the end, so a client (or an admin)
  // that acts on the final event never finds its request still listed as live. One publish for
  // the whole batch.
  publish_stats();
  for (auto& [request, f] : ended) {
    if (!request.closed) tell_end(request, *f, now);
  }
}

// NOTE: on_finish comes even when the client is gone (before or during the held-back text):
// it is the one event every request ends with, and net does its accounting there.
void IngressActor::tell_end(LiveRequest& request, const scheduler::FinishedSequence& finished,
                            Clock::time_point now) {
  bool stopped = false;
  if (!request.client_gone) {
    std::string tail = request.detokenizer.flush();
    StopMatcher::Result last = request.stop.push(tail);
    std::string text = std::move(last.text);
    if (!last.stopped) text += request.stop.flush();
    stopped = last.stopped;
    if (!text.empty()) {
      engine::TokenDelta delta;
      delta.text = std::move(text);
      delta.num_generated_tokens = finished.num_generated_tokens;
      request.client_gone = !request.sink->on_delta(request.request_id, std::move(delta));
    }
  }
  const std::string reason(stopped ? std::string_view("stop")
                                   : scheduler::openai_finish_reason(finished.reason));
  request.sink->on_finish(request.request_id, completion_of(request, reason, &finished, now));
  // A do_remote_decode answer nobody received: its KV can never be pulled, so free it now
  // rather than at lease expiry. (A client that leaves after this point: the lease covers it.)
  if (finished.held_kv && request.client_gone) {
    send_to_scheduler(scheduler::ReleaseHeldKv{request.request_id, /*forget_lease=*/true});
  }
}

void IngressActor::on_refused(const AdmissionRefused& refusal) {
  auto it = live_.find(refusal.request_id);
  if (it == live_.end()) return;
  ++num_refused_;
  if (!it->second.closed) {
    it->second.sink->on_error(refusal.request_id,
                              error_for(refusal.result, it->second.input_field));
  }
  live_.erase(it);
}

void IngressActor::on_step_failed(const StepFailed& failure) {
  for (engine::RequestId id : failure.request_ids) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    fail(it->second, RequestError{ErrorCode::kInternal, "generation failed: " + failure.message, ""});
    live_.erase(it);
  }
}

void IngressActor::fail(LiveRequest& request, RequestError error) {
  if (request.closed) return;
  request.closed = true;
  request.sink->on_error(request.request_id, std::move(error));
}

engine::Completion IngressActor::completion_of(const LiveRequest& request,
                                               std::string finish_reason,
                                               const scheduler::FinishedSequence* finished,
                                               Clock::time_point now) const {
  engine::Completion completion;
  completion.finish_reason = std::move(finish_reason);
  completion.usage.prompt_tokens = request.num_prompt_tokens;
  completion.usage.completion_tokens =
      finished ? finished->num_generated_tokens : request.num_generated_tokens;
  completion.usage.cached_prompt_tokens = finished ? finished->num_cached_prompt_tokens : 0;
  engine::Timings& t = completion.timings;
  if (request.first_scheduled_at) t.queue_ms = milliseconds_between(request.submitted_at, *request.first_scheduled_at);
  if (request.first_token_at) {
    t.time_to_first_token_ms = milliseconds_between(request.submitted_at, *request.first_token_at);
    const double decode_s = std::chrono::duration<double>(now - *request.first_token_at).count();
    if (decode_s > 0 && completion.usage.completion_tokens > 1) {
      t.decode_tokens_per_s = (completion.usage.completion_tokens - 1) / decode_s;
    }
  }
  t.total_ms = milliseconds_between(request.submitted_at, now);
  if (finished != nullptr && finished->held_kv) {
    // vLLM's answer for a decode server (or a proxy): where the KV is and under what lease.
    disagg::KvTransferParams params;
    params.do_remote_prefill = true;
    params.remote_engine_id = disagg_.engine_id;
    params.remote_block_ids.assign(finished->held_kv->block_ids.begin(), finished->held_kv->block_ids.end());
    params.remote_request_id = std::to_string(finished->request_id);
    params.remote_host = disagg_.config.advertise_host;
    params.remote_port = disagg_.config.advertise_port;
    params.remote_num_tokens = finished->held_kv->num_tokens;
    params.first_token_id = finished->held_kv->first_token_id;
    completion.kv_transfer = std::move(params);
  }
  return completion;
}

void IngressActor::publish_stats() {
  engine::IngressSnapshot snapshot;
  snapshot.live.reserve(live_.size());
  for (const auto& [id, request] : live_) {
    // A closed request's client has had its final event; only the scheduler's confirmation is
    // outstanding.
    if (request.closed) continue;
    snapshot.live.push_back({id, request.client_label, request.client, request.origin, request.submitted_at});
  }
  snapshot.time_to_first_token = time_to_first_token_.summary();
  snapshot.tokens_per_s = generated_tokens_.per_second(Clock::now());
  snapshot.num_refused = num_refused_;
  snapshot.num_remote_prefills = num_remote_prefills_;
  snapshot.num_remote_prefill_fallbacks = num_remote_prefill_fallbacks_;
  board_->publish_ingress(std::move(snapshot));
}

}  // namespace troupe::ingress
