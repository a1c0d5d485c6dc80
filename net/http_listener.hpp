// The HTTP server's accept loop, internal to net/http_server.cpp (it exposes Asio types).
//
// It accepts on its own strand and hands each connection to the server, except:
//   - at max_connections, it answers 503 itself (OpenAI error shape, Retry-After) and closes,
//     so that clients get an answer instead of waiting in the listen backlog once the process
//     is out of file descriptors;
//   - after a failed accept (EMFILE and the like) it waits before the next one, 50 ms doubling
//     to 1 s, and rate-limits its warnings (accept_backoff.hpp): retrying at once spun a core
//     and wrote ~500k identical lines a second (issue 14).
//
// Thread-safety: listen(), start() and stop() from the controlling thread; the loop and the
// refusals run on io threads (the loop on its strand, each refusal on its connection's strand).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "net/accept_backoff.hpp"
#include "net/connection_metrics.hpp"

namespace troupe::net {

class HttpListener {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  // Called on the listener strand with each accepted connection below the cap; must not block,
  // and must count the connection in `num_open_connections` before it returns.
  using OnConnection = std::function<void(Socket socket)>;

  // `num_open_connections` is the server's count of connections it serves (read, never
  // written, here); it and `io` must outlive the listener.
  HttpListener(boost::asio::io_context& io, int max_connections,
               const std::atomic<int>& num_open_connections,
               std::shared_ptr<ConnectionMetrics> metrics, OnConnection on_connection);

  // Binds and listens (before the io threads run). Returns the bound port. Throws
  // std::system_error naming the address. Warns when the file-descriptor limit is below what
  // max_connections needs.
  uint16_t listen(const std::string& host, uint16_t port);

  // Starts the accept loop.
  void start();

  // Closes the acceptor and ends a back-off wait; the loop ends. Refusals still lingering end
  // within a second or with the io_context. Idempotent.
  void stop();

 private:
  boost::asio::awaitable<void> run();
  // Counts and logs (rate-limited) a failed accept; returns how long to wait before the next.
  std::chrono::milliseconds on_accept_failure(AcceptBackoff& backoff,
                                              const boost::system::error_code& ec);
  void refuse(Socket socket);
  boost::asio::awaitable<void> answer_refusal(Socket socket);
  void warn_if_descriptors_are_short() const;

  boost::asio::io_context& io_;
  const int max_connections_;
  const std::atomic<int>& num_open_connections_;
  std::shared_ptr<ConnectionMetrics> metrics_;
  OnConnection on_connection_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;
  // On the strand.
  LogThrottle refusal_log_{std::chrono::seconds(5)};
  std::atomic<bool> stopping_{false};
  std::atomic<int> num_lingering_refusals_{0};
};

}  // namespace troupe::net
