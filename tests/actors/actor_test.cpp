// Tests for actors/runtime/actor.hpp: an actor handles everything it accepted, stop() stops
// admission, shutdown drains within the deadline or cancels (abandoning, never silently losing,
// what is left), failures are reported, and a custom run() loop can await a completion from a
// foreign thread the way the scheduler awaits a step.
#include "actors/runtime/actor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "actors/runtime/completion_slot.hpp"
#include "actors/runtime/executor_threads.hpp"
#include "runtime_test_support.hpp"

// In the helpers' namespace (runtime_test_support.hpp: kScaleDown, in(), eventually()).
namespace troupe::actors::runtime::testing {
namespace {

namespace asio = boost::asio;

struct Work {
  int64_t value = 0;
  std::chrono::milliseconds delay{0};  // how long handling it takes (a timer, not a blocked thread)
  bool fail = false;                   // throw from handle(): a bug, reported as kFailed
};

// Counts what it handled and what it abandoned; everything it accepted ends in one of the two.
class CountingActor final : public Actor<Work> {
 public:
  CountingActor(std::size_t capacity) : Actor("counting", capacity) {}

  std::atomic<int64_t> num_handled{0};
  std::atomic<int64_t> sum_handled{0};
  std::atomic<int64_t> num_abandoned{0};
  std::atomic<bool> handled_on_one_thread{true};

 protected:
  asio::awaitable<void> handle(Work work) override {
    check_thread();
    if (work.fail) throw std::runtime_error("handle failed on purpose");
    if (work.delay.count() > 0) {
      // Named local: no co_await inside a larger expression (g++ 12.2 miscompile, TOOLCHAIN.md).
      asio::any_io_executor executor = co_await asio::this_coro::executor;
      asio::steady_timer timer(executor, work.delay);
      auto wait = timer.async_wait(asio::as_tuple(asio::use_awaitable));
      co_await std::move(wait);
      if (cancel_requested()) {
        num_abandoned.fetch_add(1);
        co_return;
      }
    }
    num_handled.fetch_add(1, std::memory_order_relaxed);
    sum_handled.fetch_add(work.value, std::memory_order_relaxed);
  }

  void abandon(Work work) override {
    (void)work;
    check_thread();
    num_abandoned.fetch_add(1);
  }

 private:
  void check_thread() {
    const std::thread::id current = std::this_thread::get_id();
    std::thread::id expected{};
    if (!first_thread_.compare_exchange_strong(expected, current) && expected != current) {
      handled_on_one_thread = false;
    }
  }
  std::atomic<std::thread::id> first_thread_{};
};

TEST(ActorTest, HandlesEverythingAcceptedFromManyThreadsThenDrainsOnShutdown) {
  ExecutorThreads engine("engine", 1);
  auto actor = std::make_shared<CountingActor>(128);
  actor->start(engine.executor());

  constexpr int kNumSenders = 4;
  const int64_t num_per_sender = 400'000 / kScaleDown / kNumSenders;
  std::vector<std::thread> senders;
  for (int sender = 0; sender < kNumSenders; ++sender) {
    senders.emplace_back([&] {
      for (int64_t i = 1; i <= num_per_sender; ++i) {
        Work work{i};
        while (actor->try_send(std::move(work)) == SendStatus::kFull) std::this_thread::yield();
      }
    });
  }
  for (std::thread& sender : senders) sender.join();

  EXPECT_EQ(actor->shutdown(in(20000ms)), ShutdownOutcome::kDrained);
  EXPECT_EQ(actor->num_handled.load(), kNumSenders * num_per_sender);
  EXPECT_EQ(actor->sum_handled.load(), kNumSenders * (num_per_sender * (num_per_sender + 1) / 2));
  EXPECT_EQ(actor->num_abandoned.load(), 0);
  EXPECT_TRUE(actor->handled_on_one_thread.load());
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ActorTest, StopStopsAdmissionButAcceptedMessagesAreStillHandled) {
  ExecutorThreads engine("engine", 1);
  auto actor = std::make_shared<CountingActor>(16);
  for (int64_t i = 0; i < 10; ++i) ASSERT_EQ(actor->try_send(Work{i, 1ms}), SendStatus::kAccepted);
  actor->start(engine.executor());
  actor->stop();
  EXPECT_EQ(actor->try_send(Work{99}), SendStatus::kClosed);
  EXPECT_EQ(actor->shutdown(in(10000ms)), ShutdownOutcome::kDrained);
  EXPECT_EQ(actor->num_handled.load(), 10);
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ActorTest, ShutdownCancelsAtTheDeadlineAndAbandonsTheRestNeverSilently) {
  ExecutorThreads engine("engine", 2);  // several threads: the actor's strand keeps it serial
  // (On two threads a strand may hop between them, so only the one-thread tests check that.)
  auto actor = std::make_shared<CountingActor>(64);
  actor->start(engine.executor());
  int64_t num_accepted = 0;
  for (int64_t i = 0; i < 50; ++i) {
    if (actor->try_send(Work{i, 200ms}) == SendStatus::kAccepted) ++num_accepted;
  }
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(actor->shutdown(in(300ms), 5000ms), ShutdownOutcome::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5000ms);
  EXPECT_GE(actor->num_abandoned.load(), 1);
  EXPECT_EQ(actor->num_handled.load() + actor->num_abandoned.load(), num_accepted);
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

TEST(ActorTest, AnExceptionFromHandleIsReportedAsFailedAndClosesTheMailbox) {
  ExecutorThreads engine("engine", 1);
  auto actor = std::make_shared<CountingActor>(16);
  actor->start(engine.executor());
  ASSERT_EQ(actor->try_send(Work{1}), SendStatus::kAccepted);
  Work bad{2, 0ms, true};
  ASSERT_EQ(actor->try_send(std::move(bad)), SendStatus::kAccepted);
  ASSERT_TRUE(eventually([&] { return actor->lifecycle().is_finished(); }));
  EXPECT_EQ(actor->try_send(Work{3}), SendStatus::kClosed);
  EXPECT_EQ(actor->shutdown(in(1000ms)), ShutdownOutcome::kFailed);
  EXPECT_NE(actor->lifecycle().failure().find("on purpose"), std::string::npos);
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

// Blocks its executor thread (a bug an actor must not have), so cancellation cannot reach it.
class BlockingActor final : public Actor<int> {
 public:
  BlockingActor() : Actor("blocking", 4) {}
  std::atomic<bool> release{false};
  std::atomic<bool> blocking{false};

 protected:
  asio::awaitable<void> handle(int) override {
    blocking = true;
    while (!release.load()) std::this_thread::sleep_for(1ms);
    co_return;
  }
};

TEST(ActorTest, AnActorThatIgnoresCancellationIsReportedStuck) {
  ExecutorThreads engine("engine", 1);
  auto actor = std::make_shared<BlockingActor>();
  actor->start(engine.executor());
  ASSERT_EQ(actor->try_send(1), SendStatus::kAccepted);
  ASSERT_TRUE(eventually([&] { return actor->blocking.load(); }));
  EXPECT_EQ(actor->shutdown(in(50ms), 50ms), ShutdownOutcome::kStuck);
  actor->release = true;
  EXPECT_EQ(actor->shutdown(in(5000ms)), ShutdownOutcome::kCancelled) << "it returns once unblocked";
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

// The scheduler's shape: its own run() loop drains the inbox without blocking, launches a step
// on a foreign "backend" thread and awaits the step's CompletionSlot, resuming on its executor.
struct StepRequest {
  int64_t num_tokens = 0;
};

class StepLoopActor final : public Actor<StepRequest> {
 public:
  StepLoopActor() : Actor("step-loop", 64) {}
  std::atomic<int64_t> num_steps{0};
  std::atomic<int64_t> num_tokens_done{0};
  std::atomic<bool> always_resumed_on_own_thread{true};

 protected:
  asio::awaitable<void> handle(StepRequest) override { co_return; }  // unused: run() is custom

  asio::awaitable<void> run() override {
    const std::thread::id own_thread = std::this_thread::get_id();
    for (;;) {
      int64_t num_tokens = 0;
      while (std::optional<StepRequest> request = mailbox().try_receive()) num_tokens += request->num_tokens;
      if (num_tokens == 0) {
        std::optional<StepRequest> request = co_await mailbox().receive();  // idle: sleep
        if (!request) co_return;  // end-of-stream
        num_tokens = request->num_tokens;
      }
      auto step_done = CompletionSlot<int64_t>::create();
      std::thread backend([completer = step_done->completer(), num_tokens] { completer(num_tokens); });
      backend.detach();
      std::optional<int64_t> outcome = co_await step_done->wait();
      if (!outcome) co_return;  // cancelled
      if (std::this_thread::get_id() != own_thread) always_resumed_on_own_thread = false;
      num_steps.fetch_add(1);
      num_tokens_done.fetch_add(*outcome);
    }
  }
};

TEST(ActorTest, ACustomStepLoopAwaitsForeignCompletionsOnItsOwnExecutor) {
  ExecutorThreads engine("engine", 1);
  auto actor = std::make_shared<StepLoopActor>();
  actor->start(engine.executor());
  const int64_t num_requests = 2000 / kScaleDown;
  for (int64_t i = 0; i < num_requests; ++i) {
    StepRequest request{1};
    while (actor->try_send(std::move(request)) == SendStatus::kFull) std::this_thread::yield();
  }
  EXPECT_EQ(actor->shutdown(in(20000ms)), ShutdownOutcome::kDrained);
  EXPECT_EQ(actor->num_tokens_done.load(), num_requests);
  EXPECT_LE(actor->num_steps.load(), num_requests) << "requests arriving during a step share the next one";
  EXPECT_TRUE(actor->always_resumed_on_own_thread.load());
  EXPECT_EQ(engine.join(in(5000ms)), JoinOutcome::kFinished);
}

}  // namespace
}  // namespace troupe::actors::runtime::testing
