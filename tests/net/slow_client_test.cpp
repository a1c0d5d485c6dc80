// A streaming client that stops reading is dropped once the response's unsent bytes pass
// HttpServerConfig::max_stream_buffer_bytes (api.max_stream_buffer_bytes in the config): the
// handler's write() returns false, which is how a generation learns to stop. A real loopback
// client with a small receive buffer that never reads; the handler writes as fast as it can.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "net/http_server.hpp"
#include "tests/net/loopback.hpp"

namespace troupe::net {
namespace {

struct FloodResult {
  bool dropped = false;    // write() refused more bytes
  uint64_t written = 0;    // bytes accepted before that
};

// Streams 4 KiB chunks until write() refuses (or a cap far past any buffer), on its own thread
// as a generation would.
class FloodRoute {
 public:
  void handle(std::shared_ptr<ResponseStream> out) {
    worker_ = std::thread([this, out] {
      FloodResult result;
      HttpResponse head;
      head.content_type = "text/event-stream";
      if (out->begin_stream(std::move(head))) {
        const std::string chunk(4096, 'x');
        while (result.written < (uint64_t{256} << 20)) {
          if (!out->write(chunk)) {
            result.dropped = true;
            break;
          }
          result.written += chunk.size();
        }
      }
      out->end();
      done_.set_value(result);
    });
  }
  std::future<FloodResult> result() { return done_.get_future(); }
  ~FloodRoute() {
    if (worker_.joinable()) worker_.join();
  }

 private:
  std::promise<FloodResult> done_;
  std::thread worker_;
};

// Connects with a 4 KiB receive buffer (set before connect, so the window stays small), sends
// one request and never reads.
int connect_lazy_reader(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  if (!testing::connect_loopback(fd, port)) return -1;
  const std::string request = "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  return fd;
}

TEST(SlowStreamingClient, IsDroppedAtTheConfiguredBufferLimit) {
  auto route = std::make_shared<FloodRoute>();
  auto router = std::make_shared<Router>();
  router->add_async("GET", "/flood", [route](HttpRequest, std::shared_ptr<ResponseStream> out) {
    route->handle(std::move(out));
  });
  HttpServerConfig config;
  config.port = 0;
  config.max_stream_buffer_bytes = 64 << 10;
  HttpServer server(config, router);
  server.start();
  auto result = route->result();
  const int fd = connect_lazy_reader(server.port());
  ASSERT_GE(fd, 0);
  // A guard against a hang only: the drop comes as soon as the kernel's buffers are full.
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const FloodResult flood = result.get();
  EXPECT_TRUE(flood.dropped);
  // What the socket's kernel buffers hold (a few MiB at most on loopback) plus the 64 KiB limit:
  // far below the 8 MiB default, which is what a limit that never reached the stream would give.
  EXPECT_LT(flood.written, uint64_t{8} << 20) << "bytes accepted before the drop";
  ::close(fd);
  server.stop();
}

}  // namespace
}  // namespace troupe::net
