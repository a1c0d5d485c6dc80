// The HTTP/1.1 listener: Boost.Beast C++20 coroutines on a pool of io threads, one strand per
// connection. Request handling is delegated to a Router (a pure function); this class owns only
// sockets, timeouts, limits and shutdown. Beast stays inside http_server.cpp (pimpl), so files
// that include this header compile in seconds.
//
// Connections are capped (max_connections): one more is answered 503 and closed, so that with
// the cap below the file-descriptor limit the process does not run out of descriptors, leaving
// clients unanswered in the listen backlog. Should accept() fail all the same (EMFILE and the
// like), the listener backs off instead of spinning (http_listener.hpp).
//
// Thread-safety: construct, start(), begin_shutdown() and stop() from one controlling thread
// (main). The router is shared read-only with the io threads; the metrics are atomics.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "net/access_policy.hpp"
#include "net/connection_metrics.hpp"
#include "net/router.hpp"
#include "net/websocket_endpoint.hpp"

namespace troupe::net {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;        // 0 picks a free port (see HttpServer::port())
  int io_threads = 1;
  // Open connections (HTTP and WebSocket) beyond which a new one gets 503 and is closed. Keep it
  // below the file-descriptor limit less what the process needs besides (start() warns if not).
  int max_connections = 1000;
  uint64_t max_body_bytes = 8u << 20;  // larger bodies get 413
  uint32_t max_header_bytes = 64u << 10;
  uint64_t max_stream_buffer_bytes = 8u << 20;  // unsent streamed bytes before a client is "too slow"
  // One request's header and body, from its first byte (from the accept for a connection's
  // first request); also each write.
  std::chrono::milliseconds read_timeout{30'000};
  std::chrono::milliseconds keep_alive_timeout{60'000};  // idle time before a request's first byte
  std::chrono::milliseconds shutdown_grace{5'000};       // in-flight requests may finish
  std::chrono::milliseconds ws_idle_timeout{300'000};   // WebSocket: no traffic (pings included)
  uint64_t ws_max_message_bytes = 1u << 20;              // WebSocket: larger messages close 1009
  std::chrono::milliseconds ws_close_timeout{1'000};     // WebSocket: our close frame unanswered
  // TLS (HTTP, SSE and WebSocket alike) when both are set: a PEM certificate (chain) and its
  // private key. TLS 1.2 is the oldest version offered.
  std::string ssl_cert_file;
  std::string ssl_key_file;
};

// The TLS certificate or key cannot be used: unreadable, not PEM, or not a pair. The message
// names the file.
class TlsConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class HttpServer {
 public:
  // `metrics` receives the listener's counters (null: the server keeps its own).
  HttpServer(HttpServerConfig config, std::shared_ptr<const Router> router,
             std::shared_ptr<ConnectionMetrics> metrics = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Loads the TLS certificate and key of `config` (when set) as start() would, and throws
  // TlsConfigError when they cannot be used; lets a server fail before loading its model.
  static void check_tls(const HttpServerConfig& config);

  // Binds, listens and starts the io threads. Throws std::system_error (with the address in the
  // message) when the address cannot be bound, TlsConfigError for an unusable certificate.
  void start();

  // Serves WebSocket upgrades of GET `path` with one endpoint per connection (before start()).
  void add_websocket_route(std::string path, WebSocketFactory factory);

  // Who may reach what; without one every request is served. Applied right after each
  // request's header, before its body is read. Callable any time from any thread (a key
  // rotation): requests whose header arrives afterwards are checked against the new policy.
  void set_access_policy(std::shared_ptr<const AccessPolicy> policy);

  // Re-reads the certificate and key files of the config (a certificate rotation): connections
  // accepted afterwards use them, established ones keep theirs until they close. False when the
  // server does not speak TLS (nothing to reload). Throws TlsConfigError, naming the file, when
  // the new files cannot be used; the certificate in force then stays. Any thread, after start().
  bool reload_tls();
  const std::string& tls_certificate_file() const;

  // The bound port; valid after start().
  uint16_t port() const;

  // Starts the shutdown without waiting: WebSocket upgrades are refused with 503 from now on,
  // and every open WebSocket session closes with 1001 (going away) once its in-flight work has
  // sent its final frames (idle sessions at once), each on its own strand. Plain HTTP is served
  // as before until stop(). Call it when draining begins; stop() calls it if nobody did.
  // Idempotent.
  void begin_shutdown();

  // Stops accepting, closes idle connections, lets in-flight requests finish within
  // shutdown_grace (WebSocket sessions close as begin_shutdown() says), then joins the io
  // threads: what has not ended by then is dropped. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::net
