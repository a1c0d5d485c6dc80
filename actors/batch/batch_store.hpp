// Durable batches (issue 40): OpenAI's batch objects and their per-item progress in the same
// SQLite database as the files (<storage.dir>/troupe.db, WAL), so that a batch survives kill -9.
//
// The exactly-once protocol, with the output journal (actors/batch/batch_journal.hpp):
//   1. finished items' lines are appended to the batch's output / error journal and fsync'd;
//   2. one transaction marks those items done and records the journals' new committed lengths;
//   3. at start-up every live batch's journals are cut back to the committed lengths, so a line
//      appended before a crash but never committed disappears, and its item (still pending in the
//      database) runs again. No item is lost; none is answered twice.
// Finishing links the journals into the file store under fresh file ids and records those files
// and the batch's final status in one transaction (a crash in between leaves only unlisted
// bytes, which FileStore::open sweeps).
//
// Scarcity is a value (StorageError: a full disk, a database that cannot be written); only
// open() throws, at start-up. A batch belongs to its owner (the API key's name); other owners are
// answered as if it did not exist.
//
// Thread-safety: every member may be called from any thread; one mutex serializes the database.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/batch/batch_status.hpp"
#include "actors/batch/file_store.hpp"

struct sqlite3;

namespace troupe::batch {

struct BatchRecord {
  std::string id;  // "batch_" + 24 hex digits
  std::string owner;
  std::string endpoint;  // /v1/chat/completions, /v1/completions or /v1/embeddings
  std::string input_file_id;
  std::string completion_window;     // as the client gave it ("24h")
  std::optional<std::string> metadata_json;  // a JSON object of strings, as given
  BatchStatus status = BatchStatus::kValidating;
  // Why the batch failed: OpenAI's errors.data, a JSON array (of {code, message, param, line}).
  std::optional<std::string> errors_json;
  int64_t created_at = 0;
  int64_t expires_at = 0;
  std::optional<int64_t> in_progress_at, finalizing_at, completed_at, failed_at, expired_at,
      cancelling_at, cancelled_at;
  int64_t total = 0;      // items in the input file (set when validation passes)
  int64_t completed = 0;  // items answered 200 (output file)
  int64_t failed = 0;     // items answered otherwise (error file)
  std::optional<std::string> output_file_id;
  std::optional<std::string> error_file_id;
  // The journals' committed lengths (see the protocol above); not part of OpenAI's object.
  int64_t output_bytes = 0;
  int64_t error_bytes = 0;
};

struct BatchListQuery {
  int32_t limit = 20;
  std::optional<std::string> after;  // a batch id: the ones created before it (newest first)
};

struct BatchList {
  std::vector<BatchRecord> batches;
  bool has_more = false;
};

// One finished item, as committed in step 2.
struct ItemOutcome {
  int64_t index = 0;
  bool succeeded = false;  // its line went to the output journal (else: the error journal)
};

// A journal to turn into a file when the batch finishes: its path, the name the file gets.
struct FinalFile {
  std::filesystem::path journal;
  std::string filename;
};

class BatchStore {
 public:
  // Opens the database next to `files`' (its directory must exist: FileStore::open made it).
  // Throws StorageOpenError naming the path when it cannot.
  static std::unique_ptr<BatchStore> open(std::shared_ptr<FileStore> files);
  ~BatchStore();
  BatchStore(const BatchStore&) = delete;
  BatchStore& operator=(const BatchStore&) = delete;

  // Inserts a new batch (status validating); `record.id` is filled in.
  std::variant<BatchRecord, StorageError> create(BatchRecord record);
  std::optional<BatchRecord> get(std::string_view owner, std::string_view id) const;
  BatchList list(std::string_view owner, const BatchListQuery& query) const;
  // validating or in_progress -> cancelling; the batch as it is now (unchanged when it was past
  // those), nullopt when the owner has no such batch.
  std::optional<std::variant<BatchRecord, StorageError>> request_cancel(std::string_view owner,
                                                                        std::string_view id,
                                                                        int64_t now);

  // --- the batch actor's side (no owner check: it runs every owner's batches) -----------------
  // Whether this store may run the batches: servers sharing a storage.dir all take batches, and
  // one of them runs them — the one holding an exclusive lock on <dir>/batches.lock (released by
  // the kernel when its process ends, kill -9 included, so another takes over). Idempotent.
  bool try_become_runner();
  // The newest `limit` batches of every owner (`troupe admin batches`).
  std::vector<BatchRecord> recent(int32_t limit) const;
  // Batches not yet terminal, oldest first.
  std::vector<BatchRecord> live() const;
  std::optional<BatchRecord> find(std::string_view id) const;
  // validating -> in_progress with `total` pending items (one transaction).
  std::optional<StorageError> start(std::string_view id, int64_t total, int64_t now);
  // Items not yet done, in order.
  std::vector<int64_t> pending_items(std::string_view id) const;
  // Step 2 of the protocol: marks `outcomes` done, adds them to the counts, records the lengths.
  std::optional<StorageError> commit(std::string_view id, const std::vector<ItemOutcome>& outcomes,
                                     int64_t output_bytes, int64_t error_bytes);
  // in_progress or cancelling -> finalizing (the last lines are being turned into files).
  std::optional<StorageError> set_finalizing(std::string_view id, int64_t now);
  // The end: `status` (completed, cancelled, expired or failed) with its timestamp, the journals
  // that have lines as files of the batch's owner, `errors_json` when it failed.
  std::optional<StorageError> finish(std::string_view id, BatchStatus status, int64_t now,
                                     const std::optional<FinalFile>& output,
                                     const std::optional<FinalFile>& errors,
                                     const std::optional<std::string>& errors_json = std::nullopt);

 private:
  BatchStore(std::shared_ptr<FileStore> files, sqlite3* db);

  std::shared_ptr<FileStore> files_;
  int runner_lock_fd_ = -1;  // try_become_runner(): held until destruction
  mutable std::mutex mutex_;
  sqlite3* db_ = nullptr;  // guarded by mutex_
};

}  // namespace troupe::batch
