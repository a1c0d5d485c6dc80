// WaitingQueue: priority first, then round robin across clients (kClient) or arrival (kFifo);
// preempted sequences resume first; the per-client counts behind max_waiting_per_client.
#include "actors/scheduler/waiting_queue.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace troupe::scheduler {
namespace {

class QueueFixture {
 public:
  explicit QueueFixture(Fairness fairness) : queue(fairness) {}

  Sequence* make(RequestId id, std::string client, Priority priority = Priority::kNormal) {
    auto seq = std::make_unique<Sequence>();
    seq->request_id = id;
    seq->client = std::move(client);
    seq->priority = priority;
    sequences.push_back(std::move(seq));
    return sequences.back().get();
  }
  Sequence* arrive(RequestId id, std::string client, Priority priority = Priority::kNormal) {
    Sequence* seq = make(id, std::move(client), priority);
    queue.push_back(seq);
    return seq;
  }

  // Pops everything, in service order.
  std::vector<RequestId> drain() {
    std::vector<RequestId> order;
    while (Sequence* seq = queue.front()) {
      order.push_back(seq->request_id);
      queue.pop_front();
    }
    return order;
  }
  std::vector<RequestId> listed() const {
    std::vector<RequestId> order;
    queue.for_each([&order](const Sequence& seq) { order.push_back(seq.request_id); });
    return order;
  }

  WaitingQueue queue;
  std::deque<std::unique_ptr<Sequence>> sequences;
};

using Ids = std::vector<RequestId>;

TEST(WaitingQueueTest, FifoServesByArrivalWhoeverSentIt) {
  QueueFixture f(Fairness::kFifo);
  for (RequestId id = 1; id <= 4; ++id) f.arrive(id, "flood");
  f.arrive(5, "lone");
  EXPECT_EQ(f.listed(), (Ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(f.drain(), (Ids{1, 2, 3, 4, 5}));
}

TEST(WaitingQueueTest, ClientFairnessServesClientsRoundRobin) {
  QueueFixture f(Fairness::kClient);
  for (RequestId id = 1; id <= 4; ++id) f.arrive(id, "flood");
  f.arrive(5, "lone");
  f.arrive(6, "third");
  f.arrive(7, "third");
  // The lone client's one request is served second, not after the flood.
  EXPECT_EQ(f.listed(), (Ids{1, 5, 6, 2, 7, 3, 4}));
  EXPECT_EQ(f.drain(), (Ids{1, 5, 6, 2, 7, 3, 4}));
  EXPECT_TRUE(f.queue.empty());
  EXPECT_EQ(f.queue.num_clients(), 0);
}

TEST(WaitingQueueTest, PriorityComesBeforeFairness) {
  QueueFixture f(Fairness::kClient);
  f.arrive(1, "a");
  f.arrive(2, "b", Priority::kLow);
  f.arrive(3, "a", Priority::kHigh);
  f.arrive(4, "b");
  EXPECT_EQ(f.drain(), (Ids{3, 1, 4, 2}));
}

TEST(WaitingQueueTest, APreemptedRequestResumesFirst) {
  for (Fairness fairness : {Fairness::kFifo, Fairness::kClient}) {
    QueueFixture f(fairness);
    f.arrive(1, "a");
    f.arrive(2, "b");
    Sequence* victim = f.make(9, "b");
    f.queue.push_front(victim);  // KV preemption: its client goes first
    EXPECT_EQ(f.queue.front(), victim) << to_string(fairness);
    EXPECT_EQ(f.drain().front(), 9u);
  }
}

TEST(WaitingQueueTest, AVictimPreemptedForAnotherClientKeepsItsClientsPlace) {
  QueueFixture f(Fairness::kClient);
  Sequence* lone = f.arrive(1, "lone");
  f.arrive(2, "flood");
  f.queue.push_front(f.make(9, "flood"), WaitingQueue::RingPlace::kKeep);
  EXPECT_EQ(f.queue.front(), lone);  // not jumped by the victim made for it
  EXPECT_EQ(f.drain(), (Ids{1, 9, 2}));  // but first within its own client

  f.arrive(3, "lone");
  f.queue.push_front(f.make(10, "flood"), WaitingQueue::RingPlace::kKeep);  // flood was absent
  EXPECT_EQ(f.drain(), (Ids{3, 10}));
}

TEST(WaitingQueueTest, EraseAndPerClientCounts) {
  QueueFixture f(Fairness::kClient);
  Sequence* a1 = f.arrive(1, "a");
  f.arrive(2, "a");
  Sequence* b1 = f.arrive(3, "b", Priority::kHigh);
  EXPECT_EQ(f.queue.size(), 3);
  EXPECT_EQ(f.queue.num_waiting_of("a"), 2);
  EXPECT_EQ(f.queue.num_waiting_of("b"), 1);
  EXPECT_EQ(f.queue.num_waiting_of("c"), 0);
  EXPECT_EQ(f.queue.num_clients(), 2);
  EXPECT_TRUE(f.queue.erase(b1));
  EXPECT_FALSE(f.queue.erase(b1));
  EXPECT_EQ(f.queue.num_clients(), 1);
  EXPECT_TRUE(f.queue.erase(a1));
  EXPECT_EQ(f.queue.num_waiting_of("a"), 1);
  EXPECT_EQ(f.drain(), (Ids{2}));
  // FIFO keeps counting per client too (the cap holds in both modes).
  QueueFixture fifo(Fairness::kFifo);
  fifo.arrive(1, "a");
  fifo.arrive(2, "b");
  EXPECT_EQ(fifo.queue.num_waiting_of("a"), 1);
  EXPECT_EQ(fifo.queue.num_clients(), 2);
}

}  // namespace
}  // namespace troupe::scheduler
