// WebSocket sessions: Beast's websocket stream handles framing, masking, UTF-8 validation of
// text frames (close 1007), the message size limit (close 1009), pings and the idle timeout.
// On server shutdown the writer closes with 1001 once the endpoint's in-flight work has ended.
#include "net/ws_session.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <spdlog/spdlog.h>

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

template <class Stream>
using WsStream = websocket::stream<Stream>;
// Rings the writer when the endpoint has output (capacity 1: one pending ring is enough).
using Doorbell = asio::experimental::concurrent_channel<void(beast::error_code)>;

// Sends our close frame (1001, going away) and waits at most `close_timeout` for the client's
// answer; Beast closes the socket when it does not come, so a silent client cannot hold the
// session (or the server's shutdown) open.
template <class Stream>
asio::awaitable<void> close_going_away(WsStream<Stream>& ws,
                                       std::chrono::milliseconds close_timeout) {
  websocket::stream_base::timeout timeouts;
  ws.get_option(timeouts);
  timeouts.handshake_timeout = close_timeout;  // Beast times the closing handshake with this
  ws.set_option(timeouts);
  const websocket::close_reason reason(websocket::close_code::going_away, "server shutting down");
  auto [close_ec] = co_await ws.async_close(reason, kAsTuple);
  if (close_ec) spdlog::debug("ws: close on shutdown: {}", close_ec.message());
}

// The single writer: frames leave in the order the endpoint produced them. After a close was
// requested it keeps sending until the endpoint is idle with nothing left to send, then closes.
template <class Stream>
asio::awaitable<void> write_frames(std::shared_ptr<WsStream<Stream>> ws,
                                   std::shared_ptr<Doorbell> doorbell,
                                   std::shared_ptr<WebSocketEndpoint> endpoint,
                                   std::shared_ptr<WsCloseRequest> close_request,
                                   std::chrono::milliseconds close_timeout) {
  for (;;) {
    auto [ring_ec] = co_await doorbell->async_receive(kAsTuple);
    if (ring_ec) co_return;  // the reader ended the session
    // Output produced while a frame was on its way is sent before the close is considered.
    for (std::deque<std::string> frames = endpoint->take_output(); !frames.empty();
         frames = endpoint->take_output()) {
      for (std::string& frame : frames) {
        ws->text(true);
        auto [write_ec, written] = co_await ws->async_write(asio::buffer(frame), kAsTuple);
        if (write_ec) {
          doorbell->close();
          co_return;
        }
      }
    }
    // NOTE: no suspension between the last (empty) take_output() and idle(): the endpoint
    // cannot have produced a final frame in between.
    if (close_request->requested() && endpoint->idle()) {
      auto closing = close_going_away(*ws, close_timeout);  // named: see TOOLCHAIN.md, pitfall 1
      co_await std::move(closing);
      co_return;
    }
  }
}

}  // namespace

void WsCloseRequest::request() {
  if (requested_) return;
  requested_ = true;
  if (on_request_) on_request_();
}

void WsCloseRequest::attach(std::function<void()> on_request) {
  on_request_ = std::move(on_request);
  if (requested_) on_request_();
}

template <class Stream>
asio::awaitable<void> run_websocket_session(Stream stream,
                                            beast::http::request<beast::http::string_body> request,
                                            const WebSocketFactory& factory, WsSessionConfig config,
                                            WsHandshake handshake,
                                            std::shared_ptr<WsCloseRequest> close_request) {
  beast::get_lowest_layer(stream).expires_never();  // the websocket stream's timeouts apply now
  auto ws = std::make_shared<WsStream<Stream>>(std::move(stream));
  websocket::stream_base::timeout timeouts = websocket::stream_base::timeout::suggested(beast::role_type::server);
  timeouts.idle_timeout = config.idle_timeout;
  timeouts.keep_alive_pings = true;
  ws->set_option(timeouts);
  ws->set_option(websocket::stream_base::decorator(
      [protocol = handshake.protocol](websocket::response_type& response) {
        response.set(beast::http::field::server, "troupe");
        if (!protocol.empty()) response.set(beast::http::field::sec_websocket_protocol, protocol);
      }));
  ws->read_message_max(config.max_message_bytes);
  auto [accept_ec] = co_await ws->async_accept(request, kAsTuple);
  if (accept_ec) co_return;

  const asio::any_io_executor executor = ws->get_executor();
  auto doorbell = std::make_shared<Doorbell>(executor, 1);
  std::weak_ptr<Doorbell> weak_bell = doorbell;
  std::shared_ptr<WebSocketEndpoint> endpoint = factory(
      [executor](std::function<void()> work) { asio::post(executor, std::move(work)); },
      [weak_bell] {
        if (auto bell = weak_bell.lock()) bell->try_send(beast::error_code{});
      },
      handshake.peer);
  asio::co_spawn(executor,
                 write_frames(ws, doorbell, endpoint, close_request, config.close_timeout),
                 asio::detached);
  close_request->attach([weak_endpoint = std::weak_ptr<WebSocketEndpoint>(endpoint), weak_bell] {
    if (auto live = weak_endpoint.lock()) live->on_shutdown();
    if (auto bell = weak_bell.lock()) bell->try_send(beast::error_code{});  // the writer decides
  });

  beast::flat_buffer buffer;
  for (;;) {
    auto [read_ec, read_bytes] = co_await ws->async_read(buffer, kAsTuple);
    if (read_ec) {
      if (read_ec != websocket::error::closed) spdlog::debug("ws: session ends: {}", read_ec.message());
      break;
    }
    if (ws->got_text()) {
      endpoint->on_text(beast::buffers_to_string(buffer.data()));
    } else {
      endpoint->on_binary();
    }
    buffer.consume(buffer.size());
  }
  endpoint->on_closed();
  doorbell->close();
}

template asio::awaitable<void> run_websocket_session<beast::tcp_stream>(
    beast::tcp_stream, beast::http::request<beast::http::string_body>, const WebSocketFactory&,
    WsSessionConfig, WsHandshake, std::shared_ptr<WsCloseRequest>);
template asio::awaitable<void> run_websocket_session<TlsStream>(
    TlsStream, beast::http::request<beast::http::string_body>, const WebSocketFactory&,
    WsSessionConfig, WsHandshake, std::shared_ptr<WsCloseRequest>);

}  // namespace troupe::net
