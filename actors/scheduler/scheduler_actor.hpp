// The scheduler actor: the step loop of docs/design.md §2 around the pure Scheduler policy.
//
//   0. borrow the KV manager from the kv-cache actor (the tick's one exchange with it; it goes
//      back at the end of the tick, see actors/kv_cache/kv_cache_actor.hpp);
//   1. drain the mailbox without blocking (Admit, CancelSequence, FinishSequence);
//   2. plan = policy.schedule();
//   3. send the StepBatch to the gpu-worker and co_await the step's CompletionSlot, which the
//      backend completes from its own thread (CUDA event / CPU compute thread) — the engine
//      thread never blocks on the device. A step the policy may interrupt (first-token
//      interrupts, scheduler.hpp) is awaited together with the mailbox: each message is applied
//      at once, and when the policy says a newcomer's first token is due the backend is asked to
//      give the step up (it reports back StepOutcome::interrupted, and the next tick replans);
//      Before the step goes out, the constrained sequences' grammar bitmasks are filled
//      (StructuredOutput, issue 19); after it, their matchers accept the sampled tokens;
//   4. policy.on_step_complete(result); the step's measured time refits the StepCostModel
//      (step_cost_model.hpp), which the policy uses for the step-time budget from then on;
//   5. one StepEvents message to ingress for the whole step;
//   6. return the KV manager; nothing to run: suspend on the mailbox (no busy loop). A message
//      that wakes the loop is applied in the next tick, once the manager is borrowed again.
// The loop's wall time is booked as it goes (StepAccountant, step_account.hpp): asleep, each
// step by the backend's phases, and the loop's own work around them.
//
// Shutdown: stop() closes the mailbox; the loop keeps stepping until every admitted sequence has
// finished (drain), then returns. A cancellation (shutdown deadline) cancels what is left.
//
// Thread-safety: connect() and start() from the wiring thread before any message; try_send()/
// send()/shutdown() from any thread; everything else runs on the actor's executor.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "actors/common/stats_board.hpp"
#include "actors/gpu_worker/gpu_worker_actor.hpp"
#include "actors/kv_cache/kv_cache_actor.hpp"
#include "actors/messages/ingress_messages.hpp"
#include "actors/messages/scheduler_messages.hpp"
#include "actors/runtime/actor.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/scheduler/step_account.hpp"
#include "actors/scheduler/step_cost_model.hpp"
#include "actors/scheduler/structured_output.hpp"

namespace troupe::scheduler {

class SchedulerActor final : public actors::runtime::Actor<SchedulerMessage> {
 public:
  using IngressActorBase = actors::runtime::Actor<ingress::IngressMessage>;

  SchedulerActor(SchedulerConfig config, StepCostFitterConfig step_cost,
                 std::shared_ptr<engine::StatsBoard> board, size_t mailbox_capacity);

  void connect(std::shared_ptr<IngressActorBase> ingress,
               std::shared_ptr<kv_cache::KvCacheActor> kv_cache,
               std::shared_ptr<gpu_worker::GpuWorkerActor> gpu_worker);
  // Breaks the reference cycle with ingress once both actors have stopped.
  void disconnect();

 protected:
  boost::asio::awaitable<void> run() override;
  // Unused: run() drains the mailbox itself; kept for the base class contract.
  boost::asio::awaitable<void> handle(SchedulerMessage message) override;

 private:
  void apply(SchedulerMessage message);
  // false when the kv-cache actor could not lend the manager (it is gone: a wiring bug).
  boost::asio::awaitable<bool> borrow_kv_cache();
  void return_kv_cache();
  boost::asio::awaitable<void> run_step(StepPlan plan, std::chrono::steady_clock::time_point tick_started);
  // The step's outcome (nullopt: the wait was cancelled). With `interrupt`, messages are applied
  // while the step runs and the interrupt is requested once policy_.interrupt_due().
  boost::asio::awaitable<std::optional<gpu::StepOutcome>> await_step(
      actors::runtime::CompletionSlot<gpu::StepOutcome>& done, gpu::StepInterrupt* interrupt);
  boost::asio::awaitable<void> send_to_ingress(ingress::IngressMessage message);
  boost::asio::awaitable<void> flush_ended();
  // The policy's work outside steps (KvWork): pulls and lease releases to the kv-cache actor,
  // remote first tokens to ingress.
  boost::asio::awaitable<void> dispatch_kv_work();
  void open_leases(const std::vector<FinishedSequence>& finished);
  void cancel_everything();
  void publish_stats();
  void learn_step_cost(const StepPlan& plan, double device_ms);
  // Constrained sequences: fill the step's bitmasks (timed), and after it accept the sampled
  // tokens, finishing those whose grammar ended.
  void fill_bitmasks(gpu::StepBatch& batch);
  void accept_constrained(StepUpdate& update);
  void forget_constrained(const std::vector<FinishedSequence>& finished);

  Scheduler policy_;
  std::shared_ptr<engine::StatsBoard> board_;
  std::shared_ptr<IngressActorBase> ingress_;
  std::shared_ptr<kv_cache::KvCacheActor> kv_cache_;
  std::shared_ptr<gpu_worker::GpuWorkerActor> gpu_worker_;
  // Ended outside a step (cancel, stop string, refusal); reported to ingress before the next
  // step.
  std::vector<FinishedSequence> ended_;
  std::vector<ingress::AdmissionRefused> refused_;
  engine::RollingLatency step_time_;
  StepCostFitter step_cost_;
  PlanningMargin planning_margin_;
  StructuredOutput structured_;
  engine::StructuredOutputStats structured_stats_;
  engine::StepCostStats step_cost_stats_;
  double total_tick_ms_ = 0;    // whole ticks that ran a step
  double total_device_ms_ = 0;  // ... of which the backend's step
  // The loop's wall time by part (interrupted steps' time included); restarted when run() starts.
  StepAccountant account_{std::chrono::steady_clock::now()};
};

}  // namespace troupe::scheduler
