// WaitingQueue: a ring of per-client queues per priority (see waiting_queue.hpp).
#include "actors/scheduler/waiting_queue.hpp"

#include <algorithm>

namespace troupe::scheduler {
namespace {

const std::string kEveryone;  // kFifo: one queue for all

}  // namespace

const std::string& WaitingQueue::key_of(const Sequence* seq) const {
  return fairness_ == Fairness::kClient ? seq->client : kEveryone;
}

void WaitingQueue::count(const std::string& client, int32_t delta) {
  const auto it = waiting_per_client_.try_emplace(client, 0).first;
  it->second += delta;
  if (it->second == 0) waiting_per_client_.erase(it);
  size_ += delta;
}

int32_t WaitingQueue::num_waiting_of(const std::string& client) const {
  const auto it = waiting_per_client_.find(client);
  return it == waiting_per_client_.end() ? 0 : it->second;
}

void WaitingQueue::push_back(Sequence* seq) {
  Level& level = level_of(seq);
  const std::string& key = key_of(seq);
  auto [it, added] = level.clients.try_emplace(key);
  if (added) it->second.ring_position = level.ring.insert(level.ring.end(), key);
  it->second.queue.push_back(seq);
  count(seq->client, +1);
}

void WaitingQueue::push_front(Sequence* seq, RingPlace place) {
  Level& level = level_of(seq);
  const std::string& key = key_of(seq);
  auto [it, added] = level.clients.try_emplace(key);
  if (added) {
    it->second.ring_position = level.ring.insert(
        place == RingPlace::kFront ? level.ring.begin() : level.ring.end(), key);
  } else if (place == RingPlace::kFront) {
    level.ring.splice(level.ring.begin(), level.ring, it->second.ring_position);
  }
  it->second.queue.push_front(seq);
  count(seq->client, +1);
}

std::pair<WaitingQueue::Level*, const std::string*> WaitingQueue::next_client() {
  for (int p = kNumPriorities - 1; p >= 0; --p) {
    Level& level = levels_[static_cast<size_t>(p)];
    if (level.ring.empty()) continue;
    const std::string* chosen = &level.ring.front();
    if (load_ && fairness_ == Fairness::kClient) {
      int32_t least = load_(*chosen);
      for (const std::string& client : level.ring) {
        const int32_t load = load_(client);
        if (load < least) {
          least = load;
          chosen = &client;
        }
      }
    }
    return {&level, chosen};
  }
  return {nullptr, nullptr};
}

Sequence* WaitingQueue::front() const {
  // next_client() only reads; it is non-const so pop_front() can share it.
  const auto [level, client] = const_cast<WaitingQueue*>(this)->next_client();
  if (level == nullptr) return nullptr;
  return level->clients.at(*client).queue.front();
}

void WaitingQueue::pop_front() {
  const auto [level, chosen] = next_client();
  if (level == nullptr) return;
  const std::string client = *chosen;
  auto& entry = level->clients.at(client);
  count(entry.queue.front()->client, -1);
  entry.queue.pop_front();
  if (entry.queue.empty()) {
    level->ring.erase(entry.ring_position);
    level->clients.erase(client);
  } else {
    // Round robin: this client's next request waits for every other client's turn.
    level->ring.splice(level->ring.end(), level->ring, entry.ring_position);
  }
}

bool WaitingQueue::erase(const Sequence* seq) {
  Level& level = level_of(seq);
  const std::string& key = key_of(seq);
  const auto it = level.clients.find(key);
  if (it == level.clients.end()) return false;
  auto& queue = it->second.queue;
  const auto pos = std::find(queue.begin(), queue.end(), seq);
  if (pos == queue.end()) return false;
  queue.erase(pos);
  count(seq->client, -1);
  forget_if_empty(level, key);
  return true;
}

void WaitingQueue::forget_if_empty(Level& level, const std::string& client) {
  const auto it = level.clients.find(client);
  if (it == level.clients.end() || !it->second.queue.empty()) return;
  level.ring.erase(it->second.ring_position);
  level.clients.erase(it);
}

}  // namespace troupe::scheduler
