// What a WebSocket route serves, without Beast: the session (ws_session.cpp) moves frames between
// the socket and one WebSocketEndpoint per connection.
//
// Thread-safety: every member runs on the connection's strand. `Post` runs a function on that
// strand (for callbacks that arrive from other threads); `Wake` tells the session's writer that
// take_output() has frames.
//
// Shutdown: the session calls on_shutdown() once when the server starts to shut down, keeps
// sending what take_output() returns, and closes the socket with 1001 (going away) as soon as
// idle() holds and no output is pending, so in-flight work ends with its final frames first.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::net {

class WebSocketEndpoint {
 public:
  using Post = std::function<void(std::function<void()>)>;
  using Wake = std::function<void()>;

  virtual ~WebSocketEndpoint() = default;
  virtual void on_text(std::string_view frame) = 0;
  virtual void on_binary() = 0;
  virtual void on_closed() = 0;
  virtual std::deque<std::string> take_output() = 0;
  // The server is shutting down: admit no new work (answer it with an error frame instead).
  virtual void on_shutdown() = 0;
  // True when no work of this connection is in flight, so closing cuts nothing short.
  virtual bool idle() const = 0;
};

// Who is on the other end of a session, as the handshake established it.
struct WebSocketPeer {
  std::string key_name;  // the API key that authenticated the upgrade; empty when none needed
};

using WebSocketFactory = std::function<std::shared_ptr<WebSocketEndpoint>(
    WebSocketEndpoint::Post, WebSocketEndpoint::Wake, const WebSocketPeer&)>;

}  // namespace troupe::net
