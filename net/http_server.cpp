// Beast session coroutines (the accept loop is in http_listener.cpp). Expected conditions (end
// of stream, timeouts, limits) come back as values through as_tuple; exceptions are not used
// for control flow.
#include "net/http_server.hpp"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <type_traits>
#include <mutex>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <openssl/ssl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "net/http_framing.hpp"
#include "net/http_listener.hpp"
#include "net/http_message.hpp"
#include "net/response_stream.hpp"
#include "net/ws_session.hpp"

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

// One open connection. Owned by its session coroutine; the server also tracks it so stop() can
// close idle connections and begin_shutdown() can reach its WebSocket session.
std::atomic<uint64_t> next_connection_id{1};

// What the server tracks of a connection, whatever its stream (plain TCP or TLS).
struct ConnectionBase {
  explicit ConnectionBase(asio::any_io_executor strand) : executor(std::move(strand)) {}
  virtual ~ConnectionBase() = default;
  // Cancels what the connection waits for (on its strand).
  virtual void cancel() = 0;
  const asio::any_io_executor executor;  // the connection's strand; may be read from any thread
  // Process-unique: a request names its connection (the fair-share client of last resort).
  const uint64_t id = next_connection_id.fetch_add(1, std::memory_order_relaxed);
  // The rest is touched only on the connection's strand.
  bool busy = false;  // a request is being handled (or the connection is a WebSocket session)
  std::shared_ptr<WsCloseRequest> websocket;  // set when the connection became a WebSocket
};

// `Stream` is beast::tcp_stream or TlsStream (ws_session.hpp); the session coroutines below are
// templates over it, instantiated for both in this file.
template <class Stream>
struct Connection final : ConnectionBase {
  Connection(asio::any_io_executor strand, Stream s,
             std::shared_ptr<asio::ssl::context> tls_context = nullptr)
      : ConnectionBase(std::move(strand)),
        tls_context(std::move(tls_context)),
        stream(std::move(s)) {}
  void cancel() override { beast::get_lowest_layer(stream).cancel(); }
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream); }
  // The certificate this connection was accepted with, kept while it lives even if a reload
  // replaced the server's (declared before `stream`, so it outlives it). An upgraded
  // WebSocket's stream keeps the OpenSSL context alive by itself: SSL_new takes a reference.
  std::shared_ptr<asio::ssl::context> tls_context;
  Stream stream;  // moved into the WebSocket session on upgrade
};

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, beast::tcp_stream>;


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

// Rings the session awake when its ResponseStream has something new (capacity 1: a pending ring
// is enough).
using Doorbell = asio::experimental::concurrent_channel<void(beast::error_code)>;

http::response<http::empty_body> stream_head(HttpResponse&& plain, unsigned version,
                                             bool keep_alive) {
  http::response<http::empty_body> head{static_cast<http::status>(plain.status), version};
  head.set(http::field::server, "troupe");
  head.set(http::field::content_type, plain.content_type);
  head.set(http::field::cache_control, "no-cache");
  for (auto& [name, value] : plain.headers) head.set(name, value);
  head.keep_alive(keep_alive);
  if (version >= 11) head.chunked(true);
  return head;
}

// True when the peer closed or reset the connection; bytes waiting (a pipelined request) are
// left in the socket.
bool peer_closed(tcp::socket& socket) {
  char byte = 0;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// Watches an otherwise idle socket while a response is being produced: EOF or a reset marks the
// client gone (which cancels its generation). Runs on the connection's strand.
// NOTE: over TLS a client's close_notify alert is data, so only the TCP close counts there.
template <class Stream>
void watch_for_disconnect(std::shared_ptr<Connection<Stream>> connection,
                          std::shared_ptr<ResponseStream> out) {
  tcp::socket& socket = connection->tcp().socket();
  socket.async_wait(tcp::socket::wait_read,
                    [connection, out = std::move(out)](const beast::error_code& ec) {
                      if (ec == asio::error::operation_aborted) return;
                      if (ec || peer_closed(connection->tcp().socket())) out->mark_client_gone();
                    });
}

// The end of a connection that needs no answer: the peer left, a timeout, or stop().
bool connection_ended(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::operation_aborted ||
         ec == beast::error::timeout || ec == asio::error::connection_reset ||
         ec == asio::error::eof;
}

// A TLS server context of modern defaults (TLS 1.2+) over the certificate chain and key files.
std::shared_ptr<asio::ssl::context> make_tls_context(const HttpServerConfig& config) {
  if (config.ssl_cert_file.empty() != config.ssl_key_file.empty()) {
    throw TlsConfigError("TLS needs both a certificate (--ssl-cert, http.ssl_cert_file) and its "
                         "private key (--ssl-key, http.ssl_key_file)");
  }
  for (const std::string* file : {&config.ssl_cert_file, &config.ssl_key_file}) {
    if (!std::ifstream(*file)) {
      throw TlsConfigError(fmt::format("TLS: cannot read '{}': {}", *file, std::strerror(errno)));
    }
  }
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  beast::error_code ec;
  context->use_certificate_chain_file(config.ssl_cert_file, ec);
  if (ec) {
    throw TlsConfigError(fmt::format("TLS: '{}' is not a usable PEM certificate: {}",
                                     config.ssl_cert_file, ec.message()));
  }
  context->use_private_key_file(config.ssl_key_file, asio::ssl::context::pem, ec);
  if (ec) {
    throw TlsConfigError(fmt::format(
        "TLS: '{}' is not a usable PEM private key for the certificate '{}': {}",
        config.ssl_key_file, config.ssl_cert_file, ec.message()));
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    throw TlsConfigError(fmt::format("TLS: the private key '{}' does not match the certificate '{}'",
                                     config.ssl_key_file, config.ssl_cert_file));
  }
  return context;
}

// One request's worth of reading: what the session does next.
struct RequestRead {
  bool connection_ended = false;        // nothing to answer: leave
  std::optional<HttpResponse> refusal;  // answer this and close (parse, framing or auth error)
  std::string key_name;                 // the API key that authenticated the request
  bool key_is_admin = false;
};

// A refused request's body is read (and dropped) when it is at most this large, so that closing
// the connection after the 401 does not reset it under the client's feet with unread bytes;
// a larger (or chunked) one is not read at all.
constexpr uint64_t kMaxUnauthenticatedBodyBytes = 64u << 10;

// How long a TLS connection's end waits for the client's close_notify.
constexpr std::chrono::milliseconds kTlsShutdownTimeout{1'000};

std::string_view header_value(const http::request<http::string_body>& header, http::field name) {
  const auto it = header.find(name);
  if (it == header.end()) return {};
  return {it->value().data(), it->value().size()};
}

// The access decision for a parsed request header (access_policy.hpp).
AccessDecision check_access(const AccessPolicy& policy,
                            const http::request<http::string_body>& header) {
  const std::string_view target(header.target().data(), header.target().size());
  const std::string_view protocols = beast::websocket::is_upgrade(header)
                                         ? header_value(header, http::field::sec_websocket_protocol)
                                         : std::string_view{};
  return policy.check(target.substr(0, target.find('?')),
                      header_value(header, http::field::authorization), protocols);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerConfig config;
  std::shared_ptr<const Router> router;
  std::shared_ptr<ConnectionMetrics> metrics;
  asio::io_context io{std::max(1, config.io_threads)};
  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::atomic<bool> shutting_down{false};  // begin_shutdown() was called: no new WebSockets
  std::atomic<int> num_connections{0};
  HttpListener listener{io, config.max_connections, num_connections, metrics,
                        [this](tcp::socket socket) { admit(std::move(socket)); }};
  std::mutex connections_mutex;
  std::set<std::shared_ptr<ConnectionBase>> connections;
  std::map<std::string, WebSocketFactory, std::less<>> websocket_routes;
  // Replaced whole by a reload (SIGHUP, the admin's `reload`) while io threads read them: each
  // accept and each request header takes the current one under the mutex (a pointer copy).
  mutable std::mutex credentials_mutex;
  std::shared_ptr<asio::ssl::context> tls;  // set when the server speaks TLS; never modified
  std::shared_ptr<const AccessPolicy> access = std::make_shared<AccessPolicy>();

  std::shared_ptr<asio::ssl::context> current_tls() const {
    std::lock_guard lock(credentials_mutex);
    return tls;
  }
  std::shared_ptr<const AccessPolicy> current_access() const {
    std::lock_guard lock(credentials_mutex);
    return access;
  }
  uint16_t bound_port = 0;
  bool started = false;
  bool stopped = false;

  Impl(HttpServerConfig c, std::shared_ptr<const Router> r, std::shared_ptr<ConnectionMetrics> m)
      : config(std::move(c)),
        router(std::move(r)),
        metrics(m ? std::move(m) : std::make_shared<ConnectionMetrics>()) {}

  void track(const std::shared_ptr<ConnectionBase>& connection) {
    std::lock_guard lock(connections_mutex);
    connections.insert(connection);
  }
  void untrack(const std::shared_ptr<ConnectionBase>& connection) {
    std::lock_guard lock(connections_mutex);
    connections.erase(connection);
  }

  template <class Stream>
  asio::awaitable<void> run_session(std::shared_ptr<Connection<Stream>> connection);
  // The session's end: TLS close_notify when `tls_goodbye` (and the server is not stopping),
  // the socket closed unless a WebSocket session took it (`upgraded`), the counts updated.
  template <class Stream>
  asio::awaitable<void> close_session(std::shared_ptr<Connection<Stream>> connection,
                                      bool tls_goodbye, bool upgraded);
  // TLS only: the handshake, within read_timeout from the accept. False: the connection failed.
  asio::awaitable<bool> handshake(TlsStream& stream);
  // Waits (up to the keep-alive timeout) for the first byte of the connection's next request.
  // False: the connection ended first.
  template <class Stream>
  asio::awaitable<bool> await_next_request(Stream& stream, beast::flat_buffer& buffer);
  // Reads one request's header, checks its framing, then reads its body, all within one
  // read_timeout that starts now.
  template <class Stream>
  asio::awaitable<RequestRead> read_request(Stream& stream, beast::flat_buffer& buffer,
                                            http::request_parser<http::string_body>& parser);
  // The WebSocket route an upgrade request asks for; null for anything else.
  const WebSocketFactory* websocket_route(const http::request<http::string_body>& request) const;
  // Writes what `out` produces until it is complete. False: the connection must close.
  template <class Stream>
  asio::awaitable<bool> serve_exchange(std::shared_ptr<Connection<Stream>> connection,
                                       std::shared_ptr<ResponseStream> out, unsigned version,
                                       bool keep_alive);
  template <class Stream>
  asio::awaitable<bool> write_bytes(Stream& stream, std::string bytes);
  // Starts serving an accepted connection (on the listener strand).
  void admit(tcp::socket socket);
};

template <class Stream>
asio::awaitable<void> HttpServer::Impl::run_session(std::shared_ptr<Connection<Stream>> connection) {
  Stream& stream = connection->stream;
  beast::flat_buffer buffer;
  bool first_request = true;
  bool upgraded = false;
  bool open = true;
  if constexpr (kIsTls<Stream>) {
    open = co_await handshake(stream);
  }
  while (open && !stopping.load(std::memory_order_acquire)) {
    // NOTE: a connection's first request gets read_timeout from the accept; a pipelined one
    // (bytes already buffered) from now.
    if (!first_request && buffer.size() == 0) {
      const bool started = co_await await_next_request(stream, buffer);
      if (!started) break;
    }
    first_request = false;
    http::request_parser<http::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    parser.header_limit(config.max_header_bytes);
    RequestRead read = co_await read_request(stream, buffer, parser);
    if (read.connection_ended) break;
    connection->busy = true;
    unsigned version = 11;
    bool keep_alive = false;
    auto out = std::make_shared<ResponseStream>(config.max_stream_buffer_bytes);
    if (read.refusal) {
      out->respond(std::move(*read.refusal));
    } else {
      http::request<http::string_body> request = parser.release();
      version = request.version();
      const WebSocketFactory* websocket = websocket_route(request);
      if (websocket && shutting_down.load(std::memory_order_acquire)) {
        // NOTE: checked on the strand with no suspension before `connection->websocket` is set,
        // so begin_shutdown() either finds the session below or this refusal happens.
        out->respond(error_response(503, "the server is shutting down", "service_unavailable_error",
                                    {}, "draining"));
      } else if (websocket) {
        // The connection becomes a WebSocket session for the rest of its life.
        connection->websocket = std::make_shared<WsCloseRequest>();
        WsSessionConfig ws_config{config.ws_idle_timeout, config.ws_max_message_bytes,
                                  config.ws_close_timeout};
        WsHandshake handshake;
        handshake.protocol = chosen_websocket_protocol(
            header_value(request, http::field::sec_websocket_protocol));
        handshake.peer.key_name = std::move(read.key_name);
        auto session =
            run_websocket_session(std::move(connection->stream), std::move(request), *websocket,
                                  ws_config, std::move(handshake), connection->websocket);
        co_await std::move(session);
        upgraded = true;  // the stream is gone: the WebSocket session closed it
        break;
      } else {
        keep_alive = request.keep_alive() && !stopping.load(std::memory_order_acquire);
        HttpRequest plain = to_plain_request(std::move(request));
        plain.connection_id = connection->id;
        plain.api_key_name = std::move(read.key_name);
        plain.api_key_is_admin = read.key_is_admin;
        router->dispatch(std::move(plain), out);
      }
    }
    const bool reusable = co_await serve_exchange(connection, out, version, keep_alive);
    connection->busy = false;
    if (!reusable || !keep_alive) break;
  }
  // Named first: g++ 12.2 miscompiles some temporaries inside co_await (TOOLCHAIN.md).
  auto closing = close_session(connection, /*tls_goodbye=*/open && !upgraded, upgraded);
  co_await std::move(closing);
}

template <class Stream>
asio::awaitable<void> HttpServer::Impl::close_session(
    std::shared_ptr<Connection<Stream>> connection, bool tls_goodbye, bool upgraded) {
  if constexpr (kIsTls<Stream>) {
    // close_notify, and the client's answer read, so that its own close_notify does not meet a
    // closed socket (a reset, which clients report instead of the last response).
    if (tls_goodbye && !stopping.load(std::memory_order_acquire)) {
      connection->tcp().expires_after(std::min(config.read_timeout, kTlsShutdownTimeout));
      [[maybe_unused]] auto [shutdown_ec] = co_await connection->stream.async_shutdown(kAsTuple);
    }
  }
  // NOTE: after an upgrade the stream was moved into the WebSocket session, which closed it; a
  // moved-from TLS stream has no lowest layer to reach.
  if (!upgraded) {
    beast::error_code ignored;
    connection->tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    connection->tcp().socket().close(ignored);
  }
  untrack(connection);
  num_connections.fetch_sub(1, std::memory_order_acq_rel);
  metrics->num_open.fetch_sub(1, std::memory_order_relaxed);
}

asio::awaitable<bool> HttpServer::Impl::handshake(TlsStream& stream) {
  beast::get_lowest_layer(stream).expires_after(config.read_timeout);
  auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kAsTuple);
  if (ec) spdlog::debug("http: TLS handshake failed: {}", ec.message());
  co_return !ec;
}

template <class Stream>
asio::awaitable<bool> HttpServer::Impl::await_next_request(Stream& stream,
                                                           beast::flat_buffer& buffer) {
  // Only the keep-alive timeout runs until a byte arrives; read_request() then gives the request
  // read_timeout. Waiting for the whole request here under the keep-alive timeout would let a
  // client trickle a request in a byte at a time for that much longer (issue 14).
  constexpr size_t kFirstReadBytes = 4096;
  beast::get_lowest_layer(stream).expires_after(config.keep_alive_timeout);
  auto [ec, num_bytes] = co_await stream.async_read_some(buffer.prepare(kFirstReadBytes), kAsTuple);
  buffer.commit(num_bytes);
  co_return !ec;
}

template <class Stream>
asio::awaitable<RequestRead> HttpServer::Impl::read_request(
    Stream& stream, beast::flat_buffer& buffer, http::request_parser<http::string_body>& parser) {
  RequestRead read;
  beast::get_lowest_layer(stream).expires_after(config.read_timeout);
  auto [head_ec, head_bytes] = co_await http::async_read_header(stream, buffer, parser, kAsTuple);
  if (connection_ended(head_ec)) {
    read.connection_ended = true;
    co_return read;
  }
  if (head_ec) {
    read.refusal = parse_error_response(head_ec, config.max_body_bytes);
    co_return read;
  }
  // Before the body: with untrustworthy framing we do not know where the body ends.
  read.refusal = check_framing(parser.get());
  if (read.refusal) co_return read;
  // Before the body too: an unauthenticated client costs a header and a 401.
  const std::shared_ptr<const AccessPolicy> policy = current_access();
  AccessDecision access_decision = check_access(*policy, parser.get());
  if (access_decision.refusal) {
    const std::string_view target(parser.get().target().data(), parser.get().target().size());
    spdlog::info("http {} {} status=401 finish=invalid_api_key", parser.get().method_string(),
                 target.substr(0, target.find('?')));
    read.refusal = std::move(access_decision.refusal);
    const auto length = parser.content_length();
    if (!parser.is_done() && length && *length <= kMaxUnauthenticatedBodyBytes) {
      [[maybe_unused]] auto [drop_ec, drop_bytes] =
          co_await http::async_read(stream, buffer, parser, kAsTuple);
    }
    co_return read;
  }
  read.key_name = std::move(access_decision.key_name);
  read.key_is_admin = access_decision.key_is_admin;
  if (parser.is_done()) co_return read;
  auto [body_ec, body_bytes] = co_await http::async_read(stream, buffer, parser, kAsTuple);
  if (connection_ended(body_ec)) {
    read.connection_ended = true;
  } else if (body_ec) {
    read.refusal = parse_error_response(body_ec, config.max_body_bytes);
  }
  co_return read;
}

const WebSocketFactory* HttpServer::Impl::websocket_route(
    const http::request<http::string_body>& request) const {
  if (!beast::websocket::is_upgrade(request)) return nullptr;
  const std::string_view target(request.target().data(), request.target().size());
  auto route = websocket_routes.find(target.substr(0, target.find('?')));
  return route == websocket_routes.end() ? nullptr : &route->second;
}

template <class Stream>
asio::awaitable<bool> HttpServer::Impl::write_bytes(Stream& stream, std::string bytes) {
  beast::get_lowest_layer(stream).expires_after(config.read_timeout);
  auto [ec, written] = co_await asio::async_write(stream, asio::buffer(bytes), kAsTuple);
  co_return !ec;
}

template <class Stream>
asio::awaitable<bool> HttpServer::Impl::serve_exchange(
    std::shared_ptr<Connection<Stream>> connection, std::shared_ptr<ResponseStream> out,
    unsigned version, bool keep_alive) {
  Stream& stream = connection->stream;
  beast::tcp_stream& tcp = connection->tcp();
  auto doorbell = std::make_shared<Doorbell>(connection->executor, 1);
  out->attach([weak = std::weak_ptr<Doorbell>(doorbell)] {
    if (auto bell = weak.lock()) bell->try_send(beast::error_code{});
  });
  bool ok = true;
  bool watching = false;
  bool streaming = false;
  const bool chunked = version >= 11;
  while (true) {
    ResponseStream::Pending pending = out->take();
    if (out->client_gone()) {
      ok = false;
      break;
    }
    if (pending.head && !pending.streaming) {
      http::response<http::string_body> response =
          to_beast_response(std::move(*pending.head), version, keep_alive);
      tcp.expires_after(config.read_timeout);
      auto [write_ec, written] = co_await http::async_write(stream, response, kAsTuple);
      ok = !write_ec;
      break;
    }
    if (pending.head) {
      streaming = true;
      http::response<http::empty_body> head =
          stream_head(std::move(*pending.head), version, keep_alive && chunked);
      http::response_serializer<http::empty_body> serializer{head};
      tcp.expires_after(config.read_timeout);
      auto [head_ec, head_bytes] = co_await http::async_write_header(stream, serializer, kAsTuple);
      if (head_ec) {
        ok = false;
        break;
      }
    }
    if (!pending.data.empty() && streaming) {
      std::string bytes = chunked ? fmt::format("{:x}\r\n{}\r\n", pending.data.size(), pending.data)
                                  : std::move(pending.data);
      const bool written = co_await write_bytes(stream, std::move(bytes));
      if (!written) {
        ok = false;
        break;
      }
    }
    if (pending.finished) {
      if (streaming && chunked) {
        std::string last = "0\r\n\r\n";
        ok = co_await write_bytes(stream, std::move(last));
      }
      ok = ok && chunked;  // a close-delimited body ends by closing
      break;
    }
    if (!pending.empty()) continue;
    if (!watching) {
      watching = true;
      watch_for_disconnect(connection, out);
    }
    tcp.expires_never();
    auto [bell_ec] = co_await doorbell->async_receive(kAsTuple);
    if (bell_ec) {
      ok = false;  // the server is stopping
      break;
    }
  }
  out->detach();
  if (!ok) out->mark_client_gone();
  if (watching) {
    beast::error_code ignored;
    tcp.socket().cancel(ignored);
  }
  co_return ok;
}

void HttpServer::Impl::admit(tcp::socket socket) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // streamed tokens must not wait for Nagle
  const asio::any_io_executor strand = socket.get_executor();
  num_connections.fetch_add(1, std::memory_order_acq_rel);
  metrics->num_open.fetch_add(1, std::memory_order_relaxed);
  if (std::shared_ptr<asio::ssl::context> context = current_tls()) {
    auto connection = std::make_shared<Connection<TlsStream>>(
        strand, TlsStream(beast::tcp_stream(std::move(socket)), *context), std::move(context));
    track(connection);
    asio::co_spawn(strand, run_session(connection), asio::detached);
  } else {
    auto connection =
        std::make_shared<Connection<beast::tcp_stream>>(strand, beast::tcp_stream(std::move(socket)));
    track(connection);
    asio::co_spawn(strand, run_session(connection), asio::detached);
  }
}

HttpServer::HttpServer(HttpServerConfig config, std::shared_ptr<const Router> router,
                       std::shared_ptr<ConnectionMetrics> metrics)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(router), std::move(metrics))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::check_tls(const HttpServerConfig& config) {
  if (config.ssl_cert_file.empty() && config.ssl_key_file.empty()) return;
  (void)make_tls_context(config);
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (!s.config.ssl_cert_file.empty() || !s.config.ssl_key_file.empty()) {
    std::shared_ptr<asio::ssl::context> context = make_tls_context(s.config);
    std::lock_guard lock(s.credentials_mutex);
    s.tls = std::move(context);
  }
  s.bound_port = s.listener.listen(s.config.host, s.config.port);
  s.listener.start();
  for (int i = 0; i < std::max(1, s.config.io_threads); ++i) {
    s.threads.emplace_back([&s] { s.io.run(); });
    // Named for per-thread CPU accounts (bench/serve_bench.py --server-pid).
    pthread_setname_np(s.threads.back().native_handle(), ("http-" + std::to_string(i)).c_str());
  }
  s.started = true;
}

uint16_t HttpServer::port() const { return impl_->bound_port; }

void HttpServer::add_websocket_route(std::string path, WebSocketFactory factory) {
  impl_->websocket_routes.emplace(std::move(path), std::move(factory));
}

void HttpServer::set_access_policy(std::shared_ptr<const AccessPolicy> policy) {
  std::lock_guard lock(impl_->credentials_mutex);
  impl_->access = std::move(policy);
}

const std::string& HttpServer::tls_certificate_file() const { return impl_->config.ssl_cert_file; }

bool HttpServer::reload_tls() {
  Impl& s = *impl_;
  if (s.current_tls() == nullptr) return false;
  // Built (and checked) before the swap: a bad file throws here and the old context stays.
  std::shared_ptr<asio::ssl::context> context = make_tls_context(s.config);
  std::lock_guard lock(s.credentials_mutex);
  s.tls = std::move(context);
  return true;
}

void HttpServer::begin_shutdown() {
  Impl& s = *impl_;
  if (!s.started || s.shutting_down.exchange(true, std::memory_order_acq_rel)) return;
  // Connections tracked after this snapshot see `shutting_down` before any upgrade.
  std::lock_guard lock(s.connections_mutex);
  for (const auto& connection : s.connections) {
    asio::post(connection->executor, [connection] {
      if (connection->websocket) connection->websocket->request();
    });
  }
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  begin_shutdown();
  s.stopped = true;
  s.stopping.store(true, std::memory_order_release);
  s.listener.stop();
  // Idle connections close now; busy ones finish their response first (keep-alive is off).
  // WebSocket connections are busy: they close themselves (begin_shutdown).
  {
    std::lock_guard lock(s.connections_mutex);
    for (const auto& connection : s.connections) {
      asio::post(connection->executor, [connection] {
        if (!connection->busy) connection->cancel();
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
