// The admin socket (docs/design.md §4): a Unix domain socket, mode 0600, one JSON command per line
// and one JSON reply per line (protocol in admin_protocol.hpp), plus an optional TCP listener
// that is off by default, bound to loopback unless configured, and refuses every command without
// the bearer token read from a file. Asio stays inside admin_server.cpp (pimpl).
//
// Connections that send nothing must not lock operators out (issue 14): a connection with no
// complete command for idle_timeout is closed (a running `watch` is not idle), and a new
// connection at max_connections closes the connection idle the longest instead of being refused.
//
// Thread-safety: construct, start() and stop() from one controlling thread (main). Sessions run
// on the server's own io thread, which is also where the drain callback is called.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "actors/engine/engine.hpp"
#include "net/admin_protocol.hpp"

namespace troupe::net {

struct AdminTcpConfig {
  bool enabled = false;
  std::string host = "127.0.0.1";  // a non-loopback address is allowed but logged as a warning
  uint16_t port = 0;               // 0 picks a free port (see AdminServer::tcp_port())
  std::filesystem::path token_file;  // required when enabled; its trimmed content is the token
};

struct AdminServerConfig {
  bool enabled = true;  // for the wiring (troupe serve); AdminServer itself does not read it
  std::filesystem::path socket_path;  // empty: default_admin_socket_path()
  AdminTcpConfig tcp;
  size_t max_line_bytes = 64u << 10;  // a longer line gets an error and the connection closes
  // At the cap, a new connection closes the one idle the longest; when none is idle (all run a
  // command or a watch) the new one gets an error and is closed.
  int max_connections = 32;
  // No complete command line for this long (a `watch` streaming is not idle): the connection
  // gets an error line and is closed.
  std::chrono::milliseconds idle_timeout{60'000};
};

class AdminServer {
 public:
  // Asked for by {"cmd":"drain"}: the process should stop admitting, finish in-flight requests
  // and exit 0. Called on the admin io thread after the reply is written, at most once; it must
  // not block and must not call stop() (post to the main thread instead).
  using DrainCallback = std::function<void()>;

  // `sources`: what `batches` shows and what `reload` does (admin_protocol.hpp; empty: none).
  AdminServer(AdminServerConfig config, engine::Engine& engine, DrainCallback request_drain,
              AdminSources sources = {});
  ~AdminServer();  // stop()
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Claims the socket path (a stale socket is replaced; a live one or a non-socket file is an
  // error), listens, and starts the io thread. Throws std::runtime_error / std::system_error with
  // a message naming the path or address ("another troupe is serving on PATH").
  void start();

  // Closes the listeners and every connection (watches end), joins the io thread, and removes
  // the socket file if it is still ours. Idempotent.
  void stop();

  // Valid after start().
  const std::filesystem::path& socket_path() const;
  uint16_t tcp_port() const;  // 0 when the TCP listener is off

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::net
