// API keys applied by the HTTP server itself (issue 16), over real loopback sockets: the 401
// comes after the header and before the body, the key's name reaches the handler and the
// WebSocket endpoint, /health stays open, and a WebSocket upgrade without a key gets no socket.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <string>
#include <utility>

#include "net/http_server.hpp"
#include "tests/net/ws_test_client.hpp"
#include "tests/net/ws_test_endpoint.hpp"

namespace troupe::net {
namespace {

using testing::WsTestClient;

constexpr std::string_view kAliceKey = "sk-alice-0123456789";

class HttpAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto router = std::make_shared<Router>();
    router->add("GET", "/health", [](const HttpRequest&) { return json_response(200, "{}"); });
    router->add("GET", "/v1/whoami", [](const HttpRequest& r) {
      return json_response(200, "\"" + r.api_key_name + "\"");
    });
    router->add("POST", "/tokenize", [this](const HttpRequest& r) {
      num_handled_.fetch_add(1);
      return json_response(200, r.body);
    });
    HttpServerConfig config;
    config.port = 0;
    config.max_body_bytes = 1u << 20;
    config.shutdown_grace = std::chrono::milliseconds(500);
    server_ = std::make_unique<HttpServer>(config, router);
    ApiKeys keys;
    keys.add("alice", kAliceKey, "test");
    server_->set_access_policy(std::make_shared<AccessPolicy>(std::move(keys), true));
    server_->add_websocket_route(
        "/v1/chat/ws", [](WebSocketEndpoint::Post, WebSocketEndpoint::Wake wake,
                          const WebSocketPeer& peer) {
          // Answers every text frame with the name of the key its session authenticated with.
          return std::make_shared<testing::AnsweringEndpoint>(
              std::move(wake), [name = peer.key_name](std::string_view) {
                return name.empty() ? std::string("(none)") : name;
              });
        });
    server_->start();
  }

  // One request on a fresh connection; the whole response (the server closes after a 401).
  std::string exchange(const std::string& request) {
    WsTestClient client(server_->port());
    EXPECT_TRUE(client.connected());
    client.send_raw(request);
    return client.read_all();
  }

  std::atomic<int> num_handled_{0};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpAuthTest, MissingOrWrongKeyGets401InOpenAiShape) {
  for (const std::string authorization :
       {std::string(), std::string("Authorization: Bearer sk-alice-012345678\r\n"),
        std::string("Authorization: Basic YWxpY2U=\r\n")}) {
    const std::string response =
        exchange("GET /v1/whoami HTTP/1.1\r\nHost: x\r\n" + authorization + "\r\n");
    EXPECT_TRUE(response.starts_with("HTTP/1.1 401")) << response;
    EXPECT_NE(response.find("WWW-Authenticate: Bearer"), std::string::npos) << response;
    EXPECT_NE(response.find(R"("type":"authentication_error")"), std::string::npos);
    EXPECT_NE(response.find(R"("code":"invalid_api_key")"), std::string::npos);
    EXPECT_EQ(response.find("sk-alice"), std::string::npos) << response;
  }
}

TEST_F(HttpAuthTest, TheKeysNameReachesTheHandler) {
  const std::string response = exchange(
      "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-alice-0123456789\r\n"
      "Connection: close\r\n\r\n");
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
  EXPECT_TRUE(response.ends_with("\"alice\"")) << response;
}

TEST_F(HttpAuthTest, HealthStaysOpen) {
  const std::string response =
      exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
}

// The 401 comes right after the header: a client announcing a large body it never sends is
// answered at once, and the handler never runs.
TEST_F(HttpAuthTest, TheRefusalComesBeforeTheBody) {
  WsTestClient client(server_->port());
  ASSERT_TRUE(client.connected());
  const auto start = std::chrono::steady_clock::now();
  client.send_raw("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n{\"pro");
  const std::string response = client.read_all();
  EXPECT_TRUE(response.starts_with("HTTP/1.1 401")) << response;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(num_handled_.load(), 0);
}

// A small refused body is read and dropped, so the 401 arrives whole rather than being lost to a
// reset when the server closes with unread bytes.
TEST_F(HttpAuthTest, ASmallRefusedBodyIsDrainedAndThe401ArrivesWhole) {
  const std::string body(20000, 'x');
  const std::string response = exchange("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                        std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 401")) << response;
  EXPECT_NE(response.find("invalid_api_key"), std::string::npos);
  EXPECT_EQ(num_handled_.load(), 0);
}

// Limits hold before authentication: a body over http.max_body_bytes is 413 with or without a key.
TEST_F(HttpAuthTest, TheBodyLimitAppliesBeforeAuthentication) {
  const std::string response =
      exchange("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n");
  EXPECT_TRUE(response.starts_with("HTTP/1.1 413")) << response;
}

TEST_F(HttpAuthTest, WebSocketUpgradeWithoutAKeyGets401AndNoSocket) {
  for (const std::string headers :
       {std::string(), std::string("Sec-WebSocket-Protocol: troupe.chat.v1\r\n"),
        std::string("Sec-WebSocket-Protocol: troupe.chat.v1, bearer.sk-wrong\r\n")}) {
    WsTestClient client(server_->port());
    ASSERT_TRUE(client.connected());
    const std::string head = client.handshake("/v1/chat/ws", headers);
    EXPECT_TRUE(head.starts_with("HTTP/1.1 401")) << head;
    EXPECT_NE(client.read_all().find("invalid_api_key"), std::string::npos);  // then EOF
    EXPECT_TRUE(client.closed_by_peer());
  }
}

TEST_F(HttpAuthTest, WebSocketKeyAsSubprotocolIsAcceptedAndNeverEchoed) {
  WsTestClient client(server_->port());
  ASSERT_TRUE(client.connected());
  const std::string head = client.handshake(
      "/v1/chat/ws", "Sec-WebSocket-Protocol: troupe.chat.v1, bearer.sk-alice-0123456789\r\n");
  ASSERT_TRUE(head.starts_with("HTTP/1.1 101")) << head;
  EXPECT_NE(head.find("Sec-WebSocket-Protocol: troupe.chat.v1\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.find("bearer"), std::string::npos) << head;
  client.send_text("who?");
  const auto frame = client.read_message();
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->payload, "alice");
}

TEST_F(HttpAuthTest, WebSocketKeyAsAuthorizationHeaderIsAccepted) {
  WsTestClient client(server_->port());
  ASSERT_TRUE(client.connected());
  const std::string head =
      client.handshake("/v1/chat/ws", "Authorization: Bearer sk-alice-0123456789\r\n");
  ASSERT_TRUE(head.starts_with("HTTP/1.1 101")) << head;
  EXPECT_EQ(head.find("Sec-WebSocket-Protocol"), std::string::npos) << head;
  client.send_text("who?");
  const auto frame = client.read_message();
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->payload, "alice");
}

}  // namespace
}  // namespace troupe::net
