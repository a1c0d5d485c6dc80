// CompletionSlot<T>: a one-shot result that a foreign thread fills and a coroutine awaits.
//
// This is how an actor awaits work that finishes on a thread it does not own: the CPU backend's
// compute threads, a CUDA event-poll thread. gpu::Backend::launch takes a plain callback (gpu/
// does not depend on Asio); completer() is that callback. The awaiting coroutine resumes on its
// own executor, never on the backend's thread.
//
//   auto step_done = CompletionSlot<gpu::StepOutcome>::create();
//   backend.launch(std::move(batch), step_done->completer());   // returns at once
//   std::optional<gpu::StepOutcome> outcome = co_await step_done->wait();
//
// Thread-safety: complete() / completer() from any thread, and only the first completion
// counts; wait() and is_complete() from the awaiting coroutine's executor, one wait at a time.
// Owned by shared_ptr: the completer keeps the slot alive until the foreign thread is done with
// it, even if the awaiting actor has given up (cancelled) in the meantime.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/runtime/parking_spot.hpp"

namespace troupe::actors::runtime {

template <typename T>
class CompletionSlot : public std::enable_shared_from_this<CompletionSlot<T>> {
  struct PrivateTag {};

 public:
  explicit CompletionSlot(PrivateTag) {}
  // Any thread.
  static std::shared_ptr<CompletionSlot> create() { return std::make_shared<CompletionSlot>(PrivateTag{}); }

  // Any thread. Stores the result and wakes the waiter. Returns false (and drops `value`) if the
  // slot was already completed: a completion must happen once, a second one is the caller's bug
  // made harmless.
  bool complete(T value) {
    State expected = State::kEmpty;
    if (!state_.compare_exchange_strong(expected, State::kWriting, std::memory_order_acquire)) return false;
    value_.emplace(std::move(value));
    state_.store(State::kReady, std::memory_order_release);
    waiter_spot_.notify();
    return true;
  }

  // Any thread. A copyable callable (fits std::function, e.g. gpu::Backend::Completion) that
  // completes this slot. It holds a reference, so the slot outlives the foreign thread's use.
  auto completer() {
    return [slot = this->shared_from_this()](T value) { slot->complete(std::move(value)); };
  }

  // Awaiting executor. The result (moved out), or nullopt if the wait was cancelled.
  boost::asio::awaitable<std::optional<T>> wait() {
    for (;;) {
      if (state_.load(std::memory_order_acquire) == State::kReady) co_return take();
      auto is_ready = [this] { return state_.load(std::memory_order_acquire) == State::kReady; };
      auto park = waiter_spot_.async_park(is_ready, boost::asio::as_tuple(boost::asio::use_awaitable));
      auto [woken] = co_await std::move(park);
      if (woken) co_return std::nullopt;  // cancelled; a later complete() is harmless
    }
  }

  // Awaiting executor. Returns once the result is there or the wait was cancelled, without
  // taking the result (wait() then returns it at once). Safe to await together with other work
  // (awaitable operators), where a cancelled wait() could lose the result it had taken.
  boost::asio::awaitable<void> wait_ready() {
    if (is_complete()) co_return;
    auto is_ready = [this] { return is_complete(); };
    auto park = waiter_spot_.async_park(is_ready, boost::asio::as_tuple(boost::asio::use_awaitable));
    auto [woken] = co_await std::move(park);
    (void)woken;  // woken or cancelled: the caller looks
  }

  // Awaiting executor (or any thread, as a snapshot).
  bool is_complete() const { return state_.load(std::memory_order_acquire) == State::kReady; }

 private:
  enum class State { kEmpty, kWriting, kReady };

  std::optional<T> take() {
    std::optional<T> result = std::move(value_);
    value_.reset();
    return result;
  }

  std::atomic<State> state_{State::kEmpty};
  std::optional<T> value_;  // written once by the completer, read by the waiter after kReady
  ParkingSpot waiter_spot_;
};

}  // namespace troupe::actors::runtime
