// Tool calling in the model layer (issue 19): the prompt text of tools, calls and results per
// family (exact strings, from Qwen2.5's and Meta's Llama 3.1 reference templates), Python-style
// JSON, the tool-call grammars' structural tags and the incremental call parser.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/chat_template.hpp"
#include "model/python_json.hpp"
#include "model/tool_call_parser.hpp"
#include "model/tool_calling.hpp"

namespace troupe::model {
namespace {

const ToolDefinition kWeather{
    "get_weather",
    R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})",
    R"({"type":"function","function":{"name":"get_weather","description":"Get weather",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})"};

const std::string kHermesTools =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    R"({"type": "function", "function": {"name": "get_weather", "description": "Get weather", )"
    R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
    R"("required": ["city"]}}})"
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

ChatMessage assistant_call(std::string content, std::string arguments) {
  ChatMessage m{"assistant", std::move(content)};
  m.tool_calls.push_back({"call_1", "get_weather", std::move(arguments)});
  return m;
}

ChatMessage tool_result(std::string content) {
  ChatMessage m{"tool", std::move(content)};
  m.tool_call_id = "call_1";
  return m;
}

TEST(ChatTemplateTools, ChatmlRendersToolsInTheSystemTurnWithTheModelsDefaultPrompt) {
  const ChatTemplate smollm(ChatTemplateKind::kChatml, std::string(kSmolLmDefaultSystemPrompt));
  const std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}};
  const std::vector<ToolDefinition> tools = {kWeather};
  EXPECT_EQ(smollm.apply(messages, true, tools),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face\n\n" + kHermesTools +
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
  // A system message of the request replaces the default; plain ChatML has no default.
  const std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(ChatTemplate::by_name("chatml").apply(with_system, false, tools),
            "<|im_start|>system\nBe brief.\n\n" + kHermesTools + "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(ChatTemplate::by_name("chatml").apply(messages, false, tools),
            "<|im_start|>system\n" + kHermesTools + "<|im_start|>user\nWeather in Paris?<|im_end|>\n");
}

TEST(ChatTemplateTools, ChatmlRendersCallsAndGroupsToolResultsInOneUserTurn) {
  const std::vector<ChatMessage> messages = {
      {"user", "Weather?"},
      assistant_call("", R"({"city":"Paris"})"),
      tool_result(R"({"temp":21})"),
      tool_result("sunny"),
      assistant_call("Checking again.", "not json"),
  };
  EXPECT_EQ(ChatTemplate::by_name("chatml").apply(messages, true),
            "<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\":21}\n</tool_response>\n<tool_response>\n"
            "sunny\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\nChecking again.\n<tool_call>\n{\"name\": \"get_weather\", "
            "\"arguments\": not json}\n</tool_call><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTools, ToolTextIsUntrustedContent) {
  const std::vector<ChatMessage> messages = {{"user", "x"}, tool_result("<|im_end|>")};
  const RenderedPrompt p = ChatTemplate::by_name("chatml").render(messages, true);
  const size_t at = p.text.find("<tool_response>\n<|im_end|>") + 16;
  bool covered = false;
  for (const TextSpan& span : p.content_spans) covered = covered || (span.begin <= at && at + 10 <= span.end);
  EXPECT_TRUE(covered) << p.text;
}

TEST(ChatTemplateTools, Llama3FollowsMetasJsonToolCallingTemplate) {
  const ToolDefinition tool{"f", R"({"type":"object","properties":{},"required":["a"]})",
                            R"({"type":"function","function":{"name":"f","parameters":)"
                            R"({"type":"object","properties":{},"required":["a"]}}})"};
  const std::vector<ChatMessage> messages = {
      {"system", "You are a bot. "},
      {"user", " What is f? "},
      assistant_call("", R"({"a":1.0})"),
      tool_result("42"),
  };
  const std::vector<ToolDefinition> tools = {tool};
  EXPECT_EQ(ChatTemplate::by_name("llama3").apply(messages, true, tools),
            "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a bot.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
            "respond with a JSON for a function call with its proper arguments that best answers "
            "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}.Do not use variables.\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n"
            "        \"parameters\": {\n            \"type\": \"object\",\n            "
            "\"properties\": {},\n            \"required\": [\n                \"a\"\n"
            "            ]\n        }\n    }\n}\n\nWhat is f?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
            "\"parameters\": {\"a\": 1.0}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTools, PlainConversationsStayAsBefore) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(ChatTemplate::by_name("llama3").apply(messages, true),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::by_name("chatml").tool_call_format(), ToolCallFormat::kHermes);
  EXPECT_EQ(ChatTemplate::by_name("llama3").tool_call_format(), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ChatTemplate::by_name("mistral-v3").tool_call_format(), ToolCallFormat::kNone);
}

TEST(PythonJson, DumpsAsPythonsJsonModule) {
  EXPECT_EQ(python_json_dumps(R"({"a":[1,2.5,1.0,true,null],"b":{},"c":[],"d":"é\n\"x\""})"),
            R"({"a": [1, 2.5, 1.0, true, null], "b": {}, "c": [], "d": "é\n\"x\""})");
  EXPECT_EQ(python_json_dumps(R"({"a":[1],"b":{}})", 2), "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  EXPECT_FALSE(python_json_dumps("{nope"));
  // Python leaves DEL raw where the server's own JSON escapes it (model/json_string.hpp).
  EXPECT_EQ(python_json_dumps("\"a\x7f\\u0001\""), "\"a\x7f\\u0001\"");
}

// ---- the grammar -------------------------------------------------------------------------------

TEST(ToolCallGrammar, StructuralTagPerChoice) {
  const std::vector<ToolDefinition> tools = {kWeather, {"ping", "", R"({"type":"function"})"}};
  ToolChoice choice;
  choice.mode = ToolChoiceMode::kNone;
  EXPECT_FALSE(tool_call_grammar(ToolCallFormat::kHermes, tools, choice));
  EXPECT_FALSE(tool_call_grammar(ToolCallFormat::kNone, tools, ToolChoice{}));

  choice.mode = ToolChoiceMode::kRequired;
  auto spec = tool_call_grammar(ToolCallFormat::kHermes, tools, choice);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->kind, grammar::GrammarKind::kStructuralTag);
  EXPECT_EQ(spec->source,
            R"({"type":"structural_tag","format":{"type":"tags_with_separator","tags":[)"
            R"({"type":"tag","begin":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",)"
            R"("content":{"type":"json_schema","json_schema":)" + kWeather.parameters +
            R"(},"end":"}\n</tool_call>"},)"
            R"({"type":"tag","begin":"<tool_call>\n{\"name\": \"ping\", \"arguments\": ",)"
            R"("content":{"type":"json_schema","json_schema":{"type":"object"}},)"
            R"("end":"}\n</tool_call>"}],"separator":"\n","at_least_one":true,)"
            R"("stop_after_first":false}})");

  choice.mode = ToolChoiceMode::kAuto;
  choice.parallel = false;
  spec = tool_call_grammar(ToolCallFormat::kLlama3Json, tools, choice);
  ASSERT_TRUE(spec);
  EXPECT_NE(spec->source.find(R"("type":"triggered_tags","triggers":["{\"name\": \""])"),
            std::string::npos) << spec->source;
  EXPECT_NE(spec->source.find(R"("at_least_one":false,"stop_after_first":true)"), std::string::npos);

  choice.mode = ToolChoiceMode::kNamed;
  choice.name = "ping";
  EXPECT_NE(tool_call_grammar(ToolCallFormat::kHermes, tools, choice, 4)->source.find(
                R"({"type":"object"},"max_whitespace_cnt":4})"),
            std::string::npos);
  spec = tool_call_grammar(ToolCallFormat::kHermes, tools, choice);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->source,
            R"({"type":"structural_tag","format":{"type":"tag","begin":"<tool_call>\n{\"name\": )"
            R"(\"ping\", \"arguments\": ","content":{"type":"json_schema","json_schema":)"
            R"({"type":"object"}},"end":"}\n</tool_call>"}})");
}

// ---- the parser --------------------------------------------------------------------------------

const std::string kCall1 =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\\\"\"}}\n</tool_call>";
const std::string kCall2 = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";

TEST(ToolCallParser, HermesCallsAndTheTextAroundThem) {
  ParsedToolOutput out = parse_tool_calls(ToolCallFormat::kHermes, kCall1);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, "{\"city\": \"Pa}ris\\\"\"}");
  EXPECT_EQ(out.content, "");

  out = parse_tool_calls(ToolCallFormat::kHermes, "Let me check.\n" + kCall1 + "\n" + kCall2 + "\n");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "ping");
  EXPECT_EQ(out.calls[1].arguments, "{}");
  EXPECT_EQ(out.content, "Let me check.");
}

TEST(ToolCallParser, TextWithoutCallsIsContentUnchanged) {
  for (const std::string text : {"Hello <b>world</b>\n", "a < b and <tool", "  x  ", "{\"name\" is"}) {
    const ParsedToolOutput out = parse_tool_calls(ToolCallFormat::kHermes, text);
    EXPECT_TRUE(out.calls.empty());
    EXPECT_EQ(out.content, text);
  }
}

TEST(ToolCallParser, MalformedCallsMakeTheWholeTextContent) {
  const std::vector<std::string> malformed = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",    // bad tail
      "<tool_call>\n{\"arguments\": {}, \"name\": \"f\"}\n</tool_call>",          // key order
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",          // not an object
  };
  for (const std::string& text : malformed) {
    const ParsedToolOutput out = parse_tool_calls(ToolCallFormat::kHermes, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content, text);
  }
}

// Events assembled into an answer, as a stream's client assembles what it was sent.
ParsedToolOutput assembled(const std::vector<ToolCallEvent>& events) {
  ParsedToolOutput out;
  for (const ToolCallEvent& e : events) {
    if (e.kind == ToolCallEvent::Kind::kContent) out.content += e.text;
    if (e.kind == ToolCallEvent::Kind::kCallBegin) out.calls.push_back({e.text, {}});
    if (e.kind == ToolCallEvent::Kind::kArguments) out.calls.back().arguments += e.text;
  }
  return out;
}

// Output cut off by max_tokens (issue 41, item 7): the complete calls stand; a call whose name
// was read stays a call with the arguments written so far; one cut before its name is content.
// The whole-text answer equals what a stream sent, fed a character at a time.
TEST(ToolCallParser, ACutOffCallKeepsTheCompleteOnesStreamedAndWhole) {
  struct Case {
    std::string text;
    std::vector<std::string> names;
    std::vector<std::string> arguments;
    std::string content;
  };
  const std::vector<Case> cases = {
      {kCall2 + "\n" + kCall2 + "\n" + kCall2 + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci",
       {"ping", "ping", "ping", "get_weather"}, {"{}", "{}", "{}", "{\"ci"}, ""},
      {"Sure " + kCall2 + " <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}",
       {"ping", "f"}, {"{}", "{\"a\": 1}"}, "Sure"},
      {kCall1 + "\n<tool_call>\n{\"name\": \"f\"", {"get_weather"}, {"{\"city\": \"Pa}ris\\\"\"}"},
       "<tool_call>\n{\"name\": \"f\""},
      {"<tool_call>\n{\"name\": \"f\"", {}, {}, "<tool_call>\n{\"name\": \"f\""},
  };
  for (const Case& c : cases) {
    const ParsedToolOutput whole = parse_tool_calls(ToolCallFormat::kHermes, c.text);
    std::vector<std::string> names, arguments;
    for (const ParsedToolCall& call : whole.calls) {
      names.push_back(call.name);
      arguments.push_back(call.arguments);
    }
    EXPECT_EQ(names, c.names) << c.text;
    EXPECT_EQ(arguments, c.arguments) << c.text;
    EXPECT_EQ(whole.content, c.content) << c.text;

    ToolCallStreamParser parser(ToolCallFormat::kHermes);
    std::vector<ToolCallEvent> events;
    for (const char ch : c.text) parser.feed(std::string_view(&ch, 1), events);
    parser.finish(events);
    EXPECT_TRUE(parser.truncated()) << c.text;
    EXPECT_FALSE(parser.malformed()) << c.text;
    const ParsedToolOutput streamed = assembled(events);
    ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << c.text;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments);
    }
    EXPECT_EQ(streamed.content, whole.content) << c.text;
  }
}

// Fed a character at a time, the events assemble to the same answer, the trigger never shows up
// in content, and the arguments arrive in pieces.
TEST(ToolCallParser, MarkersSplitAcrossDeltas) {
  const std::string text = "Hi <b>.\n" + kCall1 + "\n" + kCall2;
  ToolCallStreamParser parser(ToolCallFormat::kHermes);
  std::vector<ToolCallEvent> events;
  for (const char c : text) parser.feed(std::string_view(&c, 1), events);
  parser.finish(events);
  EXPECT_FALSE(parser.malformed());
  EXPECT_EQ(parser.num_calls(), 2);
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
  int argument_pieces = 0;
  for (const ToolCallEvent& e : events) {
    if (e.kind == ToolCallEvent::Kind::kContent) content += e.text;
    if (e.kind == ToolCallEvent::Kind::kCallBegin) {
      EXPECT_EQ(e.call_index, static_cast<int32_t>(names.size()));
      names.push_back(e.text);
      arguments.emplace_back();
    }
    if (e.kind == ToolCallEvent::Kind::kArguments) {
      ASSERT_EQ(e.call_index + 1, static_cast<int32_t>(arguments.size()));
      arguments.back() += e.text;
      ++argument_pieces;
    }
  }
  EXPECT_EQ(content, "Hi <b>.");
  EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "ping"}));
  EXPECT_EQ(arguments, (std::vector<std::string>{"{\"city\": \"Pa}ris\\\"\"}", "{}"}));
  EXPECT_GT(argument_pieces, 2);
}

TEST(ToolCallParser, Llama3JsonCalls) {
  ParsedToolOutput out = parse_tool_calls(
      ToolCallFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"x\": [1, {\"y\": 2}]}}");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "f");
  EXPECT_EQ(out.calls[0].arguments, "{\"x\": [1, {\"y\": 2}]}");
  out = parse_tool_calls(ToolCallFormat::kLlama3Json,
                         "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}; {\"name\": \"g\", "
                         "\"parameters\": {\"a\": \"b\"}}");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[1].name, "g");
  EXPECT_EQ(out.content, "");
  out = parse_tool_calls(ToolCallFormat::kLlama3Json, "The answer is {\"a\": 1}.");
  EXPECT_TRUE(out.calls.empty());
  EXPECT_EQ(out.content, "The answer is {\"a\": 1}.");
}

}  // namespace
}  // namespace troupe::model
