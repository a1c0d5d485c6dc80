#include "actors/ingress/ingress_actor.hpp"

#include <algorithm>
#include <type_traits>

#include <boost/asio/post.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::ingress {

using actors::runtime::SendStatus;
using engine::ErrorCode;
using engine::RequestError;

namespace {

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
      output_(prompts_->tokenizer()),
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
          deliver(output_.process({}, m.finished, Clock::now()));
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
  fail_everyone_draining();
}

void IngressActor::fail_everyone_draining() {
  for (auto& [id, live] : live_) {
    std::vector<engine::RequestId> unused;
    if (output_.close_with_error(id, unused)) {
      live.sink->on_error(id, RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
    }
    output_.forget(id);
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
  fail_everyone_draining();
}

void IngressActor::on_submit(Submit& submit) {
  engine::GenerateRequest& request = submit.request;
  LiveRequest live{
      .request_id = submit.request_id,
      .client_label = request.client_label,
      .client = request.client,
      .origin = request.origin,
      .sink = std::move(submit.sink),
      .submitted_at = submit.submitted_at,
      .input_field = request.embedding ? "input" : request.messages.empty() ? "prompt" : "messages",
      .num_choices = request.embedding ? static_cast<int32_t>(request.embedding->inputs.size())
                                       : std::max(request.n, 1),
  };
  output_.add(submit.request_id,
              OutputOptions{.stop_strings = request.stop.stop_strings,
                            .include_stop_string = request.include_stop_string_in_output,
                            .want_logprobs = request.sampling.logprobs,
                            .min_tokens = request.sampling.min_tokens,
                            .num_choices = live.num_choices,
                            .echo = request.echo,
                            .prompt_logprobs = request.prompt_logprobs,
                            .embedding = request.embedding.has_value()},
              submit.submitted_at);
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
  end_before_start(it->second, error ? std::optional<RequestError>(std::move(*error)) : std::nullopt);
}

// Off the live list first, then its client hears the end (as for every other end).
void IngressActor::end_before_start(LiveRequest& live, std::optional<RequestError> error) {
  LiveRequest ended = std::move(live);
  const engine::RequestId id = ended.request_id;
  const bool answered = output_.answered(id);
  engine::Completion cancelled = output_.cancelled_before_start(id, Clock::now());
  output_.forget(id);
  live_.erase(id);
  publish_stats();
  if (answered) return;
  if (ended.cancelled_building) {
    // Every request's choices end before it does (the sink contract), these ones unstarted.
    for (int32_t i = 0; i < ended.num_choices; ++i) {
      ended.sink->on_choice_end(id, engine::ChoiceEnd{i, "cancelled", 0});
    }
    ended.sink->on_finish(id, std::move(cancelled));
    return;
  }
  ++num_refused_;
  ended.sink->on_error(id, std::move(*error));
}

void IngressActor::admit(LiveRequest& live, BuiltPrompt& prompt, engine::GenerateRequest& request) {
  if (request.embedding) {
    admit_embedding(live, prompt, request);
    return;
  }
  if (request.echo || request.prompt_logprobs >= 0) {
    output_.set_prompt(live.request_id, prompt.token_ids, std::move(prompt.echo_text));
  }
  scheduler::NewRequest admit;
  admit.prompt_logprobs = request.prompt_logprobs;
  admit.prompt_only = request.prompt_only;
  admit.request_id = live.request_id;
  admit.prompt_token_ids = std::move(prompt.token_ids);
  admit.sampling = request.sampling;
  admit.stop = request.stop;
  admit.stop.max_tokens = prompt.max_tokens;
  admit.priority = request.priority;
  admit.client = request.client;
  admit.grammar = std::move(prompt.grammar);
  output_.set_prompt_tokens(live.request_id, static_cast<int32_t>(admit.prompt_token_ids.size()));
  if (auto error = apply_kv_transfer(admit, request)) {
    ++num_refused_;
    fail_and_forget(live.request_id, std::move(*error));
    return;
  }
  if (start_remote_prefill(live, admit, request)) return;
  send_admission(live, std::move(admit));
}

// One prompt-only sequence per input, ids request_id + i, admitted together like n choices.
void IngressActor::admit_embedding(LiveRequest& live, BuiltPrompt& prompt,
                                   const engine::GenerateRequest& request) {
  scheduler::Admit group;
  group.sequences.reserve(prompt.inputs.size());
  int32_t num_prompt_tokens = 0;
  for (size_t i = 0; i < prompt.inputs.size(); ++i) {
    scheduler::NewRequest input;
    input.request_id = live.request_id + static_cast<engine::RequestId>(i);
    num_prompt_tokens += static_cast<int32_t>(prompt.inputs[i].size());
    input.prompt_token_ids = std::move(prompt.inputs[i]);
    input.stop.max_tokens = 0;
    input.priority = request.priority;
    input.client = request.client;
    input.pooling = request.embedding->pooling;
    input.prompt_only = true;
    group.sequences.push_back(std::move(input));
  }
  output_.set_prompt_tokens(live.request_id, num_prompt_tokens);
  send_group(live, std::move(group));
}

void IngressActor::send_admission(LiveRequest& live, scheduler::NewRequest admit) {
  scheduler::Admit group;
  group.sequences.reserve(static_cast<size_t>(live.num_choices));
  for (int32_t i = 1; i < live.num_choices; ++i) {
    scheduler::NewRequest choice = admit;
    choice.request_id = live.request_id + static_cast<engine::RequestId>(i);
    choice.sampling.seed = admit.sampling.seed + static_cast<uint64_t>(i);
    group.sequences.push_back(std::move(choice));
  }
  group.sequences.insert(group.sequences.begin(), std::move(admit));
  send_group(live, std::move(group));
}

void IngressActor::send_group(LiveRequest& live, scheduler::Admit group) {
  const SendStatus status = scheduler_->try_send(scheduler::SchedulerMessage{std::move(group)});
  if (status != SendStatus::kAccepted) {
    ++num_refused_;
    fail_and_forget(live.request_id,
                    status == SendStatus::kFull
                        ? RequestError{ErrorCode::kQueueFull, "the server is overloaded; retry later", ""}
                        : RequestError{ErrorCode::kDraining, "the server is shutting down", ""});
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
  // The scheduler answers with a FinishedSequence (kCancelled) per sequence, which ends the
  // request once all are in.
  for (const engine::RequestId sequence : output_.open_sequences(request_id)) {
    send_to_scheduler(scheduler::CancelSequence{sequence});
  }
}

void IngressActor::on_step_events(StepEvents& events) {
  output_.note_scheduled(events.scheduled, events.step_started_at);
  generated_tokens_.add(events.step_done_at, events.update.tokens.size());
  deliver(output_.process(events.update, events.step_done_at));
}

void IngressActor::deliver(OutputProcessor::Outputs outputs) {
  for (const engine::RequestId sequence : outputs.sequences_to_finish) {
    send_to_scheduler(scheduler::FinishSequence{sequence, scheduler::FinishReason::kStopString});
  }
  for (const double ms : outputs.time_to_first_token_ms) time_to_first_token_.add(ms);
  // The board forgets the requests before their clients hear the end, so a client (or an admin)
  // that acts on the final event never finds its request still listed as live. One publish for
  // the whole batch.
  std::unordered_map<engine::RequestId, LiveRequest> forgotten;
  for (const engine::RequestId id : outputs.forgotten) {
    if (auto node = live_.extract(id)) forgotten.insert(std::move(node));
  }
  const bool any_answer = std::any_of(outputs.outputs.begin(), outputs.outputs.end(), [](const RequestOutput& o) {
    return std::holds_alternative<engine::Completion>(o.event);
  });
  if (any_answer || !forgotten.empty()) publish_stats();
  for (RequestOutput& output : outputs.outputs) {
    auto it = live_.find(output.request_id);
    if (it != live_.end()) {
      deliver_one(it->second, output);
    } else if (auto gone = forgotten.find(output.request_id); gone != forgotten.end()) {
      deliver_one(gone->second, output);
    }
  }
}

// NOTE: on_finish comes even when the client is gone: it is the one event every request ends
// with, and net does its accounting there.
void IngressActor::deliver_one(LiveRequest& live, RequestOutput& output) {
  const engine::RequestId id = live.request_id;
  if (auto* delta = std::get_if<engine::TokenDelta>(&output.event)) {
    if (live.client_gone || live.sink->on_delta(id, std::move(*delta))) return;
    // No more deltas; the scheduler's confirmation of the cancels brings the final call.
    live.client_gone = true;
    for (const engine::RequestId sequence : output_.client_gone(id)) {
      send_to_scheduler(scheduler::CancelSequence{sequence});
    }
    return;
  }
  if (auto* end = std::get_if<engine::ChoiceEnd>(&output.event)) {
    live.sink->on_choice_end(id, *end);
    return;
  }
  engine::Completion& completion = std::get<engine::Completion>(output.event);
  if (output.held_kv) {
    // vLLM's answer for a decode server (or a proxy): where the KV is and under what lease.
    disagg::KvTransferParams params;
    params.do_remote_prefill = true;
    params.remote_engine_id = disagg_.engine_id;
    params.remote_block_ids.assign(output.held_kv->block_ids.begin(), output.held_kv->block_ids.end());
    for (const std::vector<kv_cache::BlockId>& group : output.held_kv->sliding_block_ids) {
      params.remote_sliding_block_ids.emplace_back(group.begin(), group.end());
    }
    params.remote_request_id = std::to_string(id);
    params.remote_host = disagg_.config.advertise_host;
    params.remote_port = disagg_.config.advertise_port;
    params.remote_num_tokens = output.held_kv->num_tokens;
    params.first_token_id = output.held_kv->first_token_id;
    completion.kv_transfer = std::move(params);
  }
  live.sink->on_finish(id, std::move(completion));
  // A do_remote_decode answer nobody received: its KV can never be pulled, so free it now
  // rather than at lease expiry. (A client that leaves after this point: the lease covers it.)
  if (output.held_kv && live.client_gone) {
    send_to_scheduler(scheduler::ReleaseHeldKv{id, /*forget_lease=*/true});
  }
}

void IngressActor::on_refused(const AdmissionRefused& refusal) {
  auto it = live_.find(refusal.request_id);
  if (it == live_.end()) return;
  ++num_refused_;
  fail_and_forget(refusal.request_id, error_for(refusal.result, it->second.input_field));
}

void IngressActor::on_step_failed(const StepFailed& failure) {
  for (const engine::RequestId sequence : failure.request_ids) {
    const std::optional<engine::RequestId> id = output_.request_of(sequence);
    if (!id) continue;
    fail_and_forget(*id, RequestError{ErrorCode::kInternal, "generation failed: " + failure.message, ""},
                    /*cancel_siblings=*/true);
  }
}

void IngressActor::fail_and_forget(engine::RequestId request_id, RequestError error,
                                   bool cancel_siblings) {
  auto node = live_.extract(request_id);
  std::vector<engine::RequestId> open;
  const bool tell = output_.close_with_error(request_id, open);
  output_.forget(request_id);
  if (node.empty()) return;
  publish_stats();
  if (tell) node.mapped().sink->on_error(request_id, std::move(error));
  if (!cancel_siblings) return;
  for (const engine::RequestId sequence : open) send_to_scheduler(scheduler::CancelSequence{sequence});
}

void IngressActor::publish_stats() {
  engine::IngressSnapshot snapshot;
  snapshot.live.reserve(live_.size());
  for (const auto& [id, request] : live_) {
    // An answered request's client has had its final event; only the scheduler's
    // confirmation is outstanding.
    if (output_.answered(id)) continue;
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
