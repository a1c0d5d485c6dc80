// The batch actor's feeding policy (issue 40), without I/O or threads: which items of which
// batches go to the engine next. Batches are fed oldest first, and at most `max_in_flight` items
// are in the engine at once, all batches together: the batch is work for the idle capacity (its
// items run at the lowest priority), and a bounded number in flight keeps the engine's queue and
// the actor's mailbox bounded however large the input file is.
//
// An item is pending, then in flight (taken by take_starts()), then finished. An item the engine
// could not take now (its queue was full, it was draining) is parked and pending again after
// release_parked() (the actor's next tick): retrying at once would spin.
//
// Thread-safety: none; the batch actor's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::batch {

struct ItemStart {
  std::string batch_id;
  int64_t index = 0;
};

class BatchPlanner {
 public:
  explicit BatchPlanner(int32_t max_in_flight);

  // A batch to feed, after those already added; `pending`: its items not yet done, in order.
  void add(const std::string& batch_id, std::vector<int64_t> pending);
  // Forgets a batch (it ended). Its in-flight items no longer count.
  void remove(std::string_view batch_id);
  bool contains(std::string_view batch_id) const;

  // Items to start now, oldest batch first, until `bound` (at most max_in_flight) are in flight
  // and at most `max_starts` of them; they count as in flight until finished().
  std::vector<ItemStart> take_starts(int32_t bound, int32_t max_starts);
  std::vector<ItemStart> take_starts() { return take_starts(max_in_flight_, max_in_flight_); }
  // An in-flight item ended. `retry`: the engine did not take it; it is parked.
  void finished(std::string_view batch_id, int64_t index, bool retry);
  // Parked items become pending again (at the front of their batch's queue).
  void release_parked();

  // Stops feeding `batch_id` (cancelled, expired, failed): its pending and parked items are
  // dropped; returns them. In-flight ones stay until they finish.
  std::vector<int64_t> stop(std::string_view batch_id);
  // The items of `batch_id` in flight now (to cancel them).
  std::vector<int64_t> in_flight_of(std::string_view batch_id) const;
  // Nothing of `batch_id` pending, parked or in flight.
  bool idle(std::string_view batch_id) const;

  int32_t in_flight() const { return in_flight_; }
  int64_t queued() const;  // pending + parked, all batches

 private:
  struct Feed {
    std::string id;
    std::deque<int64_t> pending;
    std::vector<int64_t> parked;
    std::set<int64_t> in_flight;
    bool stopped = false;  // stop(): nothing of it starts again
  };
  Feed* find(std::string_view batch_id);
  const Feed* find(std::string_view batch_id) const;

  int32_t max_in_flight_;
  int32_t in_flight_ = 0;
  std::vector<Feed> feeds_;  // oldest first
};

}  // namespace troupe::batch
