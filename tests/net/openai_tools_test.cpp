// Tool calling on the OpenAI surface (issue 19): what `tools`, `tool_choice`,
// `parallel_tool_calls` and the messages' tool fields decode to, the 400s naming the field
// (net/openai_tools.hpp), and the answers' shapes, whole and streamed (net/openai_tool_calls.hpp).
#include <simdjson.h>

#include <gtest/gtest.h>

#include "net/openai_request.hpp"
#include "net/openai_response.hpp"
#include "net/openai_tool_calls.hpp"

namespace troupe::net {
namespace {

using model::ToolChoiceMode;

const OpenAiApiConfig kConfig;
constexpr std::string_view kTool =
    R"({"type":"function","function":{"name":"get_weather","description":"Weather.",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})";

ParsedCompletion chat(const std::string& extra, std::string_view messages =
                                                     R"([{"role":"user","content":"hi"}])") {
  const std::string body = R"({"messages":)" + std::string(messages) +
                           (extra.empty() ? "" : ",") + extra + "}";
  return parse_completion_request(ApiKind::kChat, body, "M", kConfig);
}

engine::GenerateRequest ok(const ParsedCompletion& parsed) {
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parsed))
      << std::get<ApiError>(parsed).param << ": " << std::get<ApiError>(parsed).message;
  return std::holds_alternative<CompletionRequest>(parsed) ? std::get<CompletionRequest>(parsed).generate
                                                           : engine::GenerateRequest{};
}

std::string tools(std::string_view second = {}) {
  return R"("tools":[)" + std::string(kTool) + (second.empty() ? "" : ",") + std::string(second) + "]";
}

TEST(OpenAiTools, ToolsAndChoicesDecode) {
  engine::GenerateRequest g = ok(chat(tools()));
  ASSERT_EQ(g.tools.size(), 1u);
  EXPECT_EQ(g.tools[0].name, "get_weather");
  EXPECT_EQ(g.tools[0].parameters, R"({"type":"object","properties":{"city":{"type":"string"}}})");
  EXPECT_EQ(g.tools[0].json, kTool);
  EXPECT_EQ(g.tool_choice.mode, ToolChoiceMode::kAuto);  // the default with tools
  EXPECT_TRUE(g.tool_choice.parallel);
  EXPECT_TRUE(g.parses_tool_calls());
  EXPECT_FALSE(g.structured_output);  // the tool grammar is built where the template is known

  EXPECT_EQ(ok(chat(tools() + R"(,"tool_choice":"required","parallel_tool_calls":false)"))
                .tool_choice.mode, ToolChoiceMode::kRequired);
  EXPECT_FALSE(ok(chat(tools() + R"(,"parallel_tool_calls":false)")).tool_choice.parallel);
  g = ok(chat(tools() + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(g.tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(g.tool_choice.name, "get_weather");
  g = ok(chat(tools() + R"(,"tool_choice":"none")"));
  EXPECT_EQ(g.tools.size(), 1u);  // still rendered
  EXPECT_FALSE(g.parses_tool_calls());
  // What clients send without tools.
  EXPECT_FALSE(ok(chat(R"("tools":[],"tool_choice":"none")")).parses_tool_calls());
  EXPECT_FALSE(ok(chat(R"("tools":null,"tool_choice":null,"parallel_tool_calls":true)")).parses_tool_calls());
  // tool_choice none with response_format: the structured output applies.
  EXPECT_TRUE(ok(chat(tools() + R"(,"tool_choice":"none","response_format":{"type":"json_object"})"))
                  .structured_output);
}

TEST(OpenAiTools, HistoryWithCallsAndResultsDecodes) {
  const engine::GenerateRequest g = ok(chat(tools(), R"([
    {"role":"user","content":"Weather?"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
      {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":{"city":"Rome"}}}]},
    {"role":"tool","tool_call_id":"call_1","content":"21C"}])"));
  ASSERT_EQ(g.messages.size(), 3u);
  ASSERT_EQ(g.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(g.messages[1].content, "");
  EXPECT_EQ(g.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(g.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(g.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(g.messages[1].tool_calls[1].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(g.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(g.messages[2].content, "21C");
}

TEST(OpenAiTools, BadInputIsA400NamingTheField) {
  struct Case {
    std::string extra;
    std::string param;
    std::string messages = R"([{"role":"user","content":"hi"}])";
  };
  const std::vector<Case> cases = {
      {R"("tools":{})", "tools"},
      {R"("tools":[3])", "tools[0]"},
      {R"("tools":[{"function":{"name":"f"}}])", "tools[0].type"},
      {R"("tools":[{"type":"code_interpreter"}])", "tools[0].type"},
      {R"("tools":[{"type":"function"}])", "tools[0].function"},
      {tools(R"({"type":"function","function":{"description":"x"}})"), "tools[1].function.name"},
      {tools(R"({"type":"function","function":{"name":"a b"}})"), "tools[1].function.name"},
      {tools(R"({"type":"function","function":{"name":""}})"), "tools[1].function.name"},
      {tools(R"({"type":"function","function":{"name":"get_weather"}})"), "tools[1].function.name"},
      {tools(R"({"type":"function","function":{"name":"f","parameters":"{}"}})"),
       "tools[1].function.parameters"},
      {tools(R"({"type":"function","function":{"name":"f","description":3}})"),
       "tools[1].function.description"},
      {tools(R"({"type":"function","function":{"name":"f","strict":"yes"}})"),
       "tools[1].function.strict"},
      {R"("tool_choice":"auto")", "tool_choice"},
      {R"("tool_choice":"required")", "tool_choice"},
      {tools() + R"(,"tool_choice":"any")", "tool_choice"},
      {tools() + R"(,"tool_choice":3)", "tool_choice"},
      {tools() + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})",
       "tool_choice.function.name"},
      {tools() + R"(,"tool_choice":{"type":"function","function":{}})", "tool_choice.function.name"},
      {tools() + R"(,"tool_choice":{"type":"other"})", "tool_choice.type"},
      {tools() + R"(,"parallel_tool_calls":1)", "parallel_tool_calls"},
      {tools() + R"(,"response_format":{"type":"json_object"})", "response_format"},
      {tools() + R"(,"tool_choice":"required","structured_outputs":{"regex":"a"})",
       "structured_outputs"},
      {"", "messages[0].tool_calls",
       R"([{"role":"user","content":"x","tool_calls":[]}])"},
      {"", "messages[0].tool_calls[0].function.arguments",
       R"([{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f"}}]}])"},
      {"", "messages[0].tool_calls[0].function.arguments",
       R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":3}}]}])"},
      {"", "messages[0].tool_calls[0].function",
       R"([{"role":"assistant","tool_calls":[{"id":"c"}]}])"},
      {"", "messages[0].tool_call_id", R"([{"role":"tool","content":"x","tool_call_id":5}])"},
  };
  for (const Case& c : cases) {
    const ParsedCompletion parsed = chat(c.extra, c.messages);
    ASSERT_TRUE(std::holds_alternative<ApiError>(parsed)) << c.extra << c.messages;
    const ApiError& e = std::get<ApiError>(parsed);
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra << c.messages << ": " << e.message;
  }
  // Completions has no tools.
  const ParsedCompletion completion = parse_completion_request(
      ApiKind::kCompletion, R"({"prompt":"x",)" + tools() + "}", "M", kConfig);
  ASSERT_TRUE(std::holds_alternative<ApiError>(completion));
  EXPECT_EQ(std::get<ApiError>(completion).param, "tools");
}

// ---- answers -----------------------------------------------------------------------------------

const std::string kCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

simdjson::dom::element parse(simdjson::dom::parser& parser, const std::string& json) {
  simdjson::dom::element root;
  EXPECT_EQ(parser.parse(json).get(root), simdjson::SUCCESS) << json;
  return root;
}

std::string body_of(const std::string& text, std::string_view finish_reason,
                    model::ToolCallFormat format = model::ToolCallFormat::kHermes) {
  CollectedChoices collected(1, LogprobsOutput::kNone, format);
  engine::TokenDelta delta;
  delta.text = text;
  collected.add(delta);
  collected.end(engine::ChoiceEnd{0, std::string(finish_reason), 5});
  engine::Completion completion;
  completion.finish_reason = std::string(finish_reason);
  const ResponseIdentity identity{ApiKind::kChat, "chatcmpl-1", 1, "M"};
  return collected.body_json(identity, completion, [](int32_t) { return std::string(); });
}

TEST(OpenAiToolAnswers, WholeMessageCarriesToolCallsWithNullContent) {
  simdjson::dom::parser parser;
  const std::string body = body_of(kCall, "stop");
  const simdjson::dom::element choice = parse(parser, body)["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "tool_calls") << body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << body;
  const simdjson::dom::element call = choice["message"]["tool_calls"].at(0);
  EXPECT_TRUE(std::string_view(call["id"]).starts_with("call_"));
  EXPECT_EQ(std::string_view(call["type"]), "function");
  EXPECT_EQ(std::string_view(call["function"]["name"]), "get_weather");
  EXPECT_EQ(std::string_view(call["function"]["arguments"]), R"({"city": "Paris"})");
  EXPECT_TRUE(call["index"].error()) << "a message's calls carry no index";
}

TEST(OpenAiToolAnswers, TextMalformedCallsAndLengthKeepTheirReason) {
  simdjson::dom::parser parser;
  // Text before a call is content.
  std::string body = body_of("Sure.\n" + kCall, "stop");
  EXPECT_EQ(std::string_view(parse(parser, body)["choices"].at(0)["message"]["content"]), "Sure.");
  // No call: as without tools.
  body = body_of("Hello", "stop");
  simdjson::dom::element choice = parse(parser, body)["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "stop");
  EXPECT_EQ(std::string_view(choice["message"]["content"]), "Hello");
  EXPECT_TRUE(choice["message"]["tool_calls"].error());
  // A call cut off by max_tokens before its arguments began: content, the reason stays "length".
  const std::string cut = kCall.substr(0, 40);
  body = body_of(cut, "length");
  choice = parse(parser, body)["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "length");
  EXPECT_EQ(std::string_view(choice["message"]["content"]), cut);
  // Three complete calls and a fourth cut inside its arguments (issue 41, item 7): four calls,
  // the last with what was written of its arguments, as OpenAI answers a cut call; "length".
  body = body_of(kCall + "\n" + kCall + "\n" + kCall + "\n" + kCall.substr(0, 60), "length");
  choice = parse(parser, body)["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "length") << body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << body;
  ASSERT_EQ(choice["message"]["tool_calls"].get_array().size(), 4u) << body;
  EXPECT_EQ(std::string_view(choice["message"]["tool_calls"].at(2)["function"]["arguments"]), R"({"city": "Paris"})");
  EXPECT_EQ(std::string_view(choice["message"]["tool_calls"].at(3)["function"]["arguments"]),
            kCall.substr(0, 60).substr(kCall.find("{\"city")));
  // Without tool parsing a call's text is plain content.
  body = body_of(kCall, "stop", model::ToolCallFormat::kNone);
  EXPECT_EQ(std::string_view(parse(parser, body)["choices"].at(0)["message"]["content"]), kCall);
}

TEST(OpenAiToolAnswers, StreamedPiecesAsOpenAiSendsThem) {
  ToolCallStreamer streamer(model::ToolCallFormat::kHermes);
  std::vector<ToolCallStreamer::Piece> pieces;
  const std::string text = "Ok." + kCall + kCall;
  for (size_t i = 0; i < text.size(); i += 5) {
    for (auto& piece : streamer.feed(text.substr(i, 5))) pieces.push_back(std::move(piece));
  }
  for (auto& piece : streamer.finish()) pieces.push_back(std::move(piece));
  EXPECT_TRUE(streamer.made_calls());
  ASSERT_GT(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].content, "Ok.");
  EXPECT_TRUE(pieces[0].calls.empty());
  ASSERT_EQ(pieces[1].calls.size(), 1u);
  const ToolCallOut& first = pieces[1].calls[0];
  EXPECT_TRUE(first.first);
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.name, "get_weather");
  EXPECT_EQ(first.arguments, "");
  EXPECT_TRUE(first.id.starts_with("call_"));
  std::string arguments[2];
  std::string ids[2];
  for (const auto& piece : pieces) {
    for (const ToolCallOut& call : piece.calls) {
      ASSERT_LT(call.index, 2);
      arguments[call.index] += call.arguments;
      if (call.first) ids[call.index] = call.id;
      EXPECT_EQ(call.first, !call.name.empty());
    }
  }
  EXPECT_EQ(arguments[0], R"({"city": "Paris"})");
  EXPECT_EQ(arguments[1], R"({"city": "Paris"})");
  EXPECT_NE(ids[0], ids[1]);

  // The chunk JSON of a first piece and of a fragment.
  const ResponseIdentity identity{ApiKind::kChat, "chatcmpl-1", 1, "M"};
  ChunkContent content{{}, {}, LogprobsOutput::kNone, 0};
  content.tool_calls = pieces[1].calls;
  simdjson::dom::parser parser;
  const std::string head = chunk_json(identity, content, false, std::nullopt, {});
  const simdjson::dom::element call = parse(parser, head)["choices"].at(0)["delta"]["tool_calls"].at(0);
  EXPECT_EQ(int64_t(call["index"]), 0) << head;
  EXPECT_EQ(std::string_view(call["type"]), "function") << head;
  EXPECT_EQ(std::string_view(call["function"]["name"]), "get_weather") << head;
  EXPECT_EQ(std::string_view(call["function"]["arguments"]), "") << head;
  const ToolCallOut fragment{0, {}, {}, "{\"ci", false};
  content.tool_calls = std::span(&fragment, 1);
  const std::string later = chunk_json(identity, content, false, std::nullopt, {});
  const simdjson::dom::element piece = parse(parser, later)["choices"].at(0)["delta"]["tool_calls"].at(0);
  EXPECT_TRUE(piece["id"].error()) << later;
  EXPECT_TRUE(piece["function"]["name"].error()) << later;
  EXPECT_EQ(std::string_view(piece["function"]["arguments"]), "{\"ci") << later;
  EXPECT_EQ(finish_reason_with_calls("stop", true), "tool_calls");
  EXPECT_EQ(finish_reason_with_calls("length", true), "length");
  EXPECT_EQ(finish_reason_with_calls("stop", false), "stop");
}

}  // namespace
}  // namespace troupe::net
