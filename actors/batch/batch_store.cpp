#include "actors/batch/batch_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "actors/batch/sqlite_statement.hpp"

namespace troupe::batch {
namespace {

// The files table is FileStore's (file_store.cpp creates it first); finish() adds rows to it.
constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS batches (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  owner TEXT NOT NULL,
  endpoint TEXT NOT NULL,
  input_file_id TEXT NOT NULL,
  completion_window TEXT NOT NULL,
  metadata TEXT,
  status TEXT NOT NULL,
  errors TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  in_progress_at INTEGER, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,
  expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
  total INTEGER NOT NULL DEFAULT 0,
  completed INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  output_file_id TEXT,
  error_file_id TEXT,
  output_bytes INTEGER NOT NULL DEFAULT 0,
  error_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_by_owner ON batches (owner, seq);
CREATE TABLE IF NOT EXISTS batch_items (
  batch_id TEXT NOT NULL,
  idx INTEGER NOT NULL,
  done INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (batch_id, idx)
) WITHOUT ROWID;
)sql";

constexpr std::string_view kColumns =
    "id, owner, endpoint, input_file_id, completion_window, metadata, status, errors, created_at, "
    "expires_at, in_progress_at, finalizing_at, completed_at, failed_at, expired_at, cancelling_at, "
    "cancelled_at, total, completed, failed, output_file_id, error_file_id, output_bytes, error_bytes";

BatchRecord batch_of(const Statement& s) {
  BatchRecord b;
  b.id = s.text(0);
  b.owner = s.text(1);
  b.endpoint = s.text(2);
  b.input_file_id = s.text(3);
  b.completion_window = s.text(4);
  b.metadata_json = s.optional_text(5);
  b.status = parse_batch_status(s.text(6)).value_or(BatchStatus::kFailed);
  b.errors_json = s.optional_text(7);
  b.created_at = s.integer(8);
  b.expires_at = s.integer(9);
  b.in_progress_at = s.optional_integer(10);
  b.finalizing_at = s.optional_integer(11);
  b.completed_at = s.optional_integer(12);
  b.failed_at = s.optional_integer(13);
  b.expired_at = s.optional_integer(14);
  b.cancelling_at = s.optional_integer(15);
  b.cancelled_at = s.optional_integer(16);
  b.total = s.integer(17);
  b.completed = s.integer(18);
  b.failed = s.integer(19);
  b.output_file_id = s.optional_text(20);
  b.error_file_id = s.optional_text(21);
  b.output_bytes = s.integer(22);
  b.error_bytes = s.integer(23);
  return b;
}

std::string new_batch_id() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("batch_{:016x}{:08x}", random(), static_cast<uint32_t>(random()));
}

// The column holding the timestamp of reaching `status`.
std::string_view timestamp_column(BatchStatus status) {
  switch (status) {
    case BatchStatus::kValidating: return "created_at";
    case BatchStatus::kFailed: return "failed_at";
    case BatchStatus::kInProgress: return "in_progress_at";
    case BatchStatus::kFinalizing: return "finalizing_at";
    case BatchStatus::kCompleted: return "completed_at";
    case BatchStatus::kExpired: return "expired_at";
    case BatchStatus::kCancelling: return "cancelling_at";
    case BatchStatus::kCancelled: return "cancelled_at";
  }
  return "created_at";
}

// A hard link: the journal's bytes become the file's without a copy (same directory tree).
std::optional<StorageError> link_durably(const std::filesystem::path& from,
                                         const std::filesystem::path& to) {
  if (::link(from.c_str(), to.c_str()) != 0) {
    return StorageError{fmt::format("cannot link {} to {}: {}", from.string(), to.string(),
                                    std::strerror(errno))};
  }
  sync_directory(to.parent_path());
  return std::nullopt;
}

}  // namespace

std::unique_ptr<BatchStore> BatchStore::open(std::shared_ptr<FileStore> files) {
  // The file store created the database; this adds the batches' tables to it.
  sqlite3* db = open_database(files->dir() / "troupe.db", kSchema, /*create=*/false);
  return std::unique_ptr<BatchStore>(new BatchStore(std::move(files), db));
}

BatchStore::BatchStore(std::shared_ptr<FileStore> files, sqlite3* db) : files_(std::move(files)), db_(db) {}

BatchStore::~BatchStore() {
  sqlite3_close(db_);
  if (runner_lock_fd_ >= 0) ::close(runner_lock_fd_);
}

bool BatchStore::try_become_runner() {
  std::lock_guard lock(mutex_);
  if (runner_lock_fd_ >= 0) return true;
  const std::filesystem::path path = files_->dir() / "batches.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  runner_lock_fd_ = fd;
  return true;
}

std::variant<BatchRecord, StorageError> BatchStore::create(BatchRecord record) {
  record.id = new_batch_id();
  record.status = BatchStatus::kValidating;
  std::lock_guard lock(mutex_);
  Statement s(db_,
              "INSERT INTO batches (id, owner, endpoint, input_file_id, completion_window, metadata, "
              "status, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, record.id).bind(2, record.owner).bind(3, record.endpoint).bind(4, record.input_file_id);
  s.bind(5, record.completion_window).bind_optional(6, record.metadata_json).bind(7, to_string(record.status));
  s.bind(8, record.created_at).bind(9, record.expires_at);
  if (s.step() != SQLITE_DONE) return StorageError{fmt::format("cannot record the batch: {}", sqlite3_errmsg(db_))};
  return record;
}

std::optional<BatchRecord> BatchStore::get(std::string_view owner, std::string_view id) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, fmt::format("SELECT {} FROM batches WHERE id = ? AND owner = ?", kColumns));
  s.bind(1, id).bind(2, owner);
  if (s.step() != SQLITE_ROW) return std::nullopt;
  return batch_of(s);
}

std::optional<BatchRecord> BatchStore::find(std::string_view id) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, fmt::format("SELECT {} FROM batches WHERE id = ?", kColumns));
  s.bind(1, id);
  if (s.step() != SQLITE_ROW) return std::nullopt;
  return batch_of(s);
}

BatchList BatchStore::list(std::string_view owner, const BatchListQuery& query) const {
  std::lock_guard lock(mutex_);
  int64_t before_seq = INT64_MAX;
  if (query.after) {
    Statement s(db_, "SELECT seq FROM batches WHERE id = ? AND owner = ?");
    s.bind(1, *query.after).bind(2, owner);
    if (s.step() == SQLITE_ROW) before_seq = s.integer(0);
  }
  Statement s(db_, fmt::format("SELECT {} FROM batches WHERE owner = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
                               kColumns));
  s.bind(1, owner).bind(2, before_seq).bind(3, int64_t{query.limit} + 1);  // one more: has_more
  BatchList list;
  while (s.step() == SQLITE_ROW) list.batches.push_back(batch_of(s));
  if (static_cast<int64_t>(list.batches.size()) > query.limit) {
    list.batches.pop_back();
    list.has_more = true;
  }
  return list;
}

std::optional<std::variant<BatchRecord, StorageError>> BatchStore::request_cancel(std::string_view owner,
                                                                                 std::string_view id,
                                                                                 int64_t now) {
  {
    std::lock_guard lock(mutex_);
    Statement s(db_,
                "UPDATE batches SET status = 'cancelling', cancelling_at = ? WHERE id = ? AND owner = ? "
                "AND status IN ('validating', 'in_progress')");
    s.bind(1, now).bind(2, id).bind(3, owner);
    if (s.step() != SQLITE_DONE) {
      return StorageError{fmt::format("cannot cancel {}: {}", id, sqlite3_errmsg(db_))};
    }
  }
  std::optional<BatchRecord> batch = get(owner, id);
  if (!batch) return std::nullopt;
  return std::move(*batch);
}

std::vector<BatchRecord> BatchStore::recent(int32_t limit) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, fmt::format("SELECT {} FROM batches ORDER BY seq DESC LIMIT ?", kColumns));
  s.bind(1, int64_t{limit});
  std::vector<BatchRecord> batches;
  while (s.step() == SQLITE_ROW) batches.push_back(batch_of(s));
  return batches;
}

std::vector<BatchRecord> BatchStore::live() const {
  std::lock_guard lock(mutex_);
  Statement s(db_, fmt::format("SELECT {} FROM batches WHERE status IN ('validating', 'in_progress', "
                               "'finalizing', 'cancelling') ORDER BY seq",
                               kColumns));
  std::vector<BatchRecord> batches;
  while (s.step() == SQLITE_ROW) batches.push_back(batch_of(s));
  return batches;
}

std::optional<StorageError> BatchStore::start(std::string_view id, int64_t total, int64_t now) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (transaction.begin_error()) return transaction.begin_error();
  Statement insert(db_, "INSERT OR IGNORE INTO batch_items (batch_id, idx) VALUES (?, ?)");
  for (int64_t i = 0; i < total; ++i) {
    insert.reset();
    insert.bind(1, id).bind(2, i);
    if (insert.step() != SQLITE_DONE) return transaction.failure(fmt::format("record the items of {}", id));
  }
  Statement update(db_,
                   "UPDATE batches SET status = 'in_progress', in_progress_at = ?, total = ? "
                   "WHERE id = ? AND status = 'validating'");
  update.bind(1, now).bind(2, total).bind(3, id);
  if (update.step() != SQLITE_DONE) return transaction.failure(fmt::format("start {}", id));
  return transaction.commit();
}

std::vector<int64_t> BatchStore::pending_items(std::string_view id) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, "SELECT idx FROM batch_items WHERE batch_id = ? AND done = 0 ORDER BY idx");
  s.bind(1, id);
  std::vector<int64_t> items;
  while (s.step() == SQLITE_ROW) items.push_back(s.integer(0));
  return items;
}

std::optional<StorageError> BatchStore::commit(std::string_view id, const std::vector<ItemOutcome>& outcomes,
                                               int64_t output_bytes, int64_t error_bytes) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (transaction.begin_error()) return transaction.begin_error();
  Statement mark(db_, "UPDATE batch_items SET done = ? WHERE batch_id = ? AND idx = ? AND done = 0");
  int64_t completed = 0;
  int64_t failed = 0;
  for (const ItemOutcome& outcome : outcomes) {
    mark.reset();
    mark.bind(1, int64_t{outcome.succeeded ? 1 : 2}).bind(2, id).bind(3, outcome.index);
    if (mark.step() != SQLITE_DONE) return transaction.failure(fmt::format("record items of {}", id));
    (outcome.succeeded ? completed : failed) += sqlite3_changes(db_);
  }
  Statement update(db_,
                   "UPDATE batches SET completed = completed + ?, failed = failed + ?, "
                   "output_bytes = ?, error_bytes = ? WHERE id = ?");
  update.bind(1, completed).bind(2, failed).bind(3, output_bytes).bind(4, error_bytes).bind(5, id);
  if (update.step() != SQLITE_DONE) return transaction.failure(fmt::format("record the progress of {}", id));
  return transaction.commit();
}

std::optional<StorageError> BatchStore::set_finalizing(std::string_view id, int64_t now) {
  std::lock_guard lock(mutex_);
  Statement s(db_,
              "UPDATE batches SET status = 'finalizing', finalizing_at = ? WHERE id = ? "
              "AND status IN ('in_progress', 'cancelling')");
  s.bind(1, now).bind(2, id);
  if (s.step() != SQLITE_DONE) return StorageError{fmt::format("cannot finalize {}: {}", id, sqlite3_errmsg(db_))};
  return std::nullopt;
}

std::optional<StorageError> BatchStore::finish(std::string_view id, BatchStatus status, int64_t now,
                                               const std::optional<FinalFile>& output,
                                               const std::optional<FinalFile>& errors,
                                               const std::optional<std::string>& errors_json) {
  const std::optional<BatchRecord> batch = find(id);
  if (!batch) return StorageError{fmt::format("no batch {}", id)};
  // The journals become files first (unlisted until the transaction below commits).
  struct Linked {
    std::string file_id;
    std::string filename;
    int64_t bytes = 0;
  };
  std::optional<Linked> linked[2];
  const std::optional<FinalFile>* finals[2] = {&output, &errors};
  for (int i = 0; i < 2; ++i) {
    if (!*finals[i]) continue;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size((*finals[i])->journal, ec);
    if (ec) return StorageError{fmt::format("cannot read {}: {}", (*finals[i])->journal.string(), ec.message())};
    Linked l{FileStore::new_id(), (*finals[i])->filename, static_cast<int64_t>(bytes)};
    if (auto error = link_durably((*finals[i])->journal, files_->content_path(l.file_id))) return error;
    linked[i] = std::move(l);
  }
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (transaction.begin_error()) return transaction.begin_error();
  Statement insert(db_,
                   "INSERT INTO files (id, owner, purpose, filename, bytes, created_at) "
                   "VALUES (?, ?, 'batch_output', ?, ?, ?)");
  for (const auto& l : linked) {
    if (!l) continue;
    insert.reset();
    insert.bind(1, l->file_id).bind(2, batch->owner).bind(3, l->filename).bind(4, l->bytes).bind(5, now);
    if (insert.step() != SQLITE_DONE) return transaction.failure(fmt::format("record the files of {}", id));
  }
  Statement update(db_, fmt::format("UPDATE batches SET status = ?, {} = ?, output_file_id = ?, "
                                    "error_file_id = ?, errors = COALESCE(?, errors) WHERE id = ?",
                                    timestamp_column(status)));
  update.bind(1, to_string(status)).bind(2, now);
  update.bind_optional(3, linked[0] ? std::optional<std::string>(linked[0]->file_id) : std::nullopt);
  update.bind_optional(4, linked[1] ? std::optional<std::string>(linked[1]->file_id) : std::nullopt);
  update.bind_optional(5, errors_json).bind(6, id);
  if (update.step() != SQLITE_DONE) return transaction.failure(fmt::format("finish {}", id));
  Statement items(db_, "DELETE FROM batch_items WHERE batch_id = ?");
  items.bind(1, id);
  if (items.step() != SQLITE_DONE) return transaction.failure(fmt::format("forget the items of {}", id));
  return transaction.commit();
}

}  // namespace troupe::batch
