// Beast session and listener coroutines. Expected conditions (end of stream, timeouts, limits)
// come back as values through as_tuple; exceptions are not used for control flow.
#include "net/http_server.hpp"

#include <atomic>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

// One open connection. Owned by its session coroutine; the server keeps a weak view so stop()
// can close idle connections.
struct Connection {
  explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
  bool busy = false;  // a request is being handled; touched only on the connection's strand
};

HttpRequest to_plain_request(http::request<http::string_body>&& request) {
  HttpRequest plain;
  plain.method = std::string(request.method_string());
  plain.target = std::string(request.target());
  for (const auto& field : request) {
    plain.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  plain.body = std::move(request.body());
  return plain;
}

http::response<http::string_body> to_beast_response(HttpResponse&& plain, unsigned version,
                                                    bool keep_alive) {
  http::response<http::string_body> response{static_cast<http::status>(plain.status), version};
  response.set(http::field::server, "troupe");
  response.set(http::field::content_type, plain.content_type);
  for (auto& [name, value] : plain.headers) response.set(name, value);
  response.keep_alive(keep_alive);
  response.body() = std::move(plain.body);
  response.prepare_payload();
  return response;
}

// The response for a request Beast could not parse; the connection closes afterwards.
HttpResponse parse_error_response(const beast::error_code& ec, uint64_t max_body_bytes) {
  if (ec == http::error::body_limit) {
    return error_response(413, fmt::format("request body exceeds the limit of {} bytes",
                                           max_body_bytes),
                          "invalid_request_error", {}, "request_too_large");
  }
  if (ec == http::error::header_limit) {
    return error_response(431, "request headers are too large", "invalid_request_error", {},
                          "headers_too_large");
  }
  return error_response(400, fmt::format("malformed HTTP request: {}", ec.message()),
                        "invalid_request_error", {}, "bad_request");
}

}  // namespace

struct HttpServer::Impl {
  HttpServerConfig config;
  std::shared_ptr<const Router> router;
  asio::io_context io{std::max(1, config.io_threads)};
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::atomic<int> num_connections{0};
  std::mutex connections_mutex;
  std::set<std::shared_ptr<Connection>> connections;
  uint16_t bound_port = 0;
  bool started = false;
  bool stopped = false;

  Impl(HttpServerConfig c, std::shared_ptr<const Router> r)
      : config(std::move(c)), router(std::move(r)) {}

  void track(const std::shared_ptr<Connection>& connection) {
    std::lock_guard lock(connections_mutex);
    connections.insert(connection);
  }
  void untrack(const std::shared_ptr<Connection>& connection) {
    std::lock_guard lock(connections_mutex);
    connections.erase(connection);
  }

  asio::awaitable<void> run_session(std::shared_ptr<Connection> connection);
  asio::awaitable<void> run_listener();
};

asio::awaitable<void> HttpServer::Impl::run_session(std::shared_ptr<Connection> connection) {
  beast::tcp_stream& stream = connection->stream;
  beast::flat_buffer buffer;
  bool first_request = true;
  while (!stopping.load(std::memory_order_acquire)) {
    // Between requests the idle timeout applies; once bytes arrive, the read timeout.
    stream.expires_after(first_request ? config.read_timeout : config.keep_alive_timeout);
    http::request_parser<http::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    parser.header_limit(config.max_header_bytes);
    auto [read_ec, read_bytes] = co_await http::async_read(stream, buffer, parser, kAsTuple);
    first_request = false;
    if (read_ec == http::error::end_of_stream || read_ec == asio::error::operation_aborted ||
        read_ec == beast::error::timeout || read_ec == asio::error::connection_reset ||
        read_ec == asio::error::eof) {
      break;
    }
    connection->busy = true;
    HttpResponse plain;
    unsigned version = 11;
    bool keep_alive = false;
    if (read_ec) {
      plain = parse_error_response(read_ec, config.max_body_bytes);
    } else {
      http::request<http::string_body> request = parser.release();
      version = request.version();
      keep_alive = request.keep_alive() && !stopping.load(std::memory_order_acquire);
      plain = router->handle(to_plain_request(std::move(request)));
    }
    http::response<http::string_body> response =
        to_beast_response(std::move(plain), version, keep_alive);
    stream.expires_after(config.read_timeout);
    auto [write_ec, written] = co_await http::async_write(stream, response, kAsTuple);
    connection->busy = false;
    if (write_ec || !keep_alive) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream.socket().close(ignored);
  untrack(connection);
  num_connections.fetch_sub(1, std::memory_order_acq_rel);
}

asio::awaitable<void> HttpServer::Impl::run_listener() {
  while (!stopping.load(std::memory_order_acquire)) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(io), kAsTuple);
    if (ec == asio::error::operation_aborted) break;
    if (ec) {
      spdlog::warn("http: accept failed: {}", ec.message());
      continue;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // streamed tokens must not wait for Nagle
    auto connection = std::make_shared<Connection>(std::move(socket));
    track(connection);
    num_connections.fetch_add(1, std::memory_order_acq_rel);
    asio::co_spawn(connection->stream.get_executor(), run_session(connection), asio::detached);
  }
}

HttpServer::HttpServer(HttpServerConfig config, std::shared_ptr<const Router> router)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(router))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  Impl& s = *impl_;
  beast::error_code ec;
  const auto address = asio::ip::make_address(s.config.host, ec);
  if (ec) {
    throw std::system_error(ec, fmt::format("invalid listen address '{}'", s.config.host));
  }
  const tcp::endpoint endpoint{address, s.config.port};
  s.acceptor.open(endpoint.protocol());
  s.acceptor.set_option(asio::socket_base::reuse_address(true));
  s.acceptor.bind(endpoint, ec);
  if (ec) {
    throw std::system_error(ec, fmt::format("cannot listen on {}:{}", s.config.host, s.config.port));
  }
  s.acceptor.listen(asio::socket_base::max_listen_connections);
  s.bound_port = s.acceptor.local_endpoint().port();
  asio::co_spawn(s.acceptor.get_executor(), [impl = impl_.get()] { return impl->run_listener(); },
                 asio::detached);
  for (int i = 0; i < std::max(1, s.config.io_threads); ++i) {
    s.threads.emplace_back([&s] { s.io.run(); });
  }
  s.started = true;
}

uint16_t HttpServer::port() const { return impl_->bound_port; }

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.stopping.store(true, std::memory_order_release);
  asio::post(s.io, [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
  });
  // Idle connections close now; busy ones finish their response first (keep-alive is off).
  {
    std::lock_guard lock(s.connections_mutex);
    for (const auto& connection : s.connections) {
      asio::post(connection->stream.get_executor(), [connection] {
        if (!connection->busy) connection->stream.cancel();
      });
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + s.config.shutdown_grace;
  while (s.num_connections.load(std::memory_order_acquire) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.io.stop();
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
}

}  // namespace troupe::net
