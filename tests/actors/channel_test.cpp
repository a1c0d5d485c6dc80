// Tests for actors/runtime/channel.hpp, parking_spot.hpp and completion_slot.hpp: values for
// full/closed, no loss or duplication under many producers, per-producer order, wake-up races,
// close while parked, cancellation, one-shot completion from foreign threads, and a completion
// awaited together with a mailbox (the scheduler actor's interruptible step wait).
#include "actors/runtime/channel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "actors/runtime/completion_slot.hpp"
#include "actors/runtime/executor_threads.hpp"
#include "runtime_test_support.hpp"

// In the helpers' namespace (runtime_test_support.hpp: kScaleDown, in(), eventually()).
namespace troupe::actors::runtime::testing {
namespace {

namespace asio = boost::asio;

struct Tagged {
  int32_t producer_id = 0;
  int64_t sequence = 0;
};

// The coroutines below are free functions: coroutine lambdas never capture (STYLE.md rule 7);
// tests spawn them through plain lambdas.
asio::awaitable<void> collect_until_end(Channel<std::string>& channel, std::vector<std::string>& received,
                                        std::atomic<bool>& done) {
  // NOTE: never `while (co_await ...)`: g++ 12.2 miscompiles a co_await in a loop condition
  // (SIGILL under ASan). Await into a named local, then test it.
  for (;;) {
    std::optional<std::string> message = co_await channel.receive();
    if (!message) break;
    received.push_back(*message);
  }
  done = true;
}

asio::awaitable<void> receive_once_expecting_end(Channel<int>& channel, std::atomic<int>& outcome) {
  std::optional<int> message = co_await channel.receive();
  outcome = (!message && channel.drained()) ? 1 : 2;
}

asio::awaitable<void> receive_once_expecting_cancel(Channel<int>& channel, std::atomic<int>& outcome) {
  co_await asio::this_coro::throw_if_cancelled(false);
  std::optional<int> message = co_await channel.receive();
  outcome = (!message && !channel.drained()) ? 1 : 2;
}

asio::awaitable<void> count_until_end(Channel<int>& channel, std::atomic<int64_t>& num_received,
                                      std::atomic<bool>& finished) {
  for (;;) {
    std::optional<int> message = co_await channel.receive();
    if (!message) break;
    num_received.fetch_add(1);
  }
  finished = true;
}

asio::awaitable<void> receive_forever(Channel<int>& channel) {
  std::optional<int> never = co_await channel.receive();
  (void)never;
}

asio::awaitable<void> send_one(Channel<int>& channel, int value, std::atomic<int>& outcome) {
  auto sending = channel.send(value);  // named: no temporaries inside co_await (g++ 12.2)
  SendStatus status = co_await std::move(sending);
  outcome = static_cast<int>(status);
}

TEST(ChannelTest, TrySendReportsFullAsValueAndKeepsTheMessage) {
  Channel<std::unique_ptr<int>> channel(2);
  auto first = std::make_unique<int>(1);
  auto second = std::make_unique<int>(2);
  auto third = std::make_unique<int>(3);
  EXPECT_EQ(channel.try_send(std::move(first)), SendStatus::kAccepted);
  EXPECT_EQ(channel.try_send(std::move(second)), SendStatus::kAccepted);
  EXPECT_EQ(channel.try_send(std::move(third)), SendStatus::kFull);
  ASSERT_NE(third, nullptr) << "a refused message must stay with its sender";
  EXPECT_EQ(*third, 3);

  auto received = channel.try_receive();
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(**received, 1);
  EXPECT_EQ(channel.try_send(std::move(third)), SendStatus::kAccepted);
  EXPECT_EQ(**channel.try_receive(), 2);
  EXPECT_EQ(**channel.try_receive(), 3);
  EXPECT_FALSE(channel.try_receive().has_value());
}

TEST(ChannelTest, CloseRefusesNewSendsButDeliversWhatWasAccepted) {
  Channel<std::string> channel(8);
  for (std::string text : {"a", "b", "c"}) ASSERT_EQ(channel.try_send(std::move(text)), SendStatus::kAccepted);
  channel.close();
  std::string late = "late";
  EXPECT_EQ(channel.try_send(std::move(late)), SendStatus::kClosed);
  EXPECT_EQ(late, "late");
  EXPECT_FALSE(channel.drained());

  ExecutorThreads receiver_thread("rx", 1);
  std::vector<std::string> received;
  std::atomic<bool> done{false};
  asio::co_spawn(
      receiver_thread.executor(), [&] { return collect_until_end(channel, received, done); }, asio::detached);
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_EQ(received, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(channel.drained());
  EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

// Receives everything on its own thread, checking per-producer order as it goes.
struct OrderCheckingReceiver {
  explicit OrderCheckingReceiver(int num_producers) : next_sequence(num_producers, 0) {}

  asio::awaitable<void> run(Channel<Tagged>& channel) {
    for (;;) {
      std::optional<Tagged> message = co_await channel.receive();
      if (!message) break;
      int64_t& expected = next_sequence[static_cast<std::size_t>(message->producer_id)];
      if (message->sequence != expected) ++num_out_of_order;
      expected = message->sequence + 1;
      ++num_received;
    }
    finished = true;
  }

  std::vector<int64_t> next_sequence;
  int64_t num_out_of_order = 0;
  int64_t num_received = 0;
  std::atomic<bool> finished{false};
};

TEST(ChannelTest, ManyProducerThreadsLoseNothingDuplicateNothingAndKeepOrder) {
  constexpr int kNumProducers = 4;
  const int64_t num_per_producer = 1'000'000 / kScaleDown / kNumProducers + 1;
  Channel<Tagged> channel(256);
  ExecutorThreads receiver_thread("rx", 1);
  OrderCheckingReceiver receiver(kNumProducers);
  asio::co_spawn(
      receiver_thread.executor(), [&receiver, &channel] { return receiver.run(channel); }, asio::detached);

  std::atomic<int64_t> num_full{0};
  std::vector<std::thread> producers;
  for (int producer_id = 0; producer_id < kNumProducers; ++producer_id) {
    producers.emplace_back([&, producer_id] {
      for (int64_t sequence = 0; sequence < num_per_producer; ++sequence) {
        Tagged message{producer_id, sequence};
        for (;;) {
          SendStatus status = channel.try_send(std::move(message));
          if (status == SendStatus::kAccepted) break;
          ASSERT_EQ(status, SendStatus::kFull);
          num_full.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::yield();
        }
      }
    });
  }
  for (std::thread& producer : producers) producer.join();
  channel.close();
  ASSERT_TRUE(eventually([&] { return receiver.finished.load(); }));
  EXPECT_EQ(receiver.num_received, kNumProducers * num_per_producer);
  EXPECT_EQ(receiver.num_out_of_order, 0);
  for (int64_t next : receiver.next_sequence) EXPECT_EQ(next, num_per_producer);
  EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
  std::printf("[ info ] %lld messages, %lld full retries\n", static_cast<long long>(receiver.num_received),
              static_cast<long long>(num_full.load()));
}

asio::awaitable<void> send_sequence(Channel<Tagged>& channel, int32_t producer_id, int64_t count,
                                    std::atomic<int>& num_producers_done) {
  for (int64_t sequence = 0; sequence < count; ++sequence) {
    Tagged message{producer_id, sequence};
    auto sending = channel.send(message);  // named: no temporaries inside co_await (g++ 12.2)
    SendStatus status = co_await std::move(sending);
    if (status != SendStatus::kAccepted) throw std::runtime_error("send was not accepted");
  }
  num_producers_done.fetch_add(1);
}

TEST(ChannelTest, SendAwaitsRoomInATinyMailbox) {
  // Capacity 2 and six producer coroutines on three threads: senders park for room constantly.
  constexpr int kNumProducers = 6;
  const int64_t num_per_producer = 120'000 / kScaleDown / kNumProducers;
  Channel<Tagged> channel(2);
  ExecutorThreads receiver_thread("rx", 1);
  ExecutorThreads producer_threads("tx", 3);
  OrderCheckingReceiver receiver(kNumProducers);
  asio::co_spawn(
      receiver_thread.executor(), [&receiver, &channel] { return receiver.run(channel); }, asio::detached);
  std::atomic<int> num_producers_done{0};
  for (int32_t producer_id = 0; producer_id < kNumProducers; ++producer_id) {
    // Each producer on its own strand: a coroutine never runs on two threads at once.
    asio::co_spawn(
        asio::make_strand(producer_threads.executor()),
        [&channel, producer_id, num_per_producer, &num_producers_done] {
          return send_sequence(channel, producer_id, num_per_producer, num_producers_done);
        },
        asio::detached);
  }
  ASSERT_TRUE(eventually([&] { return num_producers_done.load() == kNumProducers; }, 60000ms));
  channel.close();
  ASSERT_TRUE(eventually([&] { return receiver.finished.load(); }));
  EXPECT_EQ(receiver.num_received, kNumProducers * num_per_producer);
  EXPECT_EQ(receiver.num_out_of_order, 0);
  EXPECT_EQ(producer_threads.join(in(5000ms)), JoinOutcome::kFinished);
  EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

asio::awaitable<void> bounce(Channel<int64_t>& inbox, Channel<int64_t>& outbox) {
  for (;;) {
    std::optional<int64_t> message = co_await inbox.receive();
    if (!message) break;
    int64_t reply = *message + 1;
    if (outbox.try_send(std::move(reply)) != SendStatus::kAccepted) throw std::runtime_error("reply refused");
  }
  outbox.close();
}

asio::awaitable<void> drive_ping_pong(Channel<int64_t>& ping, Channel<int64_t>& pong, int64_t num_round_trips,
                                      std::atomic<int64_t>& num_completed) {
  int64_t value = 0;
  for (int64_t trip = 0; trip < num_round_trips; ++trip) {
    int64_t sent = value;
    if (ping.try_send(std::move(sent)) != SendStatus::kAccepted) co_return;
    std::optional<int64_t> reply = co_await pong.receive();
    if (!reply || *reply != value + 1) co_return;
    value = *reply;
    num_completed.fetch_add(1, std::memory_order_relaxed);
  }
  ping.close();
}

TEST(ChannelTest, PingPongParksAndWakesTheReceiverEveryMessage) {
  // Capacity 1 each way and one message in flight: every receive finds the queue empty and
  // parks, so every message exercises the park/notify race from both sides.
  const int64_t num_round_trips = 500'000 / kScaleDown;
  Channel<int64_t> ping(1);
  Channel<int64_t> pong(1);
  ExecutorThreads left("left", 1);
  ExecutorThreads right("right", 1);
  std::atomic<int64_t> num_completed{0};
  asio::co_spawn(right.executor(), [&ping, &pong] { return bounce(ping, pong); }, asio::detached);
  asio::co_spawn(
      left.executor(), [&] { return drive_ping_pong(ping, pong, num_round_trips, num_completed); },
      asio::detached);
  ASSERT_TRUE(eventually([&] { return num_completed.load() == num_round_trips; }, 120000ms))
      << num_completed.load() << " of " << num_round_trips;
  ASSERT_TRUE(eventually([&] { return pong.is_closed(); }));
  EXPECT_EQ(left.join(in(5000ms)), JoinOutcome::kFinished);
  EXPECT_EQ(right.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ChannelTest, CloseWakesAParkedReceiverWithEndOfStream) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    Channel<int> channel(4);
    ExecutorThreads receiver_thread("rx", 1);
    std::atomic<int> outcome{0};  // 1: end-of-stream and drained
    asio::co_spawn(
        receiver_thread.executor(), [&] { return receive_once_expecting_end(channel, outcome); },
        asio::detached);
    if (attempt % 2 == 0) {
      ASSERT_TRUE(eventually([&] { return channel.is_receiver_parked(); }));
    }
    std::thread closer([&] { channel.close(); });
    closer.join();
    ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }));
    EXPECT_EQ(outcome.load(), 1);
    EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
  }
}

TEST(ChannelTest, SendsRacingWithCloseAreEitherRefusedOrDelivered) {
  // The receiver must see end-of-stream only after every accepted message, even when close()
  // lands between a sender's admission and its push.
  const int attempts = static_cast<int>(400 / std::min<int64_t>(kScaleDown, 4));
  for (int attempt = 0; attempt < attempts; ++attempt) {
    Channel<int> channel(64);
    ExecutorThreads receiver_thread("rx", 1);
    std::atomic<int64_t> num_received{0};
    std::atomic<bool> finished{false};
    asio::co_spawn(
        receiver_thread.executor(), [&] { return count_until_end(channel, num_received, finished); },
        asio::detached);
    std::atomic<int64_t> num_accepted{0};
    std::vector<std::thread> senders;
    for (int sender = 0; sender < 3; ++sender) {
      senders.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          int value = i;
          SendStatus status = channel.try_send(std::move(value));
          if (status == SendStatus::kAccepted) num_accepted.fetch_add(1);
          if (status == SendStatus::kClosed) return;
        }
      });
    }
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(attempt % 50));
      channel.close();
    });
    for (std::thread& sender : senders) sender.join();
    closer.join();
    ASSERT_TRUE(eventually([&] { return finished.load(); }));
    EXPECT_EQ(num_received.load(), num_accepted.load()) << "attempt " << attempt;
    EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
  }
}

TEST(ChannelTest, CancellingAParkedReceiveReturnsNulloptWithoutEndOfStream) {
  Channel<int> channel(4);
  ExecutorThreads receiver_thread("rx", 1);
  asio::cancellation_signal cancel;
  std::atomic<int> outcome{0};  // 1: cancelled (nullopt, not drained)
  asio::co_spawn(
      receiver_thread.executor(), [&] { return receive_once_expecting_cancel(channel, outcome); },
      asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  ASSERT_TRUE(eventually([&] { return channel.is_receiver_parked(); }));
  asio::post(receiver_thread.executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }));
  EXPECT_EQ(outcome.load(), 1);
  // The channel still works after a cancelled wait.
  EXPECT_EQ(channel.try_send(7), SendStatus::kAccepted);
  EXPECT_EQ(channel.try_receive(), std::optional<int>(7));
  EXPECT_EQ(receiver_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ChannelTest, ABlockedSenderIsReleasedByClose) {
  Channel<int> channel(1);
  ASSERT_EQ(channel.try_send(1), SendStatus::kAccepted);
  ExecutorThreads sender_thread("tx", 1);
  std::atomic<int> outcome{-1};
  asio::co_spawn(sender_thread.executor(), [&] { return send_one(channel, 2, outcome); }, asio::detached);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(outcome.load(), -1) << "send must wait while the channel is full";
  channel.close();
  ASSERT_TRUE(eventually([&] { return outcome.load() != -1; }));
  EXPECT_EQ(outcome.load(), static_cast<int>(SendStatus::kClosed));
  EXPECT_EQ(sender_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ChannelTest, UndeliveredMessagesAreDestroyedWithTheChannel) {
  auto counted = std::make_shared<int>(0);
  {
    Channel<std::shared_ptr<int>> channel(4);
    for (int i = 0; i < 3; ++i) {
      auto copy = counted;
      ASSERT_EQ(channel.try_send(std::move(copy)), SendStatus::kAccepted);
    }
    EXPECT_EQ(counted.use_count(), 4);
  }
  EXPECT_EQ(counted.use_count(), 1);
}

asio::awaitable<void> await_rounds_completed_by_threads(int num_rounds, std::atomic<int>& num_ok,
                                                        std::atomic<bool>& finished) {
  const std::thread::id waiter_id = std::this_thread::get_id();
  for (int round = 0; round < num_rounds; ++round) {
    auto slot = CompletionSlot<std::string>::create();
    std::thread backend([completer = slot->completer(), round] { completer(std::to_string(round)); });
    std::optional<std::string> result = co_await slot->wait();
    backend.join();
    if (result == std::to_string(round) && std::this_thread::get_id() == waiter_id) num_ok.fetch_add(1);
  }
  finished = true;
}

asio::awaitable<void> await_done_then_cancelled(std::shared_ptr<CompletionSlot<int>> done,
                                                std::shared_ptr<CompletionSlot<int>> never,
                                                std::atomic<int>& outcome) {
  std::optional<int> first = co_await done->wait();
  co_await asio::this_coro::throw_if_cancelled(false);
  std::optional<int> second = co_await never->wait();
  outcome = (first == 1 && !second) ? 1 : 2;
}

// The scheduler actor's await_step(): each round a foreign thread completes a slot while
// producers keep sending; the slot and the mailbox are awaited together (readiness only: the
// loser of `||` is cancelled and what it returned is dropped), then the messages are taken.
// Neither a message nor a completion may be lost or seen twice.
asio::awaitable<void> race_completions_with_messages(Channel<int>& mailbox, int num_rounds,
                                                     std::atomic<int64_t>& num_messages,
                                                     std::atomic<int>& num_completions,
                                                     std::atomic<bool>& finished) {
  using namespace asio::experimental::awaitable_operators;
  for (int round = 0; round < num_rounds; ++round) {
    auto slot = CompletionSlot<int>::create();
    std::thread completer([slot, round] { slot->complete(round); });
    while (!slot->is_complete()) {
      auto completion = slot->wait_ready();
      auto arrival = mailbox.wait_ready();
      auto either = std::move(completion) || std::move(arrival);
      co_await std::move(either);
      while (std::optional<int> message = mailbox.try_receive()) num_messages.fetch_add(1);
      if (mailbox.drained()) break;
    }
    std::optional<int> value = co_await slot->wait();
    if (value == round) num_completions.fetch_add(1);
    completer.join();
  }
  for (;;) {
    std::optional<int> message = co_await mailbox.receive();
    if (!message) break;
    num_messages.fetch_add(1);
  }
  finished = true;
}

TEST(CompletionSlotTest, AwaitedTogetherWithAMailboxNeitherLosesAnything) {
  const int num_rounds = static_cast<int>(4'000 / kScaleDown);
  const int64_t num_sent_each = static_cast<int64_t>(40'000 / kScaleDown);
  constexpr int kProducers = 2;
  Channel<int> mailbox(8);
  ExecutorThreads waiter_thread("waiter", 1);
  std::atomic<int64_t> num_messages{0};
  std::atomic<int> num_completions{0};
  std::atomic<bool> finished{false};
  asio::co_spawn(waiter_thread.executor(), [&] {
    return race_completions_with_messages(mailbox, num_rounds, num_messages, num_completions, finished);
  }, asio::detached);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&] {
      for (int64_t i = 0; i < num_sent_each;) {
        if (mailbox.try_send(static_cast<int>(i)) == SendStatus::kAccepted) {
          ++i;
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (std::thread& t : producers) t.join();
  mailbox.close();
  ASSERT_TRUE(eventually([&] { return finished.load(); }, 120000ms));
  EXPECT_EQ(num_messages.load(), kProducers * num_sent_each);
  EXPECT_EQ(num_completions.load(), num_rounds);
  EXPECT_EQ(waiter_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(CompletionSlotTest, AForeignThreadCompletesAndTheWaiterResumesOnItsOwnThread) {
  const int num_rounds = static_cast<int>(20'000 / kScaleDown);
  ExecutorThreads waiter_thread("waiter", 1);
  std::atomic<int> num_ok{0};
  std::atomic<bool> finished{false};
  asio::co_spawn(
      waiter_thread.executor(), [&] { return await_rounds_completed_by_threads(num_rounds, num_ok, finished); },
      asio::detached);
  ASSERT_TRUE(eventually([&] { return finished.load(); }, 120000ms));
  EXPECT_EQ(num_ok.load(), num_rounds);
  EXPECT_EQ(waiter_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(CompletionSlotTest, OnlyTheFirstCompletionCountsAndCancelIsHarmless) {
  auto slot = CompletionSlot<int>::create();
  EXPECT_TRUE(slot->complete(1));
  EXPECT_FALSE(slot->complete(2));
  EXPECT_TRUE(slot->is_complete());

  ExecutorThreads waiter_thread("waiter", 1);
  auto never = CompletionSlot<int>::create();
  asio::cancellation_signal cancel;
  std::atomic<int> outcome{0};  // 1: cancelled
  asio::co_spawn(
      waiter_thread.executor(), [&] { return await_done_then_cancelled(slot, never, outcome); },
      asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  std::this_thread::sleep_for(20ms);  // let it reach the second (never completed) wait
  EXPECT_EQ(outcome.load(), 0);
  asio::post(waiter_thread.executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  ASSERT_TRUE(eventually([&] { return outcome.load() != 0; }));
  EXPECT_EQ(outcome.load(), 1);
  EXPECT_TRUE(never->complete(3)) << "completing after the waiter gave up is allowed";
  EXPECT_EQ(waiter_thread.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ExecutorThreadsTest, JoinIsForcedPastTheDeadlineWhenSomethingNeverEnds) {
  ExecutorThreads threads("stuck", 2);
  // Declared after `threads`, so destroyed first, while the (stopped) context still exists.
  Channel<int> never_closed(1);
  asio::co_spawn(threads.executor(), [&] { return receive_forever(never_closed); }, asio::detached);
  ASSERT_TRUE(eventually([&] { return never_closed.is_receiver_parked(); }));
  EXPECT_EQ(threads.join(in(100ms)), JoinOutcome::kForced);
  EXPECT_EQ(threads.join(in(100ms)), JoinOutcome::kForced) << "join is idempotent";
}

}  // namespace
}  // namespace troupe::actors::runtime::testing
