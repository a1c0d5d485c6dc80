// Tool calling in process (issue 19), on the real default model (SmolLM2, ChatML/Hermes): the
// tools are rendered into the prompt, the tool_choice grammar (an xgrammar structural tag) is
// compiled on the prompt worker and enforced by the mask, and the text parses back into calls
// whose arguments match the tool's schema.
#include "actors/engine/engine.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include "model/tool_call_parser.hpp"
#include "tests/actors/engine_test_support.hpp"

namespace troupe::engine::testing {
namespace {

using model::ToolChoiceMode;

const model::ToolDefinition kWeather{
    "get_weather",
    R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},)"
    R"("unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],)"
    R"("additionalProperties":false})",
    R"({"type":"function","function":{"name":"get_weather","description":"Get the weather.",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":)"
    R"("string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}}})"};
const model::ToolDefinition kTime{
    "get_time",
    R"({"type":"object","properties":{"tz":{"type":"string","maxLength":20}},"required":["tz"],)"
    R"("additionalProperties":false})",
    R"({"type":"function","function":{"name":"get_time","parameters":{"type":"object",)"
    R"("properties":{"tz":{"type":"string"}},"required":["tz"]}}})"};

GenerateRequest tool_chat(ToolChoiceMode mode, std::string name = {}, bool parallel = false,
                          float temperature = 0.0f, uint64_t seed = 0) {
  GenerateRequest request = greedy_chat("What is the weather in Paris?", 100);
  request.sampling.temperature = temperature;
  request.sampling.seed = seed;
  request.tools = {kWeather, kTime};
  request.tool_choice.mode = mode;
  request.tool_choice.name = std::move(name);
  request.tool_choice.parallel = parallel;
  return request;
}


void expect_valid_call(const model::ParsedToolCall& call) {
  simdjson::dom::parser parser;
  simdjson::dom::element args;
  ASSERT_EQ(parser.parse(call.arguments).get(args), simdjson::SUCCESS) << call.arguments;
  ASSERT_TRUE(args.is_object()) << call.arguments;
  if (call.name == "get_weather") {
    std::string_view unit;
    std::string_view city;
    ASSERT_EQ(args["unit"].get(unit), simdjson::SUCCESS) << call.arguments;
    EXPECT_TRUE(unit == "celsius" || unit == "fahrenheit") << call.arguments;
    ASSERT_EQ(args["city"].get(city), simdjson::SUCCESS) << call.arguments;
    EXPECT_EQ(simdjson::dom::object(args).size(), 2u) << call.arguments;
  } else {
    ASSERT_EQ(call.name, "get_time");
    std::string_view tz;
    ASSERT_EQ(args["tz"].get(tz), simdjson::SUCCESS) << call.arguments;
  }
}

#ifdef TROUPE_HAVE_XGRAMMAR

TEST(EngineToolCalls, RequiredAndNamedGiveParseableCallsMatchingTheSchema) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  struct Case {
    GenerateRequest request;
    std::string expected_name;  // "" for any
  };
  std::vector<Case> cases;
  cases.push_back({tool_chat(ToolChoiceMode::kRequired), ""});
  cases.push_back({tool_chat(ToolChoiceMode::kRequired, "", false, 1.0f, 7), ""});
  cases.push_back({tool_chat(ToolChoiceMode::kNamed, "get_time"), "get_time"});
  cases.push_back({tool_chat(ToolChoiceMode::kNamed, "get_weather", false, 1.0f, 5), "get_weather"});
  for (Case& c : cases) {
    const Answer answer = run_to_end(*engine, std::move(c.request));
    ASSERT_FALSE(answer.error) << answer.error->message;
    EXPECT_EQ(answer.finish_reason, "stop") << answer.text;
    EXPECT_TRUE(answer.text.starts_with("<tool_call>\n{\"name\": \"")) << answer.text;
    const model::ParsedToolOutput parsed =
        model::parse_tool_calls(model::ToolCallFormat::kHermes, answer.text);
    ASSERT_EQ(parsed.calls.size(), 1u) << answer.text;
    EXPECT_EQ(parsed.content, "") << answer.text;
    if (!c.expected_name.empty()) {
      EXPECT_EQ(parsed.calls[0].name, c.expected_name);
    }
    expect_valid_call(parsed.calls[0]);
  }
  EXPECT_TRUE(wait_idle(*engine));
}

TEST(EngineToolCalls, AutoGivesTextOrWellFormedCalls) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    const Answer answer = run_to_end(*engine, tool_chat(ToolChoiceMode::kAuto, "", true, 1.0f, seed));
    ASSERT_FALSE(answer.error) << answer.error->message;
    const model::ParsedToolOutput parsed =
        model::parse_tool_calls(model::ToolCallFormat::kHermes, answer.text);
    if (answer.finish_reason == "stop") {
      // Whatever the model chose, a call that started is a whole, valid call.
      for (const model::ParsedToolCall& call : parsed.calls) expect_valid_call(call);
      if (answer.text.find("<tool_call>") != std::string::npos) {
        EXPECT_FALSE(parsed.calls.empty());
      }
    }
  }
  EXPECT_TRUE(wait_idle(*engine));
}

TEST(EngineToolCalls, BadToolInputIsA400NamingTheField) {
  TROUPE_REQUIRE_MODEL();
  auto engine = Engine::start(test_config());
  GenerateRequest bad_schema = tool_chat(ToolChoiceMode::kRequired);
  bad_schema.tools[1].parameters = R"({"type":"nonsense"})";
  const Answer schema = run_to_end(*engine, std::move(bad_schema));
  ASSERT_TRUE(schema.error);
  EXPECT_EQ(schema.error->param, "tools[1].function.parameters") << schema.error->message;
  GenerateRequest with_min_tokens = tool_chat(ToolChoiceMode::kAuto);
  with_min_tokens.sampling.min_tokens = 2;
  const Answer min_tokens = run_to_end(*engine, std::move(with_min_tokens));
  ASSERT_TRUE(min_tokens.error);
  EXPECT_EQ(min_tokens.error->param, "min_tokens");
  // tool_choice none: the tools are rendered, nothing is constrained.
  const Answer none = run_to_end(*engine, tool_chat(ToolChoiceMode::kNone));
  EXPECT_FALSE(none.error);
  EXPECT_TRUE(wait_idle(*engine));
}

#endif  // TROUPE_HAVE_XGRAMMAR

TEST(EngineToolCalls, AFamilyWithoutAToolFormatRefusesTools) {
  TROUPE_REQUIRE_MODEL();
  EngineConfig config = test_config();
  config.chat_template = "mistral-v3";
  auto engine = Engine::start(config);
  const Answer answer = run_to_end(*engine, tool_chat(ToolChoiceMode::kNone));
  ASSERT_TRUE(answer.error);
  EXPECT_EQ(answer.error->code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(answer.error->param, "tools");
  EXPECT_NE(answer.error->message.find("mistral-v3"), std::string::npos) << answer.error->message;
  EXPECT_EQ(engine->model_card().tool_call_format, model::ToolCallFormat::kNone);
  EXPECT_TRUE(wait_idle(*engine));
}

}  // namespace
}  // namespace troupe::engine::testing
