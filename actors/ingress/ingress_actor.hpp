// The ingress actor: the engine's front desk. It owns every live request's sink, has its
// prompt built (chat template, tokenizer, validation) on the prompt workers, forwards it to the
// scheduler, and hands each step's sampled tokens to its OutputProcessor (the pure text side:
// detokenization, stop strings, choices, usage and timings), delivering what comes out to the
// sinks and the scheduler.
//
// Prompts are built off this thread (issue 13): tokenizing a long prompt takes milliseconds to
// seconds, and every running stream's text passes through here. A submitted request is live
// from Submit on ("building"); its PromptBuilt comes back through the mailbox, and only then
// does it reach the scheduler. A cancel while building ends it when its prompt comes back.
//
// It never waits on the scheduler's mailbox (try_send only): refusing a request with "queue
// full" is better than blocking the front desk, and it keeps the scheduler -> ingress direction
// (which does await room) free of deadlock.
//
// Thread-safety: connect() and start() from the wiring thread; try_send()/send()/shutdown() from
// any thread; everything else on the actor's executor. Sinks are called on that executor only.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <unordered_map>

#include "actors/common/stats_board.hpp"
#include "actors/disagg/disagg_config.hpp"
#include "actors/disagg/peer_client.hpp"
#include "actors/ingress/output_processor.hpp"
#include "actors/ingress/prompt_builder.hpp"
#include "actors/messages/ingress_messages.hpp"
#include "actors/messages/scheduler_messages.hpp"
#include "actors/runtime/actor.hpp"

namespace troupe::ingress {

class IngressActor final : public actors::runtime::Actor<IngressMessage> {
 public:
  using SchedulerActorBase = actors::runtime::Actor<scheduler::SchedulerMessage>;

  // prompt_executor: where prompts are built (threads of their own, never this actor's).
  IngressActor(PromptBuilder prompts, boost::asio::any_io_executor prompt_executor,
               std::shared_ptr<engine::StatsBoard> board, std::chrono::milliseconds stats_window,
               size_t mailbox_capacity);

  // Disaggregated prefill/decode: what this server is, and (decode role) the prefill servers
  // long prompts go to. From the wiring thread, before start().
  struct Disagg {
    disagg::DisaggConfig config;
    std::string engine_id;
    bool moves_kv = false;  // a KV transport runs here (prefill or decode role)
    std::shared_ptr<disagg::PeerClient> peers;
  };
  void set_disagg(Disagg disagg) { disagg_ = std::move(disagg); }

  void connect(std::shared_ptr<SchedulerActorBase> scheduler);
  void disconnect();

 protected:
  boost::asio::awaitable<void> run() override;
  boost::asio::awaitable<void> handle(IngressMessage message) override;
  void abandon(IngressMessage message) override;

 private:
  // A request's life outside its text: its client, where its prompt is, and (decode role)
  // the prefill server working for it. Its output side lives in output_.
  struct LiveRequest {
    engine::RequestId request_id = 0;
    std::string client_label;
    std::string client;
    engine::RequestOrigin origin = engine::RequestOrigin::kHttp;
    std::shared_ptr<engine::RequestSink> sink;
    Clock::time_point submitted_at;
    const char* input_field = "messages";  // the field errors about the prompt name
    int32_t num_choices = 1;
    // on_delta said the client is gone: it gets no more deltas, but its final on_finish
    // ("cancelled", once the scheduler confirms) still comes, so that net can account for
    // every request (issue 14: dropped streams used to leave no log line and no metric).
    bool client_gone = false;
    bool building = true;             // its prompt is on a worker (or a prefill server); the
                                      // scheduler has not seen it
    bool cancelled_building = false;  // ... and a cancel came meanwhile
    // Decode role: the admission waiting for a prefill server's answer, and that call.
    std::optional<scheduler::NewRequest> awaiting_remote_prefill;
    disagg::PeerClient::CallId prefill_call_id = 0;
    int32_t prefill_peer = -1;
  };

  void on_submit(Submit& submit);
  void build_prompt(engine::RequestId request_id, engine::GenerateRequest request);
  void on_prompt_built(PromptBuilt& built);
  void admit(LiveRequest& live, BuiltPrompt& prompt, engine::GenerateRequest& request);
  void admit_embedding(LiveRequest& live, BuiltPrompt& prompt, const engine::GenerateRequest& request);
  void on_cancel(engine::RequestId request_id);
  // Maps kv_transfer_params onto the admission; an error when this server cannot honour them.
  std::optional<engine::RequestError> apply_kv_transfer(scheduler::NewRequest& admit,
                                                        const engine::GenerateRequest& request) const;
  // Decode role: sends the prompt to a prefill server instead of the scheduler when worth it.
  bool start_remote_prefill(LiveRequest& live, scheduler::NewRequest& admit,
                            const engine::GenerateRequest& request);
  void on_remote_prefill_done(RemotePrefillDone& done);
  void on_peer_unusable(const disagg::PeerUnusable& unusable);
  // The request's n sequences (choice i: id + i, seed + i) go to the scheduler as one group.
  void send_admission(LiveRequest& live, scheduler::NewRequest admit);
  void send_group(LiveRequest& live, scheduler::Admit group);
  void on_step_events(StepEvents& events);
  // Hands the output processor's results to the sinks and the scheduler.
  void deliver(OutputProcessor::Outputs outputs);
  void deliver_one(LiveRequest& live, RequestOutput& output);
  void on_refused(const AdmissionRefused& refusal);
  void on_step_failed(const StepFailed& failure);
  // A request the scheduler will not hold (any more) ends with `error` and is forgotten; with
  // cancel_siblings, its other sequences still in the scheduler are cancelled.
  void fail_and_forget(engine::RequestId request_id, engine::RequestError error,
                       bool cancel_siblings = false);
  // A request that never reached the scheduler is over: cancelled or refused while building.
  void end_before_start(LiveRequest& live, std::optional<engine::RequestError> error);
  void fail_everyone_draining();
  void send_to_scheduler(scheduler::SchedulerMessage message);
  void flush_pending_control();
  void publish_stats();

  std::shared_ptr<const PromptBuilder> prompts_;  // shared with the jobs on the prompt workers
  boost::asio::any_io_executor prompt_executor_;
  std::shared_ptr<engine::StatsBoard> board_;
  std::shared_ptr<SchedulerActorBase> scheduler_;
  std::unordered_map<engine::RequestId, LiveRequest> live_;
  OutputProcessor output_;
  // Cancel/Finish messages the scheduler's mailbox had no room for; retried on every message.
  std::deque<scheduler::SchedulerMessage> pending_control_;
  engine::RollingLatency time_to_first_token_;
  engine::RollingRate generated_tokens_;
  uint64_t num_refused_ = 0;
  Disagg disagg_;
  std::vector<int32_t> prefill_calls_per_peer_;  // in flight, for least-loaded choice
  std::vector<Clock::time_point> peer_unusable_until_;  // no prompts to a peer before this
  size_t next_prefill_peer_ = 0;                 // round robin among the least loaded
  uint64_t num_remote_prefills_ = 0;
  uint64_t num_remote_prefill_fallbacks_ = 0;
};

}  // namespace troupe::ingress
