#include "actors/batch/batch_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace troupe::batch {
namespace {

std::filesystem::path journal_dir(const std::filesystem::path& storage_dir) { return storage_dir / "batches"; }

// Opens `path` for appending, cut to `length` bytes (created when missing).
std::variant<int, StorageError> open_cut(const std::filesystem::path& path, int64_t length) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return StorageError{fmt::format("cannot open {}: {}", path.string(), std::strerror(errno))};
  if (::ftruncate(fd, length) != 0 || ::lseek(fd, 0, SEEK_END) < 0 || ::fsync(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    return StorageError{fmt::format("cannot cut {} back to {} bytes: {}", path.string(), length, reason)};
  }
  return fd;
}

// Writes all of `bytes` at the end of `fd` and fsyncs; on failure cuts back to `length`.
std::optional<StorageError> append_to(int fd, const std::filesystem::path& path, int64_t length,
                                      std::string_view bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n == 0 ? "no space written" : std::strerror(errno);
      // Leave no partial line behind for readers of the journal (a crash before this is cut
      // back at the next open anyway).
      if (::ftruncate(fd, length) != 0 || ::lseek(fd, 0, SEEK_END) < 0) { /* cut at the next open */ }
      return StorageError{fmt::format("cannot write {}: {}", path.string(), reason)};
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    return StorageError{fmt::format("cannot flush {}: {}", path.string(), std::strerror(errno))};
  }
  return std::nullopt;
}

}  // namespace

std::variant<BatchJournal, StorageError> BatchJournal::open(const std::filesystem::path& storage_dir,
                                                            std::string_view batch_id,
                                                            int64_t committed_output_bytes,
                                                            int64_t committed_error_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(journal_dir(storage_dir), ec);
  if (ec) return StorageError{fmt::format("cannot create {}: {}", journal_dir(storage_dir).string(), ec.message())};
  BatchJournal journal;
  journal.output_path_ = journal_dir(storage_dir) / fmt::format("{}.output.jsonl", batch_id);
  journal.error_path_ = journal_dir(storage_dir) / fmt::format("{}.errors.jsonl", batch_id);
  auto output = open_cut(journal.output_path_, committed_output_bytes);
  if (auto* error = std::get_if<StorageError>(&output)) return *error;
  journal.output_fd_ = std::get<int>(output);
  auto errors = open_cut(journal.error_path_, committed_error_bytes);
  if (auto* error = std::get_if<StorageError>(&errors)) return *error;  // ~BatchJournal closes the first
  journal.error_fd_ = std::get<int>(errors);
  journal.output_bytes_ = committed_output_bytes;
  journal.error_bytes_ = committed_error_bytes;
  return journal;
}

void BatchJournal::remove(const std::filesystem::path& storage_dir, std::string_view batch_id) {
  std::error_code ec;
  std::filesystem::remove(journal_dir(storage_dir) / fmt::format("{}.output.jsonl", batch_id), ec);
  std::filesystem::remove(journal_dir(storage_dir) / fmt::format("{}.errors.jsonl", batch_id), ec);
}

BatchJournal::BatchJournal(BatchJournal&& other) noexcept { *this = std::move(other); }

BatchJournal& BatchJournal::operator=(BatchJournal&& other) noexcept {
  if (this == &other) return *this;
  close();
  output_path_ = std::move(other.output_path_);
  error_path_ = std::move(other.error_path_);
  output_fd_ = std::exchange(other.output_fd_, -1);
  error_fd_ = std::exchange(other.error_fd_, -1);
  output_bytes_ = other.output_bytes_;
  error_bytes_ = other.error_bytes_;
  return *this;
}

BatchJournal::~BatchJournal() { close(); }

void BatchJournal::close() {
  if (output_fd_ >= 0) ::close(std::exchange(output_fd_, -1));
  if (error_fd_ >= 0) ::close(std::exchange(error_fd_, -1));
}

std::optional<StorageError> BatchJournal::append(std::string_view output_lines, std::string_view error_lines) {
  if (!output_lines.empty()) {
    if (auto error = append_to(output_fd_, output_path_, output_bytes_, output_lines)) return error;
  }
  if (!error_lines.empty()) {
    if (auto error = append_to(error_fd_, error_path_, error_bytes_, error_lines)) {
      // The output lines are not committed either: cut them back too.
      if (!output_lines.empty() && (::ftruncate(output_fd_, output_bytes_) != 0 ||
                                    ::lseek(output_fd_, 0, SEEK_END) < 0)) { /* cut at the next open */ }
      return error;
    }
  }
  output_bytes_ += static_cast<int64_t>(output_lines.size());
  error_bytes_ += static_cast<int64_t>(error_lines.size());
  return std::nullopt;
}

}  // namespace troupe::batch
