#include "app/cli.hpp"

#include <gtest/gtest.h>

namespace troupe::app {
namespace {

// Flags are the settings' own (app/settings.hpp): each names its config key.
TEST(CommandLine, ParsesServeFlags) {
  auto parsed = parse_command_line({"serve", "--config", "c.json", "--model", "m.gguf", "--port=9",
                                    "--backend", "cpu", "--set", "scheduler.max_step_ms=50"});
  const auto& serve = std::get<ServeCommand>(std::get<Command>(parsed));
  EXPECT_EQ(serve.options.config_path, "c.json");
  ASSERT_EQ(serve.options.settings.size(), 4u);
  EXPECT_EQ(serve.options.settings[0].key, "model");
  EXPECT_EQ(serve.options.settings[0].text, "m.gguf");
  EXPECT_EQ(serve.options.settings[1].key, "http.port");
  EXPECT_EQ(serve.options.settings[1].text, "9");
  EXPECT_EQ(serve.options.settings[2].key, "backend");
  EXPECT_EQ(serve.options.settings[3].key, "scheduler.max_step_ms");
  EXPECT_EQ(serve.options.settings[3].given, "--set scheduler.max_step_ms");
  EXPECT_EQ(serve.options.settings[3].text, "50");
}

TEST(CommandLine, ApiKeyIsRepeatable) {
  auto parsed = parse_command_line({"serve", "--api-key", "sk-one", "--api-key=sk-two"});
  const auto& serve = std::get<ServeCommand>(std::get<Command>(parsed));
  ASSERT_EQ(serve.options.settings.size(), 2u);
  EXPECT_EQ(serve.options.settings[0].flag, "--api-key");
  EXPECT_EQ(serve.options.settings[1].text, "sk-two");
  const auto missing = parse_command_line({"serve", "--api-key"});
  ASSERT_TRUE(std::holds_alternative<UsageError>(missing));
}

TEST(CommandLine, SetNeedsAKnownKey) {
  const auto unknown = parse_command_line({"serve", "--set", "scheduler.warp_speed=9"});
  ASSERT_TRUE(std::holds_alternative<UsageError>(unknown));
  EXPECT_NE(std::get<UsageError>(unknown).message.find("scheduler.warp_speed"), std::string::npos);
  EXPECT_TRUE(
      std::holds_alternative<UsageError>(parse_command_line({"serve", "--set", "http.port"})));
}

TEST(CommandLine, HelpAndVersion) {
  EXPECT_TRUE(std::holds_alternative<HelpCommand>(std::get<Command>(parse_command_line({}))));
  EXPECT_TRUE(std::holds_alternative<HelpCommand>(std::get<Command>(parse_command_line({"--help"}))));
  EXPECT_TRUE(std::holds_alternative<VersionCommand>(std::get<Command>(parse_command_line({"--version"}))));
  auto serve_help = parse_command_line({"serve", "--help"});
  EXPECT_EQ(std::get<HelpCommand>(std::get<Command>(serve_help)).topic, "serve");
}

TEST(CommandLine, UsageErrors) {
  EXPECT_TRUE(std::holds_alternative<UsageError>(parse_command_line({"frobnicate"})));
  EXPECT_TRUE(std::holds_alternative<UsageError>(parse_command_line({"serve", "--bogus"})));
  const auto missing = parse_command_line({"serve", "--port"});
  ASSERT_TRUE(std::holds_alternative<UsageError>(missing));
  EXPECT_NE(std::get<UsageError>(missing).message.find("--port needs a value"), std::string::npos);
}

TEST(CliTest, ServeHelpNamesEveryOption) {
  const std::string help = serve_usage_text();
  for (const std::string& flag : serve_flag_names()) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " is missing from troupe serve --help";
  }
  EXPECT_GE(serve_flag_names().size(), 8u);
}

}  // namespace
}  // namespace troupe::app
