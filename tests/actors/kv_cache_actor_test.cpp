// The kv-cache actor (actors/kv_cache/kv_cache_actor.hpp): it lends the KV manager to one
// borrower at a time, serves the admin's flush between loans (a flush that arrives during a
// loan waits for the return), and publishes the KV statistics when the manager comes home.
#include "actors/kv_cache/kv_cache_actor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <numeric>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include "actors/runtime/executor_threads.hpp"

namespace troupe::kv_cache {
namespace {

namespace asio = boost::asio;
using actors::runtime::CompletionSlot;
using actors::runtime::ExecutorThreads;
using actors::runtime::SendStatus;
using namespace std::chrono_literals;

const KvCacheConfig kConfig{.num_blocks = 16, .block_size = 4, .enable_prefix_caching = true};

asio::awaitable<std::optional<KvLease>> await_lease(std::shared_ptr<CompletionSlot<KvLease>> slot) {
  auto waiting = slot->wait();  // named: g++ 12.2 co_await temporaries
  co_return co_await std::move(waiting);
}

class KvCacheActorTest : public ::testing::Test {
 protected:
  void SetUp() override { actor->start(thread.executor()); }
  void TearDown() override {
    actor->shutdown(std::chrono::steady_clock::now() + 5s);
    thread.join(std::chrono::steady_clock::now() + 5s);
  }

  // What the scheduler actor does at the start of a tick, from a test thread.
  KvLease borrow() {
    auto slot = CompletionSlot<KvLease>::create();
    EXPECT_EQ(actor->try_send(KvCacheMessage{LendKvCache{slot}}), SendStatus::kAccepted);
    std::optional<KvLease> answer =
        asio::co_spawn(thread.executor(), await_lease(slot), asio::use_future).get();
    return answer ? std::move(*answer) : nullptr;
  }
  void give_back(KvLease lease) {
    ASSERT_EQ(actor->try_send(KvCacheMessage{ReturnKvCache{std::move(lease)}}), SendStatus::kAccepted);
  }
  std::future<int64_t> flush() {
    auto reply = std::make_shared<std::promise<int64_t>>();
    std::future<int64_t> flushed = reply->get_future();
    EXPECT_EQ(actor->try_send(KvCacheMessage{FlushPrefixCache{reply}}), SendStatus::kAccepted);
    return flushed;
  }

  std::shared_ptr<engine::StatsBoard> board = std::make_shared<engine::StatsBoard>();
  ExecutorThreads thread{"engine", 1};
  std::shared_ptr<KvCacheActor> actor = std::make_shared<KvCacheActor>(kConfig, board, 64);
};

TEST_F(KvCacheActorTest, LendsTheManagerToOneBorrowerAtATime) {
  KvLease first = borrow();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->num_blocks(), kConfig.num_blocks);
  EXPECT_EQ(borrow(), nullptr);  // out on loan: a second borrower is refused, not served a copy
  KvCacheManager* const address = first.get();
  give_back(std::move(first));
  KvLease again = borrow();
  EXPECT_EQ(again.get(), address);  // the same manager, state and all
  give_back(std::move(again));
}

TEST_F(KvCacheActorTest, AFlushDuringALoanIsServedWhenTheManagerReturns) {
  KvLease lease = borrow();
  ASSERT_NE(lease, nullptr);
  // The borrower computes a 12-token prompt and finishes: 3 cached, unreferenced blocks.
  std::vector<int32_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 100);
  SequenceBlocks seq;
  ASSERT_TRUE(lease->allocate_slots(seq, 12));
  lease->cache_full_blocks(seq, tokens, 12);
  lease->free_sequence(seq);

  std::future<int64_t> flushed = flush();
  EXPECT_EQ(flushed.wait_for(50ms), std::future_status::timeout);  // waits for the lease
  give_back(std::move(lease));
  ASSERT_EQ(flushed.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(flushed.get(), 3);

  // Stats are published before a flush is answered, so a reader right after sees its effect.
  const auto snapshot = board->load_kv_cache();
  EXPECT_EQ(snapshot->num_loans, 1u);
  EXPECT_EQ(snapshot->stats.num_cached_unreferenced, 0);
  EXPECT_EQ(snapshot->stats.num_free, kConfig.num_blocks);
  EXPECT_EQ(flush().get(), 0);  // at home: answered at once
}

TEST_F(KvCacheActorTest, PublishesStatsWhenTheManagerComesHome) {
  EXPECT_EQ(board->load_kv_cache()->stats.num_blocks, kConfig.num_blocks);
  KvLease lease = borrow();
  SequenceBlocks seq;
  ASSERT_TRUE(lease->allocate_slots(seq, 8));  // held across the return, as a running sequence
  give_back(std::move(lease));
  ASSERT_EQ(flush().get(), 0);  // a round trip: the return has been handled
  const auto snapshot = board->load_kv_cache();
  EXPECT_EQ(snapshot->stats.num_referenced, 2);
  EXPECT_EQ(snapshot->num_loans, 1u);
}

TEST_F(KvCacheActorTest, AStoppedActorLendsNothing) {
  actor->shutdown(std::chrono::steady_clock::now() + 5s);
  auto slot = CompletionSlot<KvLease>::create();
  EXPECT_EQ(actor->try_send(KvCacheMessage{LendKvCache{slot}}), SendStatus::kClosed);
}

}  // namespace
}  // namespace troupe::kv_cache
