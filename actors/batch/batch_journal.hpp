// A batch's two output journals: <storage.dir>/batches/<batch id>.output.jsonl (items answered
// 200) and .errors.jsonl (the rest), append-only, one JSON line per item. Step 1 of the
// exactly-once protocol in actors/batch/batch_store.hpp: append() writes and fsyncs, then the
// caller commits the new lengths; open() cuts each journal back to its committed length, so a
// line that was written but never committed (a crash in between) is gone and its item runs again.
//
// Scarcity is a value: a full disk or an unwritable directory is a StorageError naming the path.
//
// Thread-safety: one journal is used by one thread (the batch actor's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "actors/batch/file_store.hpp"

namespace troupe::batch {

class BatchJournal {
 public:
  // The journals of `batch_id` under <storage_dir>/batches/, cut back to the committed lengths
  // (created empty when missing).
  static std::variant<BatchJournal, StorageError> open(const std::filesystem::path& storage_dir,
                                                       std::string_view batch_id,
                                                       int64_t committed_output_bytes,
                                                       int64_t committed_error_bytes);
  // Removes both journals of `batch_id` (after they became files, or the batch ended without).
  static void remove(const std::filesystem::path& storage_dir, std::string_view batch_id);

  BatchJournal(BatchJournal&& other) noexcept;
  BatchJournal& operator=(BatchJournal&& other) noexcept;
  BatchJournal(const BatchJournal&) = delete;
  BatchJournal& operator=(const BatchJournal&) = delete;
  ~BatchJournal();

  // Appends `output_lines` and `error_lines` (each line ending in '\n'; either may be empty) and
  // fsyncs what changed. On an error the lengths stay the last good ones: the caller must not
  // commit, and the journals are cut back at the next open().
  std::optional<StorageError> append(std::string_view output_lines, std::string_view error_lines);

  int64_t output_bytes() const { return output_bytes_; }
  int64_t error_bytes() const { return error_bytes_; }
  const std::filesystem::path& output_path() const { return output_path_; }
  const std::filesystem::path& error_path() const { return error_path_; }

 private:
  BatchJournal() = default;
  void close();

  std::filesystem::path output_path_;
  std::filesystem::path error_path_;
  int output_fd_ = -1;
  int error_fd_ = -1;
  int64_t output_bytes_ = 0;
  int64_t error_bytes_ = 0;
};

}  // namespace troupe::batch
