// `n` > 1 on /v1/completions and /v1/chat/completions: one HTTP request answered with n choices.
// Each choice is its own engine request with the same prompt (the prefix cache makes the shared
// prompt cheap); a ChoiceSink per request forwards its events, tagged with the choice index, to
// one MultiChoiceResponse, which merges them into one JSON body (no stream) or one SSE stream
// whose chunks carry the choice `index`, each choice ending with its own finish_reason chunk,
// then the summed usage chunk (include_usage) and one `data: [DONE]` after every choice ended.
//
// Seeds: with a `seed`, choice i samples with seed + i (choices differ, the response is
// reproducible); without one, every choice gets a random seed.
//
// Failure (documented behaviour): the first error of any choice fails the whole request — a
// status response when nothing was streamed yet (429 once for queue-full), else an error event
// followed by [DONE] — and the other choices are cancelled; their later events are dropped.
// A client that goes away cancels all n engine requests.
//
// Accounting: the HTTP request is one request (one access-log line, one count), ended by its
// last choice or its first error. Its finish reason is "cancelled" when any choice was
// cancelled, else "length" when any choice hit its limit, else "stop"; the latency histograms
// still get one observation per choice.
//
// Thread-safety: start() is called once, by the HTTP handler. The engine calls the ChoiceSinks
// on its ingress thread; MultiChoiceResponse's on_* never block (a mutex guards the merge
// state and is held only while appending to the non-blocking ResponseStream; engine cancels
// are issued outside it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/engine/engine.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {

class MultiChoiceResponse final : public std::enable_shared_from_this<MultiChoiceResponse> {
 public:
  MultiChoiceResponse(std::shared_ptr<OpenAiContext> context, std::shared_ptr<ResponseStream> out,
                      ResponseIdentity identity, SinkOptions options, int32_t num_choices,
                      std::shared_ptr<RequestRecord> record);

  // Submits the n engine requests (`request` copied per choice, seeds as above) and cancels
  // them all when the client goes away. Call once, right after construction.
  void start(const engine::GenerateRequest& request, bool has_seed);

  // ---- from the ChoiceSinks (the engine's ingress thread) ------------------------------
  bool on_delta(int32_t choice, engine::TokenDelta delta);
  void on_finish(int32_t choice, engine::Completion completion);
  void on_error(int32_t choice, engine::RequestError error);
  void note_request_id(engine::RequestId request_id) { record_->note_request_id(request_id); }

 private:
  struct Choice {
    std::string text;                       // no stream: the whole answer
    std::vector<engine::TokenInfo> tokens;  // no stream: every token's logprobs
    size_t text_offset = 0;                 // stream: completions' logprobs.text_offset
    bool started = false;                   // stream: its first chunk was sent
    bool done = false;
    std::string finish_reason;
    engine::Usage usage;
  };

  bool start_stream();  // with mutex_ held
  void finish_all();    // with mutex_ held: the last choice ended
  // with mutex_ held: the bodies of on_delta / on_finish once every choice was submitted
  bool take_delta(int32_t choice, engine::TokenDelta delta);
  void take_finish(int32_t choice, engine::Completion completion);
  engine::Usage total_usage() const;
  std::string_view overall_finish_reason() const;
  void cancel_all_but(int32_t choice, const std::vector<engine::RequestId>& ids) const;

  const std::shared_ptr<OpenAiContext> context_;
  const std::shared_ptr<ResponseStream> out_;
  const ResponseIdentity identity_;
  const SinkOptions options_;
  const TokenTextFn token_text_;
  const std::shared_ptr<RequestRecord> record_;

  mutable std::mutex mutex_;
  std::vector<Choice> choices_;
  std::vector<engine::RequestId> request_ids_;  // empty until every choice was submitted
  int32_t num_done_ = 0;
  bool stream_started_ = false;
  // Until every choice was submitted, events are held: a choice refused at submit (queue full)
  // must still find nothing streamed, so the client gets one 429 whatever its siblings did.
  bool submitting_ = true;
  std::vector<std::pair<int32_t, engine::TokenDelta>> held_deltas_;
  std::vector<std::pair<int32_t, engine::Completion>> held_finishes_;
  bool failed_ = false;  // a choice failed: the response is answered, the rest is dropped
  int32_t failed_choice_ = -1;
};

// One choice's RequestSink: forwards to the MultiChoiceResponse with the choice index.
// Thread-safety: as RequestSink (the engine's ingress thread, in order).
class ChoiceSink final : public engine::RequestSink {
 public:
  ChoiceSink(std::shared_ptr<MultiChoiceResponse> response, int32_t choice)
      : response_(std::move(response)), choice_(choice) {}
  bool on_delta(engine::RequestId request_id, engine::TokenDelta delta) override {
    if (choice_ == 0) response_->note_request_id(request_id);
    return response_->on_delta(choice_, std::move(delta));
  }
  void on_finish(engine::RequestId, engine::Completion completion) override {
    response_->on_finish(choice_, std::move(completion));
  }
  void on_error(engine::RequestId, engine::RequestError error) override {
    response_->on_error(choice_, std::move(error));
  }

 private:
  std::shared_ptr<MultiChoiceResponse> response_;
  int32_t choice_;
};

}  // namespace troupe::net
