// The OpenAI routes behind the real Beast server over loopback sockets, with a FakeEngine:
// streamed bytes arrive while generation runs, a client that disconnects cancels at once.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "net/http_server.hpp"
#include "net/openai_routes.hpp"
#include "tests/net/fake_engine.hpp"
#include "tests/net/loopback.hpp"

namespace troupe::net {
namespace {

using testing::FakeEngine;

class Socket {
 public:
  explicit Socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_TRUE(testing::connect_loopback(fd_, port));
    testing::set_receive_timeout(fd_, 5);
  }
  ~Socket() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  // Reads until `needle` has arrived (or the peer closes / 5 s pass).
  std::string read_until(std::string_view needle) {
    char buf[4096];
    while (data_.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      data_.append(buf, static_cast<size_t>(n));
    }
    std::string out = std::move(data_);
    data_.clear();
    return out;
  }

 private:
  int fd_ = -1;
  std::string data_;
};

std::string post(std::string_view path, std::string_view body) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: {}\r\n\r\n{}", path, body.size(), body);
}

class OpenAiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_.model.id = "M";
    auto router = std::make_shared<Router>();
    add_openai_routes(*router, engine_, state_, OpenAiApiConfig{});
    HttpServerConfig config;
    config.port = 0;
    config.io_threads = 2;
    config.max_body_bytes = 1024;
    config.shutdown_grace = std::chrono::milliseconds(500);
    server_ = std::make_unique<HttpServer>(config, router);
    server_->start();
  }
  void TearDown() override { server_->stop(); }

  FakeEngine engine_;
  ServerState state_;
  std::unique_ptr<HttpServer> server_;
};

constexpr std::string_view kStream =
    R"({"messages":[{"role":"user","content":"hi"}],"stream":true})";

TEST_F(OpenAiServerTest, StreamArrivesWhileGeneratingAndDisconnectCancels) {
  engine_.script.endless = true;
  engine_.script.tick = std::chrono::milliseconds(10);
  Socket client(server_->port());
  client.send(post("/v1/chat/completions", kStream));
  const std::string head = client.read_until("data: ");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  EXPECT_NE(head.find("text/event-stream"), std::string::npos);
  EXPECT_NE(head.find("chunked"), std::string::npos);
  const std::string more = client.read_until(R"("content":"x")");
  EXPECT_NE(more.find("chat.completion.chunk"), std::string::npos);
  EXPECT_EQ(engine_.num_active(), 1u);  // still generating: bytes were not buffered
  client.close();
  EXPECT_TRUE(FakeEngine::eventually([&] { return engine_.num_cancelled() == 1; }));
  EXPECT_TRUE(FakeEngine::eventually([&] { return engine_.num_active() == 0; }));
}

TEST_F(OpenAiServerTest, NonStreamedRequestIsCancelledWhenTheClientLeaves) {
  engine_.script.endless = true;
  Socket client(server_->port());
  client.send(post("/v1/completions", R"({"prompt":"x"})"));
  ASSERT_TRUE(FakeEngine::eventually([&] { return engine_.num_active() == 1; }));
  client.close();
  EXPECT_TRUE(FakeEngine::eventually([&] { return engine_.num_cancelled() == 1; }));
  EXPECT_TRUE(FakeEngine::eventually([&] { return engine_.num_active() == 0; }));
}

TEST_F(OpenAiServerTest, ManyStreamsDroppedLeaveTheEngineIdle) {
  engine_.script.endless = true;
  std::vector<std::unique_ptr<Socket>> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(std::make_unique<Socket>(server_->port()));
    clients.back()->send(post("/v1/chat/completions", kStream));
  }
  for (auto& client : clients) client->read_until("data: ");
  clients.clear();
  EXPECT_TRUE(FakeEngine::eventually([&] { return engine_.num_active() == 0; }));
  EXPECT_EQ(engine_.num_cancelled(), 20u);
}

TEST_F(OpenAiServerTest, KeepAliveAfterAFinishedStream) {
  Socket client(server_->port());
  client.send(post("/v1/chat/completions", kStream));
  const std::string stream = client.read_until("0\r\n\r\n");
  EXPECT_NE(stream.find("data: [DONE]"), std::string::npos) << stream;
  client.send(post("/v1/completions", R"({"prompt":"x"})"));
  const std::string second = client.read_until("}}");
  EXPECT_TRUE(second.starts_with("HTTP/1.1 200")) << second;
  EXPECT_NE(second.find(R"("text":"Hello world")"), std::string::npos);
}

TEST_F(OpenAiServerTest, QueueFullIs429WithRetryAfterAndOversizeIs413) {
  engine_.script.error = engine::RequestError{engine::ErrorCode::kQueueFull, "queue full", ""};
  Socket client(server_->port());
  client.send(post("/v1/chat/completions", kStream));
  const std::string r = client.read_until("}}");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 429")) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos);
  Socket big(server_->port());
  big.send(post("/v1/completions", std::string(4000, ' ')));
  EXPECT_TRUE(big.read_until("}}").starts_with("HTTP/1.1 413"));
}

}  // namespace
}  // namespace troupe::net
