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
  AdminConnection(AnySocket s, bool tcp) : socket(std::move(s)), is_tcp(tcp) {}
  AnySocket socket;
  bool is_tcp;  // commands must carry the token
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

  Impl(AdminServerConfig c, engine::Engine& e, DrainCallback d)
      : config(std::move(c)), engine(e), request_drain(std::move(d)) {}

  void listen_unix();
  void listen_tcp();
  asio::awaitable<void> accept_unix();
  asio::awaitable<void> accept_tcp();
  void admit(AnySocket socket, bool is_tcp);
  asio::awaitable<void> run_session(std::shared_ptr<AdminConnection> connection);
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
  connections.insert(connection);
  asio::co_spawn(threads->executor(), run_session(std::move(connection)), asio::detached);
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
  bool open = true;
  if (static_cast<int>(connections.size()) > config.max_connections) {
    std::string line = admin_error_reply("too many admin connections") + "\n";
    [[maybe_unused]] auto [ec, n] = co_await asio::async_write(socket, asio::buffer(line), kAsTuple);
    open = false;
  }
  while (open) {
    // NOTE: max_size is the line limit plus its '\n'; a longer line reports not_found.
    auto [read_ec, line_end] = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(buffer, max_line + 1), '\n', kAsTuple);
    std::string line;
    bool last = false;
    if (read_ec == asio::error::not_found) {
      std::string reply =
          admin_error_reply(fmt::format("line exceeds the limit of {} bytes; closing", max_line)) + "\n";
      [[maybe_unused]] auto [ec, n] = co_await asio::async_write(socket, asio::buffer(reply), kAsTuple);
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
    AdminOutcome outcome = execute_admin_command(command, engine);
    outcome.reply += '\n';
    auto [write_ec, written] = co_await asio::async_write(socket, asio::buffer(outcome.reply), kAsTuple);
    if (outcome.drain_requested && !drain_requested.exchange(true) && request_drain) {
      request_drain();
    }
    if (write_ec || last) break;
  }
  boost::system::error_code ignored;
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

AdminServer::AdminServer(AdminServerConfig config, engine::Engine& engine, DrainCallback request_drain)
    : impl_(std::make_unique<Impl>(std::move(config), engine, std::move(request_drain))) {}

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
