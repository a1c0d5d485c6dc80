// WebSocket sessions when the server shuts down (HttpServer::begin_shutdown / stop, and the
// session's close in net/ws_session.cpp), over real loopback sockets with the chat endpoint on a
// FakeEngine: idle sessions get a close frame with 1001 at once, busy ones get their final frames
// first, new upgrades are refused, and a client that never answers the close cannot hold stop()
// beyond the grace period.
#include <simdjson.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "net/http_server.hpp"
#include "net/ws_chat.hpp"
#include "tests/net/chat_frame.hpp"
#include "tests/net/fake_engine.hpp"
#include "tests/net/ws_test_client.hpp"

namespace troupe::net {
namespace {

using testing::FakeEngine;
using testing::WsTestClient;
using Clock = std::chrono::steady_clock;

constexpr uint16_t kGoingAway = 1001;

using testing::ChatFrame;
using testing::parse_chat_frame;

std::string chat(std::string_view id) {
  return fmt::format(R"({{"type":"chat","id":"{}","messages":[{{"role":"user","content":"hi"}}]}})",
                     id);
}

// What a client saw up to the end of its connection.
struct Transcript {
  std::vector<ChatFrame> chat_frames;
  std::optional<WsTestClient::Frame> close;  // the server's close frame, if one came
  size_t num_frames_after_close = 0;

  std::string text_of(std::string_view id) const {
    std::string text;
    for (const ChatFrame& f : chat_frames) {
      if (f.type == "delta" && f.id == id) text += f.text;
    }
    return text;
  }
};

// Reads until the server's close frame (which it answers when `answer_close`), then to EOF.
Transcript read_to_close(WsTestClient& client, bool answer_close = true) {
  Transcript transcript;
  while (std::optional<WsTestClient::Frame> frame = client.read_message()) {
    if (transcript.close) {
      ++transcript.num_frames_after_close;
    } else if (frame->opcode == WsTestClient::kClose) {
      transcript.close = frame;
      if (answer_close) client.send_close(frame->close_code());
    } else if (frame->opcode == WsTestClient::kText) {
      transcript.chat_frames.push_back(parse_chat_frame(frame->payload));
    }
  }
  return transcript;
}

class WsShutdownTest : public ::testing::Test {
 protected:
  void start_server(HttpServerConfig config = {}) {
    config.port = 0;
    config.io_threads = 2;
    server_ = std::make_unique<HttpServer>(config, std::make_shared<Router>());
    WsChatConfig ws_chat;
    ws_chat.served_model_id = "test-model";
    server_->add_websocket_route("/v1/chat/ws", ws_chat_factory(engine_, ws_chat));
    server_->start();
  }

  std::unique_ptr<WsTestClient> open_session() {
    auto client = std::make_unique<WsTestClient>(server_->port());
    EXPECT_TRUE(client->connected());
    const std::string head = client->handshake();
    EXPECT_TRUE(head.starts_with("HTTP/1.1 101")) << head;
    return client;
  }

  void TearDown() override {
    if (server_) server_->stop();
  }

  // Torn down as serve.cpp does: the server stops, the engine goes, then the server object (the
  // engine's sinks hold the server's strand executors, which must not outlive its io_context).
  std::unique_ptr<HttpServer> server_;
  FakeEngine engine_;
};

TEST_F(WsShutdownTest, IdleSessionGetsGoingAwayAtOnce) {
  start_server();
  auto client = open_session();
  // The session is live: a chat is answered in full.
  client->send_text(chat("warm-up"));
  std::vector<ChatFrame> frames;
  while (frames.empty() || frames.back().type != "done") {
    std::optional<WsTestClient::Frame> frame = client->read_message();
    ASSERT_TRUE(frame && frame->opcode == WsTestClient::kText);
    frames.push_back(parse_chat_frame(frame->payload));
  }

  server_->begin_shutdown();
  std::optional<WsTestClient::Frame> frame = client->read_message();
  ASSERT_TRUE(frame);
  ASSERT_EQ(frame->opcode, WsTestClient::kClose);
  EXPECT_EQ(frame->close_code(), kGoingAway);
  EXPECT_EQ(frame->close_reason(), "server shutting down");
  client->send_close(kGoingAway);
  EXPECT_TRUE(client->closed_by_peer());
  server_->stop();
}

TEST_F(WsShutdownTest, StopAloneClosesIdleSessionsWithGoingAway) {
  start_server();
  auto first = open_session();
  auto second = open_session();
  std::thread stopper([this] { server_->stop(); });
  const Transcript one = read_to_close(*first);
  const Transcript two = read_to_close(*second);
  stopper.join();
  ASSERT_TRUE(one.close);
  EXPECT_EQ(one.close->close_code(), kGoingAway);
  ASSERT_TRUE(two.close);
  EXPECT_EQ(two.close->close_code(), kGoingAway);
}

TEST_F(WsShutdownTest, StreamingSessionGetsItsFinalFramesThenGoingAway) {
  engine_.script.pieces = {"a", "b", "c", "d", "e", "f", "g", "h"};
  engine_.script.tick = std::chrono::milliseconds(30);
  start_server();
  auto client = open_session();
  client->send_text(chat("c1"));
  std::optional<WsTestClient::Frame> first = client->read_message();
  ASSERT_TRUE(first && first->opcode == WsTestClient::kText);
  const ChatFrame first_delta = parse_chat_frame(first->payload);
  ASSERT_EQ(first_delta.type, "delta");

  server_->begin_shutdown();
  client->send_text(chat("c2"));  // too late: refused, while c1 goes on
  Transcript rest = read_to_close(*client);
  rest.chat_frames.insert(rest.chat_frames.begin(), first_delta);

  EXPECT_EQ(rest.text_of("c1"), "abcdefgh");
  const ChatFrame* done = nullptr;
  const ChatFrame* refused = nullptr;
  for (const ChatFrame& f : rest.chat_frames) {
    if (f.type == "done" && f.id == "c1") done = &f;
    if (f.type == "error" && f.id == "c2") refused = &f;
  }
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(done->finish_reason, "stop");
  EXPECT_EQ(&rest.chat_frames.back(), done) << "the done frame is the last before the close";
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->code, "draining");
  ASSERT_TRUE(rest.close);
  EXPECT_EQ(rest.close->close_code(), kGoingAway);
  EXPECT_EQ(rest.num_frames_after_close, 0u);
  EXPECT_EQ(engine_.submitted().size(), 1u);  // c2 never reached the engine
  server_->stop();
}

TEST_F(WsShutdownTest, GenerationCancelledByTheDrainDeadlineGetsItsDoneBeforeGoingAway) {
  engine_.script.endless = true;
  engine_.script.tick = std::chrono::milliseconds(5);
  start_server();
  auto client = open_session();
  client->send_text(chat("c1"));
  ASSERT_TRUE(client->read_message());

  server_->begin_shutdown();
  // Still streaming: the session waits for its generation, however long it runs.
  for (int i = 0; i < 20; ++i) {
    std::optional<WsTestClient::Frame> frame = client->read_message();
    ASSERT_TRUE(frame);
    ASSERT_EQ(frame->opcode, WsTestClient::kText);
  }
  engine_.cancel(1);  // what Engine::drain does to what is left at its deadline

  const Transcript rest = read_to_close(*client);
  ASSERT_FALSE(rest.chat_frames.empty());
  EXPECT_EQ(rest.chat_frames.back().type, "done");
  EXPECT_EQ(rest.chat_frames.back().finish_reason, "cancelled");
  ASSERT_TRUE(rest.close);
  EXPECT_EQ(rest.close->close_code(), kGoingAway);
  server_->stop();
}

TEST_F(WsShutdownTest, UpgradeDuringShutdownIsRefusedWith503) {
  start_server();
  server_->begin_shutdown();
  WsTestClient late(server_->port());
  ASSERT_TRUE(late.connected());
  const std::string head = late.handshake();
  EXPECT_TRUE(head.starts_with("HTTP/1.1 503")) << head;
  server_->stop();
}

TEST_F(WsShutdownTest, SilentClientIsDroppedAfterTheCloseTimeout) {
  HttpServerConfig config;
  config.shutdown_grace = std::chrono::seconds(20);
  config.ws_close_timeout = std::chrono::milliseconds(200);
  start_server(config);
  auto client = open_session();
  const auto start = Clock::now();
  server_->stop();
  // Not a speed assertion: the session ended by itself, well before stop() would have forced it.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  const Transcript transcript = read_to_close(*client, /*answer_close=*/false);
  ASSERT_TRUE(transcript.close);
  EXPECT_EQ(transcript.close->close_code(), kGoingAway);
}

TEST_F(WsShutdownTest, SilentClientCannotHoldStopBeyondTheGrace) {
  HttpServerConfig config;
  config.shutdown_grace = std::chrono::milliseconds(300);
  config.ws_close_timeout = std::chrono::seconds(60);
  start_server(config);
  auto client = open_session();
  const auto start = Clock::now();
  server_->stop();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));  // the grace bounds it, not 60 s
  server_.reset();  // the dropped socket closes with the server
  const Transcript transcript = read_to_close(*client, /*answer_close=*/false);
  ASSERT_TRUE(transcript.close);
  EXPECT_EQ(transcript.close->close_code(), kGoingAway);
}

}  // namespace
}  // namespace troupe::net
