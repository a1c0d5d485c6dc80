#include "net/openai_request.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "net/json_input.hpp"

namespace troupe::net {
namespace {

const OpenAiApiConfig kConfig;

ParsedCompletion chat(std::string_view body) {
  return parse_completion_request(ApiKind::kChat, body, "M", kConfig);
}
ParsedCompletion completion(std::string_view body) {
  return parse_completion_request(ApiKind::kCompletion, body, "M", kConfig);
}
ApiError error_of(const ParsedCompletion& parsed) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed));
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

TEST(OpenAiRequest, DecodesEveryChatField) {
  const auto parsed = chat(R"({"model":"M","messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
    "max_completion_tokens":12,"temperature":0.5,"top_p":0.9,"n":1,"stop":["a","b"],"seed":7,
    "presence_penalty":0.1,"frequency_penalty":-0.2,"logprobs":true,"top_logprobs":3,
    "stream":true,"stream_options":{"include_usage":true},"user":"u1","top_k":40,"min_p":0.05,
    "repetition_penalty":1.1,"ignore_eos":true,"priority":"high","unknown_field":{"x":[1]}})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << error_of(parsed).message;
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  ASSERT_EQ(r.generate.messages.size(), 2u);
  EXPECT_EQ(r.generate.messages[1].content, "hi there");
  EXPECT_EQ(r.generate.stop.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.generate.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.generate.sampling.top_p, 0.9f);
  EXPECT_EQ(r.generate.stop.stop_strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.generate.sampling.seed, 7u);
  EXPECT_TRUE(r.generate.sampling.logprobs);
  EXPECT_EQ(r.generate.sampling.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.generate.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.generate.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.generate.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.generate.stop.ignore_eos);
  EXPECT_EQ(r.generate.priority, Priority::kHigh);
}

TEST(OpenAiRequest, DecodesPromptForms) {
  auto text = completion(R"({"prompt":"once","max_tokens":3,"logprobs":2,"stop":"."})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(text));
  const auto& r = std::get<CompletionRequest>(text);
  EXPECT_EQ(*r.generate.prompt_text, "once");
  EXPECT_EQ(r.generate.stop.max_tokens, 3);
  EXPECT_TRUE(r.generate.sampling.logprobs);
  EXPECT_EQ(r.generate.sampling.top_logprobs, 2);
  EXPECT_EQ(r.generate.stop.stop_strings, std::vector<std::string>{"."});
  auto list = completion(R"({"prompt":["one"]})");
  EXPECT_EQ(*std::get<CompletionRequest>(list).generate.prompt_text, "one");
  auto ids = completion(R"({"prompt":[1,2,3]})");
  EXPECT_EQ(std::get<CompletionRequest>(ids).generate.prompt_token_ids,
            (std::vector<int32_t>{1, 2, 3}));
  auto nested = completion(R"({"prompt":[[4,5]],"model":null})");
  EXPECT_EQ(std::get<CompletionRequest>(nested).generate.prompt_token_ids,
            (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(std::get<CompletionRequest>(nested).generate.stop.max_tokens,
            kConfig.default_max_tokens);
}

TEST(OpenAiRequest, MalformedJsonNamesThePosition) {
  const ApiError e = error_of(chat("{\"messages\": [\n  {\"role\" \"user\"}]}"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("line 2 column 11"), std::string::npos) << e.message;
  EXPECT_EQ(error_of(chat("")).status, 400);
  EXPECT_EQ(error_of(chat("[1,2]")).status, 400);
  EXPECT_NE(error_of(chat(R"({"a":1} x)")).message.find("offset 8"), std::string::npos);
}

TEST(OpenAiRequest, InvalidUtf8Is400) {
  const ApiError raw = error_of(chat("{\"messages\":[{\"role\":\"user\",\"content\":\"a\xC3\"}]}"));
  EXPECT_EQ(raw.status, 400);
  EXPECT_NE(raw.message.find("UTF-8"), std::string::npos) << raw.message;
  const auto escaped = chat(R"({"messages":[{"role":"user","content":"a\ud800b"}]})");
  EXPECT_EQ(error_of(escaped).status, 400);
}

TEST(OpenAiRequest, WrongTypesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("model":1)", "model"},
      {R"("messages":"hi")", "messages"},
      {R"("messages":[1])", "messages[0]"},
      {R"("messages":[{"role":1,"content":"x"}])", "messages[0].role"},
      {R"("messages":[{"role":"user","content":5}])", "messages[0].content"},
      {R"("max_tokens":"5")", "max_tokens"},
      {R"("max_tokens":2.5)", "max_tokens"},
      {R"("max_completion_tokens":true)", "max_completion_tokens"},
      {R"("temperature":"hot")", "temperature"},
      {R"("top_p":[1])", "top_p"},
      {R"("n":"1")", "n"},
      {R"("stop":5)", "stop"},
      {R"("stop":["a",1])", "stop"},
      {R"("seed":"7")", "seed"},
      {R"("presence_penalty":{})", "presence_penalty"},
      {R"("frequency_penalty":"0")", "frequency_penalty"},
      {R"("logprobs":1)", "logprobs"},
      {R"("top_logprobs":"2")", "top_logprobs"},
      {R"("stream":"yes")", "stream"},
      {R"("stream":true,"stream_options":true)", "stream_options"},
      {R"("stream":true,"stream_options":{"include_usage":1})", "include_usage"},
      {R"("user":42)", "user"},
      {R"("top_k":0.5)", "top_k"},
      {R"("min_p":"0")", "min_p"},
      {R"("repetition_penalty":null,"ignore_eos":"no")", "ignore_eos"},
      {R"("priority":3)", "priority"},
  };
  for (const auto& [fields, param] : cases) {
    std::string body = R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}";
    if (fields.starts_with(R"("messages")")) body = "{" + fields + "}";
    const ApiError e = error_of(chat(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  }
}

TEST(OpenAiRequest, OutOfRangeValuesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature":2.5)", "temperature"},    {R"("temperature":-0.1)", "temperature"},
      {R"("top_p":0)", "top_p"},                  {R"("top_p":1.01)", "top_p"},
      {R"("n":17)", "n"},                         {R"("n":0)", "n"},
      {R"("max_tokens":0)", "max_tokens"},        {R"("max_tokens":-3)", "max_tokens"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("top_logprobs":2)", "top_logprobs"},  // without logprobs
      {R"("stop":["a","b","c","d","e"])", "stop"},
      {R"("presence_penalty":2.5)", "presence_penalty"},
      {R"("frequency_penalty":-3)", "frequency_penalty"},
      {R"("min_p":1.5)", "min_p"},                {R"("repetition_penalty":0)", "repetition_penalty"},
      {R"("top_k":-2)", "top_k"},                 {R"("priority":"urgent")", "priority"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},  // without stream
      {R"("messages":[])", "messages"},
  };
  for (const auto& [fields, param] : cases) {
    std::string body = R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}";
    if (fields.starts_with(R"("messages")")) body = "{" + fields + "}";
    const ApiError e = error_of(chat(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  }
  EXPECT_EQ(error_of(completion(R"({"prompt":"x","logprobs":21})")).param, "logprobs");
  EXPECT_EQ(error_of(completion(R"({"prompt":["a","b"]})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt":""})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt":[]})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt":[1,-1]})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"prompt":{"a":1}})")).param, "prompt");
  EXPECT_EQ(error_of(completion(R"({"max_tokens":3})")).param, "prompt");
  EXPECT_EQ(error_of(chat(R"({"model":"M"})")).param, "messages");
}

// Issue 14: what OpenAI refuses was ignored (an unknown role rendered as a turn, a text part
// without text and a user message without content became empty turns).
TEST(OpenAiRequest, MessagesAreCheckedAsOpenAiChecksThem) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"([{"role":"wizard","content":"x"}])", "messages[0].role"},
      {R"([{"role":"","content":"x"}])", "messages[0].role"},
      {R"([{"role":"user","content":"x"},{"role":"user","content":[{"type":"text"}]}])",
       "messages[1].content[0].text"},
      {R"([{"role":"user","content":[{"type":"text","text":null}]}])", "messages[0].content[0].text"},
      {R"([{"role":"user","content":null}])", "messages[0].content"},
      {R"([{"role":"user"}])", "messages[0].content"},
      {R"([{"role":"system","content":null},{"role":"user","content":"x"}])", "messages[0].content"},
      {R"([{"role":"tool","content":null}])", "messages[0].content"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","content":null}])",
       "messages[1].content"},
  };
  for (const auto& [messages, param] : refused) {
    const std::string body = R"({"messages":)" + messages + "}";
    const ApiError e = error_of(chat(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " -> " << e.message;
  }
  // An assistant turn that made a tool call may have no content (OpenAI's rule); every OpenAI
  // role is accepted.
  const auto accepted = chat(R"({"messages":[{"role":"developer","content":"be brief"},
    {"role":"user","content":"weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",
      "function":{"name":"w","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c","content":"sunny"},
    {"role":"assistant","function_call":{"name":"w","arguments":"{}"}},
    {"role":"function","name":"w","content":"sunny"},
    {"role":"user","content":[{"type":"text","text":""}]}]})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(accepted))
      << std::get<ApiError>(accepted).message;
  EXPECT_EQ(std::get<CompletionRequest>(accepted).generate.messages.size(), 7u);
  EXPECT_EQ(std::get<CompletionRequest>(accepted).generate.messages[2].content, "");
}

// Completions' `echo` was ignored whatever it held: the client asked for its prompt back and
// silently did not get it.
TEST(OpenAiRequest, EchoIsABoolean) {
  for (const char* body : {R"({"prompt":"x","echo":"yes"})", R"({"prompt":"x","echo":1})"}) {
    const ApiError e = error_of(completion(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "echo") << body;
  }
  EXPECT_EQ(error_of(completion(R"({"prompt":"x","echo":"yes"})")).code, "invalid_type");
  for (const char* body : {R"({"prompt":"x","echo":false})", R"({"prompt":"x","echo":null})"}) {
    const auto parsed = completion(body);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << body;
    EXPECT_FALSE(std::get<CompletionRequest>(parsed).generate.echo) << body;
  }
}

// Issue 37: echo repeats the prompt; with logprobs the prompt is scored with as many
// alternatives; max_tokens 0 (echo only) scores without generating.
TEST(OpenAiRequest, EchoWithLogprobsScoresThePrompt) {
  const CompletionRequest echoed = std::get<CompletionRequest>(completion(R"({"prompt":"x","echo":true})"));
  EXPECT_TRUE(echoed.generate.echo);
  EXPECT_EQ(echoed.generate.prompt_logprobs, -1);
  EXPECT_FALSE(echoed.generate.prompt_only);
  const CompletionRequest scored =
      std::get<CompletionRequest>(completion(R"({"prompt":"x","echo":true,"logprobs":3,"max_tokens":0})"));
  EXPECT_EQ(scored.generate.prompt_logprobs, 3);
  EXPECT_TRUE(scored.generate.prompt_only);
  EXPECT_EQ(scored.generate.stop.max_tokens, 0);
  EXPECT_EQ(scored.generate.kind(), engine::RequestKind::kScore);
  const ApiError no_echo = error_of(completion(R"({"prompt":"x","max_tokens":0})"));
  EXPECT_EQ(no_echo.status, 400);
  EXPECT_EQ(no_echo.param, "max_tokens");
  EXPECT_EQ(error_of(chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})")).param,
            "max_tokens");
}

TEST(OpenAiRequest, PromptLogprobsIsVllmsField) {
  const CompletionRequest c =
      std::get<CompletionRequest>(completion(R"({"prompt":"x","prompt_logprobs":2})"));
  EXPECT_EQ(c.prompt_logprobs, 2);
  EXPECT_EQ(c.generate.prompt_logprobs, 2);
  const CompletionRequest h = std::get<CompletionRequest>(
      chat(R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":0})"));
  EXPECT_EQ(h.generate.prompt_logprobs, 0);
  const CompletionRequest none =
      std::get<CompletionRequest>(completion(R"({"prompt":"x","prompt_logprobs":null})"));
  EXPECT_FALSE(none.prompt_logprobs);
  EXPECT_EQ(none.generate.prompt_logprobs, -1);
  for (const char* body : {R"({"prompt":"x","prompt_logprobs":-1})", R"({"prompt":"x","prompt_logprobs":21})",
                           R"({"prompt":"x","prompt_logprobs":"2"})"}) {
    EXPECT_EQ(error_of(completion(body)).param, "prompt_logprobs") << body;
  }
}

// Found by tests/fuzz/openai_request_fuzz: a positive double that rounds to 0.0f passed the
// open lower bound, and ingress then refused top_p = 0 (or divided by a zero penalty).
TEST(OpenAiRequest, OpenLowerBoundsHoldAfterRoundingToFloat) {
  for (const std::string field : {"top_p", "repetition_penalty"}) {
    const std::string body =
        R"({"messages":[{"role":"user","content":"hi"}],")" + field + R"(":1e-50})";
    const ApiError e = error_of(chat(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, field) << e.message;
  }
  // The smallest positive float is still accepted.
  const auto parsed = chat(R"({"messages":[{"role":"user","content":"hi"}],"top_p":1.5e-45})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << error_of(parsed).message;
  EXPECT_GT(std::get<CompletionRequest>(parsed).generate.sampling.top_p, 0.0f);
}

TEST(OpenAiRequest, UnknownModelIs404AndServedOrEmptyModelIsAccepted) {
  const ApiError e = error_of(chat(R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(
      chat(R"({"model":"","messages":[{"role":"user","content":"x"}]})")));
}

TEST(OpenAiRequest, EngineErrorsMapToStatuses) {
  EXPECT_EQ(api_error_from({engine::ErrorCode::kInvalidRequest, "x", "p"}).status, 400);
  const ApiError too_long = api_error_from({engine::ErrorCode::kPromptTooLong, "limit 8192", ""});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_EQ(api_error_from({engine::ErrorCode::kQueueFull, "", ""}).status, 429);
  EXPECT_EQ(api_error_from({engine::ErrorCode::kDraining, "", ""}).status, 503);
  EXPECT_EQ(api_error_from({engine::ErrorCode::kInternal, "", ""}).status, 500);
}

TEST(OpenAiRequest, DecodesLogitBiasSortedAndMinTokens) {
  const auto parsed = chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":30,
    "logit_bias":{"15339":-100,"7":100,"42":0.5},"min_tokens":20})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << error_of(parsed).message;
  const model::SamplingParams& s = std::get<CompletionRequest>(parsed).generate.sampling;
  EXPECT_EQ(s.logit_bias, (std::vector<model::LogitBias>{{7, 100.0f}, {42, 0.5f}, {15339, -100.0f}}));
  EXPECT_EQ(s.min_tokens, 20);
  // Absent, null and {} alike: no bias, min_tokens 0.
  for (const char* body : {R"({"prompt":"x"})", R"({"prompt":"x","logit_bias":null,"min_tokens":null})",
                           R"({"prompt":"x","logit_bias":{}})"}) {
    const auto p = completion(body);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(p)) << body;
    EXPECT_TRUE(std::get<CompletionRequest>(p).generate.sampling.logit_bias.empty());
    EXPECT_EQ(std::get<CompletionRequest>(p).generate.sampling.min_tokens, 0);
  }
  // min_tokens == max_tokens is allowed (and == the default max_tokens when none is given).
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(
      completion(R"({"prompt":"x","max_tokens":5,"min_tokens":5})")));
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(completion(
      fmt::format(R"({{"prompt":"x","min_tokens":{}}})", kConfig.default_max_tokens))));
}

TEST(OpenAiRequest, LogitBiasAndMinTokensErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("logit_bias":[1,2])", "logit_bias"},             // not an object
      {R"("logit_bias":"x")", "logit_bias"},
      {R"("logit_bias":{"abc":1})", "logit_bias"},         // key not an integer
      {R"("logit_bias":{"-5":1})", "logit_bias"},          // negative id
      {R"("logit_bias":{"1.5":1})", "logit_bias"},
      {R"("logit_bias":{" 5":1})", "logit_bias"},
      {R"("logit_bias":{"":1})", "logit_bias"},
      {R"("logit_bias":{"99999999999":1})", "logit_bias"}, // beyond int32
      {R"("logit_bias":{"5":"1"})", "logit_bias"},         // value not a number
      {R"("logit_bias":{"5":null})", "logit_bias"},
      {R"("logit_bias":{"5":100.5})", "logit_bias"},       // out of range
      {R"("logit_bias":{"5":-101})", "logit_bias"},
      {R"("logit_bias":{"5":1,"05":2})", "logit_bias"},    // the same token twice
      {R"("min_tokens":-1)", "min_tokens"},
      {R"("min_tokens":1.5)", "min_tokens"},
      {R"("min_tokens":"3")", "min_tokens"},
      {R"("max_tokens":10,"min_tokens":11)", "min_tokens"},
  };
  for (const auto& [fields, param] : cases) {
    for (const bool is_chat : {true, false}) {
      const std::string body = is_chat
          ? fmt::format(R"({{"messages":[{{"role":"user","content":"x"}}],{}}})", fields)
          : fmt::format(R"({{"prompt":"x",{}}})", fields);
      const ApiError e = error_of(is_chat ? chat(body) : completion(body));
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body << " -> " << e.message;
      EXPECT_FALSE(e.message.empty()) << body;
    }
  }
  // Chat's max_completion_tokens bounds min_tokens too.
  EXPECT_EQ(error_of(chat(R"({"messages":[{"role":"user","content":"x"}],
    "max_completion_tokens":4,"min_tokens":5})")).param, "min_tokens");
}

TEST(OpenAiRequest, LogitBiasEntryLimitIsAConfigValue) {
  std::string entries;
  for (int i = 0; i < 301; ++i) entries += fmt::format("{}\"{}\":1", i ? "," : "", i);
  const std::string body = fmt::format(R"({{"prompt":"x","logit_bias":{{{}}}}})", entries);
  const ApiError e = error_of(completion(body));
  EXPECT_EQ(e.param, "logit_bias");
  EXPECT_NE(e.message.find("300"), std::string::npos) << e.message;
  OpenAiApiConfig roomy;
  roomy.max_logit_bias_entries = 301;
  const auto ok = parse_completion_request(ApiKind::kCompletion, body, "M", roomy);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ok));
  EXPECT_EQ(std::get<CompletionRequest>(ok).generate.sampling.logit_bias.size(), 301u);
}

TEST(SamplingParams, CheckLogitBiasAgainstAVocabulary) {
  const std::vector<model::LogitBias> ok = {{0, -100.0f}, {9, 100.0f}};
  EXPECT_FALSE(model::check_logit_bias(ok, 10));
  EXPECT_TRUE(model::check_logit_bias(ok, 9));  // 9 is outside a 9-token vocabulary
  const std::vector<model::LogitBias> nan = {{1, std::nanf("")}};
  EXPECT_TRUE(model::check_logit_bias(nan, 10));
}

TEST(JsonInput, FindsInvalidUtf8AndSyntaxErrors) {
  EXPECT_FALSE(first_invalid_utf8("caf\xC3\xA9"));
  EXPECT_EQ(first_invalid_utf8("ab\xC0\xAF"), 2u);
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);
  EXPECT_FALSE(find_json_syntax_error(R"({"a":[1,2.5e3,true,null,"x\n"]})"));
  const auto e = find_json_syntax_error("{\"a\":\n [1,]}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->line, 2u);
  EXPECT_EQ(e->column, 5u);
  EXPECT_TRUE(find_json_syntax_error(std::string(2000, '[')));
}

}  // namespace
}  // namespace troupe::net
