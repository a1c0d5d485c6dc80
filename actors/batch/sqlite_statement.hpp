// What the durable stores (file_store, batch_store) run their SQL through: opening the shared
// database, a prepared statement with typed binds and reads (finalized on scope exit), and a
// transaction that rolls back unless committed.
//
// Thread-safety: one statement or transaction is used by one thread at a time, under its
// store's mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "actors/batch/file_store.hpp"

namespace troupe::batch {

class Statement {
 public:
  // A statement that does not prepare is a bug in our SQL (or a database that is not ours):
  // StorageOpenError, which open() turns into a refusal to start.
  Statement(sqlite3* db, std::string_view sql) {
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK) {
      throw StorageOpenError(fmt::format("sqlite: {} (in: {})", sqlite3_errmsg(db), sql));
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, std::string_view text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int64_t value) {
    sqlite3_bind_int64(stmt_, i, value);
    return *this;
  }
  Statement& bind_optional(int i, const std::optional<int64_t>& value) {
    value ? sqlite3_bind_int64(stmt_, i, *value) : sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& bind_optional(int i, const std::optional<std::string>& text) {
    return text ? bind(i, std::string_view(*text)) : (sqlite3_bind_null(stmt_, i), *this);
  }
  int step() { return sqlite3_step(stmt_); }
  // Runs the statement again with new binds.
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string text(int column) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p == nullptr ? std::string() : std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
  }
  std::optional<std::string> optional_text(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
    return text(column);
  }
  int64_t integer(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::optional<int64_t> optional_integer(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
    return integer(column);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Opens (creating it when `create`) the database at `path` in WAL mode and runs `schema`.
// synchronous=NORMAL: a commit survives the process being killed (the WAL is written before the
// call returns), not a power cut since the last checkpoint — the crash the durability promise
// is about. Throws StorageOpenError naming the path.
inline sqlite3* open_database(const std::filesystem::path& path, std::string_view schema, bool create) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    const std::string reason = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw StorageOpenError(fmt::format("cannot open {}: {}", path.string(), reason));
  }
  sqlite3_busy_timeout(db, 5000);
  const std::string setup = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; " + std::string(schema);
  char* error = nullptr;
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string reason = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    sqlite3_close(db);
    throw StorageOpenError(fmt::format("cannot set up {}: {}", path.string(), reason));
  }
  return db;
}

// BEGIN IMMEDIATE (the write lock at once: no deadlock upgrading a read) ... commit(); rolled
// back on scope exit unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {
    if (!run("BEGIN IMMEDIATE")) begin_error_ = failure("begin a transaction");
  }
  ~Transaction() {
    if (open_) run("ROLLBACK");
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Why BEGIN failed, if it did (then nothing else may run in it).
  const std::optional<StorageError>& begin_error() const { return begin_error_; }
  std::optional<StorageError> commit() {
    if (!run("COMMIT")) return failure("commit");
    open_ = false;
    return std::nullopt;
  }
  // `what` failed: the error with SQLite's reason (the transaction rolls back on scope exit).
  StorageError failure(std::string_view what) const {
    return StorageError{fmt::format("cannot {}: {}", what, sqlite3_errmsg(db_))};
  }

 private:
  bool run(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK; }

  sqlite3* db_;
  bool open_ = true;
  std::optional<StorageError> begin_error_;
};

}  // namespace troupe::batch
