// HttpPeerClient against a real loopback HTTP server: a plain POSIX-socket server in a thread
// that answers canned responses (or holds a connection open without answering), so the test
// does not compile Beast itself. Every wait is on an event, bounded by kWait.
#include "net/http_peer_client.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "net/disagg_codec.hpp"
#include "tests/net/loopback.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr auto kWait = 10s;

// A full HTTP/1.1 response with a JSON body.
std::string http_response(int status, std::string_view body) {
  return "HTTP/1.1 " + std::to_string(status) + " Status\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         std::string(body);
}

// Serves one connection at a time on 127.0.0.1:<ephemeral>. The responder gets each request's
// bytes and returns the response to send, or nullopt to hold the connection open, unanswered,
// until the client closes it.
class CannedServer {
 public:
  using Responder = std::function<std::optional<std::string>(const std::string& request)>;

  explicit CannedServer(Responder responder) : responder_(std::move(responder)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in addr = testing::loopback_address(0);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t length = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::pipe(stop_pipe_), 0);
    thread_ = std::thread([this] { serve(); });
  }

  ~CannedServer() {
    const char byte = 0;
    EXPECT_EQ(::write(stop_pipe_[1], &byte, 1), 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

  uint16_t port() const { return port_; }

  // The next request the server received ("" if none came within kWait).
  std::string next_request() {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, kWait, [&] { return !requests_.empty(); })) return {};
    std::string request = std::move(requests_.front());
    requests_.pop_front();
    return request;
  }

  // Whether the client closed a held connection within kWait.
  bool wait_client_closed() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kWait, [&] { return num_client_closes_ > 0; });
  }

 private:
  // Waits until `fd` is readable; false when the server is stopping.
  bool wait_readable(int fd) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0) {
    }
    return (fds[1].revents & POLLIN) == 0;
  }

  // Reads one request: headers, then Content-Length bytes of body.
  std::optional<std::string> read_request(int fd) {
    std::string data;
    char buffer[4096];
    while (true) {
      const size_t header_end = data.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        std::string head = data.substr(0, header_end);
        std::transform(head.begin(), head.end(), head.begin(), ::tolower);
        const size_t at = head.find("content-length: ");
        const size_t length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 16));
        if (data.size() >= header_end + 4 + length) return data;
      }
      if (!wait_readable(fd)) return std::nullopt;
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return std::nullopt;
      data.append(buffer, static_cast<size_t>(n));
    }
  }

  void serve() {
    while (wait_readable(listen_fd_)) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      if (serve_connection(fd)) {
        ::close(fd);
      } else {
        ::close(fd);
        return;
      }
    }
  }

  // False when the server is stopping.
  bool serve_connection(int fd) {
    const auto request = read_request(fd);
    if (!request) return true;
    const std::optional<std::string> response = responder_(*request);
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(*request);
    }
    changed_.notify_all();
    if (response) {
      ::send(fd, response->data(), response->size(), MSG_NOSIGNAL);
      return true;
    }
    char byte = 0;
    while (true) {
      if (!wait_readable(fd)) return false;
      if (::recv(fd, &byte, 1, 0) <= 0) break;
    }
    {
      std::lock_guard lock(mutex_);
      ++num_client_closes_;
    }
    changed_.notify_all();
    return true;
  }

  Responder responder_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> requests_;
  int num_client_closes_ = 0;
};

CannedServer::Responder always(std::string response) {
  return [response = std::move(response)](const std::string&) { return response; };
}

CannedServer::Responder never_answer() {
  return [](const std::string&) { return std::optional<std::string>(); };
}

// A loopback port nothing listens on: bound once, then closed.
uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = testing::loopback_address(0);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string prefill_answer_body() {
  disagg::KvTransferParams params;
  params.do_remote_prefill = true;
  params.remote_engine_id = "engine-a";
  params.remote_block_ids = {4, 9};
  params.remote_request_id = "cmpl-42";
  params.remote_host = "127.0.0.1";
  params.remote_port = 8000;
  params.remote_num_tokens = 20;
  params.first_token_id = 77;
  JsonWriter out;
  out.begin_object().field("id", "cmpl-42").key("choices").begin_array().end_array();
  out.key("kv_transfer_params");
  write_kv_transfer_params(out, params);
  out.end_object();
  return out.take();
}

disagg::PrefillCall prefill_call(uint16_t port, std::string host = "127.0.0.1") {
  disagg::PrefillCall call;
  call.peer = {.host = std::move(host), .port = port};
  call.prompt_token_ids = {1, 2, 3};
  call.timeout = 5s;
  return call;
}

// Collects a callback's replies: the first through a future, and how many there were.
template <class Reply>
struct Replies {
  std::promise<Reply> first;
  std::atomic<int> count{0};

  std::function<void(Reply)> callback() {
    return [this](Reply reply) {
      if (count.fetch_add(1) == 0) first.set_value(std::move(reply));
    };
  }
  Reply wait() {
    auto future = first.get_future();
    if (future.wait_for(kWait) != std::future_status::ready) {
      ADD_FAILURE() << "no callback within " << kWait.count() << " s";
      return Reply{};
    }
    return future.get();
  }
};

TEST(PeerClient, PrefillAnsweredWithParamsReturnsThem) {
  CannedServer server(always(http_response(200, prefill_answer_body())));
  Replies<disagg::PrefillReply> replies;
  {
    HttpPeerClient client({.api_key = "sk-test"});
    client.prefill(prefill_call(server.port()), replies.callback());
    const disagg::PrefillReply reply = replies.wait();
    EXPECT_EQ(reply.error, "");
    EXPECT_EQ(reply.http_status, 200);
    EXPECT_TRUE(reply.params.do_remote_prefill);
    EXPECT_EQ(reply.params.remote_engine_id, "engine-a");
    EXPECT_EQ(reply.params.remote_request_id, "cmpl-42");
    EXPECT_EQ(reply.params.remote_block_ids, (std::vector<int32_t>{4, 9}));
    EXPECT_EQ(reply.params.remote_num_tokens, 20);
    EXPECT_EQ(reply.params.first_token_id, 77);
  }
  EXPECT_EQ(replies.count, 1);
  const std::string request = server.next_request();
  EXPECT_EQ(request.rfind("POST /v1/completions HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("Host: 127.0.0.1:" + std::to_string(server.port()) + "\r\n"),
            std::string::npos);
  EXPECT_NE(request.find("Authorization: Bearer sk-test\r\n"), std::string::npos);
  EXPECT_NE(request.find("Content-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(request.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(request.find("\r\n\r\n" + prefill_request_json(prefill_call(server.port()))),
            std::string::npos)
      << request;
}

TEST(PeerClient, NoApiKeyMeansNoAuthorizationHeader) {
  CannedServer server(always(http_response(200, prefill_answer_body())));
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  client.prefill(prefill_call(server.port()), replies.callback());
  EXPECT_EQ(replies.wait().error, "");
  EXPECT_EQ(server.next_request().find("Authorization"), std::string::npos);
}

TEST(PeerClient, BusyPrefillServerIsAnErrorWithItsStatus) {
  CannedServer server(always(http_response(429, R"({"error": {"message": "queue full",
"type": "rate_limit_error"}})")));
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  client.prefill(prefill_call(server.port()), replies.callback());
  const disagg::PrefillReply reply = replies.wait();
  EXPECT_EQ(reply.http_status, 429);
  EXPECT_EQ(reply.error.rfind(
                "prefill server answered 429: {\"error\": {\"message\": \"queue full\",", 0),
            0u)
      << reply.error;
  EXPECT_EQ(reply.error.find('\n'), std::string::npos);
}

TEST(PeerClient, AnswerWithoutUsableParamsIsAnError) {
  CannedServer server(always(http_response(200, R"({"id": "cmpl-1", "choices": []})")));
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  client.prefill(prefill_call(server.port()), replies.callback());
  const disagg::PrefillReply reply = replies.wait();
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.error, "prefill response has no kv_transfer_params");
}

TEST(PeerClient, RefusedConnectionFailsFast) {
  const uint16_t port = closed_port();
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  const auto start = Clock::now();
  client.prefill(prefill_call(port), replies.callback());
  const disagg::PrefillReply reply = replies.wait();
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(reply.http_status, 0);
  EXPECT_EQ(reply.error.rfind("cannot connect to 127.0.0.1:" + std::to_string(port) + ": ", 0), 0u)
      << reply.error;
}

TEST(PeerClient, ServerThatNeverAnswersTimesOut) {
  CannedServer server(never_answer());
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  auto call = prefill_call(server.port());
  call.timeout = 300ms;
  const auto start = Clock::now();
  client.prefill(std::move(call), replies.callback());
  const disagg::PrefillReply reply = replies.wait();
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 5s);
  EXPECT_EQ(reply.http_status, 0);
  EXPECT_NE(reply.error.find("timed out after 300 ms"), std::string::npos) << reply.error;
  EXPECT_TRUE(server.wait_client_closed());  // the timed-out connection is not left open
}

TEST(PeerClient, CancelClosesTheConnectionAndAnswersCancelledOnce) {
  CannedServer server(never_answer());
  Replies<disagg::PrefillReply> replies;
  {
    HttpPeerClient client({});
    const auto call_id = client.prefill(prefill_call(server.port()), replies.callback());
    ASSERT_NE(server.next_request(), "");  // the prefill server is computing
    client.cancel(call_id);
    const disagg::PrefillReply reply = replies.wait();
    EXPECT_EQ(reply.error, "cancelled");
    EXPECT_EQ(reply.http_status, 0);
    EXPECT_TRUE(server.wait_client_closed());  // how the prefill server learns to cancel
    client.cancel(call_id);                    // finished: ignored
    client.cancel(call_id + 1000);             // unknown: ignored
  }
  EXPECT_EQ(replies.count, 1);
}

TEST(PeerClient, CancelRightAfterStartingStillAnswersCancelled) {
  CannedServer server(never_answer());
  Replies<disagg::PrefillReply> replies;
  {
    HttpPeerClient client({});
    client.cancel(client.prefill(prefill_call(server.port()), replies.callback()));
    EXPECT_EQ(replies.wait().error, "cancelled");
  }
  EXPECT_EQ(replies.count, 1);
}

TEST(PeerClient, CancelAfterTheAnswerChangesNothing) {
  CannedServer server(always(http_response(200, prefill_answer_body())));
  Replies<disagg::PrefillReply> replies;
  {
    HttpPeerClient client({});
    const auto call_id = client.prefill(prefill_call(server.port()), replies.callback());
    EXPECT_EQ(replies.wait().error, "");
    client.cancel(call_id);
  }
  EXPECT_EQ(replies.count, 1);
}

TEST(PeerClient, DestructorWithACallInFlightAnswersItOnce) {
  CannedServer server(never_answer());
  Replies<disagg::PrefillReply> replies;
  {
    HttpPeerClient client({});
    client.prefill(prefill_call(server.port()), replies.callback());
    ASSERT_NE(server.next_request(), "");
  }
  EXPECT_EQ(replies.count, 1);
  EXPECT_EQ(replies.wait().error, "shutting down");
  EXPECT_TRUE(server.wait_client_closed());
}

TEST(PeerClient, ManyConcurrentCallsAllComplete) {
  CannedServer server(always(http_response(200, prefill_answer_body())));
  constexpr int kCalls = 8;
  std::vector<Replies<disagg::PrefillReply>> replies(kCalls);
  {
    HttpPeerClient client({});
    for (auto& r : replies) client.prefill(prefill_call(server.port()), r.callback());
    for (auto& r : replies) EXPECT_EQ(r.wait().params.remote_request_id, "cmpl-42");
  }
  for (auto& r : replies) EXPECT_EQ(r.count, 1);
}

TEST(PeerClient, LocalhostIsResolved) {
  CannedServer server(always(http_response(200, prefill_answer_body())));
  HttpPeerClient client({});
  Replies<disagg::PrefillReply> replies;
  client.prefill(prefill_call(server.port(), "localhost"), replies.callback());
  EXPECT_EQ(replies.wait().error, "");
  EXPECT_NE(server.next_request().find("Host: localhost:"), std::string::npos);
}

TEST(PeerClient, AnswerOverTheSizeLimitIsAnError) {
  CannedServer server(always(http_response(200, std::string(4096, ' ') + prefill_answer_body())));
  HttpPeerClient client({.max_response_bytes = 1024});
  Replies<disagg::PrefillReply> replies;
  client.prefill(prefill_call(server.port()), replies.callback());
  const disagg::PrefillReply reply = replies.wait();
  EXPECT_NE(reply.error.find("answered more than 1024 bytes"), std::string::npos) << reply.error;
}

disagg::KvMetadata sample_metadata() {
  disagg::KvMetadata m;
  m.engine_id = "engine-a";
  m.descriptor.transport = "ucx";
  m.descriptor.worker_address = std::string("\x00\x10ucx\x00", 6);
  m.descriptor.rkey = std::string("\xff\x00", 2);
  m.descriptor.base_address = 1u << 30;
  m.layout = {.num_layers = 1,
              .num_kv_heads = 2,
              .head_dim = 8,
              .block_size = 4,
              .num_blocks = 3,
              .dtype = "f16",
              .block_bytes = 128,
              .kv_stride = 384,
              .layer_stride = 768};
  m.descriptor.region_bytes = 768;
  m.compatibility_hash = "abc123";
  return m;
}

TEST(PeerClient, FetchMetadataReturnsWhatThePeerServes) {
  CannedServer server(always(http_response(200, kv_metadata_json(sample_metadata()))));
  HttpPeerClient client({});
  Replies<disagg::MetadataReply> replies;
  client.fetch_metadata({.host = "127.0.0.1", .port = server.port()}, 5s, replies.callback());
  const disagg::MetadataReply reply = replies.wait();
  ASSERT_TRUE(std::holds_alternative<disagg::KvMetadata>(reply)) << std::get<std::string>(reply);
  const auto& m = std::get<disagg::KvMetadata>(reply);
  EXPECT_EQ(m.engine_id, "engine-a");
  EXPECT_EQ(m.descriptor.worker_address, sample_metadata().descriptor.worker_address);
  EXPECT_EQ(m.descriptor.rkey, sample_metadata().descriptor.rkey);
  EXPECT_EQ(m.layout, sample_metadata().layout);
  EXPECT_EQ(server.next_request().rfind("GET /v1/kv/metadata HTTP/1.1\r\n", 0), 0u);
}

TEST(PeerClient, FetchMetadataGarbageOrRefusalIsAnError) {
  {
    CannedServer server(always(http_response(200, "<html>hello</html>")));
    HttpPeerClient client({});
    Replies<disagg::MetadataReply> replies;
    client.fetch_metadata({.host = "127.0.0.1", .port = server.port()}, 5s, replies.callback());
    const disagg::MetadataReply reply = replies.wait();
    ASSERT_TRUE(std::holds_alternative<std::string>(reply));
    EXPECT_EQ(std::get<std::string>(reply).rfind("metadata from 127.0.0.1:", 0), 0u)
        << std::get<std::string>(reply);
  }
  {
    CannedServer server(always(http_response(404, R"({"error": "no such route"})")));
    HttpPeerClient client({});
    Replies<disagg::MetadataReply> replies;
    client.fetch_metadata({.host = "127.0.0.1", .port = server.port()}, 5s, replies.callback());
    const disagg::MetadataReply reply = replies.wait();
    ASSERT_TRUE(std::holds_alternative<std::string>(reply));
    EXPECT_NE(std::get<std::string>(reply).find("answered 404: {\"error\": \"no such route\"}"),
              std::string::npos)
        << std::get<std::string>(reply);
  }
}

TEST(PeerClient, ReleasePostsTheRequestId) {
  CannedServer server(always(http_response(200, "{}")));
  HttpPeerClient client({.api_key = "sk-x"});
  client.release({.host = "127.0.0.1", .port = server.port()}, "cmpl-7");
  const std::string request = server.next_request();
  EXPECT_EQ(request.rfind("POST /v1/kv/release HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_NE(request.find("Authorization: Bearer sk-x\r\n"), std::string::npos);
  EXPECT_NE(request.find("\r\n\r\n{\"remote_request_id\":\"cmpl-7\"}"), std::string::npos)
      << request;
}

TEST(PeerClient, ReleaseToANonexistentPeerIsQuiet) {
  HttpPeerClient client({});
  client.release({.host = "127.0.0.1", .port = closed_port()}, "cmpl-8");
  // Nothing to observe but that the destructor returns with the failed call finished.
}

}  // namespace
}  // namespace troupe::net
