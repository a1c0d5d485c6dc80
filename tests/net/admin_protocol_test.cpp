// admin_protocol: command parsing, token checks and reply shapes, without sockets.
#include "net/admin_protocol.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "tests/net/admin_fake_engine.hpp"

namespace troupe::net {
namespace {

using testing::AdminFakeEngine;

template <typename T>
T parse_ok(std::string_view line, const std::optional<std::string>& token = std::nullopt) {
  auto parsed = parse_admin_command(line, token);
  if (auto* error = std::get_if<AdminError>(&parsed)) {
    ADD_FAILURE() << line << " -> " << error->message;
    return T{};
  }
  const auto& command = std::get<AdminCommand>(parsed);
  EXPECT_TRUE(std::holds_alternative<T>(command)) << line;
  return std::holds_alternative<T>(command) ? std::get<T>(command) : T{};
}

AdminError parse_error(std::string_view line, const std::optional<std::string>& token = std::nullopt) {
  auto parsed = parse_admin_command(line, token);
  EXPECT_TRUE(std::holds_alternative<AdminError>(parsed)) << line;
  return std::holds_alternative<AdminError>(parsed) ? std::get<AdminError>(parsed) : AdminError{};
}

TEST(AdminProtocolTest, ParsesEveryCommand) {
  parse_ok<AdminStats>(R"({"cmd":"stats"})");
  EXPECT_EQ(parse_ok<AdminWatch>(R"({"cmd":"watch"})").interval, kDefaultWatchInterval);
  EXPECT_EQ(parse_ok<AdminWatch>(R"({"cmd":"watch","interval_ms":50})").interval.count(), 50);
  parse_ok<AdminRequests>(R"({"cmd":"requests"})");
  EXPECT_EQ(parse_ok<AdminCancel>(R"({"cmd":"cancel","id":42})").request_id, 42u);
  EXPECT_EQ(parse_ok<AdminCancel>(R"({"cmd":"cancel","id":"17"})").request_id, 17u);
  parse_ok<AdminDrain>(R"({"cmd":"drain"})");
  EXPECT_EQ(parse_ok<AdminLogLevel>(R"({"cmd":"log_level","level":"debug"})").level, "debug");
  parse_ok<AdminFlushPrefixCache>(R"({"cmd":"flush_prefix_cache"})");
  parse_ok<AdminReload>(R"({"cmd":"reload"})");
}

TEST(AdminProtocolTest, RefusesBadLinesWithAReason) {
  EXPECT_NE(parse_error("{not json").message.find("invalid JSON"), std::string::npos);
  EXPECT_NE(parse_error(R"(["stats"])").message.find("JSON object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"command":"stats"})").message.find("\"cmd\""), std::string::npos);
  EXPECT_NE(parse_error(R"({"cmd":"reboot"})").message.find("unknown command 'reboot'"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"cmd":"watch","interval_ms":10})").message.find("between 50"),
            std::string::npos);
  EXPECT_EQ(parse_error(R"({"cmd":"watch","interval_ms":10})").kind, AdminErrorKind::kBadRequest);
  parse_error(R"({"cmd":"watch","interval_ms":"fast"})");
  parse_error(R"({"cmd":"cancel"})");
  parse_error(R"({"cmd":"cancel","id":-3})");
  parse_error(R"({"cmd":"cancel","id":"12a"})");
  parse_error(R"({"cmd":"cancel","id":""})");
  parse_error(R"({"cmd":"log_level","level":"loud"})");
  parse_error(R"({"cmd":"log_level"})");
}

TEST(AdminProtocolTest, TokenIsRequiredWhenConfigured) {
  const std::optional<std::string> token = "s3cret";
  EXPECT_EQ(parse_error(R"({"cmd":"stats"})", token).kind, AdminErrorKind::kUnauthorized);
  EXPECT_EQ(parse_error(R"({"cmd":"stats","token":"wrong"})", token).kind,
            AdminErrorKind::kUnauthorized);
  EXPECT_EQ(parse_error(R"({"cmd":"stats","token":"s3cre"})", token).kind,
            AdminErrorKind::kUnauthorized);
  EXPECT_EQ(parse_error(R"({"cmd":"stats","token":42})", token).kind, AdminErrorKind::kUnauthorized);
  // Nothing but "unauthorized" before the token checks out, whatever the line says.
  EXPECT_EQ(parse_error("{bad json", token).kind, AdminErrorKind::kUnauthorized);
  EXPECT_EQ(parse_error(R"({"cmd":"nope"})", token).message, "unauthorized");
  parse_ok<AdminStats>(R"({"cmd":"stats","token":"s3cret"})", token);
  EXPECT_EQ(parse_error(R"({"cmd":"nope","token":"s3cret"})", token).kind,
            AdminErrorKind::kBadRequest);
}

TEST(AdminProtocolTest, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "ab"));
  EXPECT_FALSE(constant_time_equals("", "a"));
  EXPECT_FALSE(constant_time_equals(std::string_view("a\0", 2), "a"));
}

TEST(AdminProtocolTest, StatsReplyHasTheSnapshotModelAndBackend) {
  engine::EngineStats stats = testing::sample_stats();
  stats.speculative = {.num_drafts = 2, .num_draft_tokens = 8, .num_accepted_tokens = 6};
  engine::ModelCard card;
  card.info.id = "m";
  card.backend = "cuda";
  const std::string reply = admin_stats_reply(stats, card);
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(reply);
  EXPECT_TRUE(root["ok"].get_bool().value());
  EXPECT_EQ(root["model"].get_string().value(), "m");
  EXPECT_EQ(root["backend"].get_string().value(), "cuda");
  EXPECT_DOUBLE_EQ(root["uptime_s"].get_double().value(), 3725);
  EXPECT_EQ(root["requests"]["waiting"].get_int64().value(), 1);
  EXPECT_EQ(root["requests"]["running"].get_int64().value(), 2);
  EXPECT_EQ(root["requests"]["preempted"].get_int64().value(), 3);
  EXPECT_EQ(root["kv_blocks"]["used"].get_int64().value(), 10);
  EXPECT_EQ(root["kv_blocks"]["cached"].get_int64().value(), 20);
  EXPECT_EQ(root["kv_blocks"]["free"].get_int64().value(), 70);
  EXPECT_DOUBLE_EQ(root["prefix_cache"]["hit_rate"].get_double().value(), 0.25);
  EXPECT_DOUBLE_EQ(root["tokens_per_s"].get_double().value(), 12.5);
  EXPECT_DOUBLE_EQ(root["step_time_ms"]["p99"].get_double().value(), 9.0);
  EXPECT_DOUBLE_EQ(root["ttft_ms"]["p50"].get_double().value(), 30.0);
  EXPECT_FALSE(root["draining"].get_bool().value());
  EXPECT_EQ(root["speculative"]["draft_tokens"].get_int64().value(), 8);
  EXPECT_EQ(root["speculative"]["accepted_tokens"].get_int64().value(), 6);
  EXPECT_DOUBLE_EQ(root["speculative"]["acceptance_rate"].get_double().value(), 0.75);
}

TEST(AdminProtocolTest, ExecutesControls) {
  AdminFakeEngine engine;
  engine::RequestInfo live;
  live.request_id = 5;
  live.client_label = "batch-1";
  live.origin = engine::RequestOrigin::kBatch;
  live.phase = engine::RequestPhase::kDecode;
  live.priority = Priority::kHigh;
  engine.set_requests({live});

  simdjson::dom::parser parser;
  std::string reply = execute_admin_command(AdminRequests{}, engine).reply;
  simdjson::dom::element root = parser.parse(reply);
  simdjson::dom::array list = root["requests"].get_array();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list.at(0)["id"].get_uint64().value(), 5u);
  EXPECT_EQ(list.at(0)["origin"].get_string().value(), "batch");
  EXPECT_EQ(list.at(0)["phase"].get_string().value(), "decode");
  EXPECT_EQ(list.at(0)["priority"].get_string().value(), "high");
  EXPECT_EQ(list.at(0)["client_label"].get_string().value(), "batch-1");

  reply = execute_admin_command(AdminCancel{5}, engine).reply;
  EXPECT_TRUE(parser.parse(reply)["was_live"].get_bool().value());
  reply = execute_admin_command(AdminCancel{5}, engine).reply;
  EXPECT_FALSE(parser.parse(reply)["was_live"].get_bool().value());
  EXPECT_EQ(engine.cancelled(), (std::vector<engine::RequestId>{5, 5}));

  const AdminOutcome drain = execute_admin_command(AdminDrain{}, engine);
  EXPECT_TRUE(drain.drain_requested);
  EXPECT_FALSE(execute_admin_command(AdminStats{}, engine).drain_requested);

  reply = execute_admin_command(AdminFlushPrefixCache{}, engine).reply;
  EXPECT_EQ(parser.parse(reply)["blocks_freed"].get_int64().value(), 7);

  const auto before = spdlog::get_level();
  reply = execute_admin_command(AdminLogLevel{"debug"}, engine).reply;
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  EXPECT_EQ(parser.parse(reply)["level"].get_string().value(), "debug");
  spdlog::set_level(before);
}

// `reload` runs the server's reload action and reports each part; a refused part makes the
// whole reply "ok": false (the CLI then exits 1); a server without one says so.
TEST(AdminProtocolTest, ReloadReportsEveryPart) {
  AdminFakeEngine engine;
  simdjson::dom::parser parser;
  std::string reply = execute_admin_command(AdminReload{}, engine).reply;
  EXPECT_FALSE(parser.parse(reply)["ok"].get_bool().value());
  EXPECT_NE(reply.find("nothing to reload"), std::string::npos) << reply;

  int calls = 0;
  std::vector<ReloadPart> parts{{"api_keys", true, "2 keys in force"},
                                {"tls", false, "TLS: cannot read 'x.crt'"}};
  AdminSources sources;
  sources.reload = [&] {
    ++calls;
    return parts;
  };
  reply = execute_admin_command(AdminReload{}, engine, sources).reply;
  EXPECT_EQ(calls, 1);
  simdjson::dom::element root = parser.parse(reply);
  EXPECT_FALSE(root["ok"].get_bool().value()) << reply;
  simdjson::dom::array list = root["reloaded"].get_array();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list.at(0)["what"].get_string().value(), "api_keys");
  EXPECT_TRUE(list.at(0)["ok"].get_bool().value());
  EXPECT_EQ(list.at(1)["detail"].get_string().value(), "TLS: cannot read 'x.crt'");
  parts[1].ok = true;
  reply = execute_admin_command(AdminReload{}, engine, sources).reply;
  EXPECT_TRUE(parser.parse(reply)["ok"].get_bool().value()) << reply;
}

}  // namespace
}  // namespace troupe::net
