// AdminServer over real sockets (a Unix socket in a temp dir, and the TCP listener on loopback)
// against a test-double engine: every command, socket-file rules, errors, watch and tokens.
#include "net/admin_server.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/admin_socket_file.hpp"
#include "tests/net/admin_fake_engine.hpp"
#include "tests/net/loopback.hpp"
#include "tests/net/temp_dir.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using testing::AdminFakeEngine;

// A blocking line client with timeouts, on a raw fd.
class LineClient {
 public:
  explicit LineClient(int fd) : fd_(fd) {}
  LineClient(LineClient&& other) noexcept : fd_(std::exchange(other.fd_, -1)), buffer_(std::move(other.buffer_)) {}
  ~LineClient() { close(); }

  static LineClient unix_socket(const std::filesystem::path& path) {
    const int fd = connect_unix_socket(path);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    return LineClient(fd);
  }
  static LineClient tcp(uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_TRUE(testing::connect_loopback(fd, port));
    return LineClient(fd);
  }

  bool connected() const { return fd_ >= 0; }

  void send(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      text.remove_prefix(static_cast<size_t>(n));
    }
  }

  // The next line, or nullopt at EOF or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (const size_t end = buffer_.find('\n'); end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // True when the server closed the connection within `timeout` (pending lines are skipped).
  bool closed_by_server(std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return true;
    }
    return false;
  }

  void half_close() { ::shutdown(fd_, SHUT_WR); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string buffer_;
};

struct Reply {
  std::string text;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  bool ok() { return root["ok"].get_bool().value(); }
  std::string error() {
    std::string_view e;
    return root["error"].get(e) == simdjson::SUCCESS ? std::string(e) : std::string();
  }
};

// Sends `line` and parses the one reply (the Reply owns its parser, so elements stay valid).
std::unique_ptr<Reply> ask(LineClient& client, std::string_view line) {
  client.send(std::string(line) + "\n");
  auto reply = std::make_unique<Reply>();
  std::optional<std::string> text = client.read_line();
  EXPECT_TRUE(text.has_value()) << "no reply to " << line;
  reply->text = text.value_or(R"({"ok":false,"error":"no reply"})");
  const auto error = reply->parser.parse(reply->text).get(reply->root);
  EXPECT_EQ(error, simdjson::SUCCESS) << reply->text;
  return reply;
}

class AdminServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    config_.socket_path = dir_ / "a.sock";
    engine_.set_stats(testing::sample_stats());
  }
  void TearDown() override { server_.reset(); }

  AdminServer& start(AdminServerConfig config) {
    server_ = std::make_unique<AdminServer>(config, engine_, [this] { ++num_drains_; });
    server_->start();
    return *server_;
  }
  AdminServer& start() { return start(config_); }

  testing::TempDir temp_dir_{"troupe-admin-test"};
  const std::filesystem::path dir_ = temp_dir_.path();
  AdminServerConfig config_;
  AdminFakeEngine engine_;
  std::atomic<int> num_drains_{0};
  std::unique_ptr<AdminServer> server_;
};

TEST_F(AdminServerTest, SocketFileIsPrivateAndRemovedOnStop) {
  AdminServer& server = start();
  EXPECT_EQ(server.socket_path(), config_.socket_path);
  struct stat info {};
  ASSERT_EQ(::lstat(config_.socket_path.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  server.stop();
  EXPECT_FALSE(std::filesystem::exists(config_.socket_path));
}

TEST_F(AdminServerTest, CreatesAMissingDirectoryPrivately) {
  config_.socket_path = dir_ / "run" / "a.sock";
  start();
  struct stat info {};
  ASSERT_EQ(::stat((dir_ / "run").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST_F(AdminServerTest, StatsReply) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  auto reply = ask(client, R"({"cmd":"stats"})");
  ASSERT_TRUE(reply->ok()) << reply->text;
  EXPECT_EQ(reply->root["model"].get_string().value(), "fake-model");
  EXPECT_EQ(reply->root["backend"].get_string().value(), "cpu");
  EXPECT_DOUBLE_EQ(reply->root["uptime_s"].get_double().value(), 3725);
  EXPECT_EQ(reply->root["requests"]["running"].get_int64().value(), 2);
  EXPECT_EQ(reply->root["kv_blocks"]["used"].get_int64().value(), 10);
  EXPECT_EQ(reply->root["kv_blocks"]["free"].get_int64().value(), 70);
  for (const char* key : {"prefix_cache", "step_time_ms", "ttft_ms", "tokens_per_s", "totals"}) {
    EXPECT_EQ(reply->root[key].error(), simdjson::SUCCESS) << key;
  }
  // Several commands on one connection.
  EXPECT_TRUE(ask(client, R"({"cmd":"stats"})")->ok());
}

TEST_F(AdminServerTest, RequestsAndCancel) {
  engine::RequestInfo info;
  info.request_id = 12;
  info.origin = engine::RequestOrigin::kHttp;
  info.phase = engine::RequestPhase::kDecode;
  info.prompt_tokens = 9;
  info.generated_tokens = 3;
  engine_.set_requests({info});
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  auto list = ask(client, R"({"cmd":"requests"})");
  ASSERT_TRUE(list->ok()) << list->text;
  simdjson::dom::array requests = list->root["requests"].get_array();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests.at(0)["id"].get_uint64().value(), 12u);
  EXPECT_EQ(requests.at(0)["origin"].get_string().value(), "http");
  EXPECT_EQ(requests.at(0)["prompt_tokens"].get_int64().value(), 9);

  auto cancelled = ask(client, R"({"cmd":"cancel","id":"12"})");
  ASSERT_TRUE(cancelled->ok()) << cancelled->text;
  EXPECT_EQ(cancelled->root["id"].get_uint64().value(), 12u);
  EXPECT_TRUE(cancelled->root["was_live"].get_bool().value());
  auto again = ask(client, R"({"cmd":"cancel","id":12})");
  EXPECT_TRUE(again->ok());
  EXPECT_FALSE(again->root["was_live"].get_bool().value());
  EXPECT_EQ(engine_.cancelled(), (std::vector<engine::RequestId>{12, 12}));
  EXPECT_FALSE(ask(client, R"({"cmd":"cancel","id":"abc"})")->ok());
}

TEST_F(AdminServerTest, DrainRepliesThenCallsBackOnce) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  auto reply = ask(client, R"({"cmd":"drain"})");
  EXPECT_TRUE(reply->ok());
  EXPECT_TRUE(reply->root["draining"].get_bool().value());
  EXPECT_TRUE(testing::FakeEngine::eventually([&] { return num_drains_.load() == 1; }));
  EXPECT_TRUE(ask(client, R"({"cmd":"drain"})")->ok());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(num_drains_.load(), 1);
}

TEST_F(AdminServerTest, LogLevelAndFlushPrefixCache) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  const auto before = spdlog::get_level();
  auto level = ask(client, R"({"cmd":"log_level","level":"debug"})");
  EXPECT_TRUE(level->ok()) << level->text;
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  spdlog::set_level(before);
  EXPECT_FALSE(ask(client, R"({"cmd":"log_level","level":"chatty"})")->ok());
  auto flushed = ask(client, R"({"cmd":"flush_prefix_cache"})");
  EXPECT_TRUE(flushed->ok());
  EXPECT_EQ(flushed->root["blocks_freed"].get_int64().value(), 7);
  EXPECT_EQ(engine_.num_flushes(), 1);
}

TEST_F(AdminServerTest, ErrorsLeaveTheConnectionUsable) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  auto bad_json = ask(client, R"({"cmd": "stats")");
  EXPECT_FALSE(bad_json->ok());
  EXPECT_NE(bad_json->error().find("invalid JSON"), std::string::npos) << bad_json->text;
  auto unknown = ask(client, R"({"cmd":"reboot"})");
  EXPECT_FALSE(unknown->ok());
  EXPECT_NE(unknown->error().find("unknown command"), std::string::npos);
  EXPECT_FALSE(ask(client, "42")->ok());
  EXPECT_FALSE(ask(client, "\xff\xfe")->ok());
  client.send("\n\r\n   \n");  // blank lines are skipped, not answered
  auto reply = ask(client, R"({"cmd":"stats"})");
  EXPECT_TRUE(reply->ok()) << reply->text;
}

TEST_F(AdminServerTest, OversizeLineGetsAnErrorThenClose) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  // Exactly the limit is accepted.
  std::string padded = R"({"cmd":"stats","pad":")";
  padded += std::string(config_.max_line_bytes - padded.size() - 2, 'x');
  padded += "\"}";
  ASSERT_EQ(padded.size(), config_.max_line_bytes);
  EXPECT_TRUE(ask(client, padded)->ok());
  // One byte more is not.
  client.send(std::string(config_.max_line_bytes + 1000, 'y'));
  std::optional<std::string> line = client.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("\"ok\":false"), std::string::npos);
  EXPECT_NE(line->find("exceeds"), std::string::npos);
  EXPECT_TRUE(client.closed_by_server());
  // The server keeps serving others.
  LineClient other = LineClient::unix_socket(config_.socket_path);
  EXPECT_TRUE(ask(other, R"({"cmd":"stats"})")->ok());
}

// Issue 14: clients that connect and send nothing filled the cap and locked operators out.
TEST_F(AdminServerTest, IdleConnectionsDoNotLockOperatorsOut) {
  AdminServerConfig config = config_;
  config.max_connections = 3;
  start(config);
  std::vector<LineClient> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(LineClient::unix_socket(config_.socket_path));
    ASSERT_TRUE(ask(idle.back(), R"({"cmd":"stats"})")->ok());  // admitted, then idle
  }
  LineClient operator_client = LineClient::unix_socket(config_.socket_path);
  auto reply = ask(operator_client, R"({"cmd":"stats"})");
  EXPECT_TRUE(reply->ok()) << reply->text;
  // The connection idle the longest made room, and was told why.
  std::optional<std::string> reason = idle[0].read_line();
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("make room"), std::string::npos) << *reason;
  EXPECT_TRUE(idle[0].closed_by_server());
  EXPECT_TRUE(ask(idle[1], R"({"cmd":"stats"})")->ok());
  EXPECT_TRUE(ask(idle[2], R"({"cmd":"stats"})")->ok());
}

TEST_F(AdminServerTest, ConnectionsThatNeverSpeakDoNotLockOperatorsOut) {
  AdminServerConfig config = config_;
  config.max_connections = 4;
  start(config);
  std::vector<LineClient> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(LineClient::unix_socket(config_.socket_path));
  LineClient operator_client = LineClient::unix_socket(config_.socket_path);
  auto reply = ask(operator_client, R"({"cmd":"stats"})");
  EXPECT_TRUE(reply->ok()) << reply->text;
}

TEST_F(AdminServerTest, NewcomerIsRefusedWhenNoConnectionIsIdle) {
  AdminServerConfig config = config_;
  config.max_connections = 1;
  start(config);
  LineClient watcher = LineClient::unix_socket(config_.socket_path);
  watcher.send(R"({"cmd":"watch","interval_ms":50})" "\n");
  ASSERT_TRUE(watcher.read_line().has_value());  // a watch is not idle
  LineClient newcomer = LineClient::unix_socket(config_.socket_path);
  std::optional<std::string> line = newcomer.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("too many admin connections"), std::string::npos) << *line;
  EXPECT_TRUE(newcomer.closed_by_server());
  EXPECT_TRUE(watcher.read_line().has_value());  // still watching
}

TEST_F(AdminServerTest, IdleConnectionIsClosedAfterTheTimeout) {
  AdminServerConfig config = config_;
  config.idle_timeout = 1s;
  start(config);
  LineClient silent = LineClient::unix_socket(config_.socket_path);
  LineClient busy = LineClient::unix_socket(config_.socket_path);
  LineClient watcher = LineClient::unix_socket(config_.socket_path);
  watcher.send(R"({"cmd":"watch","interval_ms":50})" "\n");
  // Commands more often than the timeout keep a connection open; so does a watch, which sends
  // nothing after its first line.
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(ask(busy, R"({"cmd":"stats"})")->ok()) << i;
    std::this_thread::sleep_for(100ms);
  }
  std::optional<std::string> reason = silent.read_line();
  ASSERT_TRUE(reason.has_value()) << "an idle connection was not closed";
  EXPECT_NE(reason->find("no command for 1000 ms"), std::string::npos) << *reason;
  EXPECT_TRUE(silent.closed_by_server());
  int num_watch_lines = 0;
  while (num_watch_lines < 60 && watcher.read_line(2s).has_value()) ++num_watch_lines;
  EXPECT_EQ(num_watch_lines, 60);  // 3 s of watching
}

TEST_F(AdminServerTest, FinalLineWithoutNewlineIsAnswered) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  client.send(R"({"cmd":"requests"})");
  client.half_close();  // EOF after an unterminated line
  std::optional<std::string> line = client.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("\"requests\":[]"), std::string::npos) << *line;
  EXPECT_TRUE(client.closed_by_server());
}

TEST_F(AdminServerTest, WatchStreamsUntilTheClientCloses) {
  start();
  {
    LineClient client = LineClient::unix_socket(config_.socket_path);
    client.send(R"({"cmd":"watch","interval_ms":50})" "\n");
    for (int i = 0; i < 3; ++i) {
      std::optional<std::string> line = client.read_line(2s);
      ASSERT_TRUE(line.has_value()) << "watch line " << i;
      EXPECT_NE(line->find("\"model\":\"fake-model\""), std::string::npos);
    }
  }  // closed
  // The watch stops: stats() is no longer polled for it.
  std::this_thread::sleep_for(150ms);
  const int calls = engine_.num_stats_calls();
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(engine_.num_stats_calls(), calls);
  LineClient other = LineClient::unix_socket(config_.socket_path);
  EXPECT_TRUE(ask(other, R"({"cmd":"requests"})")->ok());
}

TEST_F(AdminServerTest, AnotherCommandEndsAWatch) {
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  client.send(R"({"cmd":"watch","interval_ms":50})" "\n");
  ASSERT_TRUE(client.read_line().has_value());
  ASSERT_TRUE(client.read_line().has_value());
  client.send(R"({"cmd":"requests"})" "\n");
  // Watch lines already in flight may precede the requests reply.
  bool got_requests = false;
  for (int i = 0; i < 10 && !got_requests; ++i) {
    std::optional<std::string> line = client.read_line(2s);
    ASSERT_TRUE(line.has_value());
    got_requests = line->find("\"requests\":[") != std::string::npos;
  }
  EXPECT_TRUE(got_requests);
  EXPECT_FALSE(client.read_line(200ms).has_value());  // no more watch lines
}

TEST_F(AdminServerTest, StopEndsWatches) {
  AdminServer& server = start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  // A watch that would sleep a minute before its next line: stop() must end it at once, not
  // when its interval is up (the bound only guards against a hang, far from what it measures).
  client.send(R"({"cmd":"watch","interval_ms":60000})" "\n");
  ASSERT_TRUE(client.read_line().has_value());
  const auto t0 = std::chrono::steady_clock::now();
  server.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_TRUE(client.closed_by_server());
}

TEST_F(AdminServerTest, StaleSocketIsReplaced) {
  {
    // A socket file whose listener is gone, as a crashed run leaves it.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, config_.socket_path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ::close(fd);
  }
  ASSERT_EQ(probe_socket_file(config_.socket_path), SocketFileState::kStale);
  start();
  LineClient client = LineClient::unix_socket(config_.socket_path);
  EXPECT_TRUE(ask(client, R"({"cmd":"stats"})")->ok());
}

TEST_F(AdminServerTest, LiveSocketIsRefused) {
  start();
  AdminServer second(config_, engine_, [] {});
  try {
    second.start();
    FAIL() << "a second server started on a live socket";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another troupe is serving on"), std::string::npos) << e.what();
  }
  // The first one is untouched.
  LineClient client = LineClient::unix_socket(config_.socket_path);
  EXPECT_TRUE(ask(client, R"({"cmd":"stats"})")->ok());
}

TEST_F(AdminServerTest, RegularFileIsNotReplaced) {
  std::ofstream(config_.socket_path) << "precious";
  EXPECT_THROW(start(), std::runtime_error);
  std::ifstream in(config_.socket_path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(AdminServerTest, TcpListenerNeedsTheToken) {
  const std::filesystem::path token_file = dir_ / "token";
  std::ofstream(token_file) << "  t0ken-value\n";
  AdminServerConfig config = config_;
  config.tcp.enabled = true;
  config.tcp.token_file = token_file;
  AdminServer& server = start(config);
  ASSERT_NE(server.tcp_port(), 0);

  LineClient anonymous = LineClient::tcp(server.tcp_port());
  auto refused = ask(anonymous, R"({"cmd":"stats"})");
  EXPECT_FALSE(refused->ok());
  EXPECT_EQ(refused->error(), "unauthorized");
  EXPECT_TRUE(anonymous.closed_by_server());

  LineClient wrong = LineClient::tcp(server.tcp_port());
  EXPECT_EQ(ask(wrong, R"({"cmd":"stats","token":"t0ken-valuE"})")->error(), "unauthorized");

  LineClient right = LineClient::tcp(server.tcp_port());
  auto reply = ask(right, R"({"cmd":"stats","token":"t0ken-value"})");
  EXPECT_TRUE(reply->ok()) << reply->text;
  EXPECT_TRUE(ask(right, R"({"cmd":"requests","token":"t0ken-value"})")->ok());
  EXPECT_EQ(ask(right, R"({"cmd":"requests"})")->error(), "unauthorized");

  // The Unix socket (private by file mode) needs no token.
  LineClient local = LineClient::unix_socket(config_.socket_path);
  EXPECT_TRUE(ask(local, R"({"cmd":"stats"})")->ok());
}

TEST_F(AdminServerTest, TcpListenerRefusesToStartWithoutAToken) {
  AdminServerConfig config = config_;
  config.tcp.enabled = true;
  config.tcp.token_file = dir_ / "missing";
  EXPECT_THROW(start(config), std::runtime_error);
  std::ofstream(dir_ / "empty") << "\n";
  config.tcp.token_file = dir_ / "empty";
  EXPECT_THROW(start(config), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(config_.socket_path));  // nothing left behind
}

TEST(AdminSocketPathTest, DefaultPathFollowsTheEnvironment) {
  const char* saved_explicit = std::getenv("TROUPE_ADMIN_SOCKET");
  const char* saved_runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string explicit_value = saved_explicit ? saved_explicit : "";
  const std::string runtime_value = saved_runtime ? saved_runtime : "";
  ::unsetenv("TROUPE_ADMIN_SOCKET");
  ::setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  EXPECT_EQ(default_admin_socket_path(), "/run/user/1234/troupe.sock");
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(default_admin_socket_path(),
            std::filesystem::path("/tmp/troupe-" + std::to_string(::getuid())) / "troupe.sock");
  ::setenv("TROUPE_ADMIN_SOCKET", "/x/y.sock", 1);
  EXPECT_EQ(default_admin_socket_path(), "/x/y.sock");
  if (saved_explicit) ::setenv("TROUPE_ADMIN_SOCKET", explicit_value.c_str(), 1);
  else ::unsetenv("TROUPE_ADMIN_SOCKET");
  if (saved_runtime) ::setenv("XDG_RUNTIME_DIR", runtime_value.c_str(), 1);
}

}  // namespace
}  // namespace troupe::net
