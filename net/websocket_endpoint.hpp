// What a WebSocket route serves, without Beast: the session (ws_session.cpp) moves frames between
// the socket and one WebSocketEndpoint per connection.
//
// Thread-safety: every member runs on the connection's strand. `Post` runs a function on that
// strand (for callbacks that arrive from other threads); `Wake` tells the session's writer that
// take_output() has frames.
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
};

using WebSocketFactory =
    std::function<std::shared_ptr<WebSocketEndpoint>(WebSocketEndpoint::Post, WebSocketEndpoint::Wake)>;

}  // namespace troupe::net
