#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <type_traits>
#include <utility>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include "actors/runtime/completion_slot.hpp"

namespace troupe::scheduler {

using Clock = std::chrono::steady_clock;
using actors::runtime::CompletionSlot;
using actors::runtime::SendStatus;
using engine::StepCostStats;

SchedulerActor::SchedulerActor(SchedulerConfig config, StepCostFitterConfig step_cost,
                               std::shared_ptr<engine::StatsBoard> board, size_t mailbox_capacity)
    : Actor("scheduler", mailbox_capacity),
      policy_(std::move(config), Scheduler::KvCacheHome::kBorrowed),
      board_(std::move(board)),
      step_cost_(step_cost) {
  step_cost_stats_.max_step_ms = policy_.config().max_step_ms;
  step_cost_stats_.planning_margin = planning_margin_.value();
  StepCostModel model = step_cost_.model();
  model.margin = planning_margin_.value();
  policy_.set_step_cost_model(model);
  publish_stats();
}

// NOTE: the prediction compared is the one the plan was made with (the model before this
// step's refit), so the error is what the budget actually suffered.
void SchedulerActor::learn_step_cost(const StepPlan& plan, double device_ms) {
  StepCostStats& s = step_cost_stats_;
  if (plan.predicted_ms > 0) {
    const double error = std::abs(plan.predicted_ms - device_ms) / std::max(device_ms, 1e-3);
    // An exponential average over ~100 steps: recent enough to follow the machine.
    constexpr double kSmoothing = 0.01;
    s.mean_abs_error_ratio = s.num_predicted == 0 ? error
                                                  : s.mean_abs_error_ratio + kSmoothing * (error - s.mean_abs_error_ratio);
    ++s.num_predicted;
    s.last_predicted_ms = plan.predicted_ms;
  }
  if (plan.time_budgeted) planning_margin_.observe_budget_cut_step(plan.predicted_ms, device_ms);
  s.planning_margin = planning_margin_.value();
  s.last_actual_ms = device_ms;
  step_cost_.observe(plan.shape, device_ms);
  StepCostModel model = step_cost_.model();
  model.margin = planning_margin_.value();
  policy_.set_step_cost_model(model);
}

void SchedulerActor::connect(std::shared_ptr<IngressActorBase> ingress,
                             std::shared_ptr<kv_cache::KvCacheActor> kv_cache,
                             std::shared_ptr<gpu_worker::GpuWorkerActor> gpu_worker) {
  ingress_ = std::move(ingress);
  kv_cache_ = std::move(kv_cache);
  gpu_worker_ = std::move(gpu_worker);
}

void SchedulerActor::disconnect() {
  ingress_.reset();
  kv_cache_.reset();
  gpu_worker_.reset();
}

boost::asio::awaitable<void> SchedulerActor::handle(SchedulerMessage message) {
  apply(std::move(message));
  co_return;
}

void SchedulerActor::apply(SchedulerMessage message) {
  std::visit(
      [this](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Admit>) {
          if (m.sequences.empty()) return;
          const RequestId id = m.sequences.front().request_id;
          std::vector<std::pair<RequestId, std::shared_ptr<const model::grammar::CompiledGrammar>>> grammars;
          for (const NewRequest& sequence : m.sequences) {
            if (sequence.grammar) grammars.emplace_back(sequence.request_id, sequence.grammar);
          }
          const AddResult result = policy_.add_requests(std::move(m.sequences));
          if (result != AddResult::kAccepted) {
            refused_.push_back({id, result});
            return;
          }
          // Each choice its own matcher, all over the one compiled grammar.
          for (const auto& [sequence_id, grammar] : grammars) structured_.add(sequence_id, grammar);
        } else if constexpr (std::is_same_v<T, CancelSequence>) {
          if (auto finished = policy_.cancel(m.request_id)) ended_.push_back(*finished);
        } else if constexpr (std::is_same_v<T, FinishSequence>) {
          if (auto finished = policy_.finish(m.request_id, m.reason)) ended_.push_back(*finished);
        } else if constexpr (std::is_same_v<T, KvResident>) {
          policy_.kv_resident(m.request_id, m.ok);
        } else {
          static_assert(std::is_same_v<T, ReleaseHeldKv>);
          if (policy_.release_transferred(m.request_id) && m.forget_lease) {
            kv_cache_->deliver(kv_cache::KvCacheMessage{kv_cache::ReleaseKvLease{m.request_id, nullptr}});
          }
        }
      },
      message);
}

void SchedulerActor::open_leases(const std::vector<FinishedSequence>& finished) {
  for (const FinishedSequence& f : finished) {
    if (!f.held_kv) continue;
    kv_cache_->deliver(kv_cache::KvCacheMessage{kv_cache::OpenKvLease{f.request_id}});
  }
}

boost::asio::awaitable<void> SchedulerActor::dispatch_kv_work() {
  KvWork work = policy_.take_kv_work();
  for (KvPullOrder& order : work.pulls) {
    kv_cache_->deliver(kv_cache::KvCacheMessage{kv_cache::PullKv{std::move(order)}});
  }
  for (RemoteKvSource& source : work.releases) {
    kv_cache_->deliver(kv_cache::KvCacheMessage{kv_cache::ReleaseRemoteKv{std::move(source)}});
  }
  if (work.events.tokens.empty() && work.events.finished.empty()) co_return;
  forget_constrained(work.events.finished);
  open_leases(work.events.finished);
  const Clock::time_point now = Clock::now();
  ingress::IngressMessage events{ingress::StepEvents{std::move(work.events), {}, now, now}};
  auto sending = send_to_ingress(std::move(events));
  co_await std::move(sending);
}

boost::asio::awaitable<bool> SchedulerActor::borrow_kv_cache() {
  auto lease = CompletionSlot<kv_cache::KvLease>::create();
  kv_cache::KvCacheMessage request{kv_cache::LendKvCache{lease}};
  if (kv_cache_->try_send(std::move(request)) != SendStatus::kAccepted) co_return false;
  // The kv-cache actor answers at once (it shares this thread and never waits). A cancellation
  // (shutdown past its deadline) aborts only this wait; the manager is still needed to cancel
  // what is left, so wait once more — the cancellation signal fires only once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto waiting = lease->wait();
    std::optional<kv_cache::KvLease> answer = co_await std::move(waiting);
    if (!answer) continue;
    if (*answer == nullptr) co_return false;
    policy_.attach_kv_cache(std::move(*answer));
    co_return true;
  }
  co_return false;
}

void SchedulerActor::return_kv_cache() {
  kv_cache::KvCacheMessage returned{kv_cache::ReturnKvCache{policy_.detach_kv_cache()}};
  // kClosed only after the kv-cache actor stopped, i.e. at the very end of a shutdown.
  if (kv_cache_->try_send(std::move(returned)) != SendStatus::kAccepted) {
    spdlog::debug("scheduler: kv-cache actor gone; KV manager dropped");
  }
}

boost::asio::awaitable<void> SchedulerActor::send_to_ingress(ingress::IngressMessage message) {
  // Awaits room: a slow ingress slows the steps down instead of losing tokens. Ingress never
  // waits on this mailbox (it uses try_send), so the two cannot deadlock.
  auto sending = ingress_->send(std::move(message));
  const SendStatus status = co_await std::move(sending);
  if (status != SendStatus::kAccepted) spdlog::debug("scheduler: ingress gone, events dropped");
}

boost::asio::awaitable<void> SchedulerActor::flush_ended() {
  for (ingress::AdmissionRefused& refusal : refused_) {
    ingress::IngressMessage message{refusal};
    auto sending = send_to_ingress(std::move(message));  // named: g++ 12.2 co_await temporaries
    co_await std::move(sending);
  }
  refused_.clear();
  // Remote first tokens and lease releases from add_request()/cancel() come before the ends.
  auto dispatching = dispatch_kv_work();
  co_await std::move(dispatching);
  if (!ended_.empty()) {
    forget_constrained(ended_);
    ingress::IngressMessage message{ingress::SequencesEnded{std::move(ended_)}};
    ended_.clear();
    auto sending = send_to_ingress(std::move(message));
    co_await std::move(sending);
  }
}

void SchedulerActor::cancel_everything() {
  for (const SlotInfo& slot : policy_.slots()) {
    if (auto finished = policy_.cancel(slot.request_id)) ended_.push_back(*finished);
  }
}

boost::asio::awaitable<void> SchedulerActor::run() {
  std::optional<SchedulerMessage> woken_by;  // received while idle, without the KV manager
  account_ = StepAccountant(Clock::now());
  for (;;) {
    const Clock::time_point tick_started = Clock::now();
    auto borrowing = borrow_kv_cache();
    if (!co_await std::move(borrowing)) {
      // Only a wiring bug gets here (the kv-cache actor stops after this one). Without KV
      // nothing can run or be released; requests end through ingress's drain deadline.
      spdlog::critical("scheduler: the kv-cache actor did not lend the KV manager; stopping");
      co_return;
    }
    if (woken_by) apply(std::move(*std::exchange(woken_by, std::nullopt)));
    while (std::optional<SchedulerMessage> message = mailbox().try_receive()) {
      apply(std::move(*message));
    }
    if (cancel_requested()) {
      cancel_everything();
      publish_stats();
      return_kv_cache();
      auto flushing = flush_ended();
      co_await std::move(flushing);
      co_return;
    }
    auto flushing = flush_ended();
    co_await std::move(flushing);
    StepPlan plan = policy_.schedule();
    // Admissions of remote-KV requests order pulls (they run while this step does).
    auto dispatching = dispatch_kv_work();
    co_await std::move(dispatching);
    if (!plan.empty()) {
      auto stepping = run_step(std::move(plan), tick_started);
      co_await std::move(stepping);
      return_kv_cache();
      continue;
    }
    publish_stats();
    return_kv_cache();
    if (mailbox().drained() && !policy_.has_unfinished_requests()) co_return;
    // Idle: sleep until a message arrives (or the mailbox closes, or we are cancelled).
    const Clock::time_point asleep = Clock::now();
    woken_by = co_await mailbox().receive();
    account_.add_idle(std::chrono::duration<double, std::milli>(Clock::now() - asleep).count());
  }
}

boost::asio::awaitable<void> SchedulerActor::run_step(StepPlan plan,
                                                      Clock::time_point tick_started) {
  const Clock::time_point started = Clock::now();
  const uint64_t step_id = plan.batch.step_id;
  StepPlan measured;  // the plan's shape and prediction, for the cost model (the batch moves)
  measured.shape = plan.shape;
  measured.predicted_ms = plan.predicted_ms;
  measured.time_budgeted = plan.time_budgeted;
  measured.num_prefill_tokens = plan.num_prefill_tokens;
  measured.num_decode_tokens = plan.num_decode_tokens;
  std::vector<RequestId> scheduled;
  scheduled.reserve(plan.batch.seqs.size());
  for (const gpu::SequenceSlice& slice : plan.batch.seqs) scheduled.push_back(slice.seq_id);

  fill_bitmasks(plan.batch);
  std::shared_ptr<gpu::StepInterrupt> interrupt;
  if (plan.interruptible) plan.batch.interrupt = interrupt = std::make_shared<gpu::StepInterrupt>();
  auto done = CompletionSlot<gpu::StepOutcome>::create();
  gpu_worker::RunStep run{std::move(plan.batch), done};
  auto sending = gpu_worker_->send(std::move(run));
  const SendStatus sent = co_await std::move(sending);
  std::optional<gpu::StepOutcome> outcome;
  if (sent == SendStatus::kAccepted) {
    auto waiting = await_step(*done, interrupt.get());
    outcome = co_await std::move(waiting);
  }
  const Clock::time_point device_done = Clock::now();
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (outcome && outcome->ok() && outcome->interrupted) {
    // Nothing to report: the next tick replans these sequences behind the newcomer's step. Its
    // partial time says nothing about a whole step's cost, so the model does not learn from it.
    policy_.on_step_interrupted(step_id);
    account_.add_interrupted(ms(device_done - started));
    publish_stats();
    co_return;
  }
  if (!outcome) {
    // Cancelled while the device works (shutdown past its deadline) or the worker is gone.
    outcome.emplace();
    outcome->error = "the step was abandoned (shutdown)";
  }
  if (!outcome->ok()) {
    spdlog::error("step {} failed: {}", step_id, outcome->error);
    account_.add_failed(ms(device_done - started));
    for (RequestId id : scheduled) {
      policy_.cancel(id);  // their KV may hold garbage now
      structured_.remove(id);
    }
    gpu::StepResult empty;
    empty.step_id = step_id;
    (void)policy_.on_step_complete(empty);
    ingress::IngressMessage failure{ingress::StepFailed{scheduled, outcome->error}};
    auto reporting = send_to_ingress(std::move(failure));
    co_await std::move(reporting);
    co_return;
  }
  StepUpdate update = policy_.on_step_complete(outcome->result);
  accept_constrained(update);
  open_leases(update.finished);
  learn_step_cost(measured, ms(device_done - started));
  account_.add_step(measured.num_prefill_tokens, measured.num_decode_tokens,
                    ms(device_done - started), outcome->timings);
  const Clock::time_point finished = Clock::now();
  // Published before ingress hears of the step: a client that has seen a token and then reads
  // /metrics finds its request counted (running, or finished). This step's tick time joins the
  // next snapshot (the next step's, or the idle tick's).
  publish_stats();
  ingress::IngressMessage events{
      ingress::StepEvents{std::move(update), std::move(scheduled), tick_started, finished}};
  auto reporting = send_to_ingress(std::move(events));
  co_await std::move(reporting);
  // Engine overhead: the tick's time outside the backend's step (schedule, hand-off, wake-up,
  // on_step_complete, reporting). The device time includes the backend's own queueing.
  const Clock::time_point reported = Clock::now();
  step_time_.add(ms(reported - tick_started));
  const double device_ms = ms(device_done - started);
  total_tick_ms_ += ms(reported - tick_started);
  total_device_ms_ += device_ms;
}

boost::asio::awaitable<std::optional<gpu::StepOutcome>> SchedulerActor::await_step(
    CompletionSlot<gpu::StepOutcome>& done, gpu::StepInterrupt* interrupt) {
  using namespace boost::asio::experimental::awaitable_operators;
  while (interrupt != nullptr && !interrupt->requested() && !done.is_complete()) {
    // Readiness only: `||` cancels the loser and drops what it returned, so neither side may
    // take anything (a consuming receive() or wait() there loses a message or the outcome; the
    // runtime test CompletionSlotTest.AwaitedTogetherWithAMailboxNeitherLosesAnything).
    auto completion = done.wait_ready();
    auto arrival = mailbox().wait_ready();
    auto either = std::move(completion) || std::move(arrival);
    co_await std::move(either);
    bool applied = false;
    while (std::optional<SchedulerMessage> message = mailbox().try_receive()) {
      apply(std::move(*message));
      applied = true;
    }
    if (applied && policy_.interrupt_due()) interrupt->request();
    // Closed and drained, or this wait was cancelled: only the step is left to wait for.
    if (!applied && !done.is_complete()) break;
  }
  auto waiting = done.wait();
  co_return co_await std::move(waiting);
}

void SchedulerActor::fill_bitmasks(gpu::StepBatch& batch) {
  if (structured_.num_sequences() == 0) return;
  const Clock::time_point started = Clock::now();
  const int32_t num_rows = structured_.fill_bitmasks(batch);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  engine::StructuredOutputStats& s = structured_stats_;
  if (num_rows > 0) ++s.num_masked_steps;
  s.num_masked_rows += static_cast<uint64_t>(num_rows);
  s.mask_fill_ms_total += ms;
  s.mask_fill_ms_max = std::max(s.mask_fill_ms_max, ms);
}

void SchedulerActor::accept_constrained(StepUpdate& update) {
  if (structured_.num_sequences() == 0) return;
  const StructuredOutput::Ended ended = structured_.accept(update.tokens);
  const auto finish = [&](RequestId id) {
    // Already finished by the policy (the EOS the grammar allowed at its end): nothing to do.
    if (auto finished = policy_.finish(id, FinishReason::kGrammarEnd)) update.finished.push_back(*finished);
  };
  for (RequestId id : ended.grammar_ended) finish(id);
  for (RequestId id : ended.refused) {
    spdlog::error("structured output: the grammar of sequence {} refused a sampled token; ending it", id);
    finish(id);
  }
  forget_constrained(update.finished);
}

void SchedulerActor::forget_constrained(const std::vector<FinishedSequence>& finished) {
  if (structured_.num_sequences() == 0) return;
  for (const FinishedSequence& f : finished) structured_.remove(f.request_id);
}

void SchedulerActor::publish_stats() {
  engine::SchedulerSnapshot snapshot;
  snapshot.stats = policy_.stats();
  snapshot.slots = policy_.slots();
  snapshot.step_time = step_time_.summary();
  snapshot.total_tick_ms = total_tick_ms_;
  snapshot.total_device_ms = total_device_ms_;
  snapshot.step_cost = step_cost_stats_;
  snapshot.step_account = account_.at(Clock::now());
  snapshot.structured_output = structured_stats_;
  const StepCostModel& model = step_cost_.model();
  snapshot.step_cost.model_usable = model.usable;
  snapshot.step_cost.fixed_ms = model.fixed_ms;
  snapshot.step_cost.per_token_ms = model.per_token_ms;
  snapshot.step_cost.per_context_ms = model.per_context_ms;
  snapshot.step_cost.per_sampled_ms = model.per_sampled_ms;
  snapshot.step_cost.num_time_budgeted_steps = snapshot.stats.num_time_budgeted_steps;
  snapshot.step_cost.num_first_token_steps = snapshot.stats.num_first_token_steps;
  snapshot.step_cost.num_interrupted_steps = snapshot.stats.num_interrupted_steps;
  snapshot.step_cost.interrupted_ms = snapshot.step_account.interrupted_ms;
  board_->publish_scheduler(std::move(snapshot));
}

}  // namespace troupe::scheduler
