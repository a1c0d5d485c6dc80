// The Beast side of a WebSocket connection: the handshake on an upgraded HTTP request, a reader
// loop handing frames to the endpoint, and a single writer that sends the endpoint's output in
// order. Included only by http_server.cpp and ws_session.cpp (it names Beast types).
//
// Thread-safety: runs on the connection's strand.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/websocket_endpoint.hpp"

namespace troupe::net {

// A connection's stream over TLS (plain ones are beast::tcp_stream).
using TlsStream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

struct WsSessionConfig {
  std::chrono::milliseconds idle_timeout{300'000};  // no frame and no pong for this long: close
  uint64_t max_message_bytes = 1u << 20;             // larger messages: close 1009
  std::chrono::milliseconds close_timeout{1'000};    // our close frame unanswered this long: drop
};

// What the server decided about the upgrade before the handshake (access_policy.hpp).
struct WsHandshake {
  std::string protocol;  // the Sec-WebSocket-Protocol to echo ("" for none); never a key
  WebSocketPeer peer;
};

// How the server asks one session to close with 1001 (going away) when it shuts down. The
// session then tells its endpoint (on_shutdown, right away, so no frame read after the request
// starts new work), sends every frame of the work still in flight and closes once the endpoint
// is idle (at once when it already is).
//
// Thread-safety: created, requested and attached only on the connection's strand.
class WsCloseRequest {
 public:
  // Asks for the close; idempotent. Before the session attached, the request waits for it.
  void request();
  bool requested() const { return requested_; }
  // The session's reaction to the request; runs once, at once when it was already requested.
  void attach(std::function<void()> on_request);

 private:
  bool requested_ = false;
  std::function<void()> on_request_;
};

// Runs one WebSocket connection to its end: handshake, frames both ways, close. Returns when
// the socket is closed (by either side, a timeout, or the close `close_request` asks for).
// `Stream`: beast::tcp_stream or TlsStream (both instantiated in ws_session.cpp).
template <class Stream>
boost::asio::awaitable<void> run_websocket_session(
    Stream stream, boost::beast::http::request<boost::beast::http::string_body> request,
    const WebSocketFactory& factory, WsSessionConfig config, WsHandshake handshake,
    std::shared_ptr<WsCloseRequest> close_request);

}  // namespace troupe::net
