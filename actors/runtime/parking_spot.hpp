// ParkingSpot: where one coroutine waits for "something changed" and any thread wakes it.
//
// This is the only wake-up glue in the runtime; Channel (receiver and senders waiting for room)
// and CompletionSlot are built on it. The protocol has no lost wake-ups:
//
//   waiter (its executor)                        waker (any thread)
//   ---------------------                        ------------------
//   store handler; parked = true (release)       publish the state change (push, flag, ...)
//   seq_cst fence                                seq_cst fence             } notify()
//   is_ready()? -> reclaim and complete now      parked? -> exchange(false) and post the handler
//
// The two fences are ordered one way or the other, so at least one side sees the other's write:
// either the waiter's re-check sees the new state or the waker sees `parked`. Both may; the
// `parked.exchange(false)` decides which one of them owns (and posts) the stored handler.
//
// The handler always runs on the waiter's own executor (posted, never inline), and the parked
// wait counts as outstanding work on that executor, as a real I/O operation would.
//
// Thread-safety: async_park() from the waiter's executor only, one wait at a time; notify() and
// wake() from any thread. Cancellation (a bound cancellation slot, e.g. from co_spawn) must be
// emitted from the waiter's executor, as Asio requires for every operation.
#pragma once

#include <atomic>
#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/system/error_code.hpp>

namespace troupe::actors::runtime {

// std::atomic_thread_fence(seq_cst) without g++'s -Wtsan warning at every instantiation.
// ThreadSanitizer does not model fences (its runtime still issues a hardware fence, so behaviour
// is unchanged). NOTE: that is safe here because no plain data in the runtime is handed over by
// a fence: every hand-off (stored handler, slot contents, completion value) goes through an
// acquire/release pair on an atomic, which TSan does see. The fences only order the Dekker-style
// "publish, then look" of the wake-up protocol below, which a race detector does not check.
inline void full_fence() {
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

class ParkingSpot {
 public:
  // The parked completion handler, type-erased. (Not asio::any_completion_handler: in Boost
  // 1.81 moving one around here re-wrapped it on every park, nesting without bound.)
  struct Handler {
    virtual ~Handler() = default;
    virtual void complete(boost::system::error_code result) = 0;
  };

  ParkingSpot() = default;
  ParkingSpot(const ParkingSpot&) = delete;
  ParkingSpot& operator=(const ParkingSpot&) = delete;
  // NOTE: must not be destroyed while a waiter is parked (the owner's shutdown guarantees it).
  ~ParkingSpot() = default;

  // Waiter's executor only. Completes with an empty error_code when woken (or when `is_ready()`
  // already holds after the waiter was published), with operation_aborted when cancelled.
  // `is_ready` runs once, on this thread, after the fence; it may have side effects (a channel
  // pops the message it finds into its stash). Callers re-check their condition after waking:
  // a wake means "look again", not "it is there".
  template <typename IsReady, typename CompletionToken>
  auto async_park(IsReady is_ready, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        [this](auto handler, IsReady ready) { park(std::move(handler), std::move(ready)); },
        token, std::move(is_ready));
  }

  // Any thread. Call after publishing a state change the waiter may be waiting for. Cheap when
  // nobody is parked (a fence and a relaxed load).
  void notify() {
    full_fence();
    if (parked_.load(std::memory_order_relaxed)) wake(boost::system::error_code{});
  }

  // Any thread. Wakes the parked waiter with `result`, if one is parked; returns whether this
  // call was the one that woke it. Callers normally use notify(), which adds the fence.
  bool wake(boost::system::error_code result);

  // Any thread; a snapshot, for tests and stats.
  bool is_parked() const { return parked_.load(std::memory_order_acquire); }

 private:
  // Runs on the waiter's executor when a cancellation is emitted on its bound slot.
  struct CancelWait {
    ParkingSpot* spot;
    void operator()(boost::asio::cancellation_type type) const {
      if (type != boost::asio::cancellation_type::none) spot->wake(boost::asio::error::operation_aborted);
    }
  };

  template <typename RawHandler>
  struct StoredHandler final : Handler {
    explicit StoredHandler(RawHandler&& raw) : raw_handler(std::move(raw)) {}
    void complete(boost::system::error_code result) override { std::move(raw_handler)(result); }
    RawHandler raw_handler;
  };

  template <typename RawHandler, typename IsReady>
  void park(RawHandler raw_handler, IsReady is_ready) {
    auto slot = boost::asio::get_associated_cancellation_slot(raw_handler);
    // Only the waiter's executor is ever a candidate: every troupe waiter is a coroutine.
    auto waiter_executor = boost::asio::get_associated_executor(raw_handler);
    work_ = boost::asio::prefer(boost::asio::any_io_executor(waiter_executor),
                                boost::asio::execution::outstanding_work.tracked);
    cancel_slot_ = slot;
    handler_ = std::make_unique<StoredHandler<RawHandler>>(std::move(raw_handler));
    if (slot.is_connected()) slot.template emplace<CancelWait>(CancelWait{this});
    parked_.store(true, std::memory_order_release);
    full_fence();
    if (is_ready()) wake(boost::system::error_code{});
  }

  // The handler and its work-tracking executor are written by the waiter before `parked_` is
  // set (release) and taken by whoever flips it back (acquire); nobody else touches them.
  std::atomic<bool> parked_{false};
  std::unique_ptr<Handler> handler_;
  boost::asio::cancellation_slot cancel_slot_;
  boost::asio::any_io_executor work_;
};

}  // namespace troupe::actors::runtime
