// Private to tcp_transport.cpp (lifecycle and pulls) and tcp_transport_serve.cpp (answering
// peers' reads), the two parts of TcpTransport; the public API is tcp_transport.hpp.
//
// Who touches what: callers' threads only post to io_ (pull, forget_peer, shutdown) and read
// stats_ under stats_mutex_. Everything else — the acceptor, every socket, timer and record
// below — belongs to the transport's thread, the only one running io_.
//
// Lifetimes (all on the transport's thread):
//   TcpPull        — in pulls_ from start_pull until it finishes (its payload landed, the owner
//                    refused it, its connection closed, it timed out). Found by id, so a timer or
//                    reply that arrives after it finished finds nothing.
//   PeerConnection — in peers_ while usable; closed (socket and resolver) and removed at its
//                    first failure, timeout, forget or shutdown, failing its pulls at once.
//                    Handlers hold it by shared_ptr and find `closed` set.
//   ServeConnection — in serving_ from accept until its puller leaves, errs or shutdown.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "actors/kv_cache/transfer/tcp_transport.hpp"
#include "actors/kv_cache/transfer/tcp_wire.hpp"

namespace troupe::kv_transfer::detail {

namespace asio = boost::asio;
using asio::ip::tcp;

struct TcpPull {
  uint64_t id = 0;
  std::string peer_key;
  std::vector<Segment> reads;  // coalesced, in the order the payload arrives
  uint64_t num_bytes = 0;
  size_t num_segments = 0;  // as the caller gave them, for stats
  KvTransport::PullDone done;
  std::optional<asio::steady_timer> timer;
};

// Our connection to one peer whose bytes we pull. Requests are written in pull order and
// answered in that order, so `pull_ids` is also the order replies arrive in.
struct PeerConnection {
  PeerConnection(asio::io_context& io, std::string peer_key, LocalDescriptor peer)
      : key(std::move(peer_key)), descriptor(std::move(peer)), socket(io), resolver(io) {}

  std::string key;
  LocalDescriptor descriptor;
  tcp::socket socket;
  tcp::resolver resolver;
  bool closed = false;
  bool connected = false;  // TCP connected and hello queued first; requests may follow
  std::deque<uint64_t> pull_ids;  // requested (or about to be), oldest first
  std::deque<std::vector<uint8_t>> outgoing;  // frames not yet written; front is being written
  bool writing = false;
  std::array<uint8_t, tcp_wire::kHelloAckBytes> ack{};
  std::array<uint8_t, tcp_wire::kReplyHeaderBytes> reply_header{};
};

// A peer reading from us.
struct ServeConnection {
  ServeConnection(asio::io_context& io, tcp::socket accepted, uint64_t serve_id)
      : id(serve_id), socket(std::move(accepted)), hello_timer(io) {}

  uint64_t id;
  tcp::socket socket;
  asio::steady_timer hello_timer;
  bool closed = false;
  std::array<uint8_t, tcp_wire::kHelloBytes> hello{};
  std::array<uint8_t, tcp_wire::kHelloAckBytes> ack{};
  std::array<uint8_t, tcp_wire::kRequestHeaderBytes> request_header{};
  std::vector<uint8_t> range_bytes;
  std::array<uint8_t, tcp_wire::kReplyHeaderBytes> reply_header{};
  std::vector<asio::const_buffer> reply;  // the header, then the ranges of our region
  uint64_t payload_bytes = 0;
};

class TcpTransport final : public KvTransport {
 public:
  TcpTransport(void* base, size_t bytes, const TcpTransportConfig& config);
  ~TcpTransport() override;

  // Binds and listens, makes the descriptor, starts the thread; an error sentence or "".
  std::string start();

  std::string_view name() const override { return "tcp"; }
  const LocalDescriptor& local_descriptor() const override { return descriptor_; }
  void pull(const std::string& peer_key, const LocalDescriptor& peer,
            std::vector<Segment> segments, std::chrono::milliseconds timeout,
            PullDone done) override;
  void forget_peer(const std::string& peer_key) override;
  Stats stats() const override;

 private:
  // --- pulls (tcp_transport.cpp), transport thread
  struct PullCommand {
    std::string peer_key;
    LocalDescriptor peer;
    std::vector<Segment> segments;
    std::chrono::milliseconds timeout;
    PullDone done;
  };
  void start_pull(PullCommand command);
  std::shared_ptr<PeerConnection> find_or_connect(const std::string& key,
                                                  const LocalDescriptor& peer,
                                                  Status* failure);
  void on_resolved(const std::shared_ptr<PeerConnection>& connection,
                   const tcp::resolver::results_type& endpoints);
  void on_connected(const std::shared_ptr<PeerConnection>& connection);
  void enqueue_request(PeerConnection& connection, const TcpPull& pull);
  void write_next(const std::shared_ptr<PeerConnection>& connection);
  void read_reply_header(const std::shared_ptr<PeerConnection>& connection);
  void on_reply_header(const std::shared_ptr<PeerConnection>& connection);
  void on_timeout(uint64_t pull_id);
  // Retires `connection` after a socket error: its pulls fail with kPeerFailed, saying `what`.
  void fail_connection(PeerConnection& connection, std::string_view what,
                       const boost::system::error_code& error);
  // Closes `connection` and finishes its pulls: `timed_out` (if any) with kTimedOut, the rest
  // with `why`.
  void retire(PeerConnection& connection, Status why, std::optional<uint64_t> timed_out = {});
  void finish(uint64_t pull_id, Status status);
  void shutdown();

  // --- serving (tcp_transport_serve.cpp), transport thread
  void accept_next();
  void serve(tcp::socket socket);
  void read_request(const std::shared_ptr<ServeConnection>& connection);
  void on_request_ranges(const std::shared_ptr<ServeConnection>& connection, uint64_t pull_id);
  void close_serving(ServeConnection& connection);

  void update_stats(const std::function<void(Stats&)>& change);

  uint8_t* const region_;
  const uint64_t region_bytes_;
  const TcpTransportConfig config_;
  LocalDescriptor descriptor_;
  tcp_wire::Token token_{};

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::thread thread_;

  // Transport thread only.
  bool shutting_down_ = false;
  uint64_t next_pull_id_ = 1;
  uint64_t next_serve_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<TcpPull>> pulls_;
  std::unordered_map<std::string, std::shared_ptr<PeerConnection>> peers_;
  std::unordered_map<uint64_t, std::shared_ptr<ServeConnection>> serving_;

  mutable std::mutex stats_mutex_;
  Stats stats_;
};

}  // namespace troupe::kv_transfer::detail
