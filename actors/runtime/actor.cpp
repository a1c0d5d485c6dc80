// ActorLifecycle: completion bookkeeping and the deadline-bounded join.
#include "actors/runtime/actor.hpp"

#include "model/enum_names.hpp"

#include <boost/asio/post.hpp>

namespace troupe::actors::runtime {

constexpr EnumNames<ShutdownOutcome, 4> kShutdownOutcomeNames{{{
    {ShutdownOutcome::kDrained, "drained"}, {ShutdownOutcome::kCancelled, "cancelled"},
    {ShutdownOutcome::kStuck, "stuck"}, {ShutdownOutcome::kFailed, "failed"}}}, "?"};
static_assert(kShutdownOutcomeNames.dense());

std::string_view to_string(ShutdownOutcome outcome) { return kShutdownOutcomeNames.name(outcome); }

ActorLifecycle::ActorLifecycle(std::string name) : state_(std::make_shared<State>()) {
  state_->name = std::move(name);
}

void ActorLifecycle::on_finished(const std::shared_ptr<State>& state, std::exception_ptr failure) {
  std::string what;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& error) {
      what = error.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  std::lock_guard lock(state->mutex);
  state->finished = true;
  state->failure = std::move(what);
  state->finished_signal.notify_all();
}

bool ActorLifecycle::is_finished() const {
  std::lock_guard lock(state_->mutex);
  return state_->finished;
}

std::string ActorLifecycle::failure() const {
  std::lock_guard lock(state_->mutex);
  return state_->failure;
}

void ActorLifecycle::request_cancel() {
  if (!state_->spawned.load(std::memory_order_acquire)) return;
  if (state_->cancel_requested.exchange(true, std::memory_order_acq_rel)) return;
  // The signal belongs to the actor's executor (Asio's rule for cancellation slots).
  std::shared_ptr<State> state = state_;
  boost::asio::post(state->executor, [state] {
    state->cancel_signal.emit(boost::asio::cancellation_type::terminal);
  });
}

bool ActorLifecycle::wait_finished_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(state_->mutex);
  return state_->finished_signal.wait_until(lock, deadline, [this] { return state_->finished; });
}

ShutdownOutcome ActorLifecycle::join(std::chrono::steady_clock::time_point deadline,
                                     std::chrono::steady_clock::duration cancel_grace) {
  if (!state_->spawned.load(std::memory_order_acquire)) return ShutdownOutcome::kDrained;
  const auto outcome_if_returned = [this](ShutdownOutcome otherwise) {
    return failure().empty() ? otherwise : ShutdownOutcome::kFailed;
  };
  if (wait_finished_until(deadline)) {
    // A second join after an earlier one cancelled (and found it stuck) still says "cancelled".
    return outcome_if_returned(cancel_requested() ? ShutdownOutcome::kCancelled : ShutdownOutcome::kDrained);
  }
  request_cancel();
  if (wait_finished_until(std::chrono::steady_clock::now() + cancel_grace)) {
    return outcome_if_returned(ShutdownOutcome::kCancelled);
  }
  return ShutdownOutcome::kStuck;
}

}  // namespace troupe::actors::runtime
