// Admin listener and session coroutines on one io thread. A session reads newline-delimited
// commands with a size limit, answers each with one line, and streams `watch` until the client
// closes or sends another line. Expected conditions (EOF, limits, cancellation) come back as
// values through as_tuple; exceptions are only start-up failures.
#include "net/admin_server.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/runtime/executor_threads.hpp"
#include "net/admin_protocol.hpp"
#include "net/admin_socket_file.hpp"

namespace troupe::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using unix_stream = asio::local::stream_protocol;
using AnySocket = asio::generic::stream_protocol::socket;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

struct AdminConnection {
  AdminConnection(AnySocket s, bool tcp)
      : socket(std::move(s)), is_tcp(tcp), idle_timer(socket.get_executor()) {}
  AnySocket socket;
  bool is_tcp;  // commands must carry the token
  // The rest is touched only on the io thread.
  asio::steady_timer idle_timer;  // armed while the session waits for a command line
  std::chrono::steady_clock::time_point idle_since;
  bool idle = false;      // waiting for a command line (not running one, not watching)
  uint64_t num_waits = 0;  // tells the current wait's timer from a stale one
  // Set when the server closes the connection (idle timeout, room for a newcomer, refused): the
  // session tells the client why and ends. Such a connection no longer counts toward the cap.
  std::optional<std::string> closing_reason;
};

std::string read_token_file(const std::filesystem::path& path) {
  if (path.empty()) throw std::runtime_error("admin tcp: token_file is required when tcp is enabled");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(fmt::format("admin tcp: cannot read token file {}: {}", path.string(),
                                         std::strerror(errno)));
  }
  std::ostringstream content;
  content << in.rdbuf();
  std::string token = content.str();
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  token.erase(token.begin(), std::find_if(token.begin(), token.end(), not_space));
  token.erase(std::find_if(token.rbegin(), token.rend(), not_space).base(), token.end());
  if (token.empty()) {
    throw std::runtime_error(fmt::format("admin tcp: token file {} is empty", path.string()));
  }
  return token;
}

// Trims surrounding ASCII whitespace (a trailing '\r' from telnet-like clients included).
std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

struct AdminServer::Impl {
  AdminServerConfig config;
  engine::Engine& engine;
  DrainCallback request_drain;
  AdminSources sources;

  std::unique_ptr<actors::runtime::ExecutorThreads> threads;
  std::optional<unix_stream::acceptor> unix_acceptor;
  std::optional<tcp::acceptor> tcp_acceptor;
  std::optional<std::string> token;
  std::filesystem::path socket_path;
  ino_t socket_inode = 0;
  uint16_t bound_tcp_port = 0;
  std::atomic<bool> drain_requested{false};
  bool started = false;
  bool stopped = false;

  // Touched only on the io thread.
  std::set<std::shared_ptr<AdminConnection>> connections;

  Impl(AdminServerConfig c, engine::Engine& e, DrainCallback d, AdminSources s)
      : config(std::move(c)), engine(e), request_drain(std::move(d)), sources(std::move(s)) {}

  void listen_unix();
  void listen_tcp();
  asio::awaitable<void> accept_unix();
  asio::awaitable<void> accept_tcp();
  void admit(AnySocket socket, bool is_tcp);
  // At max_connections, closes the connection idle the longest. False: none is idle, so the
  // newcomer must be refused.
  bool make_room();
  // Closes the connection for `reason`, which its session tells the client.
  void close_for(AdminConnection& connection, std::string reason);
  // Idle time runs between these two, and closes the connection at idle_timeout.
  void begin_idle(const std::shared_ptr<AdminConnection>& connection);
  void end_idle(AdminConnection& connection);
  asio::awaitable<void> run_session(std::shared_ptr<AdminConnection> connection);
  // Sends {"ok":false,"error":...} (best effort, the connection is closing anyway).
  asio::awaitable<void> send_error(AdminConnection& connection, std::string message);
  // Streams stats lines until the client closes or sends something. False: the write failed.
  asio::awaitable<bool> run_watch(std::shared_ptr<AdminConnection> connection,
                                  std::chrono::milliseconds interval);
  void remove_socket_file();
};

void AdminServer::Impl::listen_unix() {
  socket_path = config.socket_path.empty() ? default_admin_socket_path() : config.socket_path;
  claim_socket_path(socket_path);
  // Bind under a temporary name, restrict it to 0600, listen, then rename it into place: the
  // socket is never reachable at `socket_path` with looser permissions, and a stale file that
  // reappeared meanwhile is replaced atomically.
  std::filesystem::path temporary = socket_path;
  temporary += fmt::format(".{}.tmp", ::getpid());
  const bool rename_into_place = temporary.native().size() <= kMaxUnixSocketPathBytes;
  const std::filesystem::path& bind_path = rename_into_place ? temporary : socket_path;
  if (rename_into_place) ::unlink(temporary.c_str());
  unix_acceptor.emplace(threads->context());
  unix_acceptor->open(unix_stream());
  boost::system::error_code ec;
  unix_acceptor->bind(unix_stream::endpoint(bind_path.native()), ec);
  if (ec) throw std::system_error(ec, fmt::format("admin socket {}: cannot bind", bind_path.string()));
  if (::chmod(bind_path.c_str(), 0600) != 0) {
    const int error = errno;
    ::unlink(bind_path.c_str());
    throw std::system_error(error, std::generic_category(),
                            fmt::format("admin socket {}: cannot chmod 0600", bind_path.string()));
  }
  unix_acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (!ec && rename_into_place && ::rename(temporary.c_str(), socket_path.c_str()) != 0) {
    ec.assign(errno, boost::system::generic_category());
  }
  if (ec) {
    ::unlink(bind_path.c_str());
    throw std::system_error(ec, fmt::format("admin socket {}: cannot listen", socket_path.string()));
  }
  struct stat info {};
  if (::stat(socket_path.c_str(), &info) == 0) socket_inode = info.st_ino;
}

void AdminServer::Impl::listen_tcp() {
  token = read_token_file(config.tcp.token_file);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(config.tcp.host, ec);
  if (ec) throw std::system_error(ec, fmt::format("admin tcp: invalid address '{}'", config.tcp.host));
  if (!address.is_loopback()) {
    spdlog::warn("admin tcp listener on non-loopback address {} (token required)", config.tcp.host);
  }
  const tcp::endpoint endpoint{address, config.tcp.port};
  tcp_acceptor.emplace(threads->context());
  tcp_acceptor->open(endpoint.protocol());
  tcp_acceptor->set_option(asio::socket_base::reuse_address(true));
  tcp_acceptor->bind(endpoint, ec);
  if (!ec) tcp_acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::system_error(
        ec, fmt::format("admin tcp: cannot listen on {}:{}", config.tcp.host, config.tcp.port));
  }
  bound_tcp_port = tcp_acceptor->local_endpoint().port();
}

void AdminServer::Impl::admit(AnySocket socket, bool is_tcp) {
  auto connection = std::make_shared<AdminConnection>(std::move(socket), is_tcp);
  if (!make_room()) connection->closing_reason = "too many admin connections";
  connections.insert(connection);
  asio::co_spawn(threads->executor(), run_session(std::move(connection)), asio::detached);
}

bool AdminServer::Impl::make_room() {
  int num_open = 0;
  AdminConnection* longest_idle = nullptr;
  for (const auto& connection : connections) {
    if (connection->closing_reason) continue;  // on its way out
    ++num_open;
    if (connection->idle && (!longest_idle || connection->idle_since < longest_idle->idle_since)) {
      longest_idle = connection.get();
    }
  }
  if (num_open < config.max_connections) return true;
  if (!longest_idle) return false;
  spdlog::info("admin: {} connections open; closing the one idle the longest for a newcomer",
               num_open);
  close_for(*longest_idle,
            "closed to make room for a new admin connection (admin.max_connections reached); "
            "this one was idle the longest");
  return true;
}

void AdminServer::Impl::close_for(AdminConnection& connection, std::string reason) {
  connection.closing_reason = std::move(reason);
  boost::system::error_code ignored;
  connection.socket.cancel(ignored);  // the session's pending read ends with operation_aborted
}

void AdminServer::Impl::begin_idle(const std::shared_ptr<AdminConnection>& connection) {
  connection->idle = true;
  connection->idle_since = std::chrono::steady_clock::now();
  const uint64_t wait = ++connection->num_waits;
  connection->idle_timer.expires_after(config.idle_timeout);
  connection->idle_timer.async_wait(
      [this, weak = std::weak_ptr<AdminConnection>(connection), wait](
          const boost::system::error_code& ec) {
        const std::shared_ptr<AdminConnection> idle = weak.lock();
        // NOTE: a command line may have completed the read already, its handler queued behind
        // this one; `num_waits` only rules out timers of earlier waits.
        if (ec || !idle || !idle->idle || idle->num_waits != wait || idle->closing_reason) return;
        close_for(*idle, fmt::format("no command for {} ms (admin.idle_timeout_ms); closing",
                                     config.idle_timeout.count()));
      });
}

void AdminServer::Impl::end_idle(AdminConnection& connection) {
  connection.idle = false;
  connection.idle_timer.cancel();
}

asio::awaitable<void> AdminServer::Impl::send_error(AdminConnection& connection,
                                                    std::string message) {
  std::string line = admin_error_reply(message) + "\n";
  [[maybe_unused]] auto [ec, n] =
      co_await asio::async_write(connection.socket, asio::buffer(line), kAsTuple);
}

asio::awaitable<void> AdminServer::Impl::accept_unix() {
  while (true) {
    auto [ec, socket] = co_await unix_acceptor->async_accept(kAsTuple);
    if (ec == asio::error::operation_aborted || !unix_acceptor->is_open()) break;
    if (ec) {
      spdlog::warn("admin: accept failed: {}", ec.message());
      continue;
    }
    admit(AnySocket(std::move(socket)), false);
  }
}

asio::awaitable<void> AdminServer::Impl::accept_tcp() {
  while (true) {
    auto [ec, socket] = co_await tcp_acceptor->async_accept(kAsTuple);
    if (ec == asio::error::operation_aborted || !tcp_acceptor->is_open()) break;
    if (ec) {
      spdlog::warn("admin tcp: accept failed: {}", ec.message());
      continue;
    }
    admit(AnySocket(std::move(socket)), true);
  }
}

asio::awaitable<bool> AdminServer::Impl::run_watch(std::shared_ptr<AdminConnection> connection,
                                                   std::chrono::milliseconds interval) {
  // A read-readiness wait ends the watch: EOF (the client closed), an error, stop() closing the
  // socket, or a new command line. The handler owns the timer and flag it touches.
  auto timer = std::make_shared<asio::steady_timer>(threads->executor());
  auto client_spoke = std::make_shared<bool>(false);
  connection->socket.async_wait(AnySocket::wait_read,
                                [timer, client_spoke](const boost::system::error_code&) {
                                  *client_spoke = true;
                                  timer->cancel();
                                });
  bool ok = true;
  while (!*client_spoke) {
    std::string line = admin_stats_reply(engine.stats(), engine.model_card());
    line += '\n';
    auto [write_ec, written] = co_await asio::async_write(connection->socket, asio::buffer(line), kAsTuple);
    if (write_ec) {
      ok = false;
      break;
    }
    if (*client_spoke) break;
    timer->expires_after(interval);
    [[maybe_unused]] auto [timer_ec] = co_await timer->async_wait(kAsTuple);
  }
  if (!*client_spoke) {
    boost::system::error_code ignored;
    connection->socket.cancel(ignored);  // ends the readiness wait before the socket is reused
  }
  co_return ok;
}

asio::awaitable<void> AdminServer::Impl::run_session(std::shared_ptr<AdminConnection> connection) {
  AnySocket& socket = connection->socket;
  const size_t max_line = config.max_line_bytes;
  std::string buffer;
  while (!connection->closing_reason) {
    begin_idle(connection);
    // NOTE: max_size is the line limit plus its '\n'; a longer line reports not_found.
    auto [read_ec, line_end] = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(buffer, max_line + 1), '\n', kAsTuple);
    end_idle(*connection);
    if (connection->closing_reason) break;
    std::string line;
    bool last = false;
    if (read_ec == asio::error::not_found) {
      std::string message = fmt::format("line exceeds the limit of {} bytes; closing", max_line);
      co_await send_error(*connection, std::move(message));
      break;
    }
    if (read_ec) {
      // A final command without its '\n' is still answered when the client half-closes.
      if (read_ec != asio::error::eof || trim(buffer).empty()) break;
      line = std::move(buffer);
      buffer.clear();
      last = true;
    } else {
      line = buffer.substr(0, line_end - 1);
      buffer.erase(0, line_end);
    }
    if (trim(line).empty()) continue;

    auto parsed = parse_admin_command(trim(line), connection->is_tcp ? token : std::nullopt);
    if (auto* error = std::get_if<AdminError>(&parsed)) {
      std::string reply = admin_error_reply(error->message) + "\n";
      auto [ec, n] = co_await asio::async_write(socket, asio::buffer(reply), kAsTuple);
      if (ec || error->kind == AdminErrorKind::kUnauthorized) break;
      continue;
    }
    const AdminCommand& command = std::get<AdminCommand>(parsed);
    if (const auto* watch = std::get_if<AdminWatch>(&command)) {
      const bool written = co_await run_watch(connection, watch->interval);
      if (!written) break;
      continue;
    }
    AdminOutcome outcome = execute_admin_command(command, engine, sources);
    outcome.reply += '\n';
    auto [write_ec, written] = co_await asio::async_write(socket, asio::buffer(outcome.reply), kAsTuple);
    if (outcome.drain_requested && !drain_requested.exchange(true) && request_drain) {
      request_drain();
    }
    if (write_ec || last) break;
  }
  if (connection->closing_reason) {
    std::string reason = *connection->closing_reason;  // a named value: see TOOLCHAIN.md pitfall 1
    co_await send_error(*connection, std::move(reason));
  }
  boost::system::error_code ignored;
  connection->idle_timer.cancel();
  socket.shutdown(AnySocket::shutdown_both, ignored);
  socket.close(ignored);
  connections.erase(connection);
}

void AdminServer::Impl::remove_socket_file() {
  // Only our own socket: a successor may have replaced a file we no longer listen on.
  struct stat info {};
  if (socket_inode != 0 && ::lstat(socket_path.c_str(), &info) == 0 && info.st_ino == socket_inode) {
    ::unlink(socket_path.c_str());
  }
}

AdminServer::AdminServer(AdminServerConfig config, engine::Engine& engine, DrainCallback request_drain,
                         AdminSources sources)
    : impl_(std::make_unique<Impl>(std::move(config), engine, std::move(request_drain), std::move(sources))) {}

AdminServer::~AdminServer() { stop(); }

void AdminServer::start() {
  Impl& s = *impl_;
  if (s.started) return;
  s.threads = std::make_unique<actors::runtime::ExecutorThreads>("admin-io", 1);
  try {
    s.listen_unix();
    if (s.config.tcp.enabled) s.listen_tcp();
  } catch (...) {
    boost::system::error_code ignored;
    if (s.unix_acceptor) s.unix_acceptor->close(ignored);
    if (s.tcp_acceptor) s.tcp_acceptor->close(ignored);
    s.remove_socket_file();
    s.threads->join(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    s.unix_acceptor.reset();
    s.tcp_acceptor.reset();
    s.threads.reset();
    throw;
  }
  Impl* impl = impl_.get();
  asio::co_spawn(s.threads->executor(), [impl] { return impl->accept_unix(); }, asio::detached);
  if (s.tcp_acceptor) {
    asio::co_spawn(s.threads->executor(), [impl] { return impl->accept_tcp(); }, asio::detached);
  }
  s.started = true;
  if (s.tcp_acceptor) {
    spdlog::info("admin socket on {} and tcp {}:{} (token required)", s.socket_path.string(),
                 s.config.tcp.host, s.bound_tcp_port);
  } else {
    spdlog::info("admin socket on {}", s.socket_path.string());
  }
}

void AdminServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  asio::post(s.threads->executor(), [impl = impl_.get()] {
    boost::system::error_code ignored;
    if (impl->unix_acceptor) impl->unix_acceptor->close(ignored);
    if (impl->tcp_acceptor) impl->tcp_acceptor->close(ignored);
    for (const auto& connection : impl->connections) {
      connection->idle_timer.cancel();  // a pending timer would keep the io thread running
      connection->socket.shutdown(AnySocket::shutdown_both, ignored);
      connection->socket.close(ignored);
    }
  });
  const auto outcome = s.threads->join(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (outcome == actors::runtime::JoinOutcome::kForced) {
    spdlog::warn("admin: io thread did not finish in time; abandoned its sessions");
  }
  s.remove_socket_file();
  s.connections.clear();
  s.unix_acceptor.reset();
  s.tcp_acceptor.reset();
  s.threads.reset();
}

const std::filesystem::path& AdminServer::socket_path() const { return impl_->socket_path; }

uint16_t AdminServer::tcp_port() const { return impl_->bound_tcp_port; }

}  // namespace troupe::net
