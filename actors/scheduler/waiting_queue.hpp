// WaitingQueue: requests that hold no KV yet, served by priority (critical first); inside a
// priority, either first-come first-served or fair share across clients (issue 13: whoever
// floods the queue must not own it).
//
//   priority level (kClient fairness)
//     ring:    client B -> client A -> client C        (clients with something waiting)
//     queues:  A: [a1 a2 a3 ...]  B: [b1]  C: [c1 c2]
//     service: the head of the least-loaded client (ClientLoad: the sequences it runs now),
//              the ring's order breaking ties; a served client moves to the ring's back. With
//              equal loads that is round robin: b1, a1, c1, a2, c2, a3, ...
//
// kFifo is the same structure with every request under one client, so both modes share one
// code path. A preempted sequence goes back to the FRONT of its client's queue, and its client
// to the front of the ring when it resumes first (KV preemption), so it resumes before anything
// that arrived after it; a sequence preempted to make room for another client keeps its
// client's place in the ring instead (it must not jump the request it was preempted for).
//
// Thread-safety: not thread-safe; one thread at a time (the scheduler actor's executor).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

#include "actors/messages/priority.hpp"
#include "actors/scheduler/scheduler_config.hpp"
#include "actors/scheduler/sequence.hpp"

namespace troupe::scheduler {

class WaitingQueue {
 public:
  // How much a client holds now (the scheduler: its running sequences); nullptr: 0 for all.
  using ClientLoad = std::function<int32_t(const std::string& client)>;

  explicit WaitingQueue(Fairness fairness = Fairness::kClient, ClientLoad load = nullptr)
      : fairness_(fairness), load_(std::move(load)) {}

  // Where a re-queued (preempted or stepped-over) sequence's client goes in the ring.
  enum class RingPlace : uint8_t {
    kFront,  // serve this client next (a KV preemption victim resumes first)
    kKeep,   // keep the client's place; append it at the back when it had none
  };

  void push_back(Sequence* seq);  // a new arrival
  void push_front(Sequence* seq, RingPlace place = RingPlace::kFront);
  // The next request to serve: highest priority, then the least-loaded client's head (ties: the
  // ring's order); nullptr when empty.
  Sequence* front() const;
  void pop_front();
  // O(client's queue length); false when seq is not queued.
  bool erase(const Sequence* seq);

  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Requests of this client waiting, over every priority (the per-client cap).
  int32_t num_waiting_of(const std::string& client) const;
  // Clients with at least one waiting request.
  int32_t num_clients() const { return static_cast<int32_t>(waiting_per_client_.size()); }
  Fairness fairness() const { return fairness_; }

  // Visits every queued sequence in round-robin order (the order of service if no client held
  // anything and nothing else arrived).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (int p = kNumPriorities - 1; p >= 0; --p) levels_[static_cast<size_t>(p)].for_each(fn);
  }

 private:
  // One priority level: a queue per client and the ring of clients that have one.
  struct Level {
    struct ClientQueue {
      std::deque<Sequence*> queue;
      std::list<std::string>::iterator ring_position;
    };
    std::unordered_map<std::string, ClientQueue> clients;
    std::list<std::string> ring;

    template <typename Fn>
    void for_each(Fn& fn) const {
      // Round robin: the i-th request of every client, in ring order, for i = 0, 1, ...
      for (size_t i = 0;; ++i) {
        bool any = false;
        for (const std::string& client : ring) {
          const auto& queue = clients.at(client).queue;
          if (i < queue.size()) {
            fn(*queue[i]);
            any = true;
          }
        }
        if (!any) return;
      }
    }
  };

  const std::string& key_of(const Sequence* seq) const;
  Level& level_of(const Sequence* seq) { return levels_[static_cast<size_t>(seq->priority)]; }
  // The highest non-empty level and its client to serve; nullptr when the queue is empty.
  std::pair<Level*, const std::string*> next_client();
  void forget_if_empty(Level& level, const std::string& client);
  void count(const std::string& client, int32_t delta);

  Fairness fairness_;
  ClientLoad load_;
  std::array<Level, kNumPriorities> levels_;  // indexed by Priority
  std::unordered_map<std::string, int32_t> waiting_per_client_;
  int32_t size_ = 0;
};

}  // namespace troupe::scheduler
