// Scheduler: the pure, synchronous continuous-batching policy (docs/design.md §2). Each
// schedule() decides which sequences run in the next forward step and how many tokens each
// computes; each on_step_complete() appends the sampled tokens and retires finished sequences.
// The scheduler actor (scheduler_actor.hpp) wraps it: drain inbox -> schedule() -> run the step
// -> on_step_complete() -> post StepEvents. No threads, clocks or I/O here; time is counted in
// steps.
//
// Policy, one step (vLLM v1's shape, TensorRT-LLM's call-and-return style):
//   1. running sequences that decode (one token left to compute), highest priority first;
//   2. running sequences still prefilling, each at most chunked_prefill_size tokens;
//   3. waiting requests in WaitingQueue order (priority, then round robin across clients, or
//      arrival with fairness kFifo), reusing cached prefix blocks, until the token budget,
//      max_num_seqs or the KV pool says stop. The head of the queue blocks the rest, unless it
//      may preempt: a lower-priority running sequence, or (kClient) one of a client that runs
//      more than one sequence more than the head's client. A request whose next uncached
//      prompt block a running prefill is computing right now steps aside until that block is
//      cached (in-flight prefix sharing; see next_block_in_progress()).
//   When a running sequence needs a block and the pool (free + evictable) is empty, a victim is
//   preempted (possibly itself): the lowest priority's latest-arrived sequence — of the client
//   running the most sequences at that priority, with kClient fairness. Its blocks are released
//   and it re-queues at the front of its client's queue, its client first, tokens kept.
//
// Step-time budget (config.max_step_ms > 0 and a usable StepCostModel, see
// step_cost_model.hpp): when the step decodes, prefill chunks (2 and 3) are cut so that the
// step's predicted time stays under max_step_ms, decode tokens being never cut. Even when the
// decodes alone fill the budget, one running prefill advances every step (nobody starves: a
// block, or what a quarter of max_step_ms buys if more), the first in fair order (priority,
// then the client running the fewest sequences, then arrival), and so may one admission that
// comes before it in that order; while requests wait for admission a running prefill takes at
// most half of the time left, so a short prompt is not queued behind a long one. With nothing decoding, prefills run at full size.
//
// First-token steps (config.first_token_steps, kClient fairness with the budget on): when the
// queue's next request is of a client that runs nothing, its whole prompt fits in max_step_ms,
// and running it alone at least halves the step its first token comes from (the decodes beside
// it cost more than its own prompt: a flooded server), the step holds only such newcomers'
// prompts; the decodes wait that one step. Never two in a row, so decodes run at least every
// other step however many newcomers arrive. See first_token_step_due().
//
// First-token interrupts (config.first_token_interrupts): a newcomer that arrives while a step
// runs would wait for the rest of it before its first-token step. When interrupt_due() holds —
// a first-token step is due, and the step in flight is not one, nor the step right after one or
// right after an interrupted step — the actor asks the backend to give the step in flight up
// (gpu::StepInterrupt; the CPU backend does so only in the step's first half) and reports it
// with on_step_interrupted(): the step counts as never run, its sequences replan from where they
// were. The waste is bounded by half a step per interrupt, and decodes still run at least every
// other step.
//
// Only one step may be in flight: schedule() -> on_step_complete() -> schedule() ...
// cancel()/finish()/add_request() may come at any point, also while a step is in flight.
//
// Thread-safety: not thread-safe; one thread at a time (the scheduler actor's executor).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/kv_cache/kv_cache_manager.hpp"
#include "actors/messages/scheduler_types.hpp"
#include "actors/scheduler/scheduler_config.hpp"
#include "actors/scheduler/sequence.hpp"
#include "actors/scheduler/step_cost_model.hpp"
#include "actors/scheduler/step_plan.hpp"
#include "actors/scheduler/waiting_queue.hpp"
#include "gpu/step.hpp"

namespace troupe::scheduler {

class Scheduler {
 public:
  // Where the KV manager (block pool + prefix cache) lives:
  //   kOwned     the policy builds and keeps it (tests, benchmarks, tools);
  //   kBorrowed  the kv-cache actor owns it and lends it for each engine tick
  //              (attach_kv_cache() ... detach_kv_cache()); the policy starts without it.
  enum class KvCacheHome : uint8_t { kOwned, kBorrowed };

  // Throws std::invalid_argument when validate(config) fails (a start-up error).
  explicit Scheduler(SchedulerConfig config, KvCacheHome home = KvCacheHome::kOwned);
  // The waiting queue asks this object for client loads: it must not move.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The KV manager this policy's config needs (what the kv-cache actor builds).
  static kv_cache::KvCacheConfig kv_cache_config(const SchedulerConfig& config);

  // The kv-cache actor's loan. Everything that reads or changes KV — schedule(),
  // on_step_complete(), cancel(), finish(), the P/D calls, flush_prefix_cache(),
  // check_invariants(), kv_cache() — needs it attached and throws std::logic_error otherwise
  // (a wiring bug). add_request(), stats() and slots() work either way (stats().kv is empty
  // while detached). attach_kv_cache() refuses a manager of another geometry.
  void attach_kv_cache(std::unique_ptr<kv_cache::KvCacheManager> kv);
  std::unique_ptr<kv_cache::KvCacheManager> detach_kv_cache();
  bool has_kv_cache() const { return kv_ != nullptr; }

  AddResult add_request(NewRequest request);
  // A request of n choices: its n sequences are admitted together or refused together (one
  // decision: the queue and the client's quota must hold all of them), with their own ids.
  AddResult add_requests(std::vector<NewRequest> requests);

  // The cost model the step-time budget uses from the next schedule() on (the actor refits it
  // after every step from measured times).
  void set_step_cost_model(const StepCostModel& model) { step_cost_ = model; }
  const StepCostModel& step_cost_model() const { return step_cost_; }

  // Plans the next step. An empty plan (nothing runnable) needs no on_step_complete().
  // Calling it while a step is in flight is a bug: std::logic_error.
  StepPlan schedule();

  // Consumes the in-flight step's sampled tokens. A result for another step is a bug.
  StepUpdate on_step_complete(const gpu::StepResult& result);

  // Whether the step in flight should be given up for the newcomer at the queue's head (the
  // policy above); false with no step in flight. Asked after each message applied mid-step.
  bool interrupt_due() const;
  // The backend gave the in-flight step up (gpu::StepOutcome::interrupted). Its spans count as
  // not computed again (their blocks stay allocated for the retry); its admissions and
  // preemptions stand. Another step id is a bug: std::logic_error.
  void on_step_interrupted(uint64_t step_id);

  // Ends a request in any state and releases its KV. nullopt when the id is unknown (already
  // finished, or handed off to another scheduler).
  std::optional<FinishedSequence> cancel(RequestId request_id);
  // Same, for a stop the scheduler cannot see (the detokenizer matched a stop string).
  std::optional<FinishedSequence> finish(RequestId request_id, FinishReason reason);

  // Disaggregated prefill/decode. Hands off sequences parked by a kPrefillOnly scheduler; their
  // KV stays held here until release_transferred() (once the copy is done).
  std::vector<PrefillHandoff> take_completed_prefill();
  bool release_transferred(RequestId request_id);
  // Takes a handed-off sequence straight into the running set. kRetryLater when no slot or
  // blocks are free now; the copies to make are in the result.
  TransferAdmission admit_transferred(const PrefillHandoff& handoff);

  // Disaggregated prefill/decode across servers (scheduler_remote_kv.cpp). A request with
  // remote_kv is admitted like any other, but instead of a prefill its blocks are allocated
  // (reusing this pool's prefix cache) and a KvPullOrder asks the kv-cache actor to fill them;
  // kv_resident() then starts it decoding, or (ok false) queues it to compute its prompt here.
  // A request with hold_kv_when_finished keeps its KV after it finishes (FinishedSequence::
  // held_kv) until release_transferred().
  void kv_resident(RequestId request_id, bool ok);
  // The pulls to start, leases to release, and events to report that arose outside a step
  // (add_request(), kv_resident(), cancel()); the actor takes them after each of those.
  KvWork take_kv_work();

  // Drops every cached prefix block no sequence references; returns how many.
  int32_t flush_prefix_cache() { return kv().flush_unreferenced_cache(); }

  SchedulerStats stats() const;
  std::vector<SlotInfo> slots() const;  // running first, then waiting, then parked

  bool has_unfinished_requests() const { return !sequences_.empty(); }
  bool step_in_flight() const { return in_flight_.has_value(); }
  const SchedulerConfig& config() const { return config_; }
  const kv_cache::KvCacheManager& kv_cache() const { return kv(); }
  // The sequence, or nullptr; for tests and the slots view.
  const Sequence* find(RequestId request_id) const;

  // Every structural invariant (pool, cache, ref counts == holders, queues); O(n). For tests
  // and debug self-checks; a description of the first violation, or nullopt.
  std::optional<std::string> check_invariants() const;

 private:
  // Bounds the scan of the waiting queue per step; past it, requests are admitted as usual.
  static constexpr size_t kMaxPrefixDeferralsPerStep = 32;

  struct Scheduled {
    Sequence* seq;
    int32_t num_tokens;           // drafts included
    int32_t num_draft_tokens = 0; // the last ones of the span (seq->draft_token_ids)
  };
  // A step being planned.
  struct Draft {
    std::vector<Scheduled> entries;
    int32_t token_budget = 0;
    std::vector<RequestId> preempted;
    bool time_bound = false;          // the step-time budget applies to this step
    bool time_cut = false;            // ... and cut a prefill chunk
    // When the decodes alone fill the budget, one running prefill still advances a block (the
    // first in fair order), and an admission may too if it comes before that one in fair order.
    const Sequence* min_progress_running = nullptr;
    bool admission_progressed = false;
    bool first_tokens_only = false;   // a first-token step: newcomers' whole prompts, nothing else
  };
  struct InFlightEntry {
    RequestId request_id;
    bool samples;
    int32_t num_tokens = 0;  // drafts included
    int32_t num_draft_tokens = 0;
  };
  struct InFlightStep {
    uint64_t step_id = 0;
    bool interruptible = false;
    std::vector<InFlightEntry> entries;
  };

  // scheduler_admission.cpp
  // `group_size`: sequences arriving together with this one (they all need queue room).
  AddResult check_admissible(const NewRequest& request, size_t group_size = 1) const;
  void admit(NewRequest request);  // after check_admissible() accepted it
  void schedule_running(Draft& draft, bool decode_pass);
  void schedule_waiting(Draft& draft);
  bool next_block_in_progress(const Sequence& seq, const kv_cache::PrefixMatch& match) const;
  bool try_admit(Draft& draft, Sequence& seq, const kv_cache::PrefixMatch& match,
                 int32_t num_tokens);
  bool grow_or_preempt(Draft& draft, Sequence& seq, int32_t num_tokens);
  void preempt(Draft& draft, Sequence& victim, WaitingQueue::RingPlace place);
  // Who makes room when the KV pool runs dry (see the policy above).
  Sequence* kv_preemption_victim() const;
  // Who makes room for the waiting `head`, or nullptr when nobody may.
  Sequence* admission_victim(const Sequence& head) const;
  int32_t running_of(const std::string& client) const;
  int32_t prefill_chunk(const Sequence& seq, int32_t budget) const;
  void add_entry(Draft& draft, Sequence& seq, int32_t num_tokens);

  // scheduler_time_budget.cpp
  void start_time_budget(Draft& draft) const;
  // Service order for prefill progress under the time budget: higher priority first, then
  // (client fairness) the client running fewer sequences, then earlier arrival.
  bool progresses_before(const Sequence& a, const Sequence& b) const;
  bool gets_min_progress(const Draft& draft, const Sequence& seq, bool admitting) const;
  StepShape shape_of(const Draft& draft) const;
  // num_tokens cut to what fits the step-time budget from `first_position` on (unchanged when
  // the budget does not apply); 0: nothing fits this step.
  int32_t fit_to_time_budget(Draft& draft, const Sequence& seq, int32_t first_position,
                             int32_t num_tokens, bool admitting) const;
  // Whether first-token steps are on and can be planned (client fairness, the budget, a usable
  // cost model); then whether the next step should be one (the policy above).
  bool first_token_steps_apply() const;
  bool first_token_step_due() const;
  // Whether the step being built may be interrupted for a newcomer's first token.
  bool interruptible(const Draft& draft, uint64_t step_id) const;
  // Whether the waiting `seq` may join the first-token step being planned.
  bool joins_first_token_step(const Draft& draft, const Sequence& seq) const;
  // What one step of its uncached prompt alone costs, or nullopt when it is no newcomer's
  // short prompt (its client runs something, it is pulled from elsewhere, or a decode of a
  // higher priority would wait for it).
  std::optional<StepShape> newcomer_prompt_shape(const Sequence& seq) const;
  void insert_running(Sequence* seq);
  void erase_running(const Sequence* seq);

  // scheduler_speculative.cpp
  // Extends this step's decode entries with n-gram drafts (config.speculative), within the
  // token budget, the step-time budget and the free KV blocks.
  void schedule_drafts(Draft& draft);
  int32_t max_drafts(Sequence& seq, int32_t token_budget);
  // A prompt prefills, or waits while a sequence slot is free (scheduler_time_budget.cpp).
  bool prompts_pending() const;
  // How many of num_drafts drafts fit the step-time budget (all when it does not apply).
  int32_t fit_drafts_to_time_budget(const Draft& draft, const Scheduled& entry,
                                    int32_t num_drafts) const;
  // After the step: counts and the adaptive rule (pause a sequence whose drafts fail).
  void settle_drafts(Sequence& seq, int32_t num_drafts, int32_t num_accepted);

  // scheduler_step.cpp
  StepPlan build_plan(Draft& draft);
  // `row` of the step's `num_rows` block-table rows (per KV group).
  void append_slice(StepPlan& plan, const Scheduled& entry, int32_t row, size_t num_rows);
  void add_prompt_outputs(gpu::StepBatch& batch, const Sequence& seq, int32_t begin, int32_t end,
                          gpu::SequenceSlice& slice) const;
  void take_prompt_outputs(StepUpdate& update, Sequence& seq, const gpu::StepResult& result);
  // `sampled`: the step's tokens for the sequence (empty when its span did not sample).
  void complete_sequence(StepUpdate& update, Sequence& seq, std::span<const gpu::SampledToken> sampled,
                         int32_t num_draft_tokens, uint64_t step_id);
  // The sequence's tokens in the result: one, or with drafts up to 1 + num_draft_tokens.
  std::span<const gpu::SampledToken> find_sampled(const gpu::StepResult& result, size_t& cursor,
                                                  RequestId request_id,
                                                  int32_t num_draft_tokens) const;

  // scheduler_transfer.cpp
  // KV groups: a remote source carries every sliding group's pages from the next token's
  // window on (true without groups).
  bool remote_windows_present(const RemoteKvSource& source, int32_t blocks_needed,
                              int32_t next_position) const;
  AddResult check_transferable(const PrefillHandoff& handoff) const;
  // Prefill side: moves a finishing hold_kv_when_finished sequence's KV into transferring_.
  std::optional<HeldKv> hold_finished_kv(Sequence& seq, FinishReason reason);

  // scheduler_remote_kv.cpp
  // add_request() of a remote_kv request: validates the source, takes the first token.
  // false when the sequence already finished (its first token ended it).
  bool start_remote(Sequence& seq, std::optional<int32_t> first_token_id);
  // The waiting head is a remote_kv sequence: allocate its blocks and order the pull. false:
  // no room now (the head keeps blocking the queue, as an ordinary prefill would).
  bool admit_remote(Sequence& seq);
  void drop_remote_source(Sequence& seq);  // releases the remote lease, computes locally
  int32_t num_sequence_slots_used() const {
    return static_cast<int32_t>(running_.size() + awaiting_kv_.size());
  }

  // scheduler.cpp
  FinishedSequence retire(Sequence& seq, FinishReason reason);
  kv_cache::KvCacheManager& kv();
  const kv_cache::KvCacheManager& kv() const;

  SchedulerConfig config_;
  std::unique_ptr<kv_cache::KvCacheManager> kv_;  // null while lent back to the kv-cache actor
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;
  WaitingQueue waiting_;
  // Sorted by (priority desc, arrival asc): the preemption victim is always back().
  std::vector<Sequence*> running_;
  std::vector<Sequence*> prefill_done_;  // kPrefillOnly: parked, in completion order
  std::unordered_map<RequestId, kv_cache::SequenceBlocks> transferring_;
  std::vector<Sequence*> awaiting_kv_;  // kAwaitingKv, in admission order
  // Cancelled while their pull ran: the blocks may still be written until kv_resident().
  std::unordered_map<RequestId, kv_cache::SequenceBlocks> cancelled_pulls_;
  KvWork kv_work_;
  std::vector<kv_cache::BlockId> kv_blocks_from_host_;  // pulled since the last plan
  uint64_t num_kv_pulls_ = 0;
  uint64_t num_kv_pull_fallbacks_ = 0;
  std::optional<InFlightStep> in_flight_;
  std::unordered_map<std::string, int32_t> running_per_client_;
  StepCostModel step_cost_;

  uint64_t next_arrival_index_ = 0;
  uint64_t num_steps_ = 0;
  uint64_t num_preemptions_ = 0;
  uint64_t num_fairness_preemptions_ = 0;
  uint64_t num_time_budgeted_steps_ = 0;
  uint64_t num_first_token_steps_ = 0;
  uint64_t num_interrupted_steps_ = 0;
  uint64_t last_interrupted_step_ = 0;  // its step id; 0: none yet
  uint64_t last_first_token_step_ = 0;  // its step id; 0: none yet
  uint64_t num_prefix_deferrals_ = 0;
  uint64_t num_requests_accepted_ = 0;
  uint64_t num_requests_refused_ = 0;
  uint64_t num_requests_finished_ = 0;
  uint64_t num_prompt_tokens_ = 0;
  uint64_t num_generated_tokens_ = 0;
  uint64_t num_spec_drafts_ = 0;           // verify spans (sequences with >= 1 draft)
  uint64_t num_spec_draft_tokens_ = 0;
  uint64_t num_spec_accepted_tokens_ = 0;
  int32_t last_step_num_tokens_ = 0;
  int32_t last_step_num_seqs_ = 0;
};

}  // namespace troupe::scheduler
