// The durable batch store and its output journals (actors/batch/batch_store.hpp,
// batch_journal.hpp) on a real SQLite database: OpenAI's lifecycle, owners apart, paging, and the
// exactly-once protocol — a journal line appended but never committed is gone at the next open.
#include "actors/batch/batch_store.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "actors/batch/batch_journal.hpp"
#include "tests/net/temp_dir.hpp"

namespace troupe::batch {
namespace {

using net::testing::TempDir;

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

BatchRecord new_batch(std::string owner, int64_t now = 100) {
  BatchRecord r;
  r.owner = std::move(owner);
  r.endpoint = "/v1/chat/completions";
  r.input_file_id = "file-input";
  r.completion_window = "24h";
  r.created_at = now;
  r.expires_at = now + 86400;
  return r;
}

struct Stores {
  explicit Stores(const std::filesystem::path& dir)
      : files(FileStore::open(dir)), batches(BatchStore::open(files)) {}
  std::shared_ptr<FileStore> files;
  std::shared_ptr<BatchStore> batches;
};

TEST(BatchStore, LifecycleFromValidatingToCompletedWithItsFiles) {
  TempDir dir("batch-store");
  Stores s(dir.path());
  BatchRecord created = std::get<BatchRecord>(s.batches->create(new_batch("alice")));
  EXPECT_EQ(created.id.rfind("batch_", 0), 0u);
  EXPECT_EQ(created.status, BatchStatus::kValidating);
  ASSERT_EQ(s.batches->live().size(), 1u);

  ASSERT_FALSE(s.batches->start(created.id, 3, 101));
  EXPECT_EQ(s.batches->pending_items(created.id), (std::vector<int64_t>{0, 1, 2}));
  auto journal = std::get<BatchJournal>(BatchJournal::open(dir.path(), created.id, 0, 0));
  ASSERT_FALSE(journal.append("{\"custom_id\":\"a\"}\n", "{\"custom_id\":\"c\"}\n"));
  ASSERT_FALSE(s.batches->commit(created.id, {{0, true}, {2, false}}, journal.output_bytes(), journal.error_bytes()));
  // A repeated commit of the same items counts nothing twice.
  ASSERT_FALSE(s.batches->commit(created.id, {{0, true}}, journal.output_bytes(), journal.error_bytes()));
  EXPECT_EQ(s.batches->pending_items(created.id), (std::vector<int64_t>{1}));
  ASSERT_FALSE(journal.append("{\"custom_id\":\"b\"}\n", ""));
  ASSERT_FALSE(s.batches->commit(created.id, {{1, true}}, journal.output_bytes(), journal.error_bytes()));

  ASSERT_FALSE(s.batches->set_finalizing(created.id, 102));
  ASSERT_FALSE(s.batches->finish(created.id, BatchStatus::kCompleted, 103,
                                 FinalFile{journal.output_path(), "out.jsonl"},
                                 FinalFile{journal.error_path(), "err.jsonl"}));
  const BatchRecord done = *s.batches->get("alice", created.id);
  EXPECT_EQ(done.status, BatchStatus::kCompleted);
  EXPECT_EQ(done.total, 3);
  EXPECT_EQ(done.completed, 2);
  EXPECT_EQ(done.failed, 1);
  EXPECT_EQ(done.in_progress_at, 101);
  EXPECT_EQ(done.finalizing_at, 102);
  EXPECT_EQ(done.completed_at, 103);
  ASSERT_TRUE(done.output_file_id && done.error_file_id);
  const auto output = s.files->read("alice", *done.output_file_id);
  ASSERT_TRUE(output && std::holds_alternative<std::string>(*output));
  EXPECT_EQ(std::get<std::string>(*output), "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n");
  EXPECT_EQ(s.files->get("alice", *done.error_file_id)->purpose, "batch_output");
  EXPECT_TRUE(s.batches->live().empty());
  EXPECT_TRUE(s.batches->pending_items(created.id).empty());
}

TEST(BatchStore, AnotherOwnerSeesNothingAndCannotCancel) {
  TempDir dir("batch-store");
  Stores s(dir.path());
  const BatchRecord mine = std::get<BatchRecord>(s.batches->create(new_batch("alice")));
  EXPECT_FALSE(s.batches->get("bob", mine.id));
  EXPECT_TRUE(s.batches->list("bob", {}).batches.empty());
  EXPECT_FALSE(s.batches->request_cancel("bob", mine.id, 200));
  EXPECT_EQ(s.batches->get("alice", mine.id)->status, BatchStatus::kValidating);
}

TEST(BatchStore, CancelMovesOnlyLiveBatchesToCancelling) {
  TempDir dir("batch-store");
  Stores s(dir.path());
  const BatchRecord b = std::get<BatchRecord>(s.batches->create(new_batch("alice")));
  ASSERT_FALSE(s.batches->start(b.id, 2, 101));
  auto cancelled = s.batches->request_cancel("alice", b.id, 150);
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(std::get<BatchRecord>(*cancelled).status, BatchStatus::kCancelling);
  EXPECT_EQ(std::get<BatchRecord>(*cancelled).cancelling_at, 150);
  ASSERT_FALSE(s.batches->finish(b.id, BatchStatus::kCancelled, 160, std::nullopt, std::nullopt));
  // A finished batch stays as it ended.
  auto again = s.batches->request_cancel("alice", b.id, 170);
  EXPECT_EQ(std::get<BatchRecord>(*again).status, BatchStatus::kCancelled);
  EXPECT_EQ(std::get<BatchRecord>(*again).cancelled_at, 160);
  EXPECT_FALSE(std::get<BatchRecord>(*again).output_file_id);
}

TEST(BatchStore, ListsNewestFirstInPages) {
  TempDir dir("batch-store");
  Stores s(dir.path());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(std::get<BatchRecord>(s.batches->create(new_batch("alice"))).id);
  BatchListQuery query;
  query.limit = 2;
  BatchList page = s.batches->list("alice", query);
  ASSERT_EQ(page.batches.size(), 2u);
  EXPECT_TRUE(page.has_more);
  EXPECT_EQ(page.batches[0].id, ids[4]);
  EXPECT_EQ(page.batches[1].id, ids[3]);
  query.after = page.batches.back().id;
  query.limit = 10;
  page = s.batches->list("alice", query);
  ASSERT_EQ(page.batches.size(), 3u);
  EXPECT_FALSE(page.has_more);
  EXPECT_EQ(page.batches[2].id, ids[0]);
}

TEST(BatchStore, SurvivesReopeningWithItsProgress) {
  TempDir dir("batch-store");
  std::string id;
  {
    Stores s(dir.path());
    id = std::get<BatchRecord>(s.batches->create(new_batch("alice"))).id;
    ASSERT_FALSE(s.batches->start(id, 4, 101));
    ASSERT_FALSE(s.batches->commit(id, {{1, true}, {3, false}}, 10, 20));
  }
  Stores s(dir.path());
  const BatchRecord b = *s.batches->find(id);
  EXPECT_EQ(b.status, BatchStatus::kInProgress);
  EXPECT_EQ(b.output_bytes, 10);
  EXPECT_EQ(b.error_bytes, 20);
  EXPECT_EQ(s.batches->pending_items(id), (std::vector<int64_t>{0, 2}));
}

TEST(BatchStore, OneStoreOfASharedDirectoryRunsTheBatchesUntilItGoes) {
  TempDir dir("batch-store");
  auto first = std::make_unique<Stores>(dir.path());
  Stores second(dir.path());
  EXPECT_TRUE(first->batches->try_become_runner());
  EXPECT_TRUE(first->batches->try_become_runner()) << "idempotent";
  EXPECT_FALSE(second.batches->try_become_runner());
  first.reset();  // its process ended: the lock is free
  EXPECT_TRUE(second.batches->try_become_runner());
}

TEST(BatchJournal, OpenCutsLinesThatWereNeverCommitted) {
  TempDir dir("batch-journal");
  std::string committed_output, committed_errors;
  {
    auto journal = std::get<BatchJournal>(BatchJournal::open(dir.path(), "batch_x", 0, 0));
    ASSERT_FALSE(journal.append("one\n", "e1\n"));
    committed_output = "one\n";
    committed_errors = "e1\n";
    ASSERT_FALSE(journal.append("two\n", "e2\n"));  // written, then the process dies: no commit
  }
  auto journal = std::get<BatchJournal>(BatchJournal::open(dir.path(), "batch_x",
                                                           static_cast<int64_t>(committed_output.size()),
                                                           static_cast<int64_t>(committed_errors.size())));
  EXPECT_EQ(read_all(journal.output_path()), committed_output);
  EXPECT_EQ(read_all(journal.error_path()), committed_errors);
  ASSERT_FALSE(journal.append("three\n", ""));
  EXPECT_EQ(read_all(journal.output_path()), "one\nthree\n");
  EXPECT_EQ(journal.output_bytes(), 10);
  BatchJournal::remove(dir.path(), "batch_x");
  EXPECT_FALSE(std::filesystem::exists(journal.output_path()));
}

TEST(BatchJournal, AnUnusableDirectoryIsAnErrorNamingIt) {
  TempDir dir("batch-journal");
  // A file where the journal directory should be: it cannot be created (root ignores modes).
  std::ofstream(dir.path() / "batches") << "in the way";
  auto journal = BatchJournal::open(dir.path(), "batch_x", 0, 0);
  ASSERT_TRUE(std::holds_alternative<StorageError>(journal));
  EXPECT_NE(std::get<StorageError>(journal).message.find((dir.path() / "batches").string()), std::string::npos)
      << std::get<StorageError>(journal).message;
}

}  // namespace
}  // namespace troupe::batch
