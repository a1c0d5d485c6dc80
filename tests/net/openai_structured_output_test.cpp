// The structured-output fields of OpenAI requests (net/openai_structured_output.hpp): what each
// shape decodes to, and the 400s that name the field.
#include "net/openai_request.hpp"

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

using model::grammar::GrammarKind;

const OpenAiApiConfig kConfig;

ParsedCompletion chat(std::string_view extra) {
  const std::string body = std::string(R"({"messages":[{"role":"user","content":"hi"}])") +
                           (extra.empty() ? "" : ",") + std::string(extra) + "}";
  return parse_completion_request(ApiKind::kChat, body, "M", kConfig);
}

engine::GenerateRequest ok(const ParsedCompletion& parsed) {
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parsed))
      << std::get<ApiError>(parsed).message;
  return std::holds_alternative<CompletionRequest>(parsed) ? std::get<CompletionRequest>(parsed).generate
                                                           : engine::GenerateRequest{};
}

ApiError error_of(const ParsedCompletion& parsed) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed));
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

TEST(OpenAiStructuredOutput, ResponseFormatTextIsNoConstraint) {
  EXPECT_FALSE(ok(chat(R"("response_format":{"type":"text"})")).structured_output);
  EXPECT_FALSE(ok(chat(R"("response_format":null)")).structured_output);
  EXPECT_FALSE(ok(chat("")).structured_output);
}

TEST(OpenAiStructuredOutput, ResponseFormatJsonObjectAndSchema) {
  const auto& object = ok(chat(R"("response_format":{"type":"json_object"})"));
  ASSERT_TRUE(object.structured_output);
  EXPECT_EQ(object.structured_output->kind, GrammarKind::kJsonObject);
  EXPECT_EQ(object.structured_output_field, "response_format");

  const auto& schema = ok(chat(R"("response_format":{"type":"json_schema","json_schema":{
      "name":"p","strict":true,"schema":{"type":"object", "properties":{"a":{"type":"integer"}}}}})"));
  ASSERT_TRUE(schema.structured_output);
  EXPECT_EQ(schema.structured_output->kind, GrammarKind::kJsonSchema);
  // Minified: equal schemas share one cache entry whatever their spacing.
  EXPECT_EQ(schema.structured_output->source,
            R"({"type":"object","properties":{"a":{"type":"integer"}}})");

  const auto& no_schema = ok(chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})"));
  ASSERT_TRUE(no_schema.structured_output);
  EXPECT_EQ(no_schema.structured_output->kind, GrammarKind::kJsonObject);
}

TEST(OpenAiStructuredOutput, VllmStructuredOutputsEveryKind) {
  const auto& json = ok(chat(R"("structured_outputs":{"json":{"type":"string"}})"));
  ASSERT_TRUE(json.structured_output);
  EXPECT_EQ(json.structured_output->kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(json.structured_output->source, R"({"type":"string"})");
  EXPECT_EQ(json.structured_output_field, "structured_outputs");

  const auto& json_text = ok(chat(R"("structured_outputs":{"json":"{\"type\":\"integer\"}"})"));
  EXPECT_EQ(json_text.structured_output->source, R"({"type":"integer"})");

  const auto& regex = ok(chat(R"("structured_outputs":{"regex":"[0-9]{3}"})"));
  EXPECT_EQ(regex.structured_output->kind, GrammarKind::kRegex);
  EXPECT_EQ(regex.structured_output->source, "[0-9]{3}");

  const auto& choice = ok(chat(R"("structured_outputs":{"choice":["yes","no"],"regex":null})"));
  EXPECT_EQ(choice.structured_output->kind, GrammarKind::kChoice);
  EXPECT_EQ(choice.structured_output->choices, (std::vector<std::string>{"yes", "no"}));

  const auto& grammar = ok(chat(R"("structured_outputs":{"grammar":"root ::= \"a\""})"));
  EXPECT_EQ(grammar.structured_output->kind, GrammarKind::kEbnf);

  const auto& object = ok(chat(R"("structured_outputs":{"json_object":true})"));
  EXPECT_EQ(object.structured_output->kind, GrammarKind::kJsonObject);
}

TEST(OpenAiStructuredOutput, OlderGuidedFieldsAreAccepted) {
  const auto& regex = ok(chat(R"("guided_regex":"a+")"));
  EXPECT_EQ(regex.structured_output->kind, GrammarKind::kRegex);
  EXPECT_EQ(regex.structured_output_field, "guided_regex");
  const auto& choice = ok(chat(R"("guided_choice":["x"])"));
  EXPECT_EQ(choice.structured_output->kind, GrammarKind::kChoice);
  const auto& json = ok(chat(R"("guided_json":{"type":"object"})"));
  EXPECT_EQ(json.structured_output->kind, GrammarKind::kJsonSchema);
  const auto& grammar = ok(chat(R"("guided_grammar":"root ::= \"b\"")"));
  EXPECT_EQ(grammar.structured_output->kind, GrammarKind::kEbnf);
}

TEST(OpenAiStructuredOutput, CompletionsTakeTheSameFields) {
  const auto parsed = parse_completion_request(
      ApiKind::kCompletion, R"({"prompt":"x","structured_outputs":{"choice":["a"]}})", "M", kConfig);
  EXPECT_EQ(ok(parsed).structured_output->kind, GrammarKind::kChoice);
}

TEST(OpenAiStructuredOutput, BadShapesAre400sNamingTheField) {
  struct Case {
    const char* extra;
    const char* param;
  };
  const Case cases[] = {
      {R"("response_format":"json")", "response_format"},
      {R"("response_format":{})", "response_format.type"},
      {R"("response_format":{"type":3})", "response_format.type"},
      {R"("response_format":{"type":"xml"})", "response_format.type"},
      {R"("response_format":{"type":"json_schema"})", "response_format.json_schema"},
      {R"("response_format":{"type":"json_schema","json_schema":[]})", "response_format.json_schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":"x"}})",
       "response_format.json_schema.schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":1,"schema":{}}})",
       "response_format.json_schema.name"},
      {R"("response_format":{"type":"json_schema","json_schema":{"strict":"yes","schema":{}}})",
       "response_format.json_schema.strict"},
      {R"("structured_outputs":[])", "structured_outputs"},
      {R"("structured_outputs":{})", "structured_outputs"},
      {R"("structured_outputs":{"yaml":"x"})", "structured_outputs.yaml"},
      {R"("structured_outputs":{"regex":"a","choice":["b"]})", "structured_outputs.choice"},
      {R"("structured_outputs":{"regex":5})", "structured_outputs.regex"},
      {R"("structured_outputs":{"regex":""})", "structured_outputs.regex"},
      {R"("structured_outputs":{"choice":[]})", "structured_outputs.choice"},
      {R"("structured_outputs":{"choice":["a",1]})", "structured_outputs.choice"},
      {R"("structured_outputs":{"json":7})", "structured_outputs.json"},
      {R"("structured_outputs":{"json_object":"yes"})", "structured_outputs.json_object"},
      {R"("guided_choice":"a")", "guided_choice"},
      {R"("response_format":{"type":"json_object"},"structured_outputs":{"regex":"a"})",
       "structured_outputs"},
      {R"("structured_outputs":{"regex":"a"},"guided_json":{})", "guided_json"},
      {R"("structured_outputs":{"regex":"a"},"min_tokens":2)", "min_tokens"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(chat(c.extra));
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra << ": " << e.message;
  }
}

TEST(OpenAiStructuredOutput, NoToolsIsNoConstraint) {
  // What OpenAI clients send when no tool is in play (tool calling: openai_tools_test.cpp).
  EXPECT_FALSE(ok(chat(R"("tools":[],"tool_choice":"none")")).structured_output);
  EXPECT_FALSE(ok(chat(R"("tools":null,"tool_choice":null)")).structured_output);
}

}  // namespace
}  // namespace troupe::net
