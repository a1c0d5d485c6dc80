// ParkingSpot::wake — the half of the wake-up protocol that may run on any thread.
#include "actors/runtime/parking_spot.hpp"

namespace troupe::actors::runtime {

namespace {

// Posted to the waiter's executor. The cancellation slot is cleared there, on the only thread
// allowed to touch it, before the coroutine resumes: a later emit must not reach this spot.
struct ResumeWaiter {
  std::unique_ptr<ParkingSpot::Handler> handler;
  boost::asio::cancellation_slot cancel_slot;
  boost::system::error_code result;
  void operator()() {
    if (cancel_slot.is_connected()) cancel_slot.clear();
    std::unique_ptr<ParkingSpot::Handler> resumed = std::move(handler);
    resumed->complete(result);
  }
};

}  // namespace

bool ParkingSpot::wake(boost::system::error_code result) {
  // acquire: pairs with the waiter's release store, so handler_ and work_ are complete here.
  if (!parked_.exchange(false, std::memory_order_acquire)) return false;
  std::unique_ptr<Handler> handler = std::move(handler_);
  boost::asio::cancellation_slot cancel_slot = cancel_slot_;
  boost::asio::any_io_executor work = std::move(work_);
  // post() counts its own work before `work` is released at the end of this scope, so the
  // waiter's io_context never sees zero outstanding work in between.
  boost::asio::post(work, ResumeWaiter{std::move(handler), cancel_slot, result});
  return true;
}

}  // namespace troupe::actors::runtime
