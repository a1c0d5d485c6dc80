// `troupe admin` (app/admin_command.cpp) against a real AdminServer on a Unix socket in a temp
// dir, with the admin test-double engine: text and --json output, exit codes.
#include <atomic>
#include <iostream>
#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "app/admin_command.hpp"
#include "net/admin_server.hpp"
#include "net/stats_schema.hpp"
#include "tests/net/admin_fake_engine.hpp"
#include "tests/net/temp_dir.hpp"

namespace troupe::app {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

CliRun run(std::vector<std::string> args) {
  std::ostringstream out;
  std::ostringstream err;
  std::streambuf* saved_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* saved_err = std::cerr.rdbuf(err.rdbuf());
  CliRun result;
  result.status = run_admin(args);
  std::cout.rdbuf(saved_out);
  std::cerr.rdbuf(saved_err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

class AdminCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    socket_ = (dir_ / "a.sock").string();
    engine_.set_stats(net::testing::sample_stats());
    engine::RequestInfo info;
    info.request_id = 31;
    info.client_label = "my-label";
    info.client = "user:ann";
    info.phase = engine::RequestPhase::kDecode;
    info.prompt_tokens = 12;
    info.generated_tokens = 345;
    info.age_ms = 1500;
    engine_.set_requests({info});
    net::AdminServerConfig config;
    config.socket_path = dir_ / "a.sock";
    server_ = std::make_unique<net::AdminServer>(config, engine_, [this] { ++num_drains_; });
    server_->start();
  }
  void TearDown() override { server_.reset(); }

  net::testing::TempDir temp_dir_{"troupe-admin-cli"};
  const std::filesystem::path dir_ = temp_dir_.path();
  std::string socket_;
  net::testing::AdminFakeEngine engine_;
  std::atomic<int> num_drains_{0};
  std::unique_ptr<net::AdminServer> server_;
};

TEST_F(AdminCliTest, Stats) {
  CliRun r = run({"--socket", socket_, "stats"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fake-model (backend cpu), up 1h 02m 05s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 running, 1 waiting, 3 preempted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("10 used, 20 cached, 70 free of 100 (10.0% used)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("12.5 tokens/s"), std::string::npos) << r.out;
}

TEST_F(AdminCliTest, StatsShowTheDraftAcceptanceRate) {
  engine::EngineStats stats = net::testing::sample_stats();
  stats.speculative = {.num_drafts = 5, .num_draft_tokens = 20, .num_accepted_tokens = 15};
  engine_.set_stats(stats);
  CliRun r = run({"--socket", socket_, "stats"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("75.0% of 20 draft tokens accepted (5 verify spans)"), std::string::npos) << r.out;
}

// `stats --all` prints every figure of the stats schema (net/stats_schema.hpp) with its help:
// a figure added to the schema shows here without another line of code.
TEST_F(AdminCliTest, StatsAllPrintsEveryFigureOfTheSchema) {
  CliRun r = run({"--socket", socket_, "stats", "--all"});
  EXPECT_EQ(r.status, 0) << r.err;
  int figures = 0;
  for (const net::Stat& stat : net::engine_stats_schema()) {
    if (stat.json.empty()) continue;
    ++figures;
    EXPECT_NE(r.out.find(std::string(stat.json) + " "), std::string::npos) << stat.json << "\n"
                                                                           << r.out;
  }
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), figures);
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_NE(line.substr(37, 14), std::string(13, ' ') + "-")
        << "a figure the server did not send: " << line;
  }
  EXPECT_NE(r.out.find("kv_blocks.used"), std::string::npos);
  EXPECT_NE(r.out.find("KV-cache blocks referenced by a sequence."), std::string::npos) << r.out;
}

TEST_F(AdminCliTest, JsonPrintsTheRawReply) {
  CliRun r = run({"admin", "--json", "--socket=" + socket_, "stats"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with(R"({"ok":true,"model":"fake-model")")) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

TEST_F(AdminCliTest, RequestsTable) {
  CliRun r = run({"requests", "--socket", socket_});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ID  ORIGIN  PHASE   PRIORITY  PROMPT  GENERATED   AGE  CLIENT    LABEL"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("31  http    decode  normal        12        345  1.5s  user:ann  my-label"),
            std::string::npos) << r.out;
}

TEST_F(AdminCliTest, CancelLogLevelFlushDrain) {
  CliRun r = run({"--socket", socket_, "cancel", "31"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "request 31 cancelled\n");
  r = run({"--socket", socket_, "cancel", "31"});
  EXPECT_EQ(r.out, "request 31 is not live (nothing to cancel)\n");
  const auto before = spdlog::get_level();
  r = run({"--socket", socket_, "log-level", "warn"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("log level warning"), std::string::npos) << r.out;
  spdlog::set_level(before);
  r = run({"--socket", socket_, "log-level", "loud"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("server error"), std::string::npos) << r.err;
  r = run({"--socket", socket_, "flush-prefix-cache"});
  EXPECT_EQ(r.out, "prefix cache flushed: 7 blocks freed\n");
  r = run({"--socket", socket_, "drain"});
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(net::testing::FakeEngine::eventually([&] { return num_drains_.load() == 1; }));
}

TEST_F(AdminCliTest, WatchPrintsATableRowPerUpdateWhenNotATerminal) {
  CliRun r = run({"--socket", socket_, "watch", "--interval", "50", "--count", "3"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;  // header + 3 rows
  EXPECT_NE(r.out.find("TOK/S"), std::string::npos);
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos);  // no cursor movement into a pipe
  r = run({"--socket", socket_, "--json", "watch", "--interval=50", "--count=2"});
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST_F(AdminCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run({}).status, 2);
  EXPECT_EQ(run({"frobnicate"}).status, 2);
  EXPECT_EQ(run({"cancel"}).status, 2);
  EXPECT_EQ(run({"cancel", "abc"}).status, 2);
  EXPECT_EQ(run({"stats", "extra"}).status, 2);
  EXPECT_EQ(run({"watch", "--interval", "10"}).status, 2);
  EXPECT_EQ(run({"--bogus", "stats"}).status, 2);
  EXPECT_EQ(run({"--socket"}).status, 2);
  CliRun help = run({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out, admin_usage_text());
}

TEST_F(AdminCliTest, NoServerListening) {
  CliRun r = run({"--socket", (dir_ / "nobody.sock").string(), "stats"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no troupe server is listening on"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace troupe::app
