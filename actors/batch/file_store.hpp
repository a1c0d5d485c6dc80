// Durable files for OpenAI's Files API (issue 40): what `client.files.create(purpose="batch")`
// uploads and a batch's output and error files. Metadata lives in an embedded SQLite database
// (Debian's libsqlite3, WAL mode) at <dir>/troupe.db; each file's bytes in <dir>/files/<id>,
// written to a temporary name, flushed and renamed before its row is committed — so after a
// crash (kill -9) every listed file is whole, and a file without its row is swept at the next
// open. A file belongs to its owner (the API key's name; "" when the server has no keys): other
// owners are answered as if it did not exist.
//
// Scarcity and refusals are values (a full disk, an unwritable directory: StorageError with the
// OS's reason); only open() throws, at start-up.
//
// Thread-safety: every member may be called from any thread; one mutex serializes the database
// (each call is a few statements; the file I/O of create() and read() runs outside it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

struct sqlite3;

namespace troupe::batch {

struct StoredFile {
  std::string id;  // "file-" + 24 hex digits
  std::string owner;
  std::string purpose;
  std::string filename;
  int64_t bytes = 0;
  int64_t created_at = 0;  // Unix seconds
};

struct StorageError {
  std::string message;
};

// open() failed: the path and the reason.
class StorageOpenError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FileListQuery {
  std::optional<std::string> purpose;
  int32_t limit = 10'000;
  std::optional<std::string> after;  // a file id: list the ones past it in this order
  bool ascending = false;            // OpenAI's default order is newest first
};

struct FileList {
  std::vector<StoredFile> files;
  bool has_more = false;
};

// fsync of a directory: a rename or link into it survives a power cut (best effort: a failure
// here leaves the entry in the page cache, as it was before).
void sync_directory(const std::filesystem::path& dir);

class FileStore {
 public:
  // Creates <dir>, <dir>/files and the database as needed. Throws StorageOpenError naming the
  // path when the directory cannot be written or the database cannot be opened.
  static std::unique_ptr<FileStore> open(const std::filesystem::path& dir);
  ~FileStore();
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::variant<StoredFile, StorageError> create(std::string_view owner, std::string_view purpose,
                                                std::string_view filename,
                                                std::string_view content, int64_t now);
  std::optional<StoredFile> get(std::string_view owner, std::string_view id) const;
  FileList list(std::string_view owner, const FileListQuery& query) const;
  // The file's bytes; nullopt when the owner has no such file, StorageError when it cannot be read.
  std::optional<std::variant<std::string, StorageError>> read(std::string_view owner,
                                                              std::string_view id) const;
  // false when the owner has no such file.
  bool remove(std::string_view owner, std::string_view id);

  const std::filesystem::path& dir() const { return dir_; }
  // Where file `id`'s bytes live; a fresh id. For the batch store, which records a batch's output
  // files and its own state in one transaction (actors/batch/batch_store.hpp).
  std::filesystem::path content_path(std::string_view id) const;
  static std::string new_id();

 private:
  FileStore(std::filesystem::path dir, sqlite3* db);
  void sweep_orphans();

  std::filesystem::path dir_;
  mutable std::mutex mutex_;
  sqlite3* db_ = nullptr;  // guarded by mutex_
};

}  // namespace troupe::batch
