// TcpTransport's lifecycle (bind, thread, shutdown), the caller-side entry points, and the pull
// side: connecting to a peer, pipelining requests, reading replies into place, timeouts, and
// retiring connections. The answering side is tcp_transport_serve.cpp; who may touch what and
// the records' lifetimes are in tcp_transport_internal.hpp, the wire format in tcp_wire.hpp.
#include "actors/kv_cache/transfer/tcp_transport.hpp"

#include <algorithm>
#include <charconv>
#include <future>
#include <random>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "actors/kv_cache/transfer/tcp_transport_internal.hpp"

namespace troupe::kv_transfer {

namespace tcp_wire {

std::string format_endpoint(const std::string& host, uint16_t port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<Endpoint> parse_endpoint(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, port);
  if (error != std::errc() || end != last || port == 0 || port > 65535) return std::nullopt;
  return Endpoint{.host = std::move(host), .port = static_cast<uint16_t>(port)};
}

}  // namespace tcp_wire

namespace detail {
namespace {

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

tcp_wire::Token random_token() {
  std::random_device random;
  tcp_wire::Token token{};
  for (size_t i = 0; i < token.size(); i += 4) {
    const uint32_t word = random();
    for (size_t j = 0; j < 4; ++j) token[i + j] = static_cast<uint8_t>(word >> (8 * j));
  }
  return token;
}

std::string describe(const boost::system::error_code& error) { return error.message(); }

}  // namespace

TcpTransport::TcpTransport(void* base, size_t bytes, const TcpTransportConfig& config)
    : region_(static_cast<uint8_t*>(base)),
      region_bytes_(bytes),
      config_(config),
      acceptor_(io_),
      accept_retry_(io_) {}

std::string TcpTransport::start() {
  if (region_ == nullptr || region_bytes_ == 0) return "the KV region is empty";
  boost::system::error_code error;
  tcp::resolver resolver(io_);
  const tcp::resolver::results_type listen_addresses =
      resolver.resolve(config_.listen_host.empty() ? "0.0.0.0" : config_.listen_host,
                       std::to_string(config_.port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || listen_addresses.empty()) {
    return "cannot resolve the KV listen host '" + config_.listen_host + "': " + describe(error);
  }
  const tcp::endpoint endpoint = listen_addresses.begin()->endpoint();
  if (acceptor_.open(endpoint.protocol(), error); error) return "socket: " + describe(error);
  acceptor_.set_option(tcp::acceptor::reuse_address(true), error);
  if (acceptor_.bind(endpoint, error); error) {
    return "cannot listen for KV reads on " +
           tcp_wire::format_endpoint(config_.listen_host, config_.port) + ": " + describe(error);
  }
  if (acceptor_.listen(asio::socket_base::max_listen_connections, error); error) {
    return "listen: " + describe(error);
  }
  const uint16_t bound_port = acceptor_.local_endpoint(error).port();
  if (error) return "local_endpoint: " + describe(error);

  token_ = random_token();
  std::string host = config_.advertise_host;
  if (host.empty()) host = is_wildcard(config_.listen_host) ? "127.0.0.1" : config_.listen_host;
  descriptor_.transport = "tcp";
  descriptor_.worker_address = tcp_wire::format_endpoint(host, bound_port);
  descriptor_.rkey.assign(token_.begin(), token_.end());
  descriptor_.base_address = 0;
  descriptor_.region_bytes = region_bytes_;

  work_.emplace(io_.get_executor());
  accept_next();
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& failure) {
        // A handler that throws is a bug; keep serving the others rather than stop the thread.
        spdlog::error("kv-transfer (tcp): {}", failure.what());
      }
    }
  });
  return {};
}

TcpTransport::~TcpTransport() {
  if (thread_.joinable()) {
    asio::post(io_, [this] { shutdown(); });
    thread_.join();
  }
}

// ---------------------------------------------------------------------------------------------
// Caller side

void TcpTransport::pull(const std::string& peer_key, const LocalDescriptor& peer,
                        std::vector<Segment> segments, std::chrono::milliseconds timeout,
                        PullDone done) {
  update_stats([](Stats& stats) { ++stats.in_flight; });
  PullCommand command{.peer_key = peer_key,
                      .peer = peer,
                      .segments = std::move(segments),
                      .timeout = timeout,
                      .done = std::move(done)};
  asio::post(io_, [this, command = std::move(command)]() mutable {
    start_pull(std::move(command));
  });
}

void TcpTransport::forget_peer(const std::string& peer_key) {
  asio::post(io_, [this, peer_key] {
    if (auto found = peers_.find(peer_key); found != peers_.end()) {
      retire(*found->second, Status::failure(StatusCode::kPeerFailed,
                                             "peer '" + peer_key + "' was forgotten"));
    }
  });
}

KvTransport::Stats TcpTransport::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void TcpTransport::update_stats(const std::function<void(Stats&)>& change) {
  std::lock_guard lock(stats_mutex_);
  change(stats_);
}

// ---------------------------------------------------------------------------------------------
// Transport thread: pulls

void TcpTransport::start_pull(PullCommand command) {
  auto pull = std::make_unique<TcpPull>();
  pull->id = next_pull_id_++;
  pull->peer_key = command.peer_key;
  pull->done = std::move(command.done);
  pull->num_segments = command.segments.size();
  const uint64_t id = pull->id;
  pulls_.emplace(id, std::move(pull));
  TcpPull& started = *pulls_.at(id);

  if (shutting_down_) {
    finish(id, Status::failure(StatusCode::kShuttingDown, "the KV transport is shutting down"));
    return;
  }
  const LocalDescriptor& peer = command.peer;
  if (peer.transport != "tcp" || !tcp_wire::parse_endpoint(peer.worker_address) ||
      peer.rkey.size() != tcp_wire::kTokenBytes) {
    finish(id, Status::failure(StatusCode::kInvalidRequest,
                               "the descriptor of peer '" + command.peer_key +
                                   "' is not a tcp descriptor (transport '" + peer.transport +
                                   "')"));
    return;
  }
  if (Status in_range = check_segments_in_range(command.segments, peer.region_bytes, region_bytes_);
      !in_range.ok()) {
    finish(id, std::move(in_range));
    return;
  }
  started.reads = coalesce_adjacent_segments(command.segments);
  for (const Segment& read : started.reads) started.num_bytes += read.bytes;
  if (started.reads.empty()) {
    finish(id, Status::success());
    return;
  }
  if (started.reads.size() > tcp_wire::kMaxRanges) {
    finish(id, Status::failure(StatusCode::kInvalidRequest,
                               "a pull of " + std::to_string(started.reads.size()) +
                                   " separate ranges is more than one request may carry"));
    return;
  }
  Status failure;
  std::shared_ptr<PeerConnection> connection = find_or_connect(command.peer_key, peer, &failure);
  if (!connection) {
    finish(id, std::move(failure));
    return;
  }
  started.timer.emplace(io_);
  started.timer->expires_after(std::min<std::chrono::milliseconds>(
      command.timeout, std::chrono::hours(24 * 365)));
  started.timer->async_wait([this, id](const boost::system::error_code& error) {
    if (!error) on_timeout(id);
  });
  update_stats([&](Stats& stats) { stats.gets_issued += started.reads.size(); });
  connection->pull_ids.push_back(id);
  enqueue_request(*connection, started);
  if (connection->connected) write_next(connection);
}

std::shared_ptr<PeerConnection> TcpTransport::find_or_connect(const std::string& key,
                                                              const LocalDescriptor& peer,
                                                              Status* failure) {
  if (auto found = peers_.find(key); found != peers_.end()) {
    if (found->second->descriptor == peer) return found->second;
    retire(*found->second,
           Status::failure(StatusCode::kPeerFailed,
                           "peer '" + key + "' restarted (its descriptor changed)"));
  }
  const std::optional<tcp_wire::Endpoint> endpoint = tcp_wire::parse_endpoint(peer.worker_address);
  if (!endpoint) {
    *failure = Status::failure(StatusCode::kInvalidRequest, "bad peer address");
    return nullptr;
  }
  auto connection = std::make_shared<PeerConnection>(io_, key, peer);
  peers_.emplace(key, connection);
  update_stats([&](Stats& stats) { stats.peers = static_cast<int32_t>(peers_.size()); });

  // The hello goes out first, whatever pulls queue behind it.
  std::vector<uint8_t> hello(tcp_wire::kHelloBytes);
  tcp_wire::Token token{};
  std::copy(peer.rkey.begin(), peer.rkey.end(), token.begin());
  tcp_wire::encode_hello(token, std::span<uint8_t, tcp_wire::kHelloBytes>(hello));
  connection->outgoing.push_back(std::move(hello));

  // A numeric host needs no resolver (Asio resolves on a thread and io_context of its own,
  // started at the first use).
  boost::system::error_code not_numeric;
  const asio::ip::address address = asio::ip::make_address(endpoint->host, not_numeric);
  if (!not_numeric) {
    on_resolved(connection, tcp::resolver::results_type::create(
                                tcp::endpoint(address, endpoint->port), endpoint->host,
                                std::to_string(endpoint->port)));
    return connection;
  }
  connection->resolver.async_resolve(
      endpoint->host, std::to_string(endpoint->port), tcp::resolver::numeric_service,
      [this, connection](const boost::system::error_code& error,
                         const tcp::resolver::results_type& endpoints) {
        if (connection->closed) return;
        if (error) {
          fail_connection(*connection, "cannot resolve its host", error);
          return;
        }
        on_resolved(connection, endpoints);
      });
  return connection;
}

void TcpTransport::on_resolved(const std::shared_ptr<PeerConnection>& connection,
                               const tcp::resolver::results_type& endpoints) {
  asio::async_connect(
      connection->socket, endpoints,
      [this, connection](const boost::system::error_code& error, const tcp::endpoint&) {
        if (connection->closed) return;
        if (error) {
          fail_connection(*connection, "cannot connect", error);
          return;
        }
        on_connected(connection);
      });
}

void TcpTransport::on_connected(const std::shared_ptr<PeerConnection>& connection) {
  boost::system::error_code ignored;
  connection->socket.set_option(tcp::no_delay(true), ignored);
  connection->connected = true;
  write_next(connection);
  asio::async_read(
      connection->socket, asio::buffer(connection->ack),
      [this, connection](const boost::system::error_code& error, size_t) {
        if (connection->closed) return;
        std::optional<tcp_wire::AckStatus> ack;
        if (!error) {
          ack = tcp_wire::decode_hello_ack(
              std::span<const uint8_t, tcp_wire::kHelloAckBytes>(connection->ack));
        }
        if (ack != tcp_wire::AckStatus::kOk) {
          const std::string why = error ? describe(error)
                                  : !ack ? "its answer is not troupe's KV protocol"
                                         : "it refused our access token (it restarted?)";
          retire(*connection,
                 Status::failure(StatusCode::kPeerFailed,
                                 "peer '" + connection->key + "' at " +
                                     connection->descriptor.worker_address + ": " + why));
          return;
        }
        read_reply_header(connection);
      });
}

void TcpTransport::enqueue_request(PeerConnection& connection, const TcpPull& pull) {
  std::vector<uint8_t> frame(tcp_wire::kRequestHeaderBytes + pull.reads.size() * tcp_wire::kRangeBytes);
  tcp_wire::encode_request_header(
      {.pull_id = pull.id, .num_ranges = static_cast<uint32_t>(pull.reads.size())},
      std::span<uint8_t, tcp_wire::kRequestHeaderBytes>(frame.data(), tcp_wire::kRequestHeaderBytes));
  uint8_t* cursor = frame.data() + tcp_wire::kRequestHeaderBytes;
  for (const Segment& read : pull.reads) {
    tcp_wire::encode_range({.offset = read.remote_offset, .bytes = read.bytes},
                           std::span<uint8_t, tcp_wire::kRangeBytes>(cursor, tcp_wire::kRangeBytes));
    cursor += tcp_wire::kRangeBytes;
  }
  connection.outgoing.push_back(std::move(frame));
}

void TcpTransport::write_next(const std::shared_ptr<PeerConnection>& connection) {
  if (connection->writing || connection->outgoing.empty() || connection->closed) return;
  connection->writing = true;
  asio::async_write(connection->socket, asio::buffer(connection->outgoing.front()),
                    [this, connection](const boost::system::error_code& error, size_t) {
                      if (connection->closed) return;
                      connection->writing = false;
                      if (error) {
                        fail_connection(*connection, "sending failed", error);
                        return;
                      }
                      connection->outgoing.pop_front();
                      write_next(connection);
                    });
}

// Always one header read outstanding once the hello is acknowledged, pulls or not: an idle
// connection whose peer died is noticed (end of file) and dropped before a pull needs it.
void TcpTransport::read_reply_header(const std::shared_ptr<PeerConnection>& connection) {
  asio::async_read(connection->socket, asio::buffer(connection->reply_header),
                   [this, connection](const boost::system::error_code& error, size_t) {
                     if (connection->closed) return;
                     if (error) {
                       fail_connection(*connection, "the connection closed", error);
                       return;
                     }
                     on_reply_header(connection);
                   });
}

void TcpTransport::on_reply_header(const std::shared_ptr<PeerConnection>& connection) {
  const std::optional<tcp_wire::ReplyHeader> header = tcp_wire::decode_reply_header(
      std::span<const uint8_t, tcp_wire::kReplyHeaderBytes>(connection->reply_header));
  const bool expected = header && !connection->pull_ids.empty() &&
                        header->pull_id == connection->pull_ids.front();
  auto pull = expected ? pulls_.find(header->pull_id) : pulls_.end();
  if (pull == pulls_.end() ||
      (header->status == tcp_wire::ReplyStatus::kOk &&
       header->payload_bytes != pull->second->num_bytes)) {
    retire(*connection, Status::failure(StatusCode::kPeerFailed,
                                        "peer '" + connection->key +
                                            "' sent a reply that does not answer our next pull"));
    return;
  }
  const uint64_t id = header->pull_id;
  if (header->status != tcp_wire::ReplyStatus::kOk) {
    connection->pull_ids.pop_front();
    finish(id, Status::failure(StatusCode::kInvalidRequest,
                               "peer '" + connection->key +
                                   "' refused a range outside its region"));
    read_reply_header(connection);
    return;
  }
  // Straight into our region: one buffer per read, in request order.
  std::vector<asio::mutable_buffer> destination;
  destination.reserve(pull->second->reads.size());
  for (const Segment& read : pull->second->reads) {
    destination.emplace_back(region_ + read.local_offset, read.bytes);
  }
  asio::async_read(connection->socket, destination,
                   [this, connection, id](const boost::system::error_code& error, size_t) {
                     if (connection->closed) return;
                     if (error) {
                       fail_connection(*connection, "it died mid-pull", error);
                       return;
                     }
                     connection->pull_ids.pop_front();
                     finish(id, Status::success());
                     read_reply_header(connection);
                   });
}

void TcpTransport::fail_connection(PeerConnection& connection, std::string_view what,
                                   const boost::system::error_code& error) {
  retire(connection, Status::failure(StatusCode::kPeerFailed,
                                     "peer '" + connection.key + "' at " +
                                         connection.descriptor.worker_address + ": " +
                                         std::string(what) + " (" + describe(error) + ")"));
}

void TcpTransport::on_timeout(uint64_t pull_id) {
  const auto pull = pulls_.find(pull_id);
  if (pull == pulls_.end()) return;
  const auto connection = peers_.find(pull->second->peer_key);
  if (connection == peers_.end()) {  // cannot happen: a live pull's connection is in peers_
    finish(pull_id, Status::failure(StatusCode::kTimedOut, "the pull timed out"));
    return;
  }
  retire(*connection->second,
         Status::failure(StatusCode::kPeerFailed,
                         "the connection to peer '" + connection->second->key +
                             "' was dropped when another pull on it timed out"),
         pull_id);
}

void TcpTransport::retire(PeerConnection& connection, Status why,
                          std::optional<uint64_t> timed_out) {
  if (connection.closed) return;
  connection.closed = true;
  boost::system::error_code ignored;
  connection.resolver.cancel();
  connection.socket.close(ignored);  // no read of ours can write into the region after this
  // peers_ may hold the last reference: keep the object alive until this function returns.
  std::shared_ptr<PeerConnection> keep;
  if (auto found = peers_.find(connection.key);
      found != peers_.end() && found->second.get() == &connection) {
    keep = std::move(found->second);
    peers_.erase(found);
    update_stats([&](Stats& stats) { stats.peers = static_cast<int32_t>(peers_.size()); });
  }
  const std::deque<uint64_t> ids = std::exchange(connection.pull_ids, {});
  for (const uint64_t id : ids) {
    if (id == timed_out) {
      finish(id, Status::failure(StatusCode::kTimedOut,
                                 "a pull from peer '" + connection.key +
                                     "' timed out; its connection was dropped"));
    } else {
      finish(id, why);
    }
  }
}

void TcpTransport::finish(uint64_t pull_id, Status status) {
  const auto found = pulls_.find(pull_id);
  if (found == pulls_.end()) return;
  std::unique_ptr<TcpPull> pull = std::move(found->second);
  pulls_.erase(found);
  if (pull->timer) pull->timer->cancel();
  update_stats([&](Stats& stats) {
    --stats.in_flight;
    if (status.ok()) {
      ++stats.pulls_ok;
      stats.bytes_pulled += pull->num_bytes;
      stats.segments += pull->num_segments;
    } else {
      ++stats.pulls_failed;
    }
  });
  if (pull->done) pull->done(std::move(status));
}

void TcpTransport::shutdown() {
  shutting_down_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  while (!peers_.empty()) {
    retire(*peers_.begin()->second,
           Status::failure(StatusCode::kShuttingDown, "the KV transport is shutting down"));
  }
  while (!serving_.empty()) close_serving(*serving_.begin()->second);
  // Pulls not yet on a connection cannot exist here (start_pull places or finishes each one),
  // but finish any left rather than lose a done.
  while (!pulls_.empty()) {
    finish(pulls_.begin()->first,
           Status::failure(StatusCode::kShuttingDown, "the KV transport is shutting down"));
  }
  work_.reset();  // run() returns once the cancelled operations' handlers have run
}

}  // namespace detail

std::unique_ptr<KvTransport> make_tcp_transport(void* base, size_t bytes,
                                                const TcpTransportConfig& config,
                                                std::string* error) {
  auto transport = std::make_unique<detail::TcpTransport>(base, bytes, config);
  if (std::string failure = transport->start(); !failure.empty()) {
    if (error != nullptr) *error = std::move(failure);
    return nullptr;
  }
  return transport;
}

}  // namespace troupe::kv_transfer
