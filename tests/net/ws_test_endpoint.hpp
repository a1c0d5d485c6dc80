// A WebSocket endpoint for the net tests: answers each text frame with what `answer` returns for
// it (an echo, the key's name, ...) and is otherwise inert. Stands in for the chat endpoint where
// a test is about the server's session code, not about chats.
//
// Thread-safety: like any endpoint, called on its connection's strand only.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "net/websocket_endpoint.hpp"

namespace troupe::net::testing {

class AnsweringEndpoint final : public WebSocketEndpoint {
 public:
  using Answer = std::function<std::string(std::string_view frame)>;
  AnsweringEndpoint(Wake wake, Answer answer) : wake_(std::move(wake)), answer_(std::move(answer)) {}
  void on_text(std::string_view frame) override {
    output_.push_back(answer_(frame));
    wake_();
  }
  void on_binary() override {}
  void on_closed() override {}
  std::deque<std::string> take_output() override { return std::exchange(output_, {}); }
  void on_shutdown() override {}
  bool idle() const override { return true; }

 private:
  Wake wake_;
  Answer answer_;
  std::deque<std::string> output_;
};

}  // namespace troupe::net::testing
