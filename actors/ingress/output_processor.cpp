#include "actors/ingress/output_processor.hpp"

#include <algorithm>

namespace troupe::ingress {
namespace {

double milliseconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// n > 1: the request's reason from its choices' (engine::Completion::finish_reason).
std::string overall_finish_reason(const std::vector<std::string>& reasons) {
  const auto any = [&reasons](std::string_view reason) {
    return std::find(reasons.begin(), reasons.end(), reason) != reasons.end();
  };
  if (any("cancelled")) return "cancelled";
  if (any("length")) return "length";
  return "stop";
}

}  // namespace

void OutputProcessor::add(engine::RequestId request_id, OutputOptions options,
                          Clock::time_point submitted_at) {
  Request request;
  request.options = std::move(options);
  request.options.num_choices = std::max(request.options.num_choices, 1);
  request.submitted_at = submitted_at;
  request.choices.reserve(static_cast<size_t>(request.options.num_choices));
  for (int32_t i = 0; i < request.options.num_choices; ++i) {
    request.choices.emplace_back(tokenizer_, request.options);
    request_of_sequence_[request_id + static_cast<engine::RequestId>(i)] = request_id;
  }
  requests_.insert_or_assign(request_id, std::move(request));
}

void OutputProcessor::set_prompt_tokens(engine::RequestId request_id, int32_t num_prompt_tokens) {
  if (auto it = requests_.find(request_id); it != requests_.end()) {
    it->second.num_prompt_tokens = num_prompt_tokens;
  }
}

void OutputProcessor::set_prompt(engine::RequestId request_id, std::vector<int32_t> token_ids,
                                 std::string text) {
  if (auto it = requests_.find(request_id); it != requests_.end()) {
    it->second.prompt_ids = std::move(token_ids);
    it->second.prompt_text = std::move(text);
  }
}

void OutputProcessor::on_prompt_scores(const scheduler::PromptLogprobs& scores) {
  auto [request, choice] = find(scores.request_id);
  if (request == nullptr || choice->ended || request->client_gone) return;
  // Positions arrive in order, each once (the scheduler reports none twice).
  for (const gpu::ScoredToken& scored : scores.tokens) {
    engine::TokenInfo info;
    info.token_id = scored.token_id;
    info.text = tokenizer_.token_piece(scored.token_id);
    info.logprob = scored.logprob;
    info.rank = scored.rank;
    for (const gpu::TokenLogprob& alt : scored.top_logprobs) info.top_logprobs.emplace_back(alt.token_id, alt.logprob);
    choice->prompt_scores.push_back(std::move(info));
  }
}

std::optional<engine::PromptEcho> OutputProcessor::take_echo(Request& request, Choice& choice) {
  const OutputOptions& o = request.options;
  if (choice.prompt_sent || (!o.echo && o.prompt_logprobs < 0)) return std::nullopt;
  choice.prompt_sent = true;
  engine::PromptEcho echo;
  echo.text = request.prompt_text;
  echo.scored = o.prompt_logprobs >= 0;
  echo.tokens.reserve(request.prompt_ids.size());
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    if (echo.scored && i > 0 && i - 1 < choice.prompt_scores.size()) {
      echo.tokens.push_back(std::move(choice.prompt_scores[i - 1]));
      continue;
    }
    engine::TokenInfo info;
    info.token_id = request.prompt_ids[i];
    info.text = tokenizer_.token_piece(info.token_id);
    info.has_logprob = false;
    echo.tokens.push_back(std::move(info));
  }
  choice.prompt_scores.clear();
  return echo;
}

OutputProcessor::Outputs OutputProcessor::process(const scheduler::StepUpdate& update,
                                                  Clock::time_point now) {
  for (const scheduler::PromptLogprobs& scores : update.prompt_logprobs) on_prompt_scores(scores);
  for (const scheduler::Embedding& embedding : update.embeddings) {
    auto [request, choice] = find(embedding.request_id);
    if (request != nullptr) choice->embedding = embedding.values;
  }
  return process(update.tokens, update.finished, now);
}

void OutputProcessor::note_scheduled(std::span<const engine::RequestId> sequence_ids,
                                     Clock::time_point at) {
  for (const engine::RequestId id : sequence_ids) {
    auto [request, choice] = find(id);
    if (request != nullptr && !request->first_scheduled_at) request->first_scheduled_at = at;
  }
}

std::optional<engine::RequestId> OutputProcessor::request_of(engine::RequestId sequence_id) const {
  const auto it = request_of_sequence_.find(sequence_id);
  if (it == request_of_sequence_.end()) return std::nullopt;
  return it->second;
}

std::pair<OutputProcessor::Request*, OutputProcessor::Choice*> OutputProcessor::find(
    engine::RequestId sequence_id) {
  const std::optional<engine::RequestId> request_id = request_of(sequence_id);
  if (!request_id) return {nullptr, nullptr};
  Request& request = requests_.at(*request_id);
  return {&request, &request.choices[static_cast<size_t>(sequence_id - *request_id)]};
}

bool OutputProcessor::answered(engine::RequestId request_id) const {
  const auto it = requests_.find(request_id);
  return it != requests_.end() && it->second.answered;
}

OutputProcessor::Outputs OutputProcessor::process(
    std::span<const scheduler::GeneratedToken> tokens,
    std::span<const scheduler::FinishedSequence> finished, Clock::time_point now) {
  Outputs out;
  for (const scheduler::GeneratedToken& token : tokens) {
    auto [request, choice] = find(token.request_id);
    if (request == nullptr || choice->ended || request->client_gone) continue;
    on_token(*request_of(token.request_id), *request, *choice, token, now, out);
  }
  for (const scheduler::FinishedSequence& f : finished) {
    auto [request, choice] = find(f.request_id);
    if (request == nullptr || choice->confirmed) continue;
    const engine::RequestId request_id = *request_of(f.request_id);
    on_sequence_end(request_id, *request, *choice, f, out);
    if (!choice->ended) {
      // An embedding ends as vLLM's pooling requests do: "stop" (it was asked for nothing more).
      const bool embedded = request->options.embedding && f.reason == scheduler::FinishReason::kPromptDone;
      end_choice(request_id, *request, *choice,
                 embedded ? std::string("stop") : std::string(scheduler::openai_finish_reason(f.reason)),
                 now, out);
    }
    if (request->num_confirmed == static_cast<int32_t>(request->choices.size())) {
      forget(request_id);
      out.forgotten.push_back(request_id);
    }
  }
  return out;
}

void OutputProcessor::on_token(engine::RequestId request_id, Request& request, Choice& choice,
                               const scheduler::GeneratedToken& token, Clock::time_point now,
                               Outputs& out) {
  choice.num_generated_tokens = token.num_generated_tokens;
  if (!request.first_token_at) {
    request.first_token_at = now;
    out.time_to_first_token_ms.push_back(milliseconds_between(request.submitted_at, now));
  }
  engine::TokenDelta delta;
  delta.index = static_cast<int32_t>(&choice - request.choices.data());
  delta.num_generated_tokens = token.num_generated_tokens;
  delta.prompt = take_echo(request, choice);
  if (request.options.want_logprobs) {
    engine::TokenInfo info;
    info.token_id = token.token_id;
    info.text = tokenizer_.token_piece(token.token_id);
    info.logprob = token.logprob;
    for (const gpu::TokenLogprob& alt : token.top_logprobs) {
      info.top_logprobs.emplace_back(alt.token_id, alt.logprob);
    }
    delta.tokens.push_back(std::move(info));
  }
  const std::string text = choice.detokenizer.push(token.token_id);
  // As vLLM: stop strings are looked for only once more than min_tokens tokens exist (the
  // scheduler holds back EOS and stop ids until then the same way).
  StopMatcher::Result stopped = token.num_generated_tokens > request.options.min_tokens
                                    ? choice.stop.push(text)
                                    : StopMatcher::Result{text, false};
  delta.text = std::move(stopped.text);
  if (!delta.text.empty() || !delta.tokens.empty() || delta.prompt) {
    out.outputs.push_back({request_id, std::move(delta), std::nullopt});
  }
  if (stopped.stopped) {
    out.sequences_to_finish.push_back(token.request_id);
    end_choice(request_id, request, choice, "stop", now, out);
  }
}

// The scheduler ended the sequence. Unless its choice already ended (stop string), the text
// held back for a possible stop string or an unfinished character goes out now.
void OutputProcessor::on_sequence_end(engine::RequestId request_id, Request& request,
                                      Choice& choice, const scheduler::FinishedSequence& finished,
                                      Outputs& out) {
  choice.confirmed = true;
  choice.finished = finished;
  ++request.num_confirmed;
  if (choice.ended || request.client_gone) return;
  choice.num_generated_tokens = finished.num_generated_tokens;
  StopMatcher::Result last = choice.stop.push(choice.detokenizer.flush());
  std::string text = std::move(last.text);
  if (!last.stopped) text += choice.stop.flush();
  if (last.stopped) choice.finish_reason = "stop";
  // A choice that generated nothing (echo with max_tokens 0) echoes its prompt here — but not
  // one cancelled or failed before its prompt was computed.
  std::optional<engine::PromptEcho> echo;
  if (finished.reason == scheduler::FinishReason::kPromptDone || finished.num_generated_tokens > 0) {
    echo = take_echo(request, choice);
  }
  if (text.empty() && !echo) return;
  engine::TokenDelta delta;
  delta.index = static_cast<int32_t>(&choice - request.choices.data());
  delta.prompt = std::move(echo);
  delta.text = std::move(text);
  delta.num_generated_tokens = finished.num_generated_tokens;
  out.outputs.push_back({request_id, std::move(delta), std::nullopt});
}

void OutputProcessor::end_choice(engine::RequestId request_id, Request& request, Choice& choice,
                                 std::string reason, Clock::time_point now, Outputs& out) {
  choice.ended = true;
  // A stop string found in the held-back tail outranks the scheduler's reason.
  if (choice.finish_reason.empty()) choice.finish_reason = std::move(reason);
  // Ended by a stop string before the scheduler's report: counted as far as the client saw.
  choice.completion_tokens =
      choice.finished ? choice.finished->num_generated_tokens : choice.num_generated_tokens;
  if (request.answered) return;
  engine::ChoiceEnd end;
  end.index = static_cast<int32_t>(&choice - request.choices.data());
  end.finish_reason = choice.finish_reason;
  end.completion_tokens = choice.completion_tokens;
  out.outputs.push_back({request_id, std::move(end), std::nullopt});
  const bool all_ended = std::all_of(request.choices.begin(), request.choices.end(),
                                     [](const Choice& c) { return c.ended; });
  if (!all_ended) return;
  request.answered = true;
  RequestOutput final_output{request_id, completion_of(request, now), std::nullopt};
  const Choice& first = request.choices.front();
  if (request.choices.size() == 1 && first.finished && first.finished->held_kv) {
    final_output.held_kv = first.finished->held_kv;
  }
  out.outputs.push_back(std::move(final_output));
}

engine::Completion OutputProcessor::completion_of(const Request& request,
                                                  Clock::time_point now) const {
  engine::Completion completion;
  std::vector<std::string> reasons;
  completion.usage.prompt_tokens = request.num_prompt_tokens;
  for (const Choice& choice : request.choices) {
    reasons.push_back(choice.finish_reason);
    completion.usage.completion_tokens += choice.completion_tokens;
    if (choice.finished) {
      completion.usage.cached_prompt_tokens =
          std::max(completion.usage.cached_prompt_tokens, choice.finished->num_cached_prompt_tokens);
    }
  }
  completion.finish_reason = reasons.size() == 1 ? reasons.front() : overall_finish_reason(reasons);
  if (request.options.embedding) {
    completion.embeddings.reserve(request.choices.size());
    for (const Choice& choice : request.choices) completion.embeddings.push_back(choice.embedding);
  }
  engine::Timings& t = completion.timings;
  if (request.first_scheduled_at) {
    t.queue_ms = milliseconds_between(request.submitted_at, *request.first_scheduled_at);
  }
  if (request.first_token_at) {
    t.time_to_first_token_ms = milliseconds_between(request.submitted_at, *request.first_token_at);
    const double decode_s = std::chrono::duration<double>(now - *request.first_token_at).count();
    if (decode_s > 0 && completion.usage.completion_tokens > 1) {
      t.decode_tokens_per_s = (completion.usage.completion_tokens - 1) / decode_s;
    }
  }
  t.total_ms = milliseconds_between(request.submitted_at, now);
  return completion;
}

std::vector<engine::RequestId> OutputProcessor::open_sequences(engine::RequestId request_id) const {
  std::vector<engine::RequestId> open;
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return open;
  for (size_t i = 0; i < it->second.choices.size(); ++i) {
    if (!it->second.choices[i].ended) open.push_back(request_id + i);
  }
  return open;
}

std::vector<engine::RequestId> OutputProcessor::client_gone(engine::RequestId request_id) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second.client_gone) return {};
  it->second.client_gone = true;
  return open_sequences(request_id);
}

bool OutputProcessor::close_with_error(engine::RequestId request_id,
                                       std::vector<engine::RequestId>& to_cancel) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second.answered) return false;
  std::vector<engine::RequestId> open = open_sequences(request_id);
  to_cancel.insert(to_cancel.end(), open.begin(), open.end());
  it->second.answered = true;
  for (Choice& choice : it->second.choices) choice.ended = true;
  return true;
}

engine::Completion OutputProcessor::cancelled_before_start(engine::RequestId request_id,
                                                           Clock::time_point now) const {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return engine::Completion{.finish_reason = "cancelled"};
  engine::Completion completion = completion_of(it->second, now);
  completion.finish_reason = "cancelled";
  return completion;
}

void OutputProcessor::forget(engine::RequestId request_id) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (size_t i = 0; i < it->second.choices.size(); ++i) request_of_sequence_.erase(request_id + i);
  requests_.erase(it);
}

}  // namespace troupe::ingress
