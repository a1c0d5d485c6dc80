#include "actors/batch/file_store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <set>

#include <fmt/format.h>

#include "actors/batch/sqlite_statement.hpp"

namespace troupe::batch {
namespace {

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS files (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  owner TEXT NOT NULL,
  purpose TEXT NOT NULL,
  filename TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_by_owner ON files (owner, seq);
)sql";

constexpr std::string_view kColumns = "id, owner, purpose, filename, bytes, created_at";

StoredFile file_of(const Statement& s) {
  return StoredFile{s.text(0), s.text(1), s.text(2), s.text(3), s.integer(4), s.integer(5)};
}

// Writes `content` to `path` durably: a temporary file, fsync, rename, fsync of the directory.
std::optional<StorageError> write_durably(const std::filesystem::path& path, std::string_view content) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return StorageError{fmt::format("cannot create {}: {}", temporary.string(), std::strerror(errno))};
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temporary.c_str());
      return StorageError{fmt::format("cannot write {}: {}", temporary.string(), reason)};
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    return StorageError{fmt::format("cannot flush {}: {}", temporary.string(), reason)};
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    return StorageError{fmt::format("cannot rename {}: {}", temporary.string(), reason)};
  }
  sync_directory(path.parent_path());
  return std::nullopt;
}

}  // namespace

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::unique_ptr<FileStore> FileStore::open(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir / "files", ec);
  if (ec) throw StorageOpenError(fmt::format("storage.dir {}: {}", dir.string(), ec.message()));
  // The directory must take new files (a read-only mount fails here, not at the first upload).
  const std::filesystem::path probe = dir / "files" / ".write-probe";
  if (auto error = write_durably(probe, "")) {
    throw StorageOpenError(fmt::format("storage.dir {} is not writable: {}", dir.string(), error->message));
  }
  std::filesystem::remove(probe, ec);
  sqlite3* db = open_database(dir / "troupe.db", kSchema, /*create=*/true);
  std::unique_ptr<FileStore> store(new FileStore(dir, db));
  store->sweep_orphans();
  return store;
}

std::string FileStore::new_id() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("file-{:016x}{:08x}", random(), static_cast<uint32_t>(random()));
}

FileStore::FileStore(std::filesystem::path dir, sqlite3* db) : dir_(std::move(dir)), db_(db) {}

FileStore::~FileStore() { sqlite3_close(db_); }

std::filesystem::path FileStore::content_path(std::string_view id) const {
  return dir_ / "files" / std::string(id);
}

// A crash between a file's rename and its row (or during a delete) leaves bytes no row names:
// they are removed, with any temporary file.
void FileStore::sweep_orphans() {
  std::set<std::string> known;
  {
    std::lock_guard lock(mutex_);
    Statement s(db_, "SELECT id FROM files");
    while (s.step() == SQLITE_ROW) known.insert(s.text(0));
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "files", ec)) {
    const std::string name = entry.path().filename().string();
    if (!known.contains(name)) std::filesystem::remove(entry.path(), ec);
  }
}

std::variant<StoredFile, StorageError> FileStore::create(std::string_view owner,
                                                        std::string_view purpose,
                                                        std::string_view filename,
                                                        std::string_view content, int64_t now) {
  StoredFile file{new_id(), std::string(owner), std::string(purpose), std::string(filename),
                  static_cast<int64_t>(content.size()), now};
  if (auto error = write_durably(content_path(file.id), content)) return *error;
  std::lock_guard lock(mutex_);
  Statement s(db_, "INSERT INTO files (id, owner, purpose, filename, bytes, created_at) VALUES (?, ?, ?, ?, ?, ?)");
  s.bind(1, file.id).bind(2, file.owner).bind(3, file.purpose).bind(4, file.filename);
  s.bind(5, file.bytes).bind(6, file.created_at);
  if (s.step() != SQLITE_DONE) {
    const std::string reason = sqlite3_errmsg(db_);
    std::error_code ec;
    std::filesystem::remove(content_path(file.id), ec);
    return StorageError{fmt::format("cannot record {}: {}", file.id, reason)};
  }
  return file;
}

std::optional<StoredFile> FileStore::get(std::string_view owner, std::string_view id) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, fmt::format("SELECT {} FROM files WHERE id = ? AND owner = ?", kColumns));
  s.bind(1, id).bind(2, owner);
  if (s.step() != SQLITE_ROW) return std::nullopt;
  return file_of(s);
}

FileList FileStore::list(std::string_view owner, const FileListQuery& query) const {
  std::lock_guard lock(mutex_);
  int64_t after_seq = query.ascending ? 0 : INT64_MAX;
  if (query.after) {
    Statement s(db_, "SELECT seq FROM files WHERE id = ? AND owner = ?");
    s.bind(1, *query.after).bind(2, owner);
    if (s.step() == SQLITE_ROW) after_seq = s.integer(0);
  }
  const std::string sql = fmt::format(
      "SELECT {} FROM files WHERE owner = ? AND seq {} ? AND (? = '' OR purpose = ?) ORDER BY seq {} LIMIT ?",
      kColumns, query.ascending ? ">" : "<", query.ascending ? "ASC" : "DESC");
  Statement s(db_, sql);
  s.bind(1, owner).bind(2, after_seq).bind(3, query.purpose.value_or("")).bind(4, query.purpose.value_or(""));
  s.bind(5, int64_t{query.limit} + 1);  // one more says whether there are more
  FileList list;
  while (s.step() == SQLITE_ROW) list.files.push_back(file_of(s));
  if (static_cast<int64_t>(list.files.size()) > query.limit) {
    list.files.pop_back();
    list.has_more = true;
  }
  return list;
}

std::optional<std::variant<std::string, StorageError>> FileStore::read(std::string_view owner,
                                                                      std::string_view id) const {
  const std::optional<StoredFile> file = get(owner, id);
  if (!file) return std::nullopt;
  const std::filesystem::path path = content_path(file->id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StorageError{fmt::format("cannot open {}: {}", path.string(), std::strerror(errno))};
  std::string content(static_cast<size_t>(file->bytes), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != content.size()) return StorageError{fmt::format("{} is shorter than recorded", path.string())};
  return content;
}

bool FileStore::remove(std::string_view owner, std::string_view id) {
  {
    std::lock_guard lock(mutex_);
    Statement s(db_, "DELETE FROM files WHERE id = ? AND owner = ?");
    s.bind(1, id).bind(2, owner);
    if (s.step() != SQLITE_DONE || sqlite3_changes(db_) == 0) return false;
  }
  // After the row: a crash here leaves bytes no row names, swept at the next open.
  std::error_code ec;
  std::filesystem::remove(content_path(id), ec);
  return true;
}

}  // namespace troupe::batch
