// KV events (issue 20): what the KV manager collects as blocks enter and leave the prefix cache,
// and what the kv-cache actor hands its sink once per tick. The hashes are checked against the
// router's chain (KvBlockHasher, itself checked against vLLM in kv_block_hash_test).
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <numeric>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include "actors/kv_cache/kv_cache_actor.hpp"
#include "actors/kv_cache/kv_cache_manager.hpp"
#include "actors/runtime/executor_threads.hpp"

namespace troupe::kv_cache {
namespace {

using namespace std::chrono_literals;

std::vector<int32_t> tokens(int32_t count, int32_t first) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

KvCacheConfig events_config(int32_t num_blocks) {
  KvCacheConfig config{.num_blocks = num_blocks, .block_size = 4, .enable_prefix_caching = true};
  config.emit_events = true;
  config.event_hash_seed = "troupe";
  return config;
}

// The router's keys for the full blocks of `prompt`.
std::vector<uint64_t> router_keys(const std::vector<int32_t>& prompt, int32_t block_size) {
  const KvBlockHasher hasher("troupe");
  std::vector<uint64_t> keys;
  BlockDigest parent = hasher.root();
  for (size_t i = 0; i + static_cast<size_t>(block_size) <= prompt.size(); i += static_cast<size_t>(block_size)) {
    parent = hasher.block(parent, std::span(prompt).subspan(i, static_cast<size_t>(block_size)));
    keys.push_back(KvBlockHasher::engine_key(parent));
  }
  return keys;
}

TEST(KvEvents, FullBlocksAreStoredOnceAsOneRunWithTheRoutersHashes) {
  KvCacheManager kv(events_config(16));
  const auto prompt = tokens(10, 100);  // 2 full blocks and 2 tokens
  const auto keys = router_keys(prompt, 4);
  SequenceBlocks a;
  ASSERT_TRUE(kv.allocate_slots(a, 10));
  kv.cache_full_blocks(a, prompt, 6);  // one block full so far
  kv.cache_full_blocks(a, prompt, 10);  // the second one
  kv.cache_full_blocks(a, prompt, 10);  // nothing new
  const auto events = kv.take_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(std::get<BlockStored>(events[0]),
            (BlockStored{{keys[0]}, std::nullopt, tokens(4, 100), 4}));
  EXPECT_EQ(std::get<BlockStored>(events[1]), (BlockStored{{keys[1]}, keys[0], tokens(4, 104), 4}));
  EXPECT_TRUE(kv.take_events().empty());  // taken

  // A second sequence sharing the first block: a hit, then only its own block is stored, with
  // the shared block as parent.
  auto other = tokens(4, 100);
  const auto tail = tokens(5, 900);
  other.insert(other.end(), tail.begin(), tail.end());
  SequenceBlocks b;
  const PrefixMatch hit = kv.find_cached_prefix(other);
  ASSERT_EQ(hit.blocks.size(), 1u);
  ASSERT_TRUE(kv.allocate_slots(b, hit, 9));
  kv.cache_full_blocks(b, other, 9);
  const auto more = kv.take_events();
  ASSERT_EQ(more.size(), 1u);
  const auto other_keys = router_keys(other, 4);
  EXPECT_EQ(other_keys[0], keys[0]);
  EXPECT_EQ(std::get<BlockStored>(more[0]), (BlockStored{{other_keys[1]}, keys[0], tokens(4, 900), 4}));
  EXPECT_EQ(kv.event_key_of(b.blocks[1]), other_keys[1]);
}

TEST(KvEvents, ConsecutiveBlocksOfOneStepAreOneEvent) {
  KvCacheManager kv(events_config(16));
  const auto prompt = tokens(12, 7);
  SequenceBlocks a;
  ASSERT_TRUE(kv.allocate_slots(a, 12));
  kv.cache_full_blocks(a, prompt, 12);
  const auto events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(events[0]), (BlockStored{router_keys(prompt, 4), std::nullopt, prompt, 4}));
}

TEST(KvEvents, ABlockComputedTwiceConcurrentlyIsStoredOnce) {
  KvCacheManager kv(events_config(16));
  const auto prompt = tokens(8, 50);
  SequenceBlocks a;
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(a, 8));
  ASSERT_TRUE(kv.allocate_slots(b, 8));  // no hit yet: both compute the same blocks
  kv.cache_full_blocks(a, prompt, 8);
  kv.cache_full_blocks(b, prompt, 8);  // already cached: b shares a's blocks, nothing stored
  const auto events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(events[0]).block_hashes, router_keys(prompt, 4));
}

TEST(KvEvents, EvictedBlocksAreRemoved) {
  KvCacheManager kv(events_config(4));
  const auto first = tokens(8, 1);
  SequenceBlocks a;
  ASSERT_TRUE(kv.allocate_slots(a, 8));
  kv.cache_full_blocks(a, first, 8);
  kv.free_sequence(a);  // 2 cached, unreferenced blocks; 2 free
  (void)kv.take_events();
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(b, 12));  // 2 free, then the tail block of `first` is evicted
  auto events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<BlockRemoved>(events[0]).block_hashes, std::vector<uint64_t>{router_keys(first, 4)[1]});
  EXPECT_EQ(kv.check_invariants(), std::nullopt);
}

TEST(KvEvents, AFlushThatEmptiesTheCacheClearsAll) {
  KvCacheManager kv(events_config(16));
  const auto prompt = tokens(8, 1);
  SequenceBlocks a;
  ASSERT_TRUE(kv.allocate_slots(a, 8));
  kv.cache_full_blocks(a, prompt, 8);
  kv.free_sequence(a);
  (void)kv.take_events();
  EXPECT_EQ(kv.flush_unreferenced_cache(), 2);
  auto events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(events[0]));
  EXPECT_EQ(kv.flush_unreferenced_cache(), 0);  // empty already: vLLM says so again
  events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(events[0]));
}

TEST(KvEvents, AFlushThatLeavesHeldBlocksRemovesOnlyTheFlushedOnes) {
  KvCacheManager kv(events_config(16));
  const auto gone = tokens(4, 1);
  const auto held = tokens(4, 500);
  SequenceBlocks a;
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(a, 4));
  ASSERT_TRUE(kv.allocate_slots(b, 4));
  kv.cache_full_blocks(a, gone, 4);
  kv.cache_full_blocks(b, held, 4);
  kv.free_sequence(a);
  (void)kv.take_events();
  EXPECT_EQ(kv.flush_unreferenced_cache(), 1);
  const auto events = kv.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<BlockRemoved>(events[0]).block_hashes, router_keys(gone, 4));
  kv.free_sequence(b);
}

TEST(KvEvents, OffMeansNoEvents) {
  KvCacheManager kv(KvCacheConfig{.num_blocks = 4, .block_size = 4, .enable_prefix_caching = true});
  EXPECT_FALSE(kv.emits_events());
  SequenceBlocks a;
  ASSERT_TRUE(kv.allocate_slots(a, 8));
  kv.cache_full_blocks(a, tokens(8, 1), 8);
  kv.free_sequence(a);
  SequenceBlocks b;
  ASSERT_TRUE(kv.allocate_slots(b, 16));
  EXPECT_EQ(kv.flush_unreferenced_cache(), 0);
  EXPECT_TRUE(kv.take_events().empty());
}

// A sink that keeps what it is given (a test fake).
class FakeSink final : public KvEventSink {
 public:
  bool publish(KvEventBatch batch) override {
    std::lock_guard lock(mutex_);
    batches_.push_back(std::move(batch));
    return true;
  }
  KvEventStats stats() const override { return KvEventStats{.published_batches = 7}; }
  std::vector<KvEventBatch> batches() const {
    std::lock_guard lock(mutex_);
    return batches_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<KvEventBatch> batches_;
};

namespace asio = boost::asio;
using actors::runtime::CompletionSlot;
using actors::runtime::ExecutorThreads;
using actors::runtime::SendStatus;

asio::awaitable<std::optional<KvLease>> await_lease(std::shared_ptr<CompletionSlot<KvLease>> slot) {
  auto waiting = slot->wait();  // named: g++ 12.2 co_await temporaries
  co_return co_await std::move(waiting);
}

TEST(KvEventsActor, ForwardsEachTicksEventsAndTheFlushsAsBatches) {
  auto board = std::make_shared<engine::StatsBoard>();
  ExecutorThreads thread{"engine", 1};
  auto actor = std::make_shared<KvCacheActor>(events_config(16), board, 64);
  auto sink = std::make_shared<FakeSink>();
  actor->set_event_sink(sink);
  actor->start(thread.executor());

  // One tick: the scheduler borrows the manager, a 9-token prompt fills 2 blocks and ends.
  auto slot = CompletionSlot<KvLease>::create();
  ASSERT_EQ(actor->try_send(KvCacheMessage{LendKvCache{slot}}), SendStatus::kAccepted);
  std::optional<KvLease> lease = asio::co_spawn(thread.executor(), await_lease(slot), asio::use_future).get();
  ASSERT_TRUE(lease && *lease);
  const auto prompt = tokens(9, 40);
  SequenceBlocks seq;
  ASSERT_TRUE((*lease)->allocate_slots(seq, 9));
  (*lease)->cache_full_blocks(seq, prompt, 9);
  (*lease)->free_sequence(seq);
  ASSERT_EQ(actor->try_send(KvCacheMessage{ReturnKvCache{std::move(*lease)}}), SendStatus::kAccepted);
  // A flush queued behind the return: answered after the tick's batch went out.
  auto reply = std::make_shared<std::promise<int64_t>>();
  std::future<int64_t> flushed = reply->get_future();
  ASSERT_EQ(actor->try_send(KvCacheMessage{FlushPrefixCache{reply}}), SendStatus::kAccepted);
  EXPECT_EQ(flushed.get(), 2);

  const auto batches = sink->batches();
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[0].events.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(batches[0].events[0]).block_hashes, router_keys(prompt, 4));
  EXPECT_GT(batches[0].timestamp, 1.7e9);  // wall-clock seconds, as vLLM's time.time()
  ASSERT_EQ(batches[1].events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(batches[1].events[0]));
  EXPECT_EQ(board->load_kv_cache()->events.published_batches, 7u);  // the sink's own count

  actor->shutdown(std::chrono::steady_clock::now() + 5s);
  thread.join(std::chrono::steady_clock::now() + 5s);
}

}  // namespace
}  // namespace troupe::kv_cache
