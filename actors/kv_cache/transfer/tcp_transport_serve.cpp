// TcpTransport's answering side, on the transport's thread: accepting pullers, checking their
// hello's token, and answering each read request with the bytes of our region, written straight
// from it (a gather write). A puller that dies mid-answer is a failed write, counted and closed;
// nothing a peer sends or fails to send can stop this thread. The pull side and the lifecycle
// are in tcp_transport.cpp.
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "actors/kv_cache/transfer/tcp_transport_internal.hpp"

namespace troupe::kv_transfer::detail {
namespace {

// A puller whose host vanished without a reset would otherwise hold its connection (and our
// read of its next request) forever: probe after 30 s of silence, give up ~30 s later.
void keep_alive(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  const int native = socket.native_handle();
  const int idle_s = 30;
  const int interval_s = 10;
  const int probes = 3;
  setsockopt(native, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(native, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(native, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

}  // namespace

void TcpTransport::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& error, tcp::socket socket) {
    if (shutting_down_) return;
    if (error) {
      // Out of descriptors or a transient network error: try again shortly, never spin.
      spdlog::warn("kv-transfer (tcp): accept failed: {}", error.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& cancelled) {
        if (!cancelled && !shutting_down_) accept_next();
      });
      return;
    }
    serve(std::move(socket));
    accept_next();
  });
}

void TcpTransport::serve(tcp::socket socket) {
  if (serving_.size() >= config_.max_serve_connections) {
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  keep_alive(socket);
  auto connection = std::make_shared<ServeConnection>(io_, std::move(socket), next_serve_id_++);
  serving_.emplace(connection->id, connection);

  connection->hello_timer.expires_after(config_.hello_timeout);
  connection->hello_timer.async_wait([this, connection](const boost::system::error_code& error) {
    if (!error && !connection->closed) close_serving(*connection);
  });
  asio::async_read(
      connection->socket, asio::buffer(connection->hello),
      [this, connection](const boost::system::error_code& error, size_t) {
        if (connection->closed) return;
        connection->hello_timer.cancel();
        if (error) {
          close_serving(*connection);
          return;
        }
        const bool welcome = tcp_wire::hello_carries(
            std::span<const uint8_t, tcp_wire::kHelloBytes>(connection->hello), token_);
        tcp_wire::encode_hello_ack(
            welcome ? tcp_wire::AckStatus::kOk : tcp_wire::AckStatus::kWrongToken,
            std::span<uint8_t, tcp_wire::kHelloAckBytes>(connection->ack));
        asio::async_write(connection->socket, asio::buffer(connection->ack),
                          [this, connection, welcome](const boost::system::error_code& sent,
                                                      size_t) {
                            if (connection->closed) return;
                            if (sent || !welcome) {
                              close_serving(*connection);
                              return;
                            }
                            read_request(connection);
                          });
      });
}

void TcpTransport::read_request(const std::shared_ptr<ServeConnection>& connection) {
  asio::async_read(
      connection->socket, asio::buffer(connection->request_header),
      [this, connection](const boost::system::error_code& error, size_t) {
        if (connection->closed) return;
        const std::optional<tcp_wire::RequestHeader> header =
            error ? std::nullopt
                  : tcp_wire::decode_request_header(
                        std::span<const uint8_t, tcp_wire::kRequestHeaderBytes>(
                            connection->request_header));
        if (!header) {  // the puller left (end of file), or spoke something else
          close_serving(*connection);
          return;
        }
        const uint64_t pull_id = header->pull_id;
        connection->range_bytes.resize(size_t{header->num_ranges} * tcp_wire::kRangeBytes);
        asio::async_read(connection->socket, asio::buffer(connection->range_bytes),
                         [this, connection, pull_id](const boost::system::error_code& failed,
                                                     size_t) {
                           if (connection->closed) return;
                           if (failed) {
                             close_serving(*connection);
                             return;
                           }
                           on_request_ranges(connection, pull_id);
                         });
      });
}

void TcpTransport::on_request_ranges(const std::shared_ptr<ServeConnection>& connection,
                                     uint64_t pull_id) {
  const size_t num_ranges = connection->range_bytes.size() / tcp_wire::kRangeBytes;
  std::vector<tcp_wire::Range> ranges;
  ranges.reserve(num_ranges);
  for (size_t i = 0; i < num_ranges; ++i) {
    ranges.push_back(tcp_wire::decode_range(std::span<const uint8_t, tcp_wire::kRangeBytes>(
        connection->range_bytes.data() + i * tcp_wire::kRangeBytes, tcp_wire::kRangeBytes)));
  }
  const std::optional<uint64_t> payload = tcp_wire::payload_of(ranges, region_bytes_);
  tcp_wire::ReplyHeader header{.pull_id = pull_id,
                               .status = payload ? tcp_wire::ReplyStatus::kOk
                                                 : tcp_wire::ReplyStatus::kOutOfRange,
                               .payload_bytes = payload.value_or(0)};
  tcp_wire::encode_reply_header(header, std::span<uint8_t, tcp_wire::kReplyHeaderBytes>(
                                            connection->reply_header));
  connection->reply.clear();
  connection->reply.emplace_back(connection->reply_header.data(), connection->reply_header.size());
  if (payload) {
    for (const tcp_wire::Range& range : ranges) {
      connection->reply.emplace_back(region_ + range.offset, range.bytes);
    }
  } else {
    spdlog::warn("kv-transfer (tcp): refused a read outside our {}-byte region", region_bytes_);
  }
  connection->payload_bytes = header.payload_bytes;
  asio::async_write(connection->socket, connection->reply,
                    [this, connection](const boost::system::error_code& error, size_t) {
                      if (connection->closed) return;
                      if (error) {
                        update_stats([](Stats& stats) { ++stats.serves_failed; });
                        close_serving(*connection);
                        return;
                      }
                      const uint64_t served = connection->payload_bytes;
                      update_stats([served](Stats& stats) { stats.bytes_served += served; });
                      read_request(connection);
                    });
}

void TcpTransport::close_serving(ServeConnection& connection) {
  if (connection.closed) return;
  connection.closed = true;
  boost::system::error_code ignored;
  connection.hello_timer.cancel();
  connection.socket.close(ignored);
  const uint64_t id = connection.id;  // the erase may destroy `connection`
  serving_.erase(id);  // handlers still queued hold their own references
}

}  // namespace troupe::kv_transfer::detail
