// WaitingQueue: requests that hold no KV yet, served by priority (critical first), FCFS inside a
// priority; a preempted sequence goes back to the FRONT of its priority so it resumes before
// anything that arrived after it.
//
// Thread-safety: not thread-safe; one thread at a time (the scheduler actor's executor).
#pragma once

#include <array>
#include <cstdint>
#include <deque>

#include "actors/common/priority.hpp"
#include "actors/scheduler/sequence.hpp"

namespace troupe::scheduler {

class WaitingQueue {
 public:
  void push_back(Sequence* seq);   // a new arrival
  void push_front(Sequence* seq);  // a preempted sequence
  // Highest priority, earliest first; nullptr when empty.
  Sequence* front() const;
  void pop_front();
  // O(queue length); false when seq is not queued.
  bool erase(const Sequence* seq);

  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Visits every queued sequence, in service order.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (int p = kNumPriorities - 1; p >= 0; --p) {
      for (const Sequence* seq : queues_[static_cast<size_t>(p)]) fn(*seq);
    }
  }

 private:
  std::deque<Sequence*>& queue_of(const Sequence* seq) {
    return queues_[static_cast<size_t>(seq->priority)];
  }

  std::array<std::deque<Sequence*>, kNumPriorities> queues_;  // indexed by Priority
  int32_t size_ = 0;
};

}  // namespace troupe::scheduler
