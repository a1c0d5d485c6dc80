// A prepared SQLite statement with typed binds and reads, finalized on scope exit: what the
// durable stores (file_store, batch_store) run their SQL through.
//
// Thread-safety: one statement is used by one thread at a time, under its store's mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
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

}  // namespace troupe::batch
