#include "net/http_listener.hpp"

#include <array>
#include <cerrno>
#include <optional>
#include <system_error>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "net/http_types.hpp"

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

// File descriptors the process needs besides its HTTP connections: the model file, stdio,
// io_context and thread wake-ups, the admin socket and its connections (32 by default).
constexpr rlim_t kReservedDescriptors = 64;

// A refused connection lingers this long at most, reading what the client sent, so that closing
// with unread bytes does not reset the connection and destroy the 503 before the client reads
// it. At most kMaxLingeringRefusals linger at once; beyond that a refused connection is closed
// without an answer, so that a flood of refusals cannot use up the descriptors the cap protects.
constexpr std::chrono::milliseconds kRefusalLinger{1'000};
constexpr int kMaxLingeringRefusals = 64;
constexpr size_t kMaxDiscardedBytes = 64u << 10;

// accept(2) on Linux: resource errors last until something is freed; the network errors it
// passes through belong to the one pending connection, and the next one may be fine.
AcceptFailure classify_accept_error(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return AcceptFailure::kUnexpected;
  switch (ec.value()) {
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM: return AcceptFailure::kOutOfResources;
    case ECONNABORTED:
    case EPROTO:
    case ENOPROTOOPT:
    case EPERM:  // a firewall rule refused this connection
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENONET:
    case EOPNOTSUPP: return AcceptFailure::kConnectionGone;
    default: return AcceptFailure::kUnexpected;  // errno is an open set
  }
}

// The whole 503 response, written without Beast's serializer (this file stays light).
std::string refusal_response(int max_connections) {
  const HttpResponse plain = error_response(
      503,
      fmt::format("the server has too many open connections (http.max_connections = {}); retry "
                  "later",
                  max_connections),
      "service_unavailable_error", {}, "too_many_connections");
  return fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nServer: troupe\r\nContent-Type: {}\r\n"
      "Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
      plain.content_type, plain.body.size(), plain.body);
}

}  // namespace

HttpListener::HttpListener(asio::io_context& io, int max_connections,
                           const std::atomic<int>& num_open_connections,
                           std::shared_ptr<ConnectionMetrics> metrics, OnConnection on_connection)
    : io_(io),
      max_connections_(max_connections),
      num_open_connections_(num_open_connections),
      metrics_(std::move(metrics)),
      on_connection_(std::move(on_connection)),
      strand_(asio::make_strand(io)),
      acceptor_(strand_),
      accept_pause_(strand_) {}

uint16_t HttpListener::listen(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw std::system_error(ec, fmt::format("invalid listen address '{}'", host));
  const tcp::endpoint endpoint{address, port};
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint, ec);
  if (ec) throw std::system_error(ec, fmt::format("cannot listen on {}:{}", host, port));
  acceptor_.listen(asio::socket_base::max_listen_connections);
  warn_if_descriptors_are_short();
  return acceptor_.local_endpoint().port();
}

void HttpListener::start() {
  asio::co_spawn(
      strand_, [this] { return run(); }, asio::detached);
}

void HttpListener::stop() {
  if (stopping_.exchange(true, std::memory_order_acq_rel)) return;
  asio::post(strand_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
  });
}

asio::awaitable<void> HttpListener::run() {
  AcceptBackoff backoff;
  while (!stopping_.load(std::memory_order_acquire)) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), kAsTuple);
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) break;
    if (ec) {
      accept_pause_.expires_after(on_accept_failure(backoff, ec));
      // stop() cancels the wait; a wait of zero completes at once.
      [[maybe_unused]] auto [pause_ec] = co_await accept_pause_.async_wait(kAsTuple);
      continue;
    }
    if (const std::optional<uint64_t> num_failures = backoff.on_success()) {
      spdlog::info("http: accepting connections again after {} failed accepts", *num_failures);
    }
    // NOTE: the count only grows on this strand (on_connection), so it cannot pass the cap.
    if (num_open_connections_.load(std::memory_order_acquire) >= max_connections_) {
      refuse(std::move(socket));
      continue;
    }
    metrics_->num_accepted.fetch_add(1, std::memory_order_relaxed);
    on_connection_(std::move(socket));
  }
}

std::chrono::milliseconds HttpListener::on_accept_failure(AcceptBackoff& backoff,
                                                          const boost::system::error_code& ec) {
  metrics_->num_accept_failures.fetch_add(1, std::memory_order_relaxed);
  const AcceptBackoff::Decision decision =
      backoff.on_failure(classify_accept_error(ec), std::chrono::steady_clock::now());
  if (decision.log) {
    spdlog::warn(
        "http: accept failed: {} ({} failures since the last report); next accept in "
        "{} ms",
        ec.message(), decision.num_failures, decision.delay.count());
  }
  return decision.delay;
}

void HttpListener::refuse(Socket socket) {
  metrics_->num_refused.fetch_add(1, std::memory_order_relaxed);
  if (const auto num_refused = refusal_log_.record(std::chrono::steady_clock::now())) {
    spdlog::warn("http: refused {} connection(s) with 503: http.max_connections ({}) are open",
                 *num_refused, max_connections_);
  }
  if (num_lingering_refusals_.load(std::memory_order_acquire) >= kMaxLingeringRefusals) {
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  num_lingering_refusals_.fetch_add(1, std::memory_order_acq_rel);
  const asio::any_io_executor executor = socket.get_executor();
  asio::co_spawn(executor, answer_refusal(std::move(socket)), asio::detached);
}

asio::awaitable<void> HttpListener::answer_refusal(Socket socket) {
  beast::tcp_stream stream(std::move(socket));
  stream.expires_after(kRefusalLinger);
  const std::string response = refusal_response(max_connections_);
  auto [write_ec, written] = co_await asio::async_write(stream, asio::buffer(response), kAsTuple);
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 4096> discard;
  size_t num_discarded = 0;
  while (!write_ec && num_discarded < kMaxDiscardedBytes) {
    auto [read_ec, num_bytes] = co_await stream.async_read_some(asio::buffer(discard), kAsTuple);
    if (read_ec) break;  // the client closed (what we wait for), or the linger ran out
    num_discarded += num_bytes;
  }
  stream.socket().close(ignored);
  num_lingering_refusals_.fetch_sub(1, std::memory_order_acq_rel);
}

void HttpListener::warn_if_descriptors_are_short() const {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  const auto wanted = static_cast<rlim_t>(max_connections_) + kReservedDescriptors;
  if (wanted <= limit.rlim_cur) return;
  spdlog::warn(
      "http.max_connections ({}) plus the ~{} descriptors the process needs besides "
      "exceed the open-file limit ({}): once it is reached, accept() fails (EMFILE) and "
      "new clients wait unanswered; raise the limit (ulimit -n) or lower "
      "http.max_connections",
      max_connections_, kReservedDescriptors, limit.rlim_cur);
}

}  // namespace troupe::net
