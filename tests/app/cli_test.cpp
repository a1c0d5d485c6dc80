#include "app/cli.hpp"

#include <gtest/gtest.h>

namespace troupe::app {
namespace {

TEST(CommandLine, ParsesServeFlags) {
  auto parsed = parse_command_line({"serve", "--model", "m.gguf", "--port=9", "--backend", "cpu"});
  const auto& serve = std::get<ServeCommand>(std::get<Command>(parsed));
  EXPECT_EQ(serve.options.model, "m.gguf");
  EXPECT_EQ(serve.options.port, "9");
  EXPECT_EQ(serve.options.backend, "cpu");
  EXPECT_FALSE(serve.options.host);
}

TEST(CommandLine, ApiKeyIsRepeatable) {
  auto parsed = parse_command_line({"serve", "--api-key", "sk-one", "--api-key=sk-two"});
  const auto& serve = std::get<ServeCommand>(std::get<Command>(parsed));
  EXPECT_EQ(serve.options.api_keys, (std::vector<std::string>{"sk-one", "sk-two"}));
  const auto missing = parse_command_line({"serve", "--api-key"});
  ASSERT_TRUE(std::holds_alternative<UsageError>(missing));
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
