// Channel benchmark: messages/s from 1 and several producer threads into one receiver coroutine,
// and the cross-thread round trip (actor A -> actor B -> actor A, each on its own thread) as
// p50/p99 latency. Prints numbers; asserts nothing about speed (docs/design.md §5).
//
//   channel_bench [messages_per_run=2000000] [round_trips=200000]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "actors/runtime/channel.hpp"
#include "actors/runtime/executor_threads.hpp"

namespace {

namespace asio = boost::asio;
using troupe::actors::runtime::Channel;
using troupe::actors::runtime::ExecutorThreads;
using troupe::actors::runtime::SendStatus;
using Clock = std::chrono::steady_clock;

struct Message {
  int64_t producer_id = 0;
  int64_t sequence = 0;
};

asio::awaitable<void> count_until_end(Channel<Message>& channel, std::atomic<int64_t>& num_received,
                                      std::atomic<bool>& finished) {
  int64_t count = 0;
  for (;;) {  // not `while (co_await ...)`: g++ 12.2 miscompiles it
    std::optional<Message> message = co_await channel.receive();
    if (!message) break;
    ++count;
  }
  num_received = count;
  finished = true;
}

void measure_throughput(int num_producers, int64_t num_messages, std::size_t capacity) {
  Channel<Message> channel(capacity);
  ExecutorThreads receiver_thread("rx", 1);
  std::atomic<int64_t> num_received{0};
  std::atomic<bool> finished{false};
  asio::co_spawn(
      receiver_thread.executor(), [&] { return count_until_end(channel, num_received, finished); },
      asio::detached);

  const int64_t num_per_producer = num_messages / num_producers;
  std::atomic<int64_t> num_full{0};
  const auto started = Clock::now();
  std::vector<std::thread> producers;
  for (int producer_id = 0; producer_id < num_producers; ++producer_id) {
    producers.emplace_back([&, producer_id] {
      int64_t full = 0;
      for (int64_t sequence = 0; sequence < num_per_producer; ++sequence) {
        Message message{producer_id, sequence};
        while (channel.try_send(std::move(message)) == SendStatus::kFull) {
          ++full;
          std::this_thread::yield();
        }
      }
      num_full += full;
    });
  }
  for (std::thread& producer : producers) producer.join();
  channel.close();
  while (!finished.load()) std::this_thread::yield();
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  receiver_thread.join(Clock::now() + std::chrono::seconds(5));
  std::printf("throughput  producers=%d capacity=%zu messages=%lld  %.2f M msg/s  (%.1f ns/msg, %lld full retries)\n",
              num_producers, capacity, static_cast<long long>(num_received.load()),
              static_cast<double>(num_received.load()) / seconds / 1e6,
              seconds * 1e9 / static_cast<double>(num_received.load()), static_cast<long long>(num_full.load()));
}

asio::awaitable<void> echo(Channel<Clock::time_point>& inbox, Channel<Clock::time_point>& outbox) {
  for (;;) {
    std::optional<Clock::time_point> stamp = co_await inbox.receive();
    if (!stamp) break;
    Clock::time_point reply = *stamp;
    outbox.try_send(std::move(reply));
  }
  outbox.close();
}

asio::awaitable<void> ping(Channel<Clock::time_point>& outbox, Channel<Clock::time_point>& inbox,
                           int64_t num_round_trips, std::vector<double>& latencies_ns, std::atomic<bool>& finished) {
  latencies_ns.reserve(static_cast<std::size_t>(num_round_trips));
  for (int64_t trip = 0; trip < num_round_trips; ++trip) {
    Clock::time_point sent = Clock::now();
    outbox.try_send(std::move(sent));
    std::optional<Clock::time_point> reply = co_await inbox.receive();
    if (!reply) break;
    latencies_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - *reply).count());
  }
  outbox.close();
  finished = true;
}

void measure_round_trip(int64_t num_round_trips) {
  Channel<Clock::time_point> to_right(16);
  Channel<Clock::time_point> to_left(16);
  ExecutorThreads left("left", 1);
  ExecutorThreads right("right", 1);
  std::vector<double> latencies_ns;
  std::atomic<bool> finished{false};
  asio::co_spawn(right.executor(), [&] { return echo(to_right, to_left); }, asio::detached);
  asio::co_spawn(
      left.executor(), [&] { return ping(to_right, to_left, num_round_trips, latencies_ns, finished); },
      asio::detached);
  while (!finished.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  left.join(Clock::now() + std::chrono::seconds(5));
  right.join(Clock::now() + std::chrono::seconds(5));
  std::sort(latencies_ns.begin(), latencies_ns.end());
  const auto at = [&](double quantile) {
    return latencies_ns[static_cast<std::size_t>(quantile * static_cast<double>(latencies_ns.size() - 1))];
  };
  std::printf("round trip  (two actors on two threads, receiver parked each time) n=%zu  p50=%.1f us  p99=%.1f us  max=%.1f us\n",
              latencies_ns.size(), at(0.50) / 1e3, at(0.99) / 1e3, latencies_ns.back() / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t num_messages = argc > 1 ? std::atoll(argv[1]) : 2'000'000;
  const int64_t num_round_trips = argc > 2 ? std::atoll(argv[2]) : 200'000;
  std::printf("hardware threads: %u\n", std::thread::hardware_concurrency());
  for (int num_producers : {1, 2, 4}) measure_throughput(num_producers, num_messages, 1024);
  measure_throughput(4, num_messages, 16);
  measure_round_trip(num_round_trips);
  return 0;
}
