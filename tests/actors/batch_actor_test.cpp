// The batch actor (actors/batch/batch_actor.hpp) on a real store, with a fake ItemRunner
// (FakeItemRunner below: the test decides when and how each item ends). Every item is answered
// exactly once — also across a crash between a journal append and its commit —, no more than
// max_in_flight are in the engine at once, cancel keeps what was answered, the completion window
// leaves batch_expired lines, and a bad file fails with its line numbers.
#include "actors/batch/batch_actor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/runtime/executor_threads.hpp"
#include "tests/net/temp_dir.hpp"

namespace troupe::batch {
namespace {

using net::testing::TempDir;

// A fake engine and codec: a line "id" (or "bad" for a line the file check refuses) runs until
// the test ends it.
class FakeItemRunner final : public ItemRunner {
 public:
  std::variant<std::string, LineProblem> check_line(std::string_view line, std::string_view) override {
    if (line == "bad") return LineProblem{"invalid_json", "not a request", ""};
    return std::string(line);
  }
  uint64_t start(const BatchRecord&, int64_t index, std::string_view line,
                 std::function<void(ItemResult)> done) override {
    std::lock_guard lock(mutex_);
    running_[index] = Running{std::string(line), std::move(done)};
    ++starts_;
    max_running_ = std::max(max_running_, running_.size());
    changed_.notify_all();
    return static_cast<uint64_t>(index);
  }
  void cancel(uint64_t handle) override {
    end(static_cast<int64_t>(handle), ItemEnd::kCancelled);
  }
  std::string expired_line(std::string_view custom_id) override { return "expired:" + std::string(custom_id); }
  std::string errors_json(const std::vector<BatchError>& errors) override {
    std::string out = "[";
    for (const BatchError& e : errors) out += e.code + "@" + std::to_string(e.line.value_or(0)) + ";";
    return out + "]";
  }

  // Ends a running item (from the test's thread, as the engine's would); false if not running.
  bool end(int64_t index, ItemEnd how) {
    std::function<void(ItemResult)> done;
    std::string line;
    {
      std::lock_guard lock(mutex_);
      auto it = running_.find(index);
      if (it == running_.end()) return false;
      done = std::move(it->second.done);
      line = it->second.line;
      running_.erase(it);
    }
    const char* prefix = how == ItemEnd::kSucceeded ? "ok:" : "err:";
    done(ItemResult{how, prefix + line});
    return true;
  }
  // Waits until `n` items run (or 10 s); their indices.
  std::vector<int64_t> wait_running(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(10), [&] { return running_.size() >= n; });
    std::vector<int64_t> indices;
    for (const auto& [index, running] : running_) indices.push_back(index);
    return indices;
  }
  size_t max_running() {
    std::lock_guard lock(mutex_);
    return max_running_;
  }
  int starts() {
    std::lock_guard lock(mutex_);
    return starts_;
  }

 private:
  struct Running {
    std::string line;
    std::function<void(ItemResult)> done;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Running> running_;
  size_t max_running_ = 0;
  int starts_ = 0;
};

struct Fixture {
  explicit Fixture(const std::filesystem::path& dir, int32_t max_in_flight = 2)
      : files(FileStore::open(dir)), batches(BatchStore::open(files)), runner(std::make_shared<FakeItemRunner>()) {
    config.max_in_flight = max_in_flight;
    config.tick = std::chrono::milliseconds(20);
  }
  ~Fixture() {
    if (actor) actor->shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    thread.join(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }

  std::string submit(std::string_view content, int64_t window = 86400) {
    const StoredFile input = std::get<StoredFile>(files->create("alice", "batch", "in.jsonl", content, now.load()));
    BatchRecord r;
    r.owner = "alice";
    r.endpoint = "/v1/chat/completions";
    r.input_file_id = input.id;
    r.completion_window = "24h";
    r.created_at = now.load();
    r.expires_at = now.load() + window;
    return std::get<BatchRecord>(batches->create(r)).id;
  }
  void start() {
    actor = std::make_shared<BatchActor>(batches, files, runner, config, [this] { return now.load(); },
                                         [this] { return engine_requests.load(); });
    actor->start(thread.executor());
  }
  // Waits for the batch to reach `status` (the actor's event, seen in the store).
  BatchRecord wait_status(const std::string& id, BatchStatus status) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::optional<BatchRecord> b;
    while (std::chrono::steady_clock::now() < deadline) {
      b = batches->find(id);
      if (b && b->status == status) return *b;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ADD_FAILURE() << id << " never became " << to_string(status) << " (is " << (b ? to_string(b->status) : "?") << ")";
    return b.value_or(BatchRecord{});
  }
  std::string content(const std::optional<std::string>& file_id) {
    if (!file_id) return "";
    auto bytes = files->read("alice", *file_id);
    return bytes && std::holds_alternative<std::string>(*bytes) ? std::get<std::string>(*bytes) : "<unreadable>";
  }

  std::shared_ptr<FileStore> files;
  std::shared_ptr<BatchStore> batches;
  std::shared_ptr<FakeItemRunner> runner;
  BatchActorConfig config;
  std::atomic<int64_t> now{1000};
  std::atomic<int64_t> engine_requests{0};  // what the engine runs or queues, the batch's included
  actors::runtime::ExecutorThreads thread{"batch-test", 1};
  std::shared_ptr<BatchActor> actor;
};

TEST(BatchActor, AnswersEveryItemOnceWithinTheInFlightBound) {
  TempDir dir("batch-actor");
  Fixture f(dir.path(), /*max_in_flight=*/2);
  const std::string id = f.submit("a\nb\n\nc\r\nd\ne\n");
  f.start();
  for (int answered = 0; answered < 5;) {
    for (const int64_t index : f.runner->wait_running(1)) {
      ASSERT_TRUE(f.runner->end(index, index == 3 ? ItemEnd::kFailed : ItemEnd::kSucceeded));
      ++answered;
    }
  }
  const BatchRecord done = f.wait_status(id, BatchStatus::kCompleted);
  EXPECT_EQ(done.total, 5);
  EXPECT_EQ(done.completed, 4);
  EXPECT_EQ(done.failed, 1);
  EXPECT_LE(f.runner->max_running(), 2u);
  EXPECT_EQ(f.runner->starts(), 5);
  std::string output = f.content(done.output_file_id);
  EXPECT_EQ(output.size(), std::string("ok:a\nok:b\nok:c\nok:e\n").size()) << output;
  for (const char* line : {"ok:a\n", "ok:b\n", "ok:c\n", "ok:e\n"}) EXPECT_NE(output.find(line), std::string::npos) << line;
  EXPECT_EQ(f.content(done.error_file_id), "err:d\n");
  EXPECT_EQ(f.actor->stats().items_succeeded, 4);
  EXPECT_EQ(f.actor->stats().items_failed, 1);
}

TEST(BatchActor, FeedsFewerItemsWhileTheEngineHasOtherWork) {
  TempDir dir("batch-actor");
  Fixture f(dir.path(), /*max_in_flight=*/3);
  f.config.max_in_flight_busy = 1;
  f.engine_requests = 100;  // interactive users: busy
  const std::string id = f.submit("a\nb\nc\nd\ne\nf\n");
  f.start();
  std::vector<int64_t> running = f.runner->wait_running(1);
  ASSERT_EQ(running.size(), 1u);
  f.runner->end(running[0], ItemEnd::kSucceeded);
  running = f.runner->wait_running(1);
  EXPECT_EQ(running.size(), 1u) << "busy: one at a time";
  EXPECT_EQ(f.runner->max_running(), 1u);
  f.engine_requests = 0;  // the users left: the next feed fills the idle capacity
  f.runner->end(running[0], ItemEnd::kSucceeded);
  EXPECT_EQ(f.runner->wait_running(3).size(), 3u);
  for (const int64_t index : f.runner->wait_running(3)) f.runner->end(index, ItemEnd::kSucceeded);
  for (const int64_t index : f.runner->wait_running(1)) f.runner->end(index, ItemEnd::kSucceeded);
  EXPECT_EQ(f.wait_status(id, BatchStatus::kCompleted).completed, 6);
}

TEST(BatchActor, ResumesAfterACrashBetweenAppendAndCommitWithoutAnsweringTwice) {
  TempDir dir("batch-actor");
  Fixture f(dir.path());
  const std::string id = f.submit("a\nb\nc\n");
  // What a killed server left: item 0 committed; item 1's line appended, never committed.
  ASSERT_FALSE(f.batches->start(id, 3, 1000));
  {
    auto journal = std::get<BatchJournal>(BatchJournal::open(dir.path(), id, 0, 0));
    ASSERT_FALSE(journal.append("ok:a\n", ""));
    ASSERT_FALSE(f.batches->commit(id, {{0, true}}, journal.output_bytes(), journal.error_bytes()));
    ASSERT_FALSE(journal.append("ok:b\n", ""));
  }
  f.start();
  std::vector<int64_t> running = f.runner->wait_running(2);
  EXPECT_EQ(running, (std::vector<int64_t>{1, 2})) << "only the uncommitted items run again";
  for (const int64_t index : running) f.runner->end(index, ItemEnd::kSucceeded);
  const BatchRecord done = f.wait_status(id, BatchStatus::kCompleted);
  EXPECT_EQ(f.content(done.output_file_id), "ok:a\nok:b\nok:c\n");
  EXPECT_EQ(done.completed, 3);
}

TEST(BatchActor, CancelKeepsTheAnsweredItemsAndStopsTheRest) {
  TempDir dir("batch-actor");
  Fixture f(dir.path(), 2);
  const std::string id = f.submit("a\nb\nc\nd\n");
  f.start();
  std::vector<int64_t> running = f.runner->wait_running(2);
  f.runner->end(running[0], ItemEnd::kSucceeded);
  // The freed place is taken before the cancel arrives.
  f.runner->wait_running(2);
  ASSERT_TRUE(f.batches->request_cancel("alice", id, 1001));
  f.actor->wake();
  const BatchRecord done = f.wait_status(id, BatchStatus::kCancelled);
  EXPECT_EQ(done.completed, 1);
  EXPECT_EQ(f.content(done.output_file_id), "ok:a\n");
  EXPECT_FALSE(done.error_file_id);
  EXPECT_EQ(f.runner->starts(), 3) << "nothing started after the cancel";
}

TEST(BatchActor, TheCompletionWindowLeavesBatchExpiredLinesForWhatDidNotRun) {
  TempDir dir("batch-actor");
  Fixture f(dir.path(), 1);
  const std::string id = f.submit("a\nb\nc\n", /*window=*/60);
  f.start();
  f.runner->end(f.runner->wait_running(1).at(0), ItemEnd::kSucceeded);
  f.runner->wait_running(1);  // b runs
  f.now += 61;
  const BatchRecord done = f.wait_status(id, BatchStatus::kExpired);
  EXPECT_EQ(f.content(done.output_file_id), "ok:a\n");
  EXPECT_EQ(f.content(done.error_file_id), "expired:b\nexpired:c\n");
  EXPECT_EQ(done.completed, 1);
  EXPECT_EQ(done.failed, 2);
  EXPECT_EQ(done.expired_at, 1061);
}

TEST(BatchActor, ABadFileFailsTheBatchNamingItsLines) {
  TempDir dir("batch-actor");
  Fixture f(dir.path());
  const std::string id = f.submit("a\nbad\n\nb\na\n");
  f.start();
  const BatchRecord failed = f.wait_status(id, BatchStatus::kFailed);
  // Physical line numbers (the blank line counts): bad on line 2, the second "a" on line 5.
  EXPECT_EQ(failed.errors_json, "[invalid_json@2;duplicate_custom_id@5;]");
  EXPECT_EQ(failed.total, 0);
  EXPECT_EQ(f.runner->starts(), 0);
}

TEST(BatchActor, AnItemTheEngineCouldNotTakeRunsAgainAtTheNextTick) {
  TempDir dir("batch-actor");
  Fixture f(dir.path(), 1);
  const std::string id = f.submit("a\n");
  f.start();
  f.runner->end(f.runner->wait_running(1).at(0), ItemEnd::kRetry);
  f.runner->end(f.runner->wait_running(1).at(0), ItemEnd::kSucceeded);
  const BatchRecord done = f.wait_status(id, BatchStatus::kCompleted);
  EXPECT_EQ(f.content(done.output_file_id), "ok:a\n");
  EXPECT_EQ(f.runner->starts(), 2);
}

}  // namespace
}  // namespace troupe::batch
