// The admin socket's wire protocol as pure functions: one JSON command per line in, one JSON
// reply per line out (docs/design.md §4). AdminServer owns the sockets; everything
// that decides what a line means and what the reply says lives here, so it is tested without I/O.
//
// Thread-safety: pure functions, except execute_admin_command, which calls the Engine facade
// (callable from any thread) and spdlog's global level.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/batch/batch_stats.hpp"
#include "actors/batch/batch_store.hpp"
#include "actors/engine/engine.hpp"
#include "net/rate_limits.hpp"

namespace troupe::net {

inline constexpr std::chrono::milliseconds kMinWatchInterval{50};
inline constexpr std::chrono::milliseconds kDefaultWatchInterval{1000};

struct AdminStats {};
struct AdminWatch {
  std::chrono::milliseconds interval = kDefaultWatchInterval;
};
struct AdminRequests {};
struct AdminCancel {
  engine::RequestId request_id = 0;
};
struct AdminDrain {};
struct AdminLogLevel {
  std::string level;  // validated: trace|debug|info|warn|error|critical|off
};
struct AdminFlushPrefixCache {};
struct AdminBatches {};
struct AdminReload {};
struct AdminKeys {};

using AdminCommand =
    std::variant<AdminStats, AdminWatch, AdminRequests, AdminCancel, AdminDrain, AdminLogLevel,
                 AdminFlushPrefixCache, AdminBatches, AdminReload, AdminKeys>;

// What `batches` shows (issue 40): the newest batches of every owner and the batch actor's
// counters. The source runs on the admin io thread (a short SQLite read).
struct AdminBatchesView {
  std::vector<batch::BatchRecord> batches;
  batch::BatchStats stats;
};
using AdminBatchesSource = std::function<AdminBatchesView()>;

// What `reload` did (issue 41): each credential source re-read (the API keys, the TLS
// certificate), whether its new version is in force, and what was read or why it was refused
// (the old version then stays). Same as SIGHUP.
struct ReloadPart {
  std::string what;    // "api_keys", "tls"
  bool ok = false;     // the new version is in force (or there was nothing to reload)
  std::string detail;  // "3 keys", "certificate server.crt", or the refusal's message
};
using AdminReloadAction = std::function<std::vector<ReloadPart>()>;

// The server's parts the admin commands reach beyond the engine; an empty one makes its command
// answer that this server has none.
struct AdminSources {
  AdminBatchesSource batches;  // `batches` (runs on the admin io thread: a short SQLite read)
  AdminReloadAction reload;    // `reload` (runs on the admin io thread: reads a few small files)
  // `keys`: every API key's limits, what is left of them and its use since start (never a key).
  std::function<std::vector<KeyUsage>()> keys;
};

// Why a line was refused. kUnauthorized closes a TCP connection; the others leave it usable.
enum class AdminErrorKind : uint8_t { kBadRequest, kUnauthorized };

struct AdminError {
  AdminErrorKind kind = AdminErrorKind::kBadRequest;
  std::string message;
};

// Parses one line (without its '\n'). When `required_token` is set (the TCP listener), the
// object must carry "token" equal to it, compared in constant time; a line without it is
// kUnauthorized whatever else it says (bad JSON included, so nothing is revealed unauthenticated).
std::variant<AdminCommand, AdminError> parse_admin_command(
    std::string_view line, const std::optional<std::string>& required_token = std::nullopt);

// Equality of two secrets in time that depends only on their lengths.
bool constant_time_equals(std::string_view a, std::string_view b);

// Reply lines (JSON text without the trailing '\n').
std::string admin_error_reply(std::string_view message);
std::string admin_stats_reply(const engine::EngineStats& stats, const engine::ModelCard& card);
std::string admin_requests_reply(const std::vector<engine::RequestInfo>& requests);
std::string admin_batches_reply(const AdminBatchesView& view);
std::string admin_reload_reply(const std::vector<ReloadPart>& parts);
std::string admin_keys_reply(const std::vector<KeyUsage>& keys);

struct AdminOutcome {
  std::string reply;
  // `drain` was asked for: the server calls its drain callback once the reply is written.
  bool drain_requested = false;
};

// Runs every command but `watch` (a stream of stats replies, run by the server).
AdminOutcome execute_admin_command(const AdminCommand& command, engine::Engine& engine,
                                   const AdminSources& sources = {});

// trace|debug|info|warn|error|critical|off (spdlog's names; "warning" and "err" are accepted too).
bool is_admin_log_level(std::string_view level);

}  // namespace troupe::net
