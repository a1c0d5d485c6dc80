// Channel<T>: the bounded, lock-free, multi-producer single-consumer mailbox every actor owns.
//
// The lock-free parts are Boost.Lockfree's; this file only adds the slots and the wake-up glue:
//
//   free_slots_  (lockfree::stack<uint32_t>)   indices of empty slots; senders pop, receiver pushes
//   slots_       (T storage[capacity])          a message lives here between send and receive
//   ready_slots_ (lockfree::queue<uint32_t>)   indices of filled slots, in send order
//
// A send pops a free index, moves the message into that slot and pushes the index to
// ready_slots_; a receive does the reverse. The queues' release/acquire operations carry the
// slot contents between threads. No allocation happens after construction, and "full" is simply
// "no free index" — reported as a value, never an exception.
//
// NOTE (ThreadSanitizer): TSan reports races inside Boost.Lockfree's node free list whenever two
// threads pop or allocate at once (boostorg/lockfree#78): a Treiber-stack pop reads `top->next`
// before the CAS that claims `top`, and discards it when the CAS fails. Those touch only Boost's
// own nodes; tests/tsan.supp suppresses exactly those frames. The hand-off of a slot itself is
// ordered by Boost's CAS (release) and acquire loads, which TSan does see: a send that wrote its
// slot after pushing the index is reported even with the suppressions in place.
//
// Closing: close() stops admission at once, but every message accepted before it is still
// delivered (unlike Asio 1.81's channels, which drop the buffer on close — TOOLCHAIN.md). The
// receiver sees end-of-stream only once the channel is closed, no sender is half-way through a
// send, and the queue is empty; `admission_` packs "closed" and the number of sends in flight
// into one word so that a send racing with close() is either refused or delivered, never lost.
//
// Ordering: messages from one sender arrive in the order it sent them (one FIFO queue).
//
// Thread-safety: try_send(), send() (from a coroutine on any executor), close(), is_closed()
// and capacity() from any thread. try_receive(), receive(), wait_ready() and drained() from the
// single receiver only (one coroutine on one executor, or a strand). Cancellation of a pending
// receive()/wait_ready()/send() must be emitted from that coroutine's own executor, as Asio
// requires.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/stack.hpp>

#include "actors/runtime/parking_spot.hpp"

namespace troupe::actors::runtime {

// What became of a send. `kFull` is back-pressure (try again later or refuse upstream);
// `kClosed` means the receiver stopped admitting and will never see this message.
enum class SendStatus { kAccepted, kFull, kClosed };

std::string_view to_string(SendStatus status);

template <typename T>
class Channel {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "a message is moved into and out of its slot; a throwing move would lose it");

 public:
  // Any thread. `capacity` messages can be buffered; 1 <= capacity < 2^31.
  explicit Channel(std::size_t capacity);
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  // Destroys undelivered messages. NOTE: nobody may be parked on the channel any more (stop the
  // receiving actor and any blocked sender first); their executors must still exist.
  ~Channel();

  // Any thread. Moves from `message` only when it returns kAccepted; on kFull or kClosed the
  // caller still owns it (to retry, or to answer its sender with an error).
  SendStatus try_send(T&& message);

  // Any thread, from a coroutine: like try_send but waits for room instead of returning kFull.
  // Returns kAccepted or kClosed; kFull only if the wait was cancelled. NOTE (g++ 12): pass a
  // named variable (`co_await channel.send(std::move(msg))`), never `send(Msg{...})`.
  boost::asio::awaitable<SendStatus> send(T message);

  // Any thread. Idempotent. Senders get kClosed from now on; the receiver still gets everything
  // accepted before, then end-of-stream. Wakes the receiver and every sender waiting for room.
  void close();
  bool is_closed() const { return (admission_.load(std::memory_order_acquire) & kClosedBit) != 0; }
  std::size_t capacity() const { return capacity_; }

  // Receiver only. The oldest message, or nullopt if none is there right now.
  std::optional<T> try_receive();

  // Receiver only, from a coroutine. Waits for the next message; resumes on the receiver's own
  // executor. nullopt means end-of-stream (closed and drained) or that the wait was cancelled;
  // drained() tells them apart.
  boost::asio::awaitable<std::optional<T>> receive();

  // Receiver only, from a coroutine. Returns once a message can be taken (try_receive()), the
  // channel is drained, or the wait was cancelled — the caller looks which. Takes nothing, so
  // it may be awaited together with other work (awaitable operators): the loser of `a || b` is
  // cancelled and whatever it had already taken is dropped, which receive() cannot survive.
  boost::asio::awaitable<void> wait_ready();

  // Receiver only. True once the channel is closed, nothing is buffered and no send is in
  // flight: no message will ever arrive again.
  bool drained();

  // Any thread; a snapshot for tests: whether the receiver is parked waiting for a message.
  bool is_receiver_parked() const { return receiver_spot_.is_parked(); }

 private:
  // admission_ = 2 * (sends in flight) + closed bit.
  static constexpr uint64_t kClosedBit = 1;
  static constexpr uint64_t kOneSend = 2;

  struct alignas(T) SlotStorage {
    std::byte bytes[sizeof(T)];
  };

  // A sender coroutine parked until the receiver frees a slot (or the channel closes).
  struct RoomWaiter {
    ParkingSpot spot;
  };

  T* slot(uint32_t index) { return std::launder(reinterpret_cast<T*>(slots_[index].bytes)); }
  std::optional<T> pop_ready();
  // Ends a send begun with `admission_.fetch_add(kOneSend)`.
  void finish_send(bool accepted);
  // Receiver: after a failed try_receive, looks again once it is published as parked.
  bool poll_into_stash();
  void register_room_waiter(RoomWaiter* waiter);
  void unregister_room_waiter(RoomWaiter* waiter);
  void wake_room_waiters();

  const std::size_t capacity_;
  std::unique_ptr<SlotStorage[]> slots_;
  boost::lockfree::stack<uint32_t> free_slots_;
  boost::lockfree::queue<uint32_t> ready_slots_;
  std::atomic<uint64_t> admission_{0};

  ParkingSpot receiver_spot_;
  // Receiver only: a message found by the park-time re-check, handed out by the next receive.
  std::optional<T> stash_;

  // Senders waiting for room: only touched when the channel is full, so a mutex is fine here.
  // num_room_waiters_ lets the receiver skip the lock on the hot path.
  std::mutex room_waiters_mutex_;
  std::vector<RoomWaiter*> room_waiters_;
  std::atomic<std::size_t> num_room_waiters_{0};
};

// ---------------------------------------------------------------------------------------------
// Implementation.

template <typename T>
Channel<T>::Channel(std::size_t capacity)
    : capacity_(capacity),
      slots_(std::make_unique<SlotStorage[]>(capacity)),
      free_slots_(capacity),
      ready_slots_(capacity) {
  if (capacity == 0 || capacity >= (std::size_t{1} << 31)) {
    throw std::invalid_argument("Channel capacity must be in [1, 2^31)");
  }
  // Pushed in reverse so that slot 0 is used first (the stack hands back the warmest slot).
  for (std::size_t i = capacity; i-- > 0;) free_slots_.bounded_push(static_cast<uint32_t>(i));
}

template <typename T>
Channel<T>::~Channel() {
  stash_.reset();
  uint32_t index = 0;
  while (ready_slots_.pop(index)) slot(index)->~T();
}

template <typename T>
SendStatus Channel<T>::try_send(T&& message) {
  const uint64_t before = admission_.fetch_add(kOneSend, std::memory_order_acquire);
  if (before & kClosedBit) {
    finish_send(false);
    return SendStatus::kClosed;
  }
  uint32_t index = 0;
  if (!free_slots_.pop(index)) {
    finish_send(false);
    return SendStatus::kFull;
  }
  ::new (static_cast<void*>(slots_[index].bytes)) T(std::move(message));
  // Cannot fail: at most `capacity_` indices exist and the queue has room for all of them.
  ready_slots_.bounded_push(index);
  finish_send(true);
  return SendStatus::kAccepted;
}

template <typename T>
void Channel<T>::finish_send(bool accepted) {
  // release: the push above happens-before a receiver that sees this count reach zero.
  const uint64_t before = admission_.fetch_sub(kOneSend, std::memory_order_acq_rel);
  // A refused send still matters after close(): the receiver may be parked waiting for the
  // in-flight count to reach zero before it can report end-of-stream.
  if (accepted || (before & kClosedBit)) receiver_spot_.notify();
}

template <typename T>
void Channel<T>::close() {
  admission_.fetch_or(kClosedBit, std::memory_order_acq_rel);
  receiver_spot_.notify();
  wake_room_waiters();
}

template <typename T>
std::optional<T> Channel<T>::pop_ready() {
  uint32_t index = 0;
  if (!ready_slots_.pop(index)) return std::nullopt;
  T* message = slot(index);
  std::optional<T> result(std::move(*message));
  message->~T();
  free_slots_.bounded_push(index);  // cannot fail, as in try_send
  // Same fence-then-look as ParkingSpot::notify, against register_room_waiter's increment.
  full_fence();
  if (num_room_waiters_.load(std::memory_order_relaxed) != 0) wake_room_waiters();
  return result;
}

template <typename T>
std::optional<T> Channel<T>::try_receive() {
  if (stash_) {
    std::optional<T> result = std::move(stash_);
    stash_.reset();
    return result;
  }
  return pop_ready();
}

template <typename T>
bool Channel<T>::drained() {
  if (stash_) return false;
  // Read admission first: a zero in-flight count seen here (acquire) makes every accepted push
  // visible to the pop that follows. A pop (not lockfree's advisory empty()) is the check; what
  // it finds waits in the stash for the next receive.
  if (admission_.load(std::memory_order_acquire) != kClosedBit) return false;
  stash_ = pop_ready();
  return !stash_.has_value();
}

template <typename T>
bool Channel<T>::poll_into_stash() {
  if (stash_) return true;
  const bool closed_and_quiet = admission_.load(std::memory_order_acquire) == kClosedBit;
  stash_ = pop_ready();
  return stash_.has_value() || closed_and_quiet;
}

template <typename T>
boost::asio::awaitable<std::optional<T>> Channel<T>::receive() {
  for (;;) {
    std::optional<T> message = try_receive();
    if (message) co_return message;
    if (drained()) co_return std::nullopt;
    // Named locals, not temporaries, inside co_await (g++ 12.2 miscompile, TOOLCHAIN.md).
    auto is_ready = [this] { return poll_into_stash(); };
    auto park = receiver_spot_.async_park(is_ready, boost::asio::as_tuple(boost::asio::use_awaitable));
    auto [woken] = co_await std::move(park);
    if (woken) co_return std::nullopt;  // cancelled
  }
}

template <typename T>
boost::asio::awaitable<void> Channel<T>::wait_ready() {
  if (poll_into_stash()) co_return;
  // A message found by the park-time re-check waits in the stash for the next try_receive().
  auto is_ready = [this] { return poll_into_stash(); };
  auto park = receiver_spot_.async_park(is_ready, boost::asio::as_tuple(boost::asio::use_awaitable));
  auto [woken] = co_await std::move(park);
  (void)woken;  // woken or cancelled: the caller looks
}

template <typename T>
void Channel<T>::register_room_waiter(RoomWaiter* waiter) {
  std::lock_guard lock(room_waiters_mutex_);
  room_waiters_.push_back(waiter);
  num_room_waiters_.fetch_add(1, std::memory_order_seq_cst);
}

template <typename T>
void Channel<T>::unregister_room_waiter(RoomWaiter* waiter) {
  std::lock_guard lock(room_waiters_mutex_);
  for (auto it = room_waiters_.begin(); it != room_waiters_.end(); ++it) {
    if (*it == waiter) {
      room_waiters_.erase(it);
      num_room_waiters_.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
  }
}

template <typename T>
void Channel<T>::wake_room_waiters() {
  // Every waiter is woken and retries: they are few (a handful of producer actors), and waking
  // one at a time could hand the only free slot to a waiter that no longer needs it.
  // NOTE: wake() runs under the lock so that a waiter cannot unregister and free its RoomWaiter
  // (it lives in the waiter's coroutine frame) while we still touch it.
  std::lock_guard lock(room_waiters_mutex_);
  for (RoomWaiter* waiter : room_waiters_) waiter->spot.wake(boost::system::error_code{});
  num_room_waiters_.fetch_sub(room_waiters_.size(), std::memory_order_relaxed);
  room_waiters_.clear();
}

template <typename T>
boost::asio::awaitable<SendStatus> Channel<T>::send(T message) {
  for (;;) {
    SendStatus status = try_send(std::move(message));
    if (status != SendStatus::kFull) co_return status;

    RoomWaiter waiter;
    // Registration happens inside the park-time check, i.e. after the waiter is published as
    // parked: a receiver that finds it in the list can always wake it. (Registering before the
    // park lets a wake-all hit a not-yet-parked waiter and drop it from the list: a lost wake-up.)
    // The check is then a real send attempt: room that appeared meanwhile is taken at once.
    auto is_ready = [this, &waiter, &message, &status] {
      register_room_waiter(&waiter);
      full_fence();  // pairs with pop_ready()'s fence
      status = try_send(std::move(message));
      return status != SendStatus::kFull;
    };
    auto park = waiter.spot.async_park(is_ready, boost::asio::as_tuple(boost::asio::use_awaitable));
    auto [woken] = co_await std::move(park);
    unregister_room_waiter(&waiter);
    if (status != SendStatus::kFull) co_return status;
    if (woken) co_return SendStatus::kFull;  // cancelled while waiting for room
  }
}

}  // namespace troupe::actors::runtime
