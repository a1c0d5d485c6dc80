// The text side of ingress as a pure policy (vLLM v1's OutputProcessor): it turns what the
// scheduler reports — each step's sampled tokens, sequences that ended — into what each
// request's client receives, in order: text deltas (incremental UTF-8-safe detokenization,
// stop strings, min_tokens), logprobs, the end of each choice, and the request's final
// Completion (finish reason, usage, timings). It also says which sequences the scheduler must
// finish (a stop string matched) and which to cancel (the client left, a sibling failed).
//
// A request of n choices is one parent over n sequences, ids request_id .. request_id + n - 1
// (the engine reserves them); each choice has its own detokenizer and stop matcher, the
// request one set of timings and one Completion, sent when its last choice ended.
//
// A request's life here: add() at submit; set_prompt_tokens() at admission; then process()
// with step updates and ended sequences. Its Completion goes out once every choice ended
// toward the client ("answered"); it is forgotten (listed in Outputs::forgotten) once the
// scheduler confirmed the end of every sequence, or at once by forget() when the scheduler
// never held it or dropped it.
//
// No threads, no I/O, no clock: times come in as arguments.
// Thread-safety: one thread (the ingress actor's).
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "actors/ingress/stop_matcher.hpp"
#include "actors/messages/engine_types.hpp"
#include "actors/messages/scheduler_types.hpp"
#include "model/detokenizer.hpp"
#include "model/tokenizer.hpp"

namespace troupe::ingress {

using Clock = std::chrono::steady_clock;

// What the output side needs of a request (from its GenerateRequest).
struct OutputOptions {
  std::vector<std::string> stop_strings;
  bool include_stop_string = false;
  bool want_logprobs = false;
  int32_t min_tokens = 0;  // stop strings count only once more tokens than this exist
  int32_t num_choices = 1;
  // Issue 37: echo the prompt (GenerateRequest::echo) and/or its scores (prompt_logprobs >= 0)
  // in each choice's first delta; an embeddings request (one vector per choice, no text).
  bool echo = false;
  int32_t prompt_logprobs = -1;
  bool embedding = false;
};

// One call to make on a request's sink.
struct RequestOutput {
  engine::RequestId request_id = 0;
  std::variant<engine::TokenDelta, engine::ChoiceEnd, engine::Completion> event;
  // With the Completion of a do_remote_decode request: the KV held for a decode server.
  std::optional<scheduler::HeldKv> held_kv;
};

class OutputProcessor {
 public:
  struct Outputs {
    std::vector<RequestOutput> outputs;                  // in delivery order
    std::vector<engine::RequestId> sequences_to_finish;  // stop string matched (kStopString)
    std::vector<engine::RequestId> forgotten;            // requests gone from here
    std::vector<double> time_to_first_token_ms;          // requests whose first token came
  };

  explicit OutputProcessor(model::Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}

  void add(engine::RequestId request_id, OutputOptions options, Clock::time_point submitted_at);
  void set_prompt_tokens(engine::RequestId request_id, int32_t num_prompt_tokens);
  // The prompt a request echoes or scores: its ids and text (the prompt as given).
  void set_prompt(engine::RequestId request_id, std::vector<int32_t> token_ids, std::string text);
  // Stamps the first-scheduled time of the requests these sequences belong to.
  void note_scheduled(std::span<const engine::RequestId> sequence_ids, Clock::time_point at);

  // A step's tokens, then the sequences that ended in it (or outside a step: `tokens` empty).
  Outputs process(std::span<const scheduler::GeneratedToken> tokens,
                  std::span<const scheduler::FinishedSequence> finished, Clock::time_point now);
  // A whole step update: its prompt outputs (scores, embeddings) first, then as above.
  Outputs process(const scheduler::StepUpdate& update, Clock::time_point now);

  // The client is gone: no more deltas for it. Returns the sequences still generating, for
  // the caller to cancel; the Completion ("cancelled") follows their confirmed ends.
  std::vector<engine::RequestId> client_gone(engine::RequestId request_id);
  // The sequences of a request that have not ended toward the client (to cancel).
  std::vector<engine::RequestId> open_sequences(engine::RequestId request_id) const;
  // The request gets an error instead of its Completion: true when it had not been answered
  // yet (the caller then tells the sink); its open sequences are appended to `to_cancel`.
  bool close_with_error(engine::RequestId request_id, std::vector<engine::RequestId>& to_cancel);
  // The Completion of a request cancelled before the scheduler saw it (nothing generated).
  engine::Completion cancelled_before_start(engine::RequestId request_id, Clock::time_point now) const;
  // Drops a request at once (refused, failed, cancelled before start, shutting down).
  void forget(engine::RequestId request_id);

  // The request a sequence belongs to (nullopt: unknown or forgotten).
  std::optional<engine::RequestId> request_of(engine::RequestId sequence_id) const;
  bool contains(engine::RequestId request_id) const { return requests_.contains(request_id); }
  // Its client has had the final call (Completion or error); only confirmations are pending.
  bool answered(engine::RequestId request_id) const;
  size_t size() const { return requests_.size(); }

 private:
  struct Choice {
    Choice(model::Tokenizer tokenizer, const OutputOptions& options)
        : detokenizer(std::move(tokenizer)),
          stop(options.stop_strings, options.include_stop_string) {}
    model::IncrementalDetokenizer detokenizer;
    StopMatcher stop;
    int32_t num_generated_tokens = 0;
    int32_t completion_tokens = 0;  // its usage, fixed when it ends
    bool ended = false;      // its ChoiceEnd was produced (or the request failed)
    bool confirmed = false;  // the scheduler reported the sequence's end
    std::string finish_reason;
    std::optional<scheduler::FinishedSequence> finished;  // the scheduler's report
    // Echo: the prompt's scores so far (entry i: prompt token i + 1), and whether the choice's
    // first delta (which carries the echo) went out.
    std::vector<engine::TokenInfo> prompt_scores;
    bool prompt_sent = false;
    std::vector<float> embedding;
  };
  struct Request {
    OutputOptions options;
    std::vector<Choice> choices;
    int32_t num_prompt_tokens = 0;
    std::vector<int32_t> prompt_ids;  // set_prompt(): echo and scores only
    std::string prompt_text;
    Clock::time_point submitted_at;
    std::optional<Clock::time_point> first_scheduled_at;
    std::optional<Clock::time_point> first_token_at;
    bool client_gone = false;
    bool answered = false;  // Completion produced, or close_with_error()
    int32_t num_confirmed = 0;
  };

  // The request and choice of a sequence id; nullptr when unknown.
  std::pair<Request*, Choice*> find(engine::RequestId sequence_id);
  void on_token(engine::RequestId request_id, Request& request, Choice& choice,
                const scheduler::GeneratedToken& token, Clock::time_point now, Outputs& out);
  void on_sequence_end(engine::RequestId request_id, Request& request, Choice& choice,
                       const scheduler::FinishedSequence& finished, Outputs& out);
  // The choice ended toward the client; the Completion follows when it was the last.
  void end_choice(engine::RequestId request_id, Request& request, Choice& choice,
                  std::string reason, Clock::time_point now, Outputs& out);
  engine::Completion completion_of(const Request& request, Clock::time_point now) const;
  void on_prompt_scores(const scheduler::PromptLogprobs& scores);
  // The echo a choice's first delta carries (nullopt: the request echoes nothing, or the
  // choice's went out); marks it sent.
  std::optional<engine::PromptEcho> take_echo(Request& request, Choice& choice);

  model::Tokenizer tokenizer_;
  std::unordered_map<engine::RequestId, Request> requests_;
  std::unordered_map<engine::RequestId, engine::RequestId> request_of_sequence_;
};

}  // namespace troupe::ingress
