// The Beast side of a WebSocket connection: the handshake on an upgraded HTTP request, a reader
// loop handing frames to the endpoint, and a single writer that sends the endpoint's output in
// order. Included only by http_server.cpp and ws_session.cpp (it names Beast types).
//
// Thread-safety: runs on the connection's strand.
#pragma once

#include <chrono>
#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/websocket_endpoint.hpp"

namespace troupe::net {

struct WsSessionConfig {
  std::chrono::milliseconds idle_timeout{300'000};  // no frame and no pong for this long: close
  uint64_t max_message_bytes = 1u << 20;             // larger messages: close 1009
};

boost::asio::awaitable<void> run_websocket_session(
    boost::beast::tcp_stream stream, boost::beast::http::request<boost::beast::http::string_body> request,
    const WebSocketFactory& factory, WsSessionConfig config);

}  // namespace troupe::net
