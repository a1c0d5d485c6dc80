// Actors: a coroutine that owns its state and drains a bounded mailbox on an executor chosen at
// wiring time, plus the structured shutdown every actor shares.
//
// Two layers:
//   ActorLifecycle  spawns one actor coroutine, knows when it ended (and whether it threw), and
//                   can cancel it (a terminal cancellation emitted on the actor's executor).
//   Actor<Message>  a base class for the usual actor: a Channel<Message> mailbox, a virtual
//                   handle(Message) coroutine, stop() and shutdown(deadline). Actors whose loop
//                   is not "one message at a time" (the scheduler's step loop) override run().
//
// Shutdown is structured: stop() stops admitting (the mailbox closes; senders get kClosed),
// the actor drains what was accepted, and shutdown(deadline) waits for that. If the deadline
// passes, the actor is cancelled: its pending await (receive, CompletionSlot::wait, a timer)
// completes with operation_aborted, cancel_requested() turns true, and every message still in
// the mailbox goes to abandon() — which answers it with an error so nothing is lost silently.
//
// An actor runs on a strand of the executor it is given, so its handlers never run concurrently
// even when that executor's io_context has several threads.
//
// Writing one:
//   class KvCacheActor final : public Actor<KvCacheMessage> {
//    public:
//     KvCacheActor() : Actor("kv-cache", /*mailbox_capacity=*/1024) {}
//    protected:
//     awaitable<void> handle(KvCacheMessage message) override { ...; co_return; }
//     void abandon(KvCacheMessage message) override { message.reply_with_error("shutting down"); }
//   };
//   auto kv = std::make_shared<KvCacheActor>();
//   kv->start(engine_thread.executor());              // wiring thread
//   kv->try_send(std::move(request));                 // any thread
//   kv->shutdown(std::chrono::steady_clock::now() + 2s);  // any thread but the engine thread
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>

#include "actors/runtime/channel.hpp"

namespace troupe::actors::runtime {

// How an actor's shutdown ended.
//   kDrained    it handled everything it had accepted and returned;
//   kCancelled  the deadline passed, it was cancelled, and it returned within the grace period;
//   kStuck      it did not return even after cancellation (an await that ignores cancellation);
//               the caller should report it and must keep the actor's executor alive.
//   kFailed     its coroutine ended with an exception (a bug); failure() says which.
enum class ShutdownOutcome { kDrained, kCancelled, kStuck, kFailed };

std::string_view to_string(ShutdownOutcome outcome);

// Thread-safety: spawn() from the wiring thread, once. Everything else from any thread, except
// join(), which blocks and so must not run on the actor's own executor.
class ActorLifecycle {
 public:
  explicit ActorLifecycle(std::string name);

  const std::string& name() const { return state_->name; }

  // Runs `make_body()` (a plain callable returning awaitable<void>, e.g. `[self] { return
  // self->run(); }` — never a coroutine lambda with captures) on a strand of `executor`.
  template <typename MakeBody>
  void spawn(boost::asio::any_io_executor executor, MakeBody make_body);

  // The strand the actor runs on (valid after spawn()).
  const boost::asio::any_io_executor& executor() const { return state_->executor; }

  bool is_finished() const;
  // True once the actor was cancelled; the actor should drop (abandon) remaining work.
  bool cancel_requested() const { return state_->cancel_requested.load(std::memory_order_acquire); }
  // Asks the actor to give up: sets cancel_requested() and emits a terminal cancellation on its
  // executor, which aborts whatever the coroutine awaits right now. Idempotent.
  void request_cancel();

  // Waits until the coroutine has returned or `deadline`; past it, cancels and waits up to
  // `cancel_grace` more.
  ShutdownOutcome join(std::chrono::steady_clock::time_point deadline,
                       std::chrono::steady_clock::duration cancel_grace = std::chrono::seconds(1));

  // The exception that escaped the actor's coroutine, as text; empty if none.
  std::string failure() const;

 private:
  struct State {
    std::string name;
    boost::asio::any_io_executor executor;
    boost::asio::cancellation_signal cancel_signal;  // emitted on `executor` only
    std::atomic<bool> cancel_requested{false};
    std::atomic<bool> spawned{false};  // set once by spawn(), before the coroutine starts

    mutable std::mutex mutex;
    std::condition_variable finished_signal;
    bool finished = false;         // guarded by mutex
    std::string failure;           // guarded by mutex
  };

  static void on_finished(const std::shared_ptr<State>& state, std::exception_ptr failure);
  bool wait_finished_until(std::chrono::steady_clock::time_point deadline) const;

  // Shared with the completion handler and posted cancellations, which may outlive this object.
  std::shared_ptr<State> state_;
};

template <typename MakeBody>
void ActorLifecycle::spawn(boost::asio::any_io_executor executor, MakeBody make_body) {
  if (state_->spawned.load(std::memory_order_acquire)) {
    throw std::logic_error("actor '" + state_->name + "' started twice");
  }
  state_->executor = boost::asio::make_strand(std::move(executor));
  state_->spawned.store(true, std::memory_order_release);  // publishes `executor`
  std::shared_ptr<State> state = state_;
  boost::asio::co_spawn(state->executor, std::move(make_body),
                        boost::asio::bind_cancellation_slot(
                            state->cancel_signal.slot(),
                            [state](std::exception_ptr failure) { on_finished(state, failure); }));
}

// Base for actors that handle one message at a time. See the top of the file for an example.
// Thread-safety: start() from the wiring thread, once; try_send(), send(), stop(), shutdown()
// and mailbox() from any thread (shutdown() not on the actor's executor); the protected members
// run on the actor's executor.
template <typename Message>
class Actor : public std::enable_shared_from_this<Actor<Message>> {
 public:
  Actor(std::string name, std::size_t mailbox_capacity)
      : mailbox_(mailbox_capacity), lifecycle_(std::move(name)) {}
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  // Starts the actor's coroutine; it holds a reference to the actor until it returns. The actor
  // must be owned by a shared_ptr.
  void start(boost::asio::any_io_executor executor) {
    std::shared_ptr<Actor> self = this->shared_from_this();
    lifecycle_.spawn(std::move(executor), [self] { return self->run_then_close(); });
  }

  SendStatus try_send(Message&& message) { return mailbox_.try_send(std::move(message)); }
  boost::asio::awaitable<SendStatus> send(Message message) { return mailbox_.send(std::move(message)); }
  Channel<Message>& mailbox() { return mailbox_; }

  // Stop admitting: senders get kClosed from now on; accepted messages are still handled.
  void stop() { mailbox_.close(); }
  // stop(), then wait for the drain until `deadline`; past it, cancel (see ActorLifecycle).
  ShutdownOutcome shutdown(std::chrono::steady_clock::time_point deadline,
                           std::chrono::steady_clock::duration cancel_grace = std::chrono::seconds(1)) {
    stop();
    return lifecycle_.join(deadline, cancel_grace);
  }

  const std::string& name() const { return lifecycle_.name(); }
  const ActorLifecycle& lifecycle() const { return lifecycle_; }
  ActorLifecycle& lifecycle() { return lifecycle_; }

 protected:
  // Actor executor. Handles one message; the next one is received only after it returns.
  virtual boost::asio::awaitable<void> handle(Message message) = 0;
  // Actor executor. A message the actor will not handle because it was cancelled; answer its
  // sender (an error reply, a "cancelled" event) so that nothing disappears silently.
  virtual void abandon(Message message) { (void)message; }
  // Actor executor. The loop; override for actors that are not one-message-at-a-time. It must
  // return once the mailbox is drained (end-of-stream) or soon after cancel_requested().
  virtual boost::asio::awaitable<void> run();

  bool cancel_requested() const { return lifecycle_.cancel_requested(); }

 private:
  boost::asio::awaitable<void> run_then_close();

  Channel<Message> mailbox_;
  ActorLifecycle lifecycle_;
};

template <typename Message>
boost::asio::awaitable<void> Actor<Message>::run() {
  for (;;) {
    std::optional<Message> message = co_await mailbox_.receive();
    if (message) {
      if (cancel_requested()) {
        abandon(std::move(*message));
        continue;
      }
      auto handling = handle(std::move(*message));  // named: g++ 12.2 co_await temporaries
      co_await std::move(handling);
      continue;
    }
    if (mailbox_.drained()) co_return;
    // Woken by cancellation. The mailbox is closed by then (shutdown() stops first), so keep
    // receiving: what is left goes to abandon(), and end-of-stream follows.
  }
}

template <typename Message>
boost::asio::awaitable<void> Actor<Message>::run_then_close() {
  // After a cancellation, later awaits report errors as values instead of throwing: the actor
  // still has to drain its mailbox and answer what it abandons.
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  std::exception_ptr failure;
  try {
    co_await run();
  } catch (...) {
    failure = std::current_exception();
  }
  // Whatever ended the loop, nobody must queue into a mailbox that nobody reads any more.
  mailbox_.close();
  for (;;) {
    std::optional<Message> leftover = co_await mailbox_.receive();
    if (leftover) abandon(std::move(*leftover));
    else if (mailbox_.drained()) break;
  }
  if (failure) std::rethrow_exception(failure);
}

// For callbacks on foreign threads (a transport, an HTTP client, a prompt worker) whose message
// must not be lost — a lost completion would leave its request or its KV blocks held forever:
// try_send, and when the mailbox is momentarily full, a coroutine on the actor's executor waits
// for room (holding the actor until then). A closed mailbox drops the message (shutting down).
// Any thread.
template <typename ActorType, typename Message>
void deliver(std::shared_ptr<ActorType> actor, Message message) {
  if (!actor || actor->try_send(std::move(message)) != SendStatus::kFull) return;
  // NOTE: try_send leaves the message intact when it refuses it.
  boost::asio::any_io_executor executor = actor->lifecycle().executor();
  boost::asio::co_spawn(
      executor,
      [actor = std::move(actor), message = std::move(message)]() mutable {
        return [](std::shared_ptr<ActorType> target, Message pending) -> boost::asio::awaitable<void> {
          auto sending = target->send(std::move(pending));  // named: g++ 12.2 co_await temporaries
          co_await std::move(sending);
        }(std::move(actor), std::move(message));
      },
      boost::asio::detached);
}

}  // namespace troupe::actors::runtime
