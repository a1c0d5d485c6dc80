// The WebSocket chat protocol (GET /v1/chat/ws), without the socket: one WsChatConnection per
// socket turns incoming text frames into engine requests and engine output into outgoing
// frames. The Beast session (ws_session.cpp) only moves frames.
//
// Client -> server:  {"type":"chat","id":"c1","messages":[...], ...sampling params, "priority"}
//                    {"type":"cancel","id":"c1"}
// Server -> client:  {"type":"delta","id":"c1","text":"Hel"}
//                    {"type":"done","id":"c1","finish_reason":"stop|length|cancelled",
//                     "usage":{...},"timings":{"ttft_ms":..,"tokens_per_s":..}}
//                    {"type":"error","id":"c1","code":"...","message":"..."}
// Several generations run at once, multiplexed by id; a duplicate live id is an error for that
// message only. The socket is one client for fair share (net/client_key.hpp), or the chat's
// `user` when it names one. A connection whose unsent output passes `max_pending_bytes` (a reader too slow
// to keep up) has its own generations cancelled; other clients never wait for it. Once the
// server shuts down (on_shutdown), new chats get an error frame with code "draining"; running
// ones continue to their done/error frame, after which the session closes the socket (1001).
//
// Accounting (net/request_record.hpp): each chat, and each frame answered with an error frame,
// is one request: one access-log line ("ws /v1/chat/ws id=<chat id> ws:<n> ...") and one count,
// also when the socket closed before its done frame could be sent.
//
// Thread-safety: on_text()/on_closed()/on_shutdown()/idle()/take_output() run on the
// connection's strand. Engine sinks call in from the ingress thread and only post() back to
// that strand (the `post` function given at construction).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "actors/engine/engine.hpp"
#include "net/metrics.hpp"
#include "net/openai_request.hpp"
#include "net/websocket_endpoint.hpp"

namespace troupe::net {

class RequestRecord;

struct WsChatConfig {
  OpenAiApiConfig api;
  std::string served_model_id;
  uint32_t max_live_generations = 16;     // per socket
  uint64_t max_pending_bytes = 8u << 20;  // unsent output before the socket's generations stop
};

class WsChatConnection final : public WebSocketEndpoint,
                               public std::enable_shared_from_this<WsChatConnection> {
 public:

  // `metrics`: shared with the HTTP routes so that /metrics counts WebSocket chats too (null:
  // the connection's own).
  // `key_name`: the API key that authenticated the upgrade (the fair-share client and the
  // access log's key=), empty when the server needs none.
  WsChatConnection(engine::Engine& engine, WsChatConfig config, Post post, Wake wake,
                   std::shared_ptr<ServingMetrics> metrics = nullptr, std::string key_name = {});

  // A text frame from the client.
  void on_text(std::string_view frame) override;
  // A frame that is not text (binary): answered with an error, the socket stays open.
  void on_binary() override;
  // The socket is gone: cancel every live generation of this connection.
  void on_closed() override;

  // Frames to send, oldest first (the session's single writer drains them).
  std::deque<std::string> take_output() override;
  // The server is shutting down: refuse new chats; running ones finish.
  void on_shutdown() override;
  // No generation of this connection is running (every one got its done or error frame).
  bool idle() const override { return live_.empty(); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  size_t num_live_generations() const { return live_.size(); }

  // Called on the strand by the sinks (posted from the ingress thread).
  // `indexed`: the chat asked for n > 1 choices, so its frames name the choice.
  void emit_delta(const std::string& client_id, engine::TokenDelta delta, bool indexed);
  void emit_choice_done(const std::string& client_id, const engine::ChoiceEnd& end);
  void emit_done(const std::string& client_id, const engine::Completion& completion);
  void emit_error(const std::string& client_id, const engine::RequestError& error);

 private:
  void start_chat(std::string_view frame, const std::string& client_id);
  void cancel_chat(const std::string& client_id);
  void push(std::string frame);
  // Answers a frame with an error frame, and records it as a refused request.
  void refuse(std::string_view client_id, const ApiError& error);
  std::shared_ptr<RequestRecord> record(std::string_view client_id) const;

  engine::Engine& engine_;
  WsChatConfig config_;
  Post post_;
  Wake wake_;
  const std::shared_ptr<ServingMetrics> metrics_;
  std::atomic<bool> closed_{false};
  bool shutting_down_ = false;
  std::unordered_map<std::string, engine::RequestId> live_;  // client id -> engine id
  // This socket as a fair-share client (a WebSocket session counts as one, unless a chat
  // names its `user`): "ws:<n>", process-unique.
  const std::string connection_label_;
  const std::string key_name_;
  std::deque<std::string> output_;
  uint64_t pending_bytes_ = 0;
};

// The factory for HttpServer::add_websocket_route("/v1/chat/ws", ...); `metrics` as above.
WebSocketFactory ws_chat_factory(engine::Engine& engine, WsChatConfig config,
                                 std::shared_ptr<ServingMetrics> metrics = nullptr);

// The frame texts (also used by tests).
// `index`: the choice, written only for chats with n > 1 (their frames carry it).
std::string ws_delta_frame(std::string_view id, std::string_view text,
                           std::optional<int32_t> index = std::nullopt);
// n > 1: one choice of the chat ended (the chat's "done" follows its last choice).
std::string ws_choice_done_frame(std::string_view id, const engine::ChoiceEnd& end);
std::string ws_done_frame(std::string_view id, const engine::Completion& completion);
std::string ws_error_frame(std::string_view id, std::string_view code, std::string_view message);

}  // namespace troupe::net
