// The batch actor (issue 40): runs OpenAI-style batches from the durable store in the engine's
// idle capacity, and survives kill -9.
//
//   HTTP (net/batches_routes.cpp)          batch actor (own thread)              engine
//   POST /v1/batches  -> store.create  ->  wake()  validate the input file
//   POST .../cancel   -> store.request_cancel  ->  wake()  cancel in-flight items
//                                          feed: BatchPlanner, <= max_in_flight ---> ItemRunner::start
//                                          ItemFinished <------------------------- done (any thread)
//                                          journal.append + fsync, store.commit (group commit)
//                                          finish: journals -> files, status
//
// The database is the truth: the actor rebuilds its in-memory state from it at every wake (new
// batches, cancel requests) and at start-up (resume after a crash), so HTTP handlers never wait
// for the actor and a lost wake only delays work to the next tick. Completions are grouped: every
// message already in the mailbox is handled before the journals are appended and one
// transaction commits them (one fsync per journal per group, not per item).
//
// It blocks on fsync and SQLite, so it must run on an executor of its own (one thread), never on
// the engine's or an io thread.
//
// Thread-safety: start() from the wiring thread; wake(), stop_feeding(), stats() and shutdown()
// from any thread (shutdown() not on the actor's own); the rest on the actor's executor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/batch/batch_journal.hpp"
#include "actors/batch/batch_planner.hpp"
#include "actors/batch/batch_stats.hpp"
#include "actors/batch/batch_store.hpp"
#include "actors/batch/item_runner.hpp"
#include "actors/runtime/actor.hpp"

namespace troupe::batch {

struct BatchActorConfig {
  int32_t max_in_flight = 64;     // batches.max_in_flight: items in the engine at once
  // batches.max_in_flight_busy: the bound while the engine also runs or queues other requests.
  // Every running decode is in every step, so a batch's share of a step is what it adds to
  // interactive users' latency (bench/RESULTS.md, "Batch isolation").
  int32_t max_in_flight_busy = 16;  // also the most prompts started at once
  int64_t max_items = 50'000;     // batches.max_items: a larger input file fails its batch
  std::chrono::milliseconds tick{1000};  // rescans the store (expiry, lost wakes, parked items)
};

// A wake: something changed in the store (a batch created or cancelled) or the tick.
struct BatchWake {};
// An item ended (from the ItemRunner's `done`, on any thread).
struct ItemFinished {
  std::string batch_id;
  int64_t index = 0;
  ItemResult result;
};
using BatchMessage = std::variant<BatchWake, ItemFinished>;

class BatchActor final : public actors::runtime::Actor<BatchMessage> {
 public:
  // `now`: Unix seconds (the system clock when serving; tests pass one they advance).
  // `engine_requests`: requests the engine
  // runs or queues now, batch items included (empty: never busy).
  BatchActor(std::shared_ptr<BatchStore> store, std::shared_ptr<FileStore> files,
             std::shared_ptr<ItemRunner> runner, BatchActorConfig config,
             std::function<int64_t()> now, std::function<int64_t()> engine_requests = {});

  // Any thread. Coalesced: at most one wake waits in the mailbox.
  void wake();
  // Any thread. No new item goes to the engine from now on (the server is draining); items in
  // flight still finish and are committed.
  void stop_feeding() { feeding_.store(false, std::memory_order_release); }
  BatchStats stats() const;

 protected:
  boost::asio::awaitable<void> run() override;
  boost::asio::awaitable<void> handle(BatchMessage message) override;
  // A completion that arrives after shutdown is not committed: its item is still pending in the
  // database and runs again after the restart.
  void abandon(BatchMessage) override {}

 private:
  enum class Ending : uint8_t { kNone, kCancel, kExpire, kFail };
  struct Live {
    BatchRecord record;
    std::string content;  // the input file
    std::vector<std::string_view> lines;  // its requests, into `content`
    std::optional<BatchJournal> journal;
    std::string output_lines, error_lines;  // appended, not yet in the journals
    std::vector<ItemOutcome> outcomes;      // ... and their items
    std::map<int64_t, uint64_t> handles;    // in-flight item -> ItemRunner handle
    Ending ending = Ending::kNone;
    std::string failure;  // kFail: why
  };

  void on_message(BatchMessage& message);
  void on_item(ItemFinished& finished);
  void refresh();
  void adopt(BatchRecord record);
  bool read_input(Live& live, std::vector<int64_t>* line_numbers);
  bool open_journal(Live& live);
  bool load(Live& live);
  void validate(Live& live);
  void end(Live& live, Ending ending, std::string why = {});
  void feed();
  void flush();
  void finish_idle();
  void settle();
  bool finish(Live& live);
  void fail_now(Live& live, const std::vector<BatchError>& errors);
  void publish_stats();
  boost::asio::awaitable<void> tick_loop();

  std::shared_ptr<BatchStore> store_;
  std::shared_ptr<FileStore> files_;
  std::shared_ptr<ItemRunner> runner_;
  BatchActorConfig config_;
  std::function<int64_t()> now_;
  std::function<int64_t()> engine_requests_;
  BatchPlanner planner_;
  std::map<std::string, Live, std::less<>> live_;

  bool standby_logged_ = false;  // another server holds the runner lock (BatchStore)
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> feeding_{true};
  std::atomic<int64_t> items_succeeded_{0}, items_failed_{0}, items_in_flight_{0}, items_queued_{0},
      live_batches_{0};
};

}  // namespace troupe::batch
