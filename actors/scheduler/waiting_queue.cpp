// WaitingQueue: one deque per priority (see waiting_queue.hpp).
#include "actors/scheduler/waiting_queue.hpp"

#include <algorithm>

namespace troupe::scheduler {

void WaitingQueue::push_back(Sequence* seq) {
  queue_of(seq).push_back(seq);
  ++size_;
}

void WaitingQueue::push_front(Sequence* seq) {
  queue_of(seq).push_front(seq);
  ++size_;
}

Sequence* WaitingQueue::front() const {
  for (int p = kNumPriorities - 1; p >= 0; --p) {
    const auto& queue = queues_[static_cast<size_t>(p)];
    if (!queue.empty()) return queue.front();
  }
  return nullptr;
}

void WaitingQueue::pop_front() {
  for (int p = kNumPriorities - 1; p >= 0; --p) {
    auto& queue = queues_[static_cast<size_t>(p)];
    if (!queue.empty()) {
      queue.pop_front();
      --size_;
      return;
    }
  }
}

bool WaitingQueue::erase(const Sequence* seq) {
  auto& queue = queues_[static_cast<size_t>(seq->priority)];
  const auto it = std::find(queue.begin(), queue.end(), seq);
  if (it == queue.end()) return false;
  queue.erase(it);
  --size_;
  return true;
}

}  // namespace troupe::scheduler
